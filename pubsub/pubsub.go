// Package pubsub shares one Redis subscription connection among every waiter of a relock
// Client and wakes them, one per message, when the lock they wait for is released.
//
// A [Subscriber] owns one dedicated connection and one goroutine, started by the first
// [Subscriber.Watch] and stopped by [Subscriber.Close], plus, while a connection is up, a
// second one that watches it for loss. Close waits for them, and a goroutine dialling a
// connection to a server that does not answer holds it until the dial fails (rueidis dials
// under a context of its own, bounded by its Dialer timeout or ConnWriteTimeout);
// [Subscriber.Shutdown] bounds that wait by a context and leaves such a goroutine to exit
// by itself when its dial ends, closing what it got and sending nothing.
//
// Channels are reference-counted: a channel is subscribed while it has waiters and for a
// short linger after the last one leaves (so a hot lock does not pay a SUBSCRIBE and
// UNSUBSCRIBE per acquisition), then unsubscribed. Only the first goroutine sends SUBSCRIBE
// and UNSUBSCRIBE, so they reach Redis in the order they were decided.
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
// Loss: when the connection fails, the goroutine reconnects with jittered backoff and subscribes
// again, and when Redis confirms a subscription every waiter of that channel is woken, since
// messages sent while it was down are lost. The failure itself wakes nobody: the server may
// have just died, and a waiter woken then would send its next attempt at that very moment,
// when the client's own connection to that server may not have failed yet: the request could
// be written into it and its reply lost (an outcome unknown). A waiter whose channel does not
// come back meanwhile wakes by its own timer, as for any lost wake-up.
//
// Sharded ([WithSharded], Redis 7 Cluster): channels are sharded channels (SSUBSCRIBE,
// SPUBLISH), each served by the master of its hash slot. The Subscriber keeps one connection
// per master that serves a channel a waiter needs, each with its own goroutines as above, and
// learns where a slot lives from CLUSTER SLOTS (asked by one more goroutine, the router) and
// from MOVED replies. When a slot moves (Redis ends the subscription with an unsolicited
// sunsubscribe, and a SSUBSCRIBE on the old node answers MOVED) or its master fails, the
// channel is subscribed again on the node that serves it now, and its waiters are woken
// when Redis confirms it there (and at once too when the old node answered: the sunsubscribe,
// MOVED): no waiter sleeps through a release published on the new node.
package pubsub

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/internal/backoff"
	"github.com/relock-go/relock/internal/hashslot"
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

// WithNotify sets f to be told when a channel that waiters listen on stops being served
// (up false, with why: its connection broke, Redis refused the subscription, or ended it
// because the channel's slot moved) and when it is served again (up true, err nil: Redis
// confirmed the subscription anew). Only channels with waiters are reported, each down at
// most once until it is up again; a channel whose last waiter leaves while it is down is
// reported no further. Nothing is reported as the Subscriber closes. f runs on the
// Subscriber's goroutines (or rueidis's reader), outside its locks: it must be quick and
// must not block, nor call the Subscriber.
func WithNotify(f func(channel string, up bool, err error)) Option {
	return optionFunc(func(s *Subscriber) { s.notify = f })
}

// errUnsubscribed is why a sharded channel that Redis unsubscribed on its own (its slot
// moved) stopped being served.
var errUnsubscribed = errors.New("pubsub: the server ended the subscription (its slot moved)")

// notice is one report for WithNotify, made under Subscriber.mu and told after it.
type notice struct {
	channel string
	up      bool
	err     error
}

// tell reports ns (WithNotify). Subscriber.mu must not be held.
func (s *Subscriber) tell(ns []notice) {
	for _, n := range ns {
		s.notify(n.channel, n.up, n.err)
	}
}

// WithSharded makes the channels sharded channels (SSUBSCRIBE; their messages must be sent
// with SPUBLISH), for a client in Cluster mode on Redis 7 or later. New refuses it for a
// client in another mode.
func WithSharded() Option { return optionFunc(func(s *Subscriber) { s.sharded = true }) }

// Subscriber multiplexes release channels over one subscription connection (per master,
// when sharded). It is safe for concurrent use.
type Subscriber struct {
	client  rueidis.Client
	linger  time.Duration
	sharded bool
	notify  func(channel string, up bool, err error) // WithNotify; nil: nobody is told

	mu      sync.Mutex
	chans   map[string]*channel
	conns   map[string]*conn  // by node address; the one classic connection is ""
	slots   map[uint16]string // sharded: the node serving a slot, as last learned
	routing bool              // sharded: the router goroutine runs
	closed  bool
	route   chan struct{} // capacity 1: a channel needs a home (sharded)
	ctx     context.Context
	cancel  context.CancelFunc
	running int           // the goroutines started and not exited
	gone    chan struct{} // closed once closed is set and running is 0
}

// conn is one subscription connection and its goroutine: the only one (classic), or one
// per node (sharded). Guarded by Subscriber.mu.
type conn struct {
	addr    string
	gen     uint64 // connection generation; bumped on every (re)connect
	started bool
	kick    chan struct{} // capacity 1: the set of wanted channels changed
	backoff time.Duration // sharded: the wait before the next connection (its loop's own)
}

// channel is the state of one release channel. Guarded by Subscriber.mu.
type channel struct {
	name       string
	home       *conn     // the connection that subscribes it; nil while unknown (sharded)
	waiters    []*Waiter // longest waiting first
	subscribed bool      // SUBSCRIBE sent on the current connection and not undone
	live       bool      // Redis confirmed the subscription on the current connection
	seq        uint64    // messages received
	idleSince  time.Time // when the last waiter left
	down       bool      // reported down (WithNotify) and not up since
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
		conns:  make(map[string]*conn),
		slots:  make(map[uint16]string),
		route:  make(chan struct{}, 1),
		gone:   make(chan struct{}),
	}
	for _, o := range opts {
		o.apply(s)
	}
	if s.linger < 0 {
		return nil, errors.New("pubsub: negative linger")
	}
	if s.sharded && client.Mode() != rueidis.ClientModeCluster {
		return nil, errors.New("pubsub: sharded channels need a client in Cluster mode")
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Mark identifies a moment in a channel's history, for [Waiter.Live]. Take it with
// [Subscriber.Mark] before an attempt whose failure may lead to a Watch.
type Mark struct {
	c        *channel
	home     *conn
	gen, seq uint64
	live     bool
}

// Mark returns the channel's position now: whether it is live, and how many messages it
// has seen on the current connection.
func (s *Subscriber) Mark(name string) Mark {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.chans[name]
	if c == nil || c.home == nil {
		return Mark{}
	}
	return Mark{c: c, home: c.home, gen: c.home.gen, seq: c.seq, live: c.live}
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
		s.want(c)
	}
	return w, nil
}

// want has c subscribed: its home connection is told (and started), or, when its home is
// not known yet, the router. Subscriber.mu must be held.
func (s *Subscriber) want(c *channel) {
	if c.home == nil {
		if !s.sharded {
			c.home = s.connTo("")
		} else if addr, ok := s.slots[hashslot.Of(c.name)]; ok {
			c.home = s.connTo(addr)
		} else {
			s.needRoute()
			return
		}
	}
	c.home.poke()
}

// connTo returns the connection to addr ("": the classic one), starting its goroutine if it
// has none. Subscriber.mu must be held.
func (s *Subscriber) connTo(addr string) *conn {
	cn := s.conns[addr]
	if cn == nil {
		cn = &conn{addr: addr, kick: make(chan struct{}, 1)}
		s.conns[addr] = cn
	}
	if !cn.started && !s.closed {
		cn.started = true
		s.running++
		go s.loop(cn)
	}
	return cn
}

// needRoute asks the router for the homes of the channels that have none, starting it if
// needed. Subscriber.mu must be held.
func (s *Subscriber) needRoute() {
	if !s.routing && !s.closed {
		s.routing = true
		s.running++
		go s.router()
	}
	select {
	case s.route <- struct{}{}:
	default:
	}
}

// rehome forgets c's home (its slot has moved, or its node failed) and has c subscribed
// again where its slot lives now (at addr, when known). With wake (the node answered, so it
// lives), c's waiters are woken to try again at once; else they are woken when the
// subscription is confirmed (see Loss in the package doc). Subscriber.mu must be held.
func (s *Subscriber) rehome(c *channel, addr string, wake bool) {
	c.subscribed, c.live = false, false
	c.seq++ // a mark taken before is stale: its subscription is gone
	if wake {
		c.wakeAll()
	}
	c.home = nil
	slot := hashslot.Of(c.name)
	if addr != "" {
		s.slots[slot] = addr
	} else {
		delete(s.slots, slot)
	}
	if len(c.waiters) > 0 {
		s.want(c)
	}
}

// Close stops the Subscriber's goroutines, closes its connections, wakes every waiter, and
// waits for the goroutines to exit. A goroutine dialling a connection to a server that does
// not answer holds Close up to rueidis's bound on a connection's setup (its Dialer timeout,
// 5 s by default, or ConnWriteTimeout when shorter), which no cancellation reaches (only
// closing the connection does: a dial function of the client's own may); [Subscriber.Shutdown]
// bounds that wait. Later Watch calls return ErrClosed. Close is Shutdown with no bound.
func (s *Subscriber) Close() { _ = s.Shutdown(context.Background()) }

// Shutdown is Close with its wait for the goroutines bounded by ctx. It stops the
// Subscriber and wakes every waiter at once, whatever ctx. It returns nil when every
// goroutine has exited, or ctx's error when ctx ended first: then a goroutine still
// dialling a connection (see Close) goes on until the dial ends, by rueidis's bound, then
// closes what it got and exits; it wakes, reports (WithNotify) and subscribes nothing
// more. A later Close or Shutdown waits for it again. Later Watch calls return ErrClosed.
func (s *Subscriber) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		if s.running == 0 {
			close(s.gone)
		}
	}
	for _, c := range s.chans {
		c.wakeAll()
	}
	s.mu.Unlock()
	s.cancel()
	select {
	case <-s.gone:
		return nil
	case <-ctx.Done():
		select {
		case <-s.gone: // both were ready: the goroutines did exit
			return nil
		default:
			return ctx.Err()
		}
	}
}

// exit is deferred first by each of the Subscriber's goroutines (after its last use of
// Subscriber.mu): the last to exit after Close says so.
func (s *Subscriber) exit() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running--
	if s.closed && s.running == 0 {
		close(s.gone)
	}
}

func (cn *conn) poke() {
	select {
	case cn.kick <- struct{}{}:
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
	return m.live && m.c == w.c && w.c.live && m.home == w.c.home && m.gen == m.home.gen && m.seq == w.c.seq
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
		if c.home != nil {
			c.home.poke()
		}
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
func (s *Subscriber) onMessage(cn *conn, gen uint64, m rueidis.PubSubMessage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen != cn.gen {
		return
	}
	if c := s.chans[m.Channel]; c != nil && c.home == cn {
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
func (s *Subscriber) onSubscription(cn *conn, gen uint64, e rueidis.PubSubSubscription) {
	if n, ok := s.subscription(cn, gen, e); ok {
		s.tell([]notice{n})
	}
}

// subscription is onSubscription under Subscriber.mu; it returns what to tell (WithNotify).
func (s *Subscriber) subscription(cn *conn, gen uint64, e rueidis.PubSubSubscription) (n notice, tell bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen != cn.gen {
		return n, false
	}
	c := s.chans[e.Channel]
	if c == nil || c.home != cn || !c.subscribed {
		return n, false
	}
	switch e.Kind {
	case "subscribe", "ssubscribe":
		if !c.live {
			c.live = true
			c.wakeAll()
			if c.down && s.notify != nil && !s.closed {
				c.down = false
				return notice{channel: c.name, up: true}, true
			}
		}
	case "sunsubscribe":
		// Not asked for (a channel this Subscriber unsubscribes is forgotten first): Redis
		// ends a sharded subscription when its slot leaves the node. Subscribed again here,
		// the node answers where the slot went (MOVED).
		c.subscribed, c.live = false, false
		// A mark taken before is stale even if the channel is subscribed again on this
		// connection (a demoted master, now a replica, serves it again): messages sent
		// meanwhile reached nobody.
		c.seq++
		c.wakeAll()
		if len(c.waiters) > 0 {
			cn.poke()
			if !c.down && s.notify != nil && !s.closed {
				c.down = true
				return notice{channel: c.name, err: errUnsubscribed}, true
			}
		}
	}
	return n, false
}

// router finds the homes of sharded channels that have none: it reads where every slot
// lives (CLUSTER SLOTS) and tells each such channel's node, trying again with backoff while
// the cluster cannot say (a failover in progress) or a node cannot be reached.
func (s *Subscriber) router() {
	defer s.exit()
	pauses := backoff.New(10*time.Millisecond, time.Second)
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.route:
		}
		slots, err := s.clusterSlots()
		s.mu.Lock()
		if err == nil {
			s.slots = slots
		}
		homeless := false
		for _, c := range s.chans {
			if c.home == nil && len(c.waiters) > 0 {
				if addr, ok := s.slots[hashslot.Of(c.name)]; ok && !s.closed {
					c.home = s.connTo(addr)
					c.home.poke()
				} else {
					homeless = true
				}
			}
		}
		s.mu.Unlock()
		if !homeless {
			pauses.Reset()
			continue
		}
		if !s.sleep(pauses.Next()) {
			return
		}
		select {
		case s.route <- struct{}{}:
		default:
		}
	}
}

// requestCtx is the context of one request of the Subscriber's own, ended by Close or
// after d. The bound is a timer rather than a deadline: rueidis sends a lone request with a
// deadline on its synchronous path, which a cancellation (Close) does not interrupt.
func (s *Subscriber) requestCtx(d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(s.ctx)
	t := time.AfterFunc(d, cancel)
	return ctx, func() {
		t.Stop()
		cancel()
	}
}

// clusterSlots asks the cluster which node serves each slot.
func (s *Subscriber) clusterSlots() (map[uint16]string, error) {
	ctx, cancel := s.requestCtx(5 * time.Second)
	defer cancel()
	ranges, err := s.client.Do(ctx, s.client.B().ClusterSlots().Build()).ToArray()
	if err != nil {
		return nil, err
	}
	slots := make(map[uint16]string, hashslot.Count)
	for _, r := range ranges {
		f, err := r.ToArray()
		if err != nil || len(f) < 3 {
			return nil, errors.New("pubsub: malformed CLUSTER SLOTS reply")
		}
		lo, err1 := f[0].AsInt64()
		hi, err2 := f[1].AsInt64()
		node, err3 := f[2].ToArray()
		if err1 != nil || err2 != nil || err3 != nil || len(node) < 2 || lo < 0 || hi >= hashslot.Count || lo > hi {
			return nil, errors.New("pubsub: malformed CLUSTER SLOTS reply")
		}
		host, err1 := node[0].ToString()
		port, err2 := node[1].AsInt64()
		if err1 != nil || err2 != nil {
			return nil, errors.New("pubsub: malformed CLUSTER SLOTS reply")
		}
		addr := net.JoinHostPort(host, strconv.FormatInt(port, 10))
		for slot := lo; slot <= hi; slot++ {
			slots[uint16(slot)] = addr
		}
	}
	return slots, nil
}

// sleep waits for d; false when the Subscriber closed first.
func (s *Subscriber) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// loop owns one connection: it (re)connects, and sends every SUBSCRIBE and UNSUBSCRIBE of
// the channels whose home it is. A sharded connection that fails gives its channels back to
// the router (their slots may have a new master) and ends; the router starts it again when
// a channel's slot still lives at its node, after a backoff that grows while the node keeps
// failing.
func (s *Subscriber) loop(cn *conn) {
	defer s.exit()
	if s.sharded {
		if cn.backoff > 0 && !s.sleep(backoff.Jitter(cn.backoff)) {
			return
		}
		start := time.Now()
		broken := s.serve(cn)
		if time.Since(start) > time.Second {
			cn.backoff = 0
		} else {
			cn.backoff = min(max(2*cn.backoff, 10*time.Millisecond), time.Second)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		cn.started = false
		if s.ctx.Err() != nil {
			return
		}
		for _, c := range s.chans {
			if c.home == cn {
				s.rehome(c, "", !broken)
			}
		}
		return
	}
	pauses := backoff.New(10*time.Millisecond, time.Second)
	for s.ctx.Err() == nil {
		start := time.Now()
		s.serve(cn)
		if s.ctx.Err() != nil {
			return
		}
		if time.Since(start) > time.Second {
			pauses.Reset()
		}
		if !s.sleep(pauses.Next()) {
			return
		}
	}
}

// nudge makes the client learn the current slot map when it has no connection to cn's node
// (a replica promoted after its master failed, which the client has not met yet): rueidis
// refreshes its map after a request that fails or is redirected, and nothing else may be
// sent to that slot meanwhile. The request is a read of one of cn's channel names as a key
// (PTTL: nothing is stored under it), routed by the client to the slot's master as it knows
// it.
func (s *Subscriber) nudge(cn *conn) {
	s.mu.Lock()
	var name string
	for _, c := range s.chans {
		if c.home == cn {
			name = c.name
			break
		}
	}
	s.mu.Unlock()
	if name == "" {
		return
	}
	ctx, cancel := s.requestCtx(time.Second)
	defer cancel()
	_ = s.client.Do(ctx, s.client.B().Pttl().Key(name).Build()).Error()
}

// dedicate returns a dedicated connection for cn: to its node when sharded.
func (s *Subscriber) dedicate(cn *conn) (rueidis.DedicatedClient, func(), error) {
	if !s.sharded {
		dc, cancel := s.client.Dedicate()
		return dc, cancel, nil
	}
	nodes := s.client.Nodes()
	node := nodes[cn.addr]
	if node == nil && strings.HasPrefix(cn.addr, ":") {
		// A node that does not know its own address (a cluster of one node, which never
		// met another) reports an empty host: the client reaches it at some host with
		// that port.
		for addr, n := range nodes {
			if strings.HasSuffix(addr, cn.addr) {
				node = n
				break
			}
		}
	}
	if node == nil {
		return nil, nil, errors.New("pubsub: no connection to " + cn.addr + " yet")
	}
	dc, cancel := node.Dedicate()
	return dc, cancel, nil
}

// serve runs one connection until it fails or the Subscriber closes. broken reports that it
// ended without an answer of the node (the connection could not be made, or broke): the node
// may be dead, and the waiters of cn's channels were not woken (see Loss in the package doc).
func (s *Subscriber) serve(cn *conn) (broken bool) {
	dc, _, err := s.dedicate(cn)
	if s.ctx.Err() != nil {
		// Closed while dialling (a dial no cancellation reaches: Shutdown may have returned
		// already): close what the dial got and send nothing.
		if err == nil {
			dc.Close()
		}
		return true
	}
	if err != nil {
		s.nudge(cn)
		return true
	}
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
	cn.gen++
	gen := cn.gen
	for _, c := range s.chans {
		if c.home == cn {
			c.subscribed, c.live = false, false
		}
	}
	s.mu.Unlock()

	errs := dc.SetPubSubHooks(rueidis.PubSubHooks{
		OnMessage:      func(m rueidis.PubSubMessage) { s.onMessage(cn, gen, m) },
		OnSubscription: func(e rueidis.PubSubSubscription) { s.onSubscription(cn, gen, e) },
	})
	lost := make(chan struct{})
	broke := make(chan error, 1) // why the connection broke, sent before cancel
	go func() {
		defer close(lost)
		select {
		case err := <-errs:
			broke <- err
			cancel()
		case <-ctx.Done():
		}
	}()
	var why error // why serve ends: a refused or failed (un)subscription

	defer func() {
		cancel()
		<-lost
	}()
	defer func() {
		select {
		case err := <-broke:
			why = err
		default:
		}
		if why == nil {
			why = errors.New("pubsub: connection lost")
		}
		// Only an error reply ends a connection whose node is known to live (a refused
		// subscription): its waiters try again at once. Any other end may be the node's
		// death: they wait for the subscription to be confirmed again.
		_, answered := rueidis.IsRedisErr(why)
		broken = !answered
		var ns []notice
		s.mu.Lock()
		if cn.gen == gen {
			cn.gen++ // messages of this connection are stale from now on
		}
		for _, c := range s.chans {
			if c.home == cn {
				c.subscribed, c.live = false, false
				if answered {
					c.wakeAll()
				}
				if len(c.waiters) > 0 && !c.down && s.notify != nil && s.ctx.Err() == nil {
					c.down = true
					ns = append(ns, notice{channel: c.name, err: why})
				}
			}
		}
		s.mu.Unlock()
		s.tell(ns)
	}()

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		sub, unsub, next := s.plan(cn)
		if !s.sharded {
			if len(unsub) > 0 {
				if err := dc.Do(ctx, dc.B().Unsubscribe().Channel(unsub...).Build()).Error(); err != nil {
					why = err
					return
				}
			}
			if len(sub) > 0 {
				if err := dc.Do(ctx, dc.B().Subscribe().Channel(sub...).Build()).Error(); err != nil {
					why = err
					return
				}
			}
		} else {
			// One channel per command: the channels of one command must share a slot.
			for _, ch := range unsub {
				if err := dc.Do(ctx, dc.B().Sunsubscribe().Channel(ch).Build()).Error(); err != nil {
					if !s.moved(cn, ch, err) {
						why = err
						return
					}
				}
			}
			for _, ch := range sub {
				if err := dc.Do(ctx, dc.B().Ssubscribe().Channel(ch).Build()).Error(); err != nil {
					if !s.moved(cn, ch, err) {
						why = err
						return
					}
				}
			}
		}
		timer.Reset(next)
		select {
		case <-ctx.Done():
			return
		case <-cn.kick:
		case <-timer.C:
		}
	}
}

// moved handles an error reply to a sharded (un)subscription on cn: a MOVED sends the
// channel to the node that serves its slot, and the connection goes on. Any other error
// ends the connection (false).
func (s *Subscriber) moved(cn *conn, ch string, err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	if !ok {
		return false
	}
	addr, ok := re.IsMoved()
	if !ok {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.chans[ch]; c != nil && c.home == cn && !s.closed {
		s.rehome(c, addr, true)
	}
	return true
}

// plan decides which of cn's channels to subscribe and unsubscribe now, marks them so, and
// says when to look again for lingering channels.
func (s *Subscriber) plan(cn *conn) (sub, unsub []string, next time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next = time.Hour
	now := time.Now()
	for name, c := range s.chans {
		if c.home != cn {
			if c.home == nil && len(c.waiters) == 0 && now.Sub(c.idleSince) >= s.linger {
				delete(s.chans, name) // homeless and unwanted: nothing to undo
			}
			continue
		}
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
