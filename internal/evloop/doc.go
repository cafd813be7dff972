// Package evloop is the mechanism of the relay's Linux event loops, apart
// from what they relay: waiting on an epoll instance ([Poller]), the
// inbox through which other goroutines hand a loop work ([Inbox]), a
// hashed timer wheel of intrusive timers ([Wheel], [Timer]), and the
// loop's pools of splice pipes ([Pipes]) and byte buffers ([Bufs]). It
// knows nothing of routes, connections or policy, as Go's internal/poll
// knows nothing of package net's addresses.
//
// A loop is one goroutine that owns a Poller, a Wheel, Pipes and Bufs;
// none of them is safe for use by another goroutine. The Inbox, and
// [Poller.Notify], are the only ways in from other goroutines.
//
// The raw socket calls the loops make are package internal/nbsys's.
//
// The Wheel and ReserveProcs are portable; the rest is Linux-only.
package evloop
