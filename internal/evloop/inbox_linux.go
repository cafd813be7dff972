package evloop

import "sync"

// An Inbox is how other goroutines hand a loop work: functions to run
// (Post) and items to serve (Put), which the loop takes in one batch
// (Drain) once its Poller says there is work ([Poller.Work]). Items of
// type T keep a loop's frequent hand-over (an accepted connection) free
// of a closure per item.
//
// Invariants: every function posted runs exactly once, on the loop, and
// every item put is served by Drain or returned by Close, exactly once.
// Within a Drain, items are served before functions, each in the order
// they came.
type Inbox[T any] struct {
	p          *Poller
	mu         sync.Mutex
	funcs      []func()
	spareFuncs []func() // the other buffer, swapped in to drain
	items      []T
	spareItems []T
	closed     bool
}

// Init ties b to the Poller of its loop, which Post and Put wake. Call
// it before any other method.
func (b *Inbox[T]) Init(p *Poller) { b.p = p }

// Post queues f to run on the loop. After Close, f still runs if the
// loop drains again; a loop that has stopped never does.
func (b *Inbox[T]) Post(f func()) {
	b.mu.Lock()
	b.funcs = append(b.funcs, f)
	b.mu.Unlock()
	b.p.Notify()
}

// Put queues x for the loop to serve, and reports false, keeping
// nothing, once Close was called: the caller then disposes of x.
func (b *Inbox[T]) Put(x T) bool {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return false
	}
	b.items = append(b.items, x)
	b.mu.Unlock()
	b.p.Notify()
	return true
}

// Drain serves the items queued with serve, then runs the functions
// queued, on the calling loop. What is queued meanwhile waits for the
// next Drain.
func (b *Inbox[T]) Drain(serve func(T)) {
	b.mu.Lock()
	fs, xs := b.funcs, b.items
	b.funcs, b.spareFuncs = b.spareFuncs[:0], nil
	b.items, b.spareItems = b.spareItems[:0], nil
	b.mu.Unlock()
	var zero T
	for i, x := range xs {
		serve(x)
		xs[i] = zero
	}
	for i, f := range fs {
		f()
		fs[i] = nil
	}
	b.mu.Lock()
	if b.spareFuncs == nil {
		b.spareFuncs = fs[:0]
	}
	if b.spareItems == nil {
		b.spareItems = xs[:0]
	}
	b.mu.Unlock()
}

// Close refuses items from now on and returns those queued and not
// served, for the caller to dispose of.
func (b *Inbox[T]) Close() []T {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	xs := b.items
	b.items = nil
	return xs
}
