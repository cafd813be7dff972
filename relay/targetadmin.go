package relay

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
)

// TargetState is the state an operator gives a target at run time
// ([Server.SetTargetState]), over what its health and weight say.
type TargetState uint8

const (
	// TargetEnabled takes new clients as its health and weight say.
	TargetEnabled TargetState = iota
	// TargetDraining takes no new client (not even as a last resort when
	// every other target is down); its connections and health checks go
	// on.
	TargetDraining
	// TargetDisabled is TargetDraining with its health checks paused
	// too, for maintenance: the target keeps the health it had.
	TargetDisabled
)

var targetStateNames = [...]string{TargetEnabled: "enabled", TargetDraining: "draining", TargetDisabled: "disabled"}

func (st TargetState) String() string {
	if int(st) < len(targetStateNames) {
		return targetStateNames[st]
	}
	return fmt.Sprintf("TargetState(%d)", uint8(st))
}

// ParseTargetState reads a TargetState's name.
func ParseTargetState(s string) (TargetState, error) {
	for i, n := range targetStateNames {
		if s == n {
			return TargetState(i), nil
		}
	}
	return 0, fmt.Errorf("target state %q: want enabled, draining or disabled", s)
}

// targetAdmin is what an operator set on a backend at run time. The
// backend keeps it while target sets are rebuilt around it; a reload
// (route.swapTargets) clears it.
type targetAdmin struct {
	state  atomic.Uint32 // a TargetState
	weight atomic.Int32  // the weight set at run time plus one; 0 none
}

// takes reports whether the backend may take new clients.
func (a *targetAdmin) takes() bool { return a.state.Load() == uint32(TargetEnabled) }

// checksPaused reports whether the backend's health checks wait.
func (a *targetAdmin) checksPaused() bool { return a.state.Load() == uint32(TargetDisabled) }

func (a *targetAdmin) clear() {
	a.state.Store(0)
	a.weight.Store(0)
}

// weight returns target i's weight: the one set at run time, if any,
// else its configured one.
func (ts *targetSet) weight(i int) int {
	if w := ts.bs[i].admin.weight.Load(); w > 0 {
		return int(w - 1)
	}
	return ts.weights[i]
}

// order returns the round-robin sequence for the weights in force.
func (ts *targetSet) order() []uint16 {
	if s := ts.reseq.Load(); s != nil {
		return *s
	}
	return ts.seq
}

// tries is the most targets one client may be given: those with a
// positive weight, or with weights set at run time, all of them.
func (ts *targetSet) tries() int {
	if ts.reseq.Load() != nil {
		return len(ts.bs)
	}
	return ts.npos
}

// clearAdmin clears what was set at run time on ts's backends.
func (ts *targetSet) clearAdmin() {
	if ts == nil {
		return
	}
	for _, b := range ts.bs {
		b.admin.clear()
	}
}

var errUnknownTarget = errors.New("no such target")

// adminTarget returns the backend of route named target: its name as
// [TargetStats].Addr gives it (a discovered backend's too), its URL, or
// its address alone if only one target has it.
func (s *Server) adminTarget(route, target string) (*route, *backend, error) {
	s.mu.Lock()
	rt := s.routes[route]
	s.mu.Unlock()
	if rt == nil {
		return nil, nil, fmt.Errorf("relay: no route %q", route)
	}
	var found *backend
	for _, b := range rt.targets().bs {
		switch {
		case b.name == target || b.addr.String() == target:
			return rt, b, nil
		case b.addr.Address == target || strings.TrimPrefix(b.addr.String(), b.addr.Network+"://") == target:
			if found != nil {
				return nil, nil, fmt.Errorf("relay: route %q: target %q is ambiguous: give its URL", route, target)
			}
			found = b
		}
	}
	if found == nil {
		return nil, nil, fmt.Errorf("relay: route %q: %w %q", route, errUnknownTarget, target)
	}
	return rt, found, nil
}

// SetTargetState sets the state of a route's target until the next
// reload ([Server.Update]), which gives every target its configured
// state back: draining or disabled, it takes no new client while its
// connections go on. target is the target's URL, or its address when no
// other target of the route has it. It returns the state the target had.
func (s *Server) SetTargetState(route, target string, st TargetState) (TargetState, error) {
	if int(st) >= len(targetStateNames) {
		return 0, fmt.Errorf("relay: %v: not a target state", st)
	}
	rt, b, err := s.adminTarget(route, target)
	if err != nil {
		return 0, err
	}
	old := TargetState(b.admin.state.Swap(uint32(st)))
	s.log.Info("target state set", "route", rt.name, "target", b.name, "state", st.String(), "was", old.String())
	return old, nil
}

// SetTargetWeight sets the balancing weight of a route's target, from 0
// to [MaxWeight], until the next reload ([Server.Update]); a weight of 0
// takes no new client. A negative weight goes back to the configured
// one. It returns the weight in force before.
func (s *Server) SetTargetWeight(route, target string, w int) (int, error) {
	if w > MaxWeight {
		return 0, fmt.Errorf("relay: weight %d: want 0 to %d", w, MaxWeight)
	}
	rt, b, err := s.adminTarget(route, target)
	if err != nil {
		return 0, err
	}
	rt.load.swapMu.Lock() // DNS discovery builds sets from the weights in force
	defer rt.load.swapMu.Unlock()
	ts := rt.targets()
	i := ts.index(b)
	if i < 0 { // DNS discovery dropped it meanwhile
		return 0, fmt.Errorf("relay: route %q: %w %q", route, errUnknownTarget, target)
	}
	old := ts.weight(i)
	b.admin.weight.Store(int32(max(w, -1) + 1))
	ts.reweigh()
	s.log.Info("target weight set", "route", rt.name, "target", b.name, "weight", ts.weight(i), "was", old)
	return old, nil
}

// index returns b's place in ts.bs.
func (ts *targetSet) index(b *backend) int {
	for i, o := range ts.bs {
		if o == b {
			return i
		}
	}
	return -1
}

// reweigh gives ts the round-robin sequence of the weights in force,
// when one was set at run time.
func (ts *targetSet) reweigh() {
	ws := make([]int, len(ts.bs))
	set := false
	for i := range ts.bs {
		ws[i] = ts.weight(i)
		set = set || ts.bs[i].admin.weight.Load() > 0
	}
	if !set {
		ts.reseq.Store(nil)
		return
	}
	seq := smoothSequence(ws)
	ts.reseq.Store(&seq)
}
