// Command contender is a lock contender process for the chaos suite. It locks and unlocks
// names on a Redis at -addr with relock, in a loop bounded by -iters and -duration, and
// talks to the test that started it over its standard streams, one JSON object a line:
//
//	stdout: {"t":"ready"}                                      connected
//	        {"t":"op", "op":{...}}                               a lock operation (worker.Op)
//	        {"t":"lost","lost":{...}}                            a loss notice (worker.Lost)
//	        {"t":"read", "id":N,"name":..,"owner":..,"token":T}  resource read: awaits a reply
//	        {"t":"write","id":N,"name":..,"owner":..,"token":T,"value":V}  resource write: awaits a reply
//	        {"t":"inside","name":..,"token":T}                   inside a critical section
//	        {"t":"exit","sections":N}                            finished
//	stdin:  {"id":N,"ok":true,"value":V}                        replies to read and write
//
// The protected resource lives in the test process, so a contender stopped with SIGSTOP in
// the middle of a critical section and continued later writes to it for real.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/chaos/internal/worker"
	"github.com/relock-go/relock/rlock"
)

type msg struct {
	T        string       `json:"t"`
	ID       int64        `json:"id,omitempty"`
	Name     string       `json:"name,omitempty"`
	Owner    string       `json:"owner,omitempty"`
	Token    int64        `json:"token,omitempty"`
	Value    int64        `json:"value,omitempty"`
	Op       *worker.Op   `json:"op,omitempty"`
	Lost     *worker.Lost `json:"lost,omitempty"`
	Sections int          `json:"sections,omitempty"`
	Err      string       `json:"err,omitempty"`
}

type reply struct {
	ID    int64 `json:"id"`
	OK    bool  `json:"ok"`
	Value int64 `json:"value"`
}

// conn is the line protocol with the test.
type conn struct {
	mu      sync.Mutex
	out     *bufio.Writer
	next    atomic.Int64
	pmu     sync.Mutex
	pending map[int64]chan reply
}

func (c *conn) send(m msg) {
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, _ = c.out.Write(append(b, '\n'))
	_ = c.out.Flush()
}

// call sends m and waits for its reply (the test always answers; stdin closing ends us).
func (c *conn) call(m msg) reply {
	m.ID = c.next.Add(1)
	ch := make(chan reply, 1)
	c.pmu.Lock()
	c.pending[m.ID] = ch
	c.pmu.Unlock()
	c.send(m)
	return <-ch
}

func (c *conn) readReplies() {
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		var r reply
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			fmt.Fprintf(os.Stderr, "contender: bad reply %q: %v\n", sc.Text(), err)
			os.Exit(3)
		}
		c.pmu.Lock()
		ch := c.pending[r.ID]
		delete(c.pending, r.ID)
		c.pmu.Unlock()
		if ch != nil {
			ch <- r
		}
	}
	os.Exit(4) // the test went away
}

func (c *conn) Read(name, owner string, token int64) (int64, bool) {
	r := c.call(msg{T: "read", Name: name, Owner: owner, Token: token})
	return r.Value, r.OK
}

func (c *conn) Write(name, owner string, token, value int64) bool {
	return c.call(msg{T: "write", Name: name, Owner: owner, Token: token, Value: value}).OK
}

func (c *conn) Op(o worker.Op)     { c.send(msg{T: "op", Op: &o}) }
func (c *conn) Lost(l worker.Lost) { c.send(msg{T: "lost", Lost: &l}) }

func main() {
	addr := flag.String("addr", "", "Redis address (127.0.0.1:port)")
	names := flag.String("names", "", "comma-separated lock names")
	iters := flag.Int("iters", 100, "acquisitions to attempt, at most")
	duration := flag.Duration("duration", 30*time.Second, "stop starting acquisitions after this")
	wait := flag.Duration("wait", 2*time.Second, "TryLock wait per attempt")
	work := flag.Duration("work", time.Millisecond, "time between the read and the write")
	watchdog := flag.Duration("watchdog", 30*time.Second, "watchdog timeout (lease)")
	cleanup := flag.Duration("cleanup", 5*time.Second, "cleanup timeout")
	workers := flag.Int("workers", 1, "goroutines, each its own Client (owner)")
	kind := flag.String("kind", "mutex", "the lock: mutex, fair or spin")
	flag.Parse()
	if !strings.HasPrefix(*addr, "127.0.0.1:") || *names == "" || *workers < 1 {
		fmt.Fprintln(os.Stderr, "contender: need -addr 127.0.0.1:port, -names and -workers >= 1")
		os.Exit(2)
	}
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{*addr}, ForceSingleClient: true})
	if err != nil {
		fmt.Fprintf(os.Stderr, "contender: connect: %v\n", err)
		os.Exit(1)
	}
	c := &conn{out: bufio.NewWriter(os.Stdout), pending: map[int64]chan reply{}}
	go c.readReplies()
	cfg := worker.Config{
		Names:    strings.Split(*names, ","),
		Iters:    *iters,
		Deadline: time.Now().Add(*duration),
		Wait:     *wait,
		Work:     *work,
		Kind:     *kind,
		Between: func(name string, token int64) {
			c.send(msg{T: "inside", Name: name, Token: token})
		},
	}
	c.send(msg{T: "ready"})
	var wg sync.WaitGroup
	var total atomic.Int64
	for i := 0; i < *workers; i++ {
		lc, err := rlock.New(rc, rlock.WithWatchdogTimeout(*watchdog), rlock.WithCleanupTimeout(*cleanup))
		if err != nil {
			fmt.Fprintf(os.Stderr, "contender: %v\n", err)
			os.Exit(1)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer lc.Close()
			total.Add(int64(worker.Run(context.Background(), lc, cfg, c, c)))
		}()
	}
	wg.Wait()
	rc.Close()
	c.send(msg{T: "exit", Sections: int(total.Load())})
}
