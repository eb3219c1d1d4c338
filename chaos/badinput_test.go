package chaos

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// must fails t if err is not nil.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// wantErr fails t unless err wraps target.
func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: got %v, want an error wrapping %v", what, err, target)
	}
}

func TestBadInput(t *testing.T) {
	srv := redistest.Start(t)
	c := relock(t, srv, srv.Addr(), rlock.WithWatchdogTimeout(2*time.Second))
	other := relock(t, srv, srv.Addr(), rlock.WithWatchdogTimeout(2*time.Second))
	base := redistest.Name(t)
	keys := func() int64 {
		m := srv.Do(t, "DBSIZE")
		return mustInt(t, &m)
	}

	t.Run("names", func(t *testing.T) {
		result(t, row{order: "bad input", fault: "names: empty, 1 MiB, binary (every byte value), with `{` and `}`",
			expected: "empty: ErrInvalid and nothing sent; the others lock, exclude and unlock like any name"})
		before := keys()
		m := c.Mutex("")
		wantErr(t, "Lock with an empty name", m.Lock(bg), rlock.ErrInvalid)
		_, err := m.TryLock(bg, 0, 0)
		wantErr(t, "TryLock with an empty name", err, rlock.ErrInvalid)
		wantErr(t, "Unlock with an empty name", m.Unlock(bg), rlock.ErrInvalid)
		if keys() != before {
			t.Error("an empty name wrote to Redis")
		}
		var bin strings.Builder
		for i := 0; i < 256; i++ {
			bin.WriteByte(byte(i))
		}
		for _, name := range []string{
			base + strings.Repeat("x", 1<<20),
			base + bin.String(),
			base + "{", base + "}", base + "}{", base + "{}", "{" + base + "}", base + "{tag}rest", base + "%7B",
		} {
			m, o := c.Mutex(name), other.Mutex(name)
			if err := m.Lock(bg); err != nil {
				t.Errorf("Lock(%.40q): %v", name, err)
				continue
			}
			if ok, err := o.TryLock(bg, 0, 0); ok || err != nil {
				t.Errorf("second owner of %.40q: %v %v (want no lock, no error)", name, ok, err)
			}
			must(t, m.Unlock(bg))
			if ok, err := o.TryLock(bg, 0, 0); !ok || err != nil {
				t.Errorf("second owner after unlock of %.40q: %v %v", name, ok, err)
			}
			must(t, o.Unlock(bg))
		}
		// Names that differ only in braces or escapes are different locks.
		a, b := c.Mutex(base+"{"), other.Mutex(base+"%7B")
		must(t, a.Lock(bg))
		if ok, err := b.TryLock(bg, 0, 0); !ok || err != nil {
			t.Errorf("%q and %q collide: %v %v", a.Name(), b.Name(), ok, err)
		} else {
			must(t, b.Unlock(bg))
		}
		must(t, a.Unlock(bg))
		setOutcome(t, "empty: ErrInvalid, nothing written; 1 MiB, binary and brace names lock, exclude and unlock; escapes do not collide")
	})

	t.Run("durations", func(t *testing.T) {
		result(t, row{order: "bad input", fault: "waits and leases: zero, negative, sub-millisecond, huge (`math.MaxInt64`)",
			expected: "negative wait and sub-ms lease: ErrInvalid; zero wait: one attempt; huge wait/lease: no overflow, no panic"})
		m, o := c.Mutex(base+"-d"), other.Mutex(base+"-d")
		_, err := m.TryLock(bg, -time.Second, 0)
		wantErr(t, "negative wait", err, rlock.ErrInvalid)
		_, err = m.TryLock(bg, 0, 500*time.Microsecond)
		wantErr(t, "sub-millisecond lease", err, rlock.ErrInvalid)
		ok, err := m.TryLock(bg, math.MaxInt64, math.MaxInt64)
		if !ok || err != nil {
			t.Fatalf("huge wait and lease on a free lock: %v %v", ok, err)
		}
		ttl, _ := m.TTL(bg)
		if ttl < 24*time.Hour {
			t.Errorf("huge lease became TTL %v", ttl)
		}
		start := time.Now()
		ok, err = o.TryLock(bg, 0, 0)
		if ok || err != nil || time.Since(start) > 2*time.Second {
			t.Errorf("zero wait on a held lock: %v %v after %v, want (false, nil) at once", ok, err, time.Since(start))
		}
		ctx, cancel := context.WithTimeout(bg, 200*time.Millisecond)
		ok, err = o.TryLock(ctx, math.MaxInt64, 0)
		cancel()
		if ok || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("huge wait bounded by ctx: %v %v, want ctx's error", ok, err)
		}
		must(t, m.Unlock(bg))
		// A negative lease means watchdog mode (documented: lease <= 0), not an error.
		ok, err = m.TryLock(bg, 0, -time.Second)
		if !ok || err != nil {
			t.Fatalf("negative lease: %v %v", ok, err)
		}
		must(t, m.Unlock(bg))
		setOutcome(t, "negative wait and sub-ms lease: ErrInvalid; zero wait: one attempt; MaxInt64 wait and lease: held with a TTL of years, a waiter bounded by its ctx; a negative lease is watchdog mode, as documented (not an error)")
	})

	t.Run("contextAndOwnership", func(t *testing.T) {
		result(t, row{order: "bad input", fault: "ctx already cancelled; Unlock without Lock, twice, from another owner",
			expected: "ctx's error, nothing left in Redis; ErrNotHeld, the holder's hold untouched"})
		name := base + "-o"
		m, o := c.Mutex(name), other.Mutex(name)
		ctx, cancel := context.WithCancel(bg)
		cancel()
		wantErr(t, "Lock with a cancelled ctx", m.Lock(ctx), context.Canceled)
		if e := srv.Do(t, "EXISTS", m.Key()); mustInt(t, &e) != 0 {
			t.Error("a cancelled Lock left the lock held")
		}
		wantErr(t, "Unlock without Lock", m.Unlock(bg), rlock.ErrNotHeld)
		must(t, m.Lock(bg))
		wantErr(t, "Unlock by another owner", o.Unlock(bg), rlock.ErrNotHeld)
		wantErr(t, "Unlock by another handle of the same Client", c.Mutex(name).Unlock(bg), rlock.ErrNotHeld)
		if n, _ := m.HoldCount(bg); n != 1 {
			t.Errorf("another owner's Unlock changed the hold count to %d", n)
		}
		must(t, m.Err(bg))
		must(t, m.Unlock(ctx)) // a cancelled ctx still unlocks
		wantErr(t, "second Unlock", m.Unlock(bg), rlock.ErrNotHeld)
		setOutcome(t, "cancelled ctx: context.Canceled, nothing held; Unlock without Lock / twice / by another owner: ErrNotHeld, the holder's count untouched; Unlock with a cancelled ctx works")
	})

	t.Run("wrongType", func(t *testing.T) {
		result(t, row{order: "bad input", fault: "a key of another type at the lock's name, and at its fence",
			expected: "ErrWrongType; the user's data untouched"})
		name := base + "-w"
		m := c.Mutex(name)
		srv.Do(t, "SET", m.Key(), "user data")
		wantErr(t, "Lock on a string", m.Lock(bg), rlock.ErrWrongType)
		wantErr(t, "Unlock on a string", m.Unlock(bg), rlock.ErrWrongType)
		_, err := m.ForceUnlock(bg)
		wantErr(t, "ForceUnlock on a string", err, rlock.ErrWrongType)
		if v := srv.Do(t, "GET", m.Key()); v.String() == "" || !strings.Contains(v.String(), "user data") {
			t.Errorf("the user's value changed: %v", v.String())
		}
		srv.Do(t, "DEL", m.Key())
		srv.Do(t, "SET", m.Key()+":fence", "user data")
		wantErr(t, "Lock with a string at the fence", m.Lock(bg), rlock.ErrWrongType)
		if e := srv.Do(t, "EXISTS", m.Key()); mustInt(t, &e) != 0 {
			t.Error("a failed Lock left the lock key")
		}
		if v := srv.Do(t, "GET", m.Key()+":fence"); !strings.Contains(v.String(), "user data") {
			t.Errorf("the user's fence value changed: %v", v.String())
		}
		setOutcome(t, "ErrWrongType from Lock, Unlock and ForceUnlock; the string at the lock and at the fence untouched")
	})

	t.Run("oom", func(t *testing.T) {
		result(t, row{order: "bad input", fault: "Redis `maxmemory` full with `noeviction` (OOM on acquire)",
			expected: "Lock fails with a clear OOM error and writes nothing; a held lock still renews and unlocks"})
		s := redistest.Start(t, redistest.WithArgs("--maxmemory-policy", "noeviction"))
		// Renewed every 250ms (four renewals in the second watched below), each with about
		// 640ms to be confirmed: 300ms at the default fraction left under 100ms, and a stall
		// of that much on a loaded machine lost the held lock for no fault of the full server.
		lc := relock(t, s, s.Addr(), rlock.WithWatchdogTimeout(time.Second), rlock.WithRenewFraction(0.25))
		held := lc.Mutex(base + "-held")
		must(t, held.Lock(bg))
		info := s.Do(t, "INFO", "memory")
		text, _ := info.ToString()
		var used int64
		for _, line := range strings.Split(text, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
				used, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		s.Do(t, "CONFIG", "SET", "maxmemory", fmt.Sprint(used/2))
		m := lc.Mutex(base + "-oom")
		err := m.Lock(bg)
		if err == nil || !strings.Contains(err.Error(), "OOM") {
			t.Errorf("Lock on a full server: %v, want an OOM error", err)
		}
		if e := s.Do(t, "EXISTS", m.Key()); mustInt(t, &e) != 0 {
			t.Error("a refused Lock wrote the lock key")
		}
		hctx, cancel := held.HoldContext(bg)
		defer cancel()
		timer := time.NewTimer(time.Second) // four renewal intervals
		select {
		case <-hctx.Done():
			t.Errorf("a held lock was lost on a full server: %v", context.Cause(hctx))
		case <-timer.C:
		}
		must(t, held.Unlock(bg))
		s.Do(t, "CONFIG", "SET", "maxmemory", "0")
		setOutcome(t, fmt.Sprintf("Lock: %.60q..., nothing written; the held lock renewed for 1 s and unlocked", err))
	})

	t.Run("readOnlyReplica", func(t *testing.T) {
		result(t, row{order: "bad input", fault: "a read-only replica's address given as the client",
			expected: "a clear READONLY error at once; nothing hangs, nothing is held"})
		replica := redistest.Start(t, redistest.WithReplicaOf(srv))
		redistest.WaitFor(t, 15*time.Second, "the replica to sync", func() bool {
			msg := replica.Do(t, "INFO", "replication")
			s, _ := msg.ToString()
			return strings.Contains(s, "master_link_status:up")
		})
		rc := relock(t, replica, replica.Addr())
		m := rc.Mutex(base + "-ro")
		start := time.Now()
		err := m.Lock(bg)
		if err == nil || !strings.Contains(err.Error(), "READONLY") {
			t.Errorf("Lock on a replica: %v, want a READONLY error", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Lock on a replica took %v", d)
		}
		wantErr(t, "Err after a refused Lock", m.Err(bg), rlock.ErrNotHeld)
		setOutcome(t, fmt.Sprintf("Lock: %.80q in %v; not held", err, time.Since(start).Round(time.Millisecond)))
	})
}
