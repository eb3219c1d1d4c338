// Command rwlock shows RWMutex, the read-write lock: many readers at once, a writer that
// waits for them and holds new readers back while it waits (writers first), one write
// release letting every waiting reader in, a downgrade from writing to reading (and the
// refused upgrade), and a crashed reader whose hold ends with its own lease. Several relock
// Clients stand for several processes.
//
//	go run ./examples/rwlock
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/relock-go/relock/examples/internal/connect"
	"github.com/relock-go/relock/rlock"
)

const lockName = "examples:rwlock:price-list"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "rwlock:", err)
		os.Exit(1)
	}
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

	var procs []*rlock.Client
	defer func() {
		for _, p := range procs {
			_ = p.Close()
		}
	}()
	newProc := func(opts ...rlock.Option) (*rlock.Client, error) {
		p, err := rlock.Dial(opt, opts...)
		if err == nil {
			procs = append(procs, p)
		}
		return p, err
	}
	a, err := newProc()
	if err != nil {
		return err
	}
	b, err := newProc()
	if err != nil {
		return err
	}
	writerProc, err := newProc()
	if err != nil {
		return err
	}

	// 1. Many readers at once.
	fmt.Println("== 1. Readers share the lock")
	r1, r2 := a.RWMutex(lockName), b.RWMutex(lockName)
	if err := r1.RLock(ctx); err != nil {
		return err
	}
	if err := r2.RLock(ctx); err != nil {
		return err
	}
	fmt.Println("A and B: RLock -> both hold a read hold")

	// 2. A writer waits for them, and holds new readers back while it waits.
	fmt.Println("\n== 2. A writer waits for the readers; new readers give way to it")
	w := writerProc.RWMutex(lockName)
	wrote := make(chan time.Time, 1)
	werr := make(chan error, 1)
	go func() {
		err := w.Lock(ctx)
		wrote <- time.Now()
		werr <- err
	}()
	late := a.RWMutex(lockName) // another reader, which arrives after the writer
	var refused bool
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		ok, err := late.TryRLock(ctx, 0, 0)
		if err != nil {
			return err
		}
		if !ok {
			refused = true
			break
		}
		_ = late.RUnlock(ctx) // the writer has not claimed its place yet
		time.Sleep(5 * time.Millisecond)
	}
	if !refused {
		return errors.New("a new reader was never held back by the waiting writer")
	}
	fmt.Println("C: TryRLock -> false: a writer is waiting, new readers give way")
	ok, err := r1.TryRLock(ctx, 0, 0)
	if err != nil || !ok {
		return fmt.Errorf("a reader inside could not re-enter: (%v, %v)", ok, err)
	}
	fmt.Println("A: TryRLock again -> true: a reader already inside may re-enter")
	var released time.Time
	for _, r := range []*rlock.RWMutex{r1, r1, r2} {
		select {
		case <-wrote:
			return errors.New("the writer got the lock while a reader held it")
		default:
		}
		released = time.Now() // the last one: the release that lets the writer in
		if err := r.RUnlock(ctx); err != nil {
			return err
		}
	}
	fmt.Println("A and B: RUnlock")
	if err := <-werr; err != nil {
		return err
	}
	fmt.Printf("W: Lock returned %v after the last reader left (woken by its release)\n", since(released, <-wrote))
	tok, err := w.Token(ctx)
	if err != nil {
		return err
	}
	fmt.Println("W: writing with fencing token", tok)

	// 3. One write release lets every waiting reader in at once.
	fmt.Println("\n== 3. Releasing the write lock wakes every waiting reader")
	const readers = 8
	var wg sync.WaitGroup
	in := make(chan time.Time, readers)
	errs := make(chan error, readers)
	waiting := make([]*rlock.RWMutex, readers)
	for i := range waiting {
		waiting[i] = procs[i%2].RWMutex(lockName)
		wg.Add(1)
		go func(r *rlock.RWMutex) {
			defer wg.Done()
			if err := r.RLock(ctx); err != nil {
				errs <- err
				return
			}
			in <- time.Now()
		}(waiting[i])
	}
	time.Sleep(200 * time.Millisecond) // let them queue up behind the writer
	if len(in) > 0 {
		return errors.New("a reader got the lock while the writer held it")
	}
	released = time.Now()
	if err := w.Unlock(ctx); err != nil {
		return err
	}
	wg.Wait()
	close(errs)
	if err, failed := <-errs; failed {
		return err
	}
	var last time.Time
	for i := 0; i < readers; i++ {
		if t := <-in; t.After(last) {
			last = t
		}
	}
	fmt.Printf("W: Unlock -> all %d waiting readers held the lock within %v\n", readers, since(released, last))
	for _, r := range waiting {
		if err := r.RUnlock(ctx); err != nil {
			return err
		}
	}

	// 4. Downgrade: write, then read, then stop writing; and no upgrade.
	fmt.Println("\n== 4. Downgrade yes, upgrade no")
	if err := w.Lock(ctx); err != nil {
		return err
	}
	if err := w.RLock(ctx); err != nil {
		return err
	}
	if err := w.Unlock(ctx); err != nil {
		return err
	}
	written, err := w.IsWriteLocked(ctx)
	if err != nil {
		return err
	}
	read, err := w.IsReadLocked(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("W: Lock, RLock, Unlock -> written=%v read=%v: still reading, others may read too\n", written, read)
	if written || !read {
		return fmt.Errorf("after a downgrade: write-locked %v, read-locked %v; want false, true", written, read)
	}
	err = w.Lock(ctx)
	fmt.Printf("W: Lock while reading -> %v\n", err)
	if !errors.Is(err, rlock.ErrUpgrade) {
		return fmt.Errorf("upgrade: got %v, want ErrUpgrade", err)
	}
	if err := w.RUnlock(ctx); err != nil {
		return err
	}

	// 5. A crashed reader stops blocking writers when its own lease ends.
	const lease = 500 * time.Millisecond
	fmt.Printf("\n== 5. A reader crashes holding a read hold with a %v lease\n", lease)
	doomed, err := newProc()
	if err != nil {
		return err
	}
	ok, err = doomed.RWMutex(lockName).TryRLock(ctx, 0, lease)
	if err != nil || !ok {
		return fmt.Errorf("doomed reader: (%v, %v)", ok, err)
	}
	crashed := time.Now()
	_ = doomed.Close() // gone without RUnlock, like a crashed process
	fmt.Println("D: TryRLock(lease) -> true, then the process dies")
	if err := w.Lock(ctx); err != nil {
		return err
	}
	waited := time.Since(crashed)
	fmt.Printf("W: Lock returned %v after the crash: the dead reader's lease ran out\n", waited.Round(time.Millisecond))
	if waited < lease-lease/10 {
		return fmt.Errorf("the writer got the lock %v after the crash, before the dead reader's %v lease ended", waited, lease)
	}
	return w.Unlock(ctx)
}

func since(from, to time.Time) time.Duration { return to.Sub(from).Round(100 * time.Microsecond) }
