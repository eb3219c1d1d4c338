// Package pubsub shares one Redis subscription connection among every waiter of a relock
// Client and wakes them, one per message, when the lock they wait for is released.
//
// A [Subscriber] owns one dedicated connection and one goroutine, started by the first
// [Subscriber.Watch] and stopped by [Subscriber.Close], plus, while a connection is up, a
// second one that watches it for loss. Channels are reference-counted: a channel is
// subscribed while it has waiters and for a short linger after the last one leaves (so a
// hot lock does not pay a SUBSCRIBE and UNSUBSCRIBE per acquisition), then unsubscribed.
// Only the first goroutine sends SUBSCRIBE and UNSUBSCRIBE, so they reach Redis in the order
// they were decided.
//
// Delivery: a message on a channel wakes one of its waiters, the one that has waited
// longest and holds no unread wake-up; a woken waiter moves to the back of the line. Two
// payloads ask for other deliveries: [WakeAll] ("*") wakes every waiter of the channel (a
// release that may let several waiters in: readers, semaphore permits, a latch), and
// [WakeTag] ("=" + tag) wakes only the waiters registered with that tag by
// [Subscriber.WatchTag] (the head of a fair lock's queue), and nobody if none is here. The
// rueidis hook that delivers messages never blocks: a wake-up is a non-blocking send into a
// channel of capacity one.
//
// Loss: when the connection fails, every waiter is woken at once (none sleeps on a dead
// channel); the goroutine reconnects with backoff and subscribes again, and when Redis
// confirms a subscription every waiter of that channel is woken again, since messages sent
// while it was down are lost.
package pubsub

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// DefaultLinger is how long a channel stays subscribed after its last waiter left.
const DefaultLinger = 5 * time.Second

// ErrClosed is returned by Watch after Close.
var ErrClosed = errors.New("pubsub: closed")

// WakeAll is the message payload that wakes every waiter of a channel.
const WakeAll = "*"

// WakeTag returns the message payload that wakes only the waiters watching with tag.
func WakeTag(tag string) string { return "=" + tag }

// Option configures a Subscriber.
type Option interface{ apply(*Subscriber) }

type optionFunc func(*Subscriber)

func (f optionFunc) apply(s *Subscriber) { f(s) }

// WithLinger sets how long a channel stays subscribed after its last waiter left (>= 0).
func WithLinger(d time.Duration) Option { return optionFunc(func(s *Subscriber) { s.linger = d }) }

// Subscriber multiplexes release channels over one subscription connection. It is safe for
// concurrent use.
type Subscriber struct {
	client rueidis.Client
	linger time.Duration

	mu      sync.Mutex
	chans   map[string]*channel
	gen     uint64 // connection generation; bumped on every (re)connect
	started bool
	closed  bool
	kick    chan struct{} // capacity 1: the set of wanted channels changed
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{} // closed when the loop has exited
}

// channel is the state of one release channel. Guarded by Subscriber.mu.
type channel struct {
	name       string
	waiters    []*Waiter // longest waiting first
	subscribed bool      // SUBSCRIBE sent on the current connection and not undone
	live       bool      // Redis confirmed the subscription on the current connection
	seq        uint64    // messages received
	idleSince  time.Time // when the last waiter left
}

// New returns a Subscriber for client. It starts nothing until the first Watch.
func New(client rueidis.Client, opts ...Option) (*Subscriber, error) {
	if client == nil {
		return nil, errors.New("pubsub: nil client")
	}
	s := &Subscriber{
		client: client,
		linger: DefaultLinger,
		chans:  make(map[string]*channel),
		kick:   make(chan struct{}, 1),
		done:   make(chan struct{}),
	}
	for _, o := range opts {
		o.apply(s)
	}
	if s.linger < 0 {
		return nil, errors.New("pubsub: negative linger")
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Mark identifies a moment in a channel's history, for [Waiter.Live]. Take it with
// [Subscriber.Mark] before an attempt whose failure may lead to a Watch.
type Mark struct {
	c        *channel
	gen, seq uint64
	live     bool
}

// Mark returns the channel's position now: whether it is live, and how many messages it
// has seen on the current connection.
func (s *Subscriber) Mark(name string) Mark {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.chans[name]
	if c == nil {
		return Mark{}
	}
	return Mark{c: c, gen: s.gen, seq: c.seq, live: c.live}
}

// Live reports whether the named channel's subscription is confirmed on the current
// connection.
func (s *Subscriber) Live(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.chans[name]
	return c != nil && c.live
}

// Waiting is the number of waiters registered on the named channel.
func (s *Subscriber) Waiting(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.chans[name]; c != nil {
		return len(c.waiters)
	}
	return 0
}

// Watch registers a waiter on the named channel, subscribing to it if needed. It never
// blocks on Redis: if the subscription is not yet confirmed, the waiter is woken when it is.
// The caller must Close the waiter.
func (s *Subscriber) Watch(name string) (*Waiter, error) { return s.WatchTag(name, "") }

// WatchTag is Watch for a waiter that a [WakeTag] message with this tag also wakes (tag ""
// is Watch: no tagged message wakes it). Plain and wake-all messages wake it like any other.
func (s *Subscriber) WatchTag(name, tag string) (*Waiter, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	c := s.chans[name]
	if c == nil {
		c = &channel{name: name}
		s.chans[name] = c
	}
	w := &Waiter{s: s, c: c, ch: make(chan struct{}, 1), ahead: len(c.waiters), tag: tag}
	c.waiters = append(c.waiters, w)
	if !c.subscribed {
		if !s.started {
			s.started = true
			go s.loop()
		}
		s.poke()
	}
	return w, nil
}

// Close stops the Subscriber's goroutine, closes its connection and wakes every waiter. It
// waits for the goroutine to exit. Later Watch calls return ErrClosed.
func (s *Subscriber) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.done
		return
	}
	s.closed = true
	started := s.started
	for _, c := range s.chans {
		c.wakeAll()
	}
	s.mu.Unlock()
	s.cancel()
	if started {
		<-s.done
	} else {
		close(s.done)
	}
}

func (s *Subscriber) poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Waiter is one caller waiting on a channel. Its methods are safe for concurrent use.
type Waiter struct {
	s      *Subscriber
	c      *channel
	ch     chan struct{}
	ahead  int // waiters registered before this one, at Watch
	tag    string
	closed bool // guarded by s.mu
}

// Ahead is the number of waiters that were already registered on the channel when this one
// was. A caller that joins behind others may leave the next attempt to them: a release wakes
// them first, and one that gives up passes its wake-up on.
func (w *Waiter) Ahead() int { return w.ahead }

// C delivers a wake-up: a message on the channel, the subscription being confirmed or lost,
// or the Subscriber closing. A wake-up is a hint to try again, never a promise.
func (w *Waiter) C() <-chan struct{} { return w.ch }

// Live reports whether the waiter's subscription is confirmed on the current connection and
// no message arrived since m: then any later release reaches some waiter of this
// Subscriber, and a caller that failed an attempt after taking m need not try again before
// waiting.
func (w *Waiter) Live(m Mark) bool {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	return m.live && m.c == w.c && w.c.live && m.gen == w.s.gen && m.seq == w.c.seq
}

// Pass hands a wake-up to the next waiter of the channel. A waiter that consumed a wake-up
// and leaves without having used it for an attempt calls Pass so that the wake-up is not
// lost.
func (w *Waiter) Pass() {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	w.c.wakeOne(w)
}

// Close unregisters the waiter. A wake-up it received and did not read is passed on to the
// next waiter. Close is idempotent.
func (w *Waiter) Close() {
	s := w.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.closed {
		return
	}
	w.closed = true
	c := w.c
	for i, o := range c.waiters {
		if o == w {
			c.waiters = append(c.waiters[:i], c.waiters[i+1:]...)
			break
		}
	}
	select {
	case <-w.ch:
		c.wakeOne(nil)
	default:
	}
	if len(c.waiters) == 0 {
		c.idleSince = time.Now()
		s.poke()
	}
}

// wakeOne wakes the longest-waiting waiter other than skip that holds no unread wake-up and
// moves it to the back of the line. Subscriber.mu must be held.
func (c *channel) wakeOne(skip *Waiter) {
	for i, w := range c.waiters {
		if w == skip {
			continue
		}
		select {
		case w.ch <- struct{}{}:
			c.waiters = append(append(c.waiters[:i:i], c.waiters[i+1:]...), w)
			return
		default:
		}
	}
}

// wakeAll wakes every waiter. Subscriber.mu must be held.
func (c *channel) wakeAll() {
	for _, w := range c.waiters {
		select {
		case w.ch <- struct{}{}:
		default:
		}
	}
}

// wakeTag wakes every waiter registered with tag. Subscriber.mu must be held.
func (c *channel) wakeTag(tag string) {
	for _, w := range c.waiters {
		if w.tag == tag {
			select {
			case w.ch <- struct{}{}:
			default:
			}
		}
	}
}

// onMessage runs on rueidis's reader goroutine: it must not block.
func (s *Subscriber) onMessage(gen uint64, m rueidis.PubSubMessage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen != s.gen {
		return
	}
	if c := s.chans[m.Channel]; c != nil {
		c.seq++
		switch {
		case m.Message == WakeAll:
			c.wakeAll()
		case len(m.Message) > 1 && m.Message[0] == '=':
			c.wakeTag(m.Message[1:])
		default:
			c.wakeOne(nil)
		}
	}
}

// onSubscription runs on rueidis's reader goroutine: it must not block.
func (s *Subscriber) onSubscription(gen uint64, e rueidis.PubSubSubscription) {
	if e.Kind != "subscribe" && e.Kind != "ssubscribe" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen != s.gen {
		return
	}
	if c := s.chans[e.Channel]; c != nil && c.subscribed && !c.live {
		c.live = true
		c.wakeAll()
	}
}

// loop owns the connection: it (re)connects, and sends every SUBSCRIBE and UNSUBSCRIBE.
func (s *Subscriber) loop() {
	defer close(s.done)
	backoff := 10 * time.Millisecond
	for s.ctx.Err() == nil {
		start := time.Now()
		s.serve()
		if s.ctx.Err() != nil {
			return
		}
		if time.Since(start) > time.Second {
			backoff = 10 * time.Millisecond
		}
		t := time.NewTimer(backoff)
		select {
		case <-s.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}

// serve runs one connection until it fails or the Subscriber closes.
func (s *Subscriber) serve() {
	dc, _ := s.client.Dedicate()
	// Close the connection, never hand it back to the client's pool: under RESP2 rueidis
	// runs pub/sub on a second connection of its own, which the pool neither unsubscribes
	// (it stays subscribed after Close) nor checks (dead after a loss, it would be handed
	// back to the next Dedicate, which could then never subscribe again).
	defer dc.Close()

	// ctx ends the connection's commands when the Subscriber closes or the connection is
	// lost: rueidis retries a failed SUBSCRIBE as long as the dedicated connection itself
	// looks healthy, which under RESP2 it does after its pub/sub connection died, so
	// without this the Do would retry forever.
	ctx, cancel := context.WithCancel(s.ctx)

	s.mu.Lock()
	s.gen++
	gen := s.gen
	for _, c := range s.chans {
		c.subscribed, c.live = false, false
	}
	s.mu.Unlock()

	errs := dc.SetPubSubHooks(rueidis.PubSubHooks{
		OnMessage:      func(m rueidis.PubSubMessage) { s.onMessage(gen, m) },
		OnSubscription: func(e rueidis.PubSubSubscription) { s.onSubscription(gen, e) },
	})
	lost := make(chan struct{})
	go func() {
		defer close(lost)
		select {
		case <-errs:
			cancel()
		case <-ctx.Done():
		}
	}()
	defer func() {
		cancel()
		<-lost
	}()
	defer func() {
		s.mu.Lock()
		if s.gen == gen {
			s.gen++ // messages of this connection are stale from now on
		}
		for _, c := range s.chans {
			c.subscribed, c.live = false, false
			c.wakeAll()
		}
		s.mu.Unlock()
	}()

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		sub, unsub, next := s.plan()
		if len(unsub) > 0 {
			if err := dc.Do(ctx, dc.B().Unsubscribe().Channel(unsub...).Build()).Error(); err != nil {
				return
			}
		}
		if len(sub) > 0 {
			if err := dc.Do(ctx, dc.B().Subscribe().Channel(sub...).Build()).Error(); err != nil {
				return
			}
		}
		timer.Reset(next)
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		case <-timer.C:
		}
	}
}

// plan decides which channels to subscribe and unsubscribe now, marks them so, and says when
// to look again for lingering channels.
func (s *Subscriber) plan() (sub, unsub []string, next time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next = time.Hour
	now := time.Now()
	for name, c := range s.chans {
		switch {
		case len(c.waiters) > 0:
			if !c.subscribed {
				c.subscribed = true
				sub = append(sub, name)
			}
		case now.Sub(c.idleSince) >= s.linger:
			if c.subscribed {
				unsub = append(unsub, name)
			}
			delete(s.chans, name)
		default:
			next = min(next, s.linger-now.Sub(c.idleSince))
		}
	}
	return sub, unsub, next
}
