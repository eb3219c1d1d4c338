package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"go.uber.org/goleak"

	"github.com/relock-go/relock/examples/internal/connect"
	"github.com/relock-go/relock/rlock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// ceiling bounds every wait of these tests: never reached unless the behaviour is wrong.
const ceiling = 20 * time.Second

// probe is a handler that tells which request (?req=NAME) entered, records how many run at
// once per document, waits until the test releases the request or its context ends, and
// records the context's cause.
type probe struct {
	entered chan string

	mu        sync.Mutex
	release   map[string]chan struct{}
	active    map[string]int // per document
	maxActive map[string]int
	causes    map[string]error
	owners    map[string]string
}

func newProbe() *probe {
	return &probe{entered: make(chan string, 16), release: map[string]chan struct{}{},
		active: map[string]int{}, maxActive: map[string]int{}, causes: map[string]error{}, owners: map[string]string{}}
}

func (p *probe) gate(req string) chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch, ok := p.release[req]
	if !ok {
		ch = make(chan struct{})
		p.release[req] = ch
	}
	return ch
}

func (p *probe) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req, doc := r.URL.Query().Get("req"), r.PathValue("id")
	owner, _ := rlock.OwnerFrom(r.Context())
	p.mu.Lock()
	p.active[doc]++
	p.maxActive[doc] = max(p.maxActive[doc], p.active[doc])
	p.owners[req] = owner
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.active[doc]--
		p.mu.Unlock()
	}()
	p.entered <- req
	select {
	case <-p.gate(req):
		io.WriteString(w, "done "+req)
	case <-r.Context().Done():
		p.mu.Lock()
		p.causes[req] = context.Cause(r.Context())
		p.mu.Unlock()
		http.Error(w, "abandoned", http.StatusServiceUnavailable)
	}
}

// env is one replica: a relock Client (on the embedded miniredis unless $REDIS_URL or
// $REDIS_ADDR name a server) and the middleware in front of a probe.
type env struct {
	c     *rlock.Client
	opt   rueidis.ClientOption
	probe *probe
	srv   *httptest.Server
}

func newEnv(t *testing.T, wait time.Duration, opts ...rlock.Option) *env {
	t.Helper()
	opt, stop, err := connect.Options()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	c, err := rlock.Dial(opt, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	e := &env{c: c, opt: opt, probe: newProbe()}
	mux := http.NewServeMux()
	// Unique lock names per test, as the lock tests do.
	mux.Handle("PUT /documents/{id}", Serialize(c, "test:httplock:"+t.Name()+":", wait, documentID)(e.probe))
	e.srv = httptest.NewServer(mux)
	t.Cleanup(e.srv.Close)
	return e
}

type reply struct {
	code       int
	body       string
	retryAfter string
	err        error
}

func (e *env) put(doc, req string) reply {
	hr, err := http.NewRequest(http.MethodPut, e.srv.URL+"/documents/"+doc+"?req="+req, nil)
	if err != nil {
		return reply{err: err}
	}
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		return reply{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, strings.TrimSpace(string(b)), resp.Header.Get("Retry-After"), err}
}

func (e *env) async(doc, req string) <-chan reply {
	ch := make(chan reply, 1)
	go func() { ch <- e.put(doc, req) }()
	return ch
}

func (e *env) waitEntered(t *testing.T, want string) {
	t.Helper()
	select {
	case got := <-e.probe.entered:
		if got != want {
			t.Fatalf("request %s entered the handler, want %s", got, want)
		}
	case <-time.After(ceiling):
		t.Fatalf("request %s never entered the handler", want)
	}
}

func await(t *testing.T, ch <-chan reply) reply {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r
	case <-time.After(ceiling):
		t.Fatal("no reply")
		return reply{}
	}
}

// TestSerialize_sameResource_refused: while a request edits document 42, a second one for
// 42 on the same replica (same Client: the owner is per request, so it does not re-enter)
// is refused with 423 Locked and Retry-After once its bounded wait ran out, without running
// the handler; the first completes with 200.
func TestSerialize_sameResource_refused(t *testing.T) {
	e := newEnv(t, 50*time.Millisecond)
	a := e.async("42", "a")
	e.waitEntered(t, "a")

	b := e.put("42", "b")
	if b.err != nil || b.code != http.StatusLocked || b.retryAfter != "1" {
		t.Fatalf("second request: %+v, want 423 with Retry-After 1", b)
	}
	close(e.probe.gate("a"))
	if r := await(t, a); r.code != http.StatusOK || r.body != "done a" {
		t.Fatalf("first request: %+v, want 200", r)
	}
	if len(e.probe.entered) != 0 {
		t.Fatalf("the refused request ran the handler")
	}
}

// TestSerialize_sameResource_waits: with a long bound, the second request for a document
// waits for the first instead of being refused, and runs after it: never two handlers at
// once for one document, and the two requests acted for two different owners.
func TestSerialize_sameResource_waits(t *testing.T) {
	e := newEnv(t, time.Minute)
	a := e.async("42", "a")
	e.waitEntered(t, "a")
	b := e.async("42", "b")
	select {
	case got := <-e.probe.entered:
		t.Fatalf("request %s entered while a held the lock", got)
	case <-time.After(100 * time.Millisecond): // b waits (a slow machine only waits longer)
	}
	close(e.probe.gate("a"))
	if r := await(t, a); r.code != http.StatusOK {
		t.Fatalf("a: %+v", r)
	}
	e.waitEntered(t, "b")
	close(e.probe.gate("b"))
	if r := await(t, b); r.code != http.StatusOK || r.body != "done b" {
		t.Fatalf("b: %+v, want 200 after waiting", r)
	}
	e.probe.mu.Lock()
	defer e.probe.mu.Unlock()
	if e.probe.maxActive["42"] != 1 {
		t.Errorf("%d handlers ran at once for document 42, want 1", e.probe.maxActive["42"])
	}
	if oa, ob := e.probe.owners["a"], e.probe.owners["b"]; oa == "" || oa == ob {
		t.Errorf("owners %q and %q: want one per request", oa, ob)
	}
}

// TestSerialize_differentResources: a request for document 7 completes while one for 42 is
// still being handled.
func TestSerialize_differentResources(t *testing.T) {
	e := newEnv(t, 0)
	a := e.async("42", "a")
	e.waitEntered(t, "a")
	close(e.probe.gate("c"))
	if r := e.put("7", "c"); r.err != nil || r.code != http.StatusOK || r.body != "done c" {
		t.Fatalf("request for another document: %+v, want 200", r)
	}
	select {
	case r := <-a:
		t.Fatalf("the request for 42 returned early: %+v", r)
	default:
	}
	close(e.probe.gate("a"))
	if r := await(t, a); r.code != http.StatusOK {
		t.Fatalf("a: %+v", r)
	}
}

// TestSerialize_lostLockCancelsHandler: when the lock is lost while the handler runs (its
// key deleted), the handler's context is cancelled with cause rlock.ErrLockLost; the next
// request for the document gets the lock.
func TestSerialize_lostLockCancelsHandler(t *testing.T) {
	e := newEnv(t, 0, rlock.WithWatchdogTimeout(300*time.Millisecond))
	a := e.async("42", "a")
	e.waitEntered(t, "a")

	opt := e.opt
	opt.DisableCache = true
	rc, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	key := e.c.Mutex("test:httplock:" + t.Name() + ":42").Key()
	if err := rc.Do(context.Background(), rc.B().Del().Key(key).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if r := await(t, a); r.code != http.StatusServiceUnavailable {
		t.Fatalf("the handler under a lost lock answered %+v, want its 503", r)
	}
	e.probe.mu.Lock()
	cause := e.probe.causes["a"]
	e.probe.mu.Unlock()
	if !errors.Is(cause, rlock.ErrLockLost) {
		t.Fatalf("the handler's context ended with cause %v, want ErrLockLost", cause)
	}

	close(e.probe.gate("b"))
	if r := e.put("42", "b"); r.err != nil || r.code != http.StatusOK {
		t.Fatalf("the next request after the loss: %+v, want 200", r)
	}
}

// TestSerialize_unavailable: a request whose lock call fails (here: the Client is closed)
// is answered 503 without running the handler; a request without a resource runs without
// a lock.
func TestSerialize_unavailable(t *testing.T) {
	e := newEnv(t, 0)
	e.c.Close()
	if r := e.put("42", "a"); r.err != nil || r.code != http.StatusServiceUnavailable {
		t.Fatalf("with the Client closed: %+v, want 503", r)
	}
	if len(e.probe.entered) != 0 {
		t.Fatalf("the handler ran without the lock")
	}

	h := Serialize(e.c, "x:", 0, func(*http.Request) string { return "" })(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := rlock.OwnerFrom(r.Context()); ok {
			t.Errorf("a request without a resource was given an owner")
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusNoContent {
		t.Fatalf("a request without a resource: %d, want 204", rec.Code)
	}
}
