// Command httplock shows an HTTP middleware that serialises requests per resource across
// every replica of a service: a request for /documents/42 runs only while it holds the lock
// "documents:42", requests for other documents run beside it, and a request that cannot get
// the lock within a bounded wait is answered 423 Locked.
//
// Each request is an owner of its own (Client.WithNewOwner): two requests served by one
// replica, on one relock Client, exclude each other just as requests on two replicas do.
// The handler runs under the hold's context (HoldContext), so a lost lock (its key deleted,
// Redis failing over, a renewal that could not be confirmed) cancels the handler's context
// with cause rlock.ErrLockLost, and the handler stops mid-work instead of finishing
// unprotected.
//
// Why 423 and not 409: 423 Locked (RFC 4918) says what happened, "the resource is locked",
// and that retrying later may succeed (Retry-After says when); 409 Conflict says the request
// conflicts with the resource's state, which the client would have to change first. A
// request whose lock call failed (Redis unreachable, the Client closed) is answered 503.
//
//	go run ./examples/httplock
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/examples/internal/connect"
	"github.com/relock-go/relock/rlock"
)

// unlockTimeout bounds the Unlock after the handler returned: it runs even when the
// request's context has ended (the client went away), so that the lock is not left to
// expire.
const unlockTimeout = 5 * time.Second

// Serialize returns middleware that runs next for one request at a time per resource. The
// resource of a request is what resource returns; "" lets the request through without a
// lock. A request waits at most wait for the lock (0: a single attempt), then gets 423
// Locked with Retry-After. The lock is held in watchdog mode while next runs, and next runs
// under the hold's context: it is cancelled, with cause rlock.ErrLockLost, if the lock is
// lost. The lock's name is prefix + resource.
func Serialize(c *rlock.Client, prefix string, wait time.Duration, resource func(*http.Request) string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			res := resource(r)
			if res == "" {
				next.ServeHTTP(w, r)
				return
			}
			// An owner per request: another request, even on this Client, is another owner.
			ctx := c.WithNewOwner(r.Context())
			m := c.Mutex(prefix + res)
			ok, err := m.TryLock(ctx, wait, 0)
			switch {
			case err != nil && r.Context().Err() != nil:
				return // the client went away while waiting: nobody reads an answer
			case err != nil:
				http.Error(w, "lock service unavailable", http.StatusServiceUnavailable)
				return
			case !ok:
				w.Header().Set("Retry-After", strconv.Itoa(max(1, int(wait.Round(time.Second).Seconds()))))
				http.Error(w, res+" is locked by another request", http.StatusLocked)
				return
			}
			defer func() {
				// Unlock even when the request's context ended; the owner id comes along.
				uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unlockTimeout)
				defer cancel()
				_ = m.Unlock(uctx) // ErrNotHeld after a loss: nothing left to give back
			}()
			hctx, cancel := m.HoldContext(ctx)
			defer cancel()
			next.ServeHTTP(w, r.WithContext(hctx))
		})
	}
}

// documentID is the resource of /documents/{id} requests: the id.
func documentID(r *http.Request) string { return r.PathValue("id") }

// editor is the handler the middleware guards: it "edits" a document, step by step, under
// the request's context, and stops as soon as that context is cancelled. started, when set,
// is told the document's id as the edit begins; proceed, when set, is waited on before the
// edit finishes (the demo and the tests use them to order requests).
type editor struct {
	started func(id string)
	proceed func(id string) <-chan struct{}
}

func (e editor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := documentID(r)
	if e.started != nil {
		e.started(id)
	}
	var gate <-chan struct{}
	if e.proceed != nil {
		gate = e.proceed(id)
	}
	select {
	case <-r.Context().Done():
		cause := context.Cause(r.Context())
		if errors.Is(cause, rlock.ErrLockLost) {
			// The lock is gone: another request may be editing now. Stop, change nothing.
			http.Error(w, "edit of "+id+" abandoned: "+cause.Error(), http.StatusServiceUnavailable)
		}
		return
	case <-gate:
	}
	fmt.Fprintf(w, "document %s edited\n", id)
}

// lockPrefix makes a document's lock name from its id.
const lockPrefix = "examples:httplock:documents:"

func newMux(c *rlock.Client, wait time.Duration, h http.Handler) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("PUT /documents/{id}", Serialize(c, lockPrefix, wait, documentID)(h))
	return mux
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "httplock:", err)
		os.Exit(1)
	}
}

// gates lets the demo hold an edit open until it says so.
type gates struct {
	mu      sync.Mutex
	open    map[string]chan struct{}
	started map[string]chan struct{}
}

func newGates() *gates {
	return &gates{open: map[string]chan struct{}{}, started: map[string]chan struct{}{}}
}

func (g *gates) get(m map[string]chan struct{}, id string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	ch, ok := m[id]
	if !ok {
		ch = make(chan struct{})
		m[id] = ch
	}
	return ch
}

func (g *gates) editor() editor {
	return editor{
		started: func(id string) {
			ch := g.get(g.started, id)
			select {
			case <-ch:
			default:
				close(ch)
			}
		},
		proceed: func(id string) <-chan struct{} { return g.get(g.open, id) },
	}
}

// reset forgets id's gates, so that the next edit of id blocks again.
func (g *gates) reset(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.open, id)
	delete(g.started, id)
}

func run() error {
	ctx := context.Background()
	// Against your own Redis, a process makes its relock Client with one line:
	//
	//	c, err := rlock.Dial(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
	//
	// Here connect.Options gives the option for $REDIS_URL or $REDIS_ADDR, or starts an
	// embedded miniredis and gives its option.
	opt, stop, err := connect.Options()
	if err != nil {
		return err
	}
	defer stop() // runs last: after every Client's Close
	fmt.Println("using", connect.Describe())

	// Two replicas of the service, each with its relock Client (one per process). A short
	// watchdog timeout makes the loss in part 3 show within a second.
	g := newGates()
	var (
		replicas []*httptest.Server
		clients  []*rlock.Client
	)
	for range 2 {
		c, err := rlock.Dial(opt, rlock.WithWatchdogTimeout(time.Second))
		if err != nil {
			return err
		}
		defer c.Close()
		clients = append(clients, c)
		srv := httptest.NewServer(newMux(c, 200*time.Millisecond, g.editor()))
		defer srv.Close()
		replicas = append(replicas, srv)
	}
	put := func(replica int, id string) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, replicas[replica].URL+"/documents/"+id, nil)
		if err != nil {
			return 0, "", err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		text := strings.TrimSpace(string(body))
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			text += " (Retry-After: " + ra + "s)"
		}
		return resp.StatusCode, text, err
	}
	type result struct {
		code int
		body string
		err  error
	}
	async := func(replica int, id string) <-chan result {
		ch := make(chan result, 1)
		go func() {
			code, body, err := put(replica, id)
			ch <- result{code, body, err}
		}()
		return ch
	}
	show := func(who string, r result) error {
		if r.err != nil {
			return fmt.Errorf("%s: %w", who, r.err)
		}
		fmt.Printf("%s -> %d %s: %s\n", who, r.code, http.StatusText(r.code), r.body)
		return nil
	}

	// 1. Two requests for one document: the second waits 200ms, then is refused.
	fmt.Println("\n== 1. PUT /documents/42 twice at once (replica 1, then replica 2)")
	first := async(0, "42")
	<-g.get(g.started, "42") // the first edit is under way, so it holds the lock
	code, body, err := put(1, "42")
	if err := show("replica 2: PUT /documents/42", result{code, body, err}); err != nil {
		return err
	}
	if code != http.StatusLocked {
		return fmt.Errorf("the second request got %d, want 423", code)
	}

	// 2. Another document is not blocked by the first.
	fmt.Println("\n== 2. PUT /documents/7 while /documents/42 is being edited")
	close(g.get(g.open, "7"))
	code, body, err = put(1, "7")
	if err := show("replica 2: PUT /documents/7", result{code, body, err}); err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("a request for another document got %d, want 200", code)
	}
	close(g.get(g.open, "42"))
	r1 := <-first
	if err := show("replica 1: PUT /documents/42", r1); err != nil {
		return err
	}
	if r1.code != http.StatusOK {
		return fmt.Errorf("the first request got %d, want 200", r1.code)
	}

	// 3. The lock is lost while the handler works: its context is cancelled.
	fmt.Println("\n== 3. The lock of /documents/42 is deleted while an edit is under way")
	g.reset("42")
	edit := async(0, "42")
	<-g.get(g.started, "42")
	rcOpt := opt
	rcOpt.DisableCache = true
	rc, err := rueidis.NewClient(rcOpt)
	if err != nil {
		return err
	}
	defer rc.Close()
	key := clients[0].Mutex(lockPrefix + "42").Key() // the lock's key in Redis
	if err := rc.Do(ctx, rc.B().Del().Key(key).Build()).Error(); err != nil {
		return err
	}
	fmt.Printf("DEL %s sent behind the holder's back (an operator, a failover...)\n", key)
	var r3 result
	select {
	case r3 = <-edit: // the handler's gate never opens: only the loss ends it
	case <-time.After(10 * time.Second):
		return fmt.Errorf("the handler was not told of the loss")
	}
	if err := show("replica 1: PUT /documents/42", r3); err != nil {
		return err
	}
	if r3.code != http.StatusServiceUnavailable || !strings.Contains(r3.body, rlock.ErrLockLost.Error()) {
		return fmt.Errorf("the edit under a lost lock answered %d %q", r3.code, r3.body)
	}
	return nil
}
