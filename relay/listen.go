package relay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"strconv"
	"syscall"
	"time"
)

// listenStream opens r.Workers listeners for a stream route, refusing an
// address another process serves (checkUnbound).
func listenStream(r *Route) ([]net.Listener, error) {
	if r.Workers > 1 && r.Listen.Network != "unix" {
		if err := checkUnbound(r.Listen.Network, r.Listen.Address); err != nil {
			return nil, err
		}
	}
	return listenStreamAt(r, r.Listen.Address, r.Workers, r.Workers > 1)
}

// adopt passes listeners just opened, or the error of opening them, to
// the Server's engine (engine.adopt).
func (s *Server) adopt(lns []net.Listener, err error) ([]net.Listener, error) {
	if err != nil {
		return nil, err
	}
	return s.eng.adopt(lns)
}

// listenStreamAt opens n listeners for a stream route at addr (for TCP),
// in one SO_REUSEPORT group if reuse is set.
func listenStreamAt(r *Route, addr string, n int, reuse bool) ([]net.Listener, error) {
	if r.Listen.Network == "unix" {
		own := owner{-1, -1}
		if r.own != nil { // resolved when the config was validated
			own = *r.own
		}
		ln, err := listenUnix(r.Listen.Address, r.UnixMode, own)
		if err != nil {
			return nil, err
		}
		return []net.Listener{ln}, nil
	}
	lc, err := listenConfigReuse(reuse)
	if err != nil {
		return nil, err
	}
	var lns []net.Listener
	for i := 0; i < n; i++ {
		ln, err := lc.Listen(context.Background(), r.Listen.Network, addr)
		if err != nil {
			closeAll(lns)
			return nil, err
		}
		if i == 0 {
			addr = ln.Addr().String() // port 0 becomes the port the others share
		}
		lns = append(lns, ln)
	}
	return lns, nil
}

// listenConfigReuse is how a TCP or UDP route opens its sockets: in one
// SO_REUSEPORT group when reuse is set (several workers, or sharing a
// port with the sockets of a route a reload replaces).
func listenConfigReuse(reuse bool) (net.ListenConfig, error) {
	// Keep-alive is set on each accepted connection from the route's
	// settings of the moment (pair.run), which Update may change while
	// the listener stays; the listener would apply those it was opened
	// with.
	lc := net.ListenConfig{KeepAlive: -1}
	if reuse {
		if err := reusePortSupported(); err != nil {
			return lc, err
		}
		lc.Control = setReusePort
	}
	return lc, nil
}

// listenUnix listens on a Unix socket path, first removing a stale socket
// file that nobody answers on (left by a crashed process), never a live
// one or a file that is not a socket. A non-zero mode becomes the file's
// permission bits, and own its owner and group (see Route.UnixMode).
func listenUnix(path string, mode os.FileMode, own owner) (net.Listener, error) {
	var lc net.ListenConfig
	if mode != 0 {
		// bind(2) creates the file with the socket inode's mode less the
		// umask, so set that mode first: no moment more open than asked.
		lc.Control = func(_, _ string, c syscall.RawConn) error { return setSocketMode(c, mode) }
	}
	listen := func() (net.Listener, error) {
		ln, err := lc.Listen(context.Background(), "unix", path)
		if err != nil {
			return nil, err
		}
		if own.uid >= 0 || own.gid >= 0 {
			if err := os.Lchown(path, own.uid, own.gid); err != nil {
				ln.Close()
				return nil, err
			}
		}
		if mode != 0 {
			if err := os.Chmod(path, mode); err != nil { // bits the umask took
				ln.Close()
				return nil, err
			}
		}
		return ln, nil
	}
	ln, err := listen()
	if err == nil || !errors.Is(err, syscall.EADDRINUSE) || path[0] == '@' {
		return ln, err
	}
	if fi, serr := os.Lstat(path); serr != nil || fi.Mode()&os.ModeSocket == 0 {
		return nil, err
	}
	c, derr := net.DialTimeout("unix", path, time.Second)
	if derr == nil {
		c.Close()
		return nil, err
	}
	if !errors.Is(derr, syscall.ECONNREFUSED) {
		return nil, err
	}
	if rerr := os.Remove(path); rerr != nil {
		return nil, fmt.Errorf("%w (removing stale socket: %v)", err, rerr)
	}
	return listen()
}

// owner is a numeric owner and group for a socket file; -1 keeps one.
type owner struct{ uid, gid int }

// lookupOwner resolves Route.UnixUser and UnixGroup: a numeric id as it
// is, a name through the system's user and group databases.
func lookupOwner(usr, grp string) (owner, error) {
	o := owner{-1, -1}
	var err error
	if usr != "" {
		if o.uid, err = lookupID(usr, userID); err != nil {
			return owner{}, fmt.Errorf("unix user %q: %v", usr, err)
		}
	}
	if grp != "" {
		if o.gid, err = lookupID(grp, groupID); err != nil {
			return owner{}, fmt.Errorf("unix group %q: %v", grp, err)
		}
	}
	return o, nil
}

func userID(name string) (string, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return "", err
	}
	return u.Uid, nil
}

func groupID(name string) (string, error) {
	g, err := user.LookupGroup(name)
	if err != nil {
		return "", err
	}
	return g.Gid, nil
}

// lookupID returns s as a numeric id, or the id byName finds for it.
func lookupID(s string, byName func(string) (string, error)) (int, error) {
	if n, err := strconv.ParseUint(s, 10, 31); err == nil {
		return int(n), nil
	}
	id, err := byName(s)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(id, 10, 31)
	if err != nil {
		return 0, fmt.Errorf("id %q is not numeric", id)
	}
	return int(n), nil
}

func closeAll(lns []net.Listener) {
	for _, ln := range lns {
		ln.Close()
	}
}
