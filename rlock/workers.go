package rlock

import (
	"slices"
	"time"
)

// workerIdle is how long a worker waits for more work before it exits.
const workerIdle = time.Second

// worker is a goroutine of a Client that runs work handed to it by Client.spare, one item at
// a time, and then waits up to workerIdle for more. A RedLock asks every instance through a
// goroutine of its own, twice per Lock+Unlock; a fresh goroutine grows its stack by copying
// as the request goes down through rueidis, every time (a fifth of the cycle's CPU in the
// profile), while a worker's stack stays grown.
type worker struct {
	work chan func() // capacity 1: the item spare hands over
}

// spare runs work as background does (counted for Close; at once, on the caller's goroutine,
// when the Client is closed), on an idle worker when there is one, else on a new worker.
func (c *Client) spare(work func()) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		work()
		return
	}
	c.bg.Add(1)
	if n := len(c.idle); n > 0 {
		w := c.idle[n-1]
		c.idle = c.idle[:n-1]
		c.mu.Unlock()
		w.work <- work // the worker is out of idle: its channel is empty
		return
	}
	c.workers.Add(1)
	c.mu.Unlock()
	w := &worker{work: make(chan func(), 1)}
	w.work <- work
	go c.runWorker(w)
}

// runWorker is w's goroutine. It ends after workerIdle without work, or at Close; Close
// waits for it (Client.workers).
func (c *Client) runWorker(w *worker) {
	defer c.workers.Done()
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	for {
		select {
		case f := <-w.work:
			f()
			c.bg.Done()
			c.mu.Lock()
			if c.closed {
				c.mu.Unlock()
				return
			}
			c.idle = append(c.idle, w)
			c.mu.Unlock()
			t.Reset(workerIdle)
			continue
		case <-t.C:
		case <-c.life.Done():
		}
		c.mu.Lock()
		if i := slices.Index(c.idle, w); i >= 0 {
			c.idle = slices.Delete(c.idle, i, i+1)
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		// spare has just taken w out of idle: its work is on the way.
		f := <-w.work
		f()
		c.bg.Done()
		c.mu.Lock()
		closed := c.closed
		if !closed {
			c.idle = append(c.idle, w)
		}
		c.mu.Unlock()
		if closed {
			return
		}
		t.Reset(workerIdle)
	}
}
