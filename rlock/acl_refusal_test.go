package rlock_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// refusalStep is one call of a primitive in TestACLRule_refusalLeavesNothing.
type refusalStep struct {
	what string
	f    func(ctx context.Context) error
	// keep are keys that a refused call must leave as they were (the state that the call
	// would have changed: a count, a lock): a refusal must not half-apply the call.
	keep []string
}

// TestACLRule_refusalLeavesNothing: for every command of ACLRule and every primitive, a user
// without that command runs the primitive's calls in turn (each call's first attempt; a call
// refused earlier leaves the later ones less to do). A refused call must fail with an error
// wrapping ErrNoPermission that names the refused command, leave no key it wrote without an
// expiry (Redis does not roll a script back: what a script wrote before the refused call
// stays unless the script undoes it), and leave the state it would have changed as it was. A
// call that succeeds may leave only the counts that live without an expiry by design (a
// semaphore's, a permit semaphore's, a latch's) without one.
func TestACLRule_refusalLeavesNothing(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("long: every primitive for every command (run without -short)")
	}
	b := realBackend(t)
	var cmds []string
	for _, r := range aclRule(t, "") {
		if strings.HasPrefix(r, "+") {
			cmds = append(cmds, r[1:])
		}
	}
	const lease = 300 * time.Millisecond
	for i, cmd := range cmds {
		t.Run(cmd, func(t *testing.T) {
			t.Parallel() // a user, a key prefix and Clients of its own on the shared server
			prefix := fmt.Sprintf("nl%d:", i)
			var rule []string
			for _, r := range aclRule(t, prefix) {
				if r != "+"+cmd {
					rule = append(rule, r)
				}
			}
			user := "nl" + strings.ReplaceAll(cmd, "|", "-")
			b.srv.Do(t, append([]string{"ACL", "SETUSER", user, "reset", "on", ">pw"}, rule...)...)
			dial := func() *rlock.Client {
				c, err := rlock.Dial(rueidis.ClientOption{InitAddress: []string{b.srv.Addr()}, Username: user, Password: "pw"},
					rlock.WithKeyPrefix(prefix), rlock.WithWatchdogTimeout(lease), rlock.WithCleanupTimeout(time.Second),
					// A waiter whose leave is refused keeps its place (or claim) until this runs
					// out: the next lock call may wait for it.
					rlock.WithWaiterTimeout(lease))
				if err != nil {
					return nil
				}
				t.Cleanup(func() { _ = c.Close() })
				return c
			}
			c, c2 := dial(), dial()
			if c == nil || c2 == nil {
				t.Skipf("Dial refused without %s", cmd)
			}
			refused := 0
			for _, p := range refusalPrimitives(c, c2, redistest.Name(t)) {
				for _, s := range p {
					if runRefusalStep(t, b.srv, prefix, cmd, s) {
						refused++
					}
				}
			}
			t.Logf("without %s: %d calls refused", cmd, refused)
		})
	}
}

// runRefusalStep runs s and checks what it left; it reports whether s was refused.
func runRefusalStep(t *testing.T, srv *redistest.Server, prefix, cmd string, s refusalStep) bool {
	t.Helper()
	dumped := time.Now()
	before, ttls := keyDumps(t, srv, prefix)
	lastScores := zsetLastScores(t, srv, before)
	ctx, cancel := context.WithTimeout(bg, 5*time.Second)
	defer cancel()
	start := time.Now()
	err := s.f(ctx)
	took := time.Since(start)
	after, _ := keyDumps(t, srv, prefix)
	afterMs := serverMs(t, srv)
	// A key whose lease ran out between the two dumps expired on its own (under load a short
	// lease can end while the step runs): that is no change made by a refused call. So did a
	// read-write lock whose every hold's lease (its <key>:leases, in server ms) had ended: the
	// next script drops the ended holds and the lock they leave empty before it reaches the
	// refused call, though the hash's own expiry, set by a longer lease given back since, has
	// not come yet (seen under load: "without zscore: RWMutex.Lock (again) was refused but
	// changed" a write hold whose renewals ZSCORE refused "-> none").
	expired := func(k string) bool {
		if _, there := after[k]; there {
			return false
		}
		if ttls[k] >= 0 && time.Duration(ttls[k])*time.Millisecond <= time.Since(dumped) {
			return true
		}
		if !strings.Contains(before[k], " mode=") {
			return false // not a read-write lock
		}
		end, ok := lastScores[k+":leases"]
		return !ok || end <= afterMs // no lease left, or every lease ended
	}
	// A give-back of a hold this Client had already lost (its renewal refused: the loss's
	// cause wraps ErrNoPermission) ran, and says the hold was not held: the call itself was
	// not refused, and it changed what it gave back.
	lostBefore := errors.Is(err, rlock.ErrNotHeld) || errors.Is(err, rlock.ErrLockLost)
	refused := errors.Is(err, rlock.ErrNoPermission) && !lostBefore
	switch {
	case err == nil:
	case refused:
		named := regexp.MustCompile(`\b` + regexp.QuoteMeta(strings.ToUpper(cmd)) + ` refused`)
		if !named.MatchString(err.Error()) {
			t.Errorf("without %s: %s: the error does not name the command: %v", cmd, s.what, err)
		}
		if took > 3*time.Second {
			t.Errorf("without %s: %s: refused after %v (a retry loop?)", cmd, s.what, took)
		}
		for _, k := range s.keep {
			if before[k] != after[k] && !expired(k) {
				t.Errorf("without %s: %s was refused but changed %s: %q -> %q (PTTL %d ms %v before; last lease end %d ms, server time %d ms after)",
					cmd, s.what, k, before[k], after[k], ttls[k], time.Since(dumped), lastScores[k+":leases"], afterMs)
			}
		}
	case lostBefore, errors.Is(err, rlock.ErrUpgrade):
		// The give-back of a hold that a refused call did not take, a renewal refused, or a
		// write lock asked for while a read hold whose give-back was refused is still held.
	default:
		t.Errorf("without %s: %s: %v, want nil or an error wrapping ErrNoPermission", cmd, s.what, err)
	}
	for k, v := range after {
		if before[k] == v || !strings.HasSuffix(v, noExpiry) || byDesignWithoutExpiry(k) && !refused {
			continue
		}
		t.Errorf("without %s: %s (error %v) left %s without an expiry", cmd, s.what, err, k)
	}
	return refused
}

// noExpiry ends a keyDumps value of a key without an expiry.
const noExpiry = " (no expiry)"

// keyDumps maps each key of prefix to its value (keyValue), followed by noExpiry when the key
// has no expiry, and to its PTTL in milliseconds (-1: no expiry).
func keyDumps(t *testing.T, srv *redistest.Server, prefix string) (map[string]string, map[string]int64) {
	t.Helper()
	msg := srv.Do(t, "KEYS", "{"+prefix+"*")
	keys, err := msg.AsStrSlice()
	if err != nil {
		t.Fatalf("KEYS: %v", err)
	}
	out := make(map[string]string, len(keys))
	ttls := make(map[string]int64, len(keys))
	for _, k := range keys {
		v := keyValue(t, srv, k)
		if v == "" {
			continue // expired since KEYS
		}
		p := srv.Do(t, "PTTL", k)
		n, _ := p.AsInt64()
		if n == -1 {
			v += noExpiry
		}
		out[k], ttls[k] = v, n
	}
	return out, ttls
}

// keyValue shows the value of key (a string, hash or sorted set, the types relock writes)
// whatever the order its fields were written in; "" when key is gone (it expired since the
// caller listed it).
func keyValue(t *testing.T, srv *redistest.Server, key string) string {
	t.Helper()
	typ := srv.Do(t, "TYPE", key)
	name, _ := typ.ToString()
	switch name {
	case "string":
		v := srv.Do(t, "GET", key)
		s, err := v.ToString()
		if err != nil {
			return ""
		}
		return "string " + s
	case "hash":
		v := srv.Do(t, "HGETALL", key)
		m, _ := v.AsStrMap()
		fields := make([]string, 0, len(m))
		for f, x := range m {
			fields = append(fields, f+"="+x)
		}
		if len(fields) == 0 {
			return ""
		}
		sort.Strings(fields)
		return "hash " + strings.Join(fields, " ")
	case "zset":
		v := srv.Do(t, "ZRANGE", key, "0", "-1", "WITHSCORES")
		zs, _ := v.AsZScores()
		if len(zs) == 0 {
			return ""
		}
		return fmt.Sprintf("zset %v", zs)
	}
	if name == "none" {
		return "" // gone since KEYS
	}
	return name
}

// zsetLastScores maps each sorted set among dumped's keys to its highest score.
func zsetLastScores(t *testing.T, srv *redistest.Server, dumped map[string]string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for k, v := range dumped {
		if !strings.HasPrefix(v, "zset ") {
			continue
		}
		m := srv.Do(t, "ZRANGE", k, "-1", "-1", "WITHSCORES")
		zs, err := m.AsZScores()
		if err == nil && len(zs) == 1 {
			out[k] = int64(zs[0].Score)
		}
	}
	return out
}

// serverMs is the server's clock in milliseconds (TIME), the clock leases are written in.
func serverMs(t *testing.T, srv *redistest.Server) int64 {
	t.Helper()
	m := srv.Do(t, "TIME")
	tm, err := m.AsStrSlice()
	if err != nil || len(tm) != 2 {
		t.Fatalf("TIME: %v %v", tm, err)
	}
	sec, _ := strconv.ParseInt(tm[0], 10, 64)
	us, _ := strconv.ParseInt(tm[1], 10, 64)
	return sec*1000 + us/1000
}

// byDesignWithoutExpiry reports whether key is a count that lives without an expiry by design:
// a semaphore's or a permit semaphore's permits, a latch's count (the primitives' Key()).
func byDesignWithoutExpiry(key string) bool {
	return strings.HasSuffix(key, "-sem}") || strings.HasSuffix(key, "-psem}") || strings.HasSuffix(key, "-latch}")
}

// refusalPrimitives returns each primitive's calls, in order: c makes them, c2 (a second
// Client of the same user) contends.
func refusalPrimitives(c, c2 *rlock.Client, name string) [][]refusalStep {
	// Longer than the watchdog's renewal interval (lease/3): a renewal runs while the
	// contender waits, and a call after it meets a hold whose renewal was refused.
	const wait = 200 * time.Millisecond
	m, m2 := c.Mutex(name+"-m"), c2.Mutex(name+"-m")
	f, f2 := c.FairMutex(name+"-fair"), c2.FairMutex(name+"-fair")
	sp := c.SpinMutex(name + "-spin")
	rw, rw2 := c.RWMutex(name+"-rw"), c2.RWMutex(name+"-rw")
	sem := c.Semaphore(name + "-sem")
	ps := c.PermitSemaphore(name + "-psem")
	l := c.CountDownLatch(name + "-latch")
	ml := c.MultiLock(name+"-a", name+"-b")
	var permit rlock.Permit
	// The contender's TryLock is refused by the holder's lock, unless the holder's lease ran
	// out first (a renewal late on a loaded machine, or refused): then it holds the lock, and
	// gives it back at once, or the holder's next Lock would wait for it until its ctx ended
	// (seen under load: "without zrevrange: Mutex.Lock (again): context deadline exceeded").
	try := func(l interface {
		TryLock(ctx context.Context, wait, lease time.Duration) (bool, error)
		Unlock(ctx context.Context) error
	}) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			ok, err := l.TryLock(ctx, wait, 0)
			if ok {
				_ = l.Unlock(ctx)
			}
			return err
		}
	}
	force := func(l interface {
		ForceUnlock(ctx context.Context) (bool, error)
	}) func(ctx context.Context) error {
		return func(ctx context.Context) error { _, err := l.ForceUnlock(ctx); return err }
	}
	mk, fk, rk := []string{m.Key()}, []string{f.Key()}, []string{rw.Key()}
	return [][]refusalStep{
		{
			{"Mutex.Lock", m.Lock, mk},
			{"Mutex.Lock (re-entry)", m.Lock, mk},
			{"Mutex.TryLock (another owner, waiting)", try(m2), nil},
			{"Mutex.Unlock", m.Unlock, mk},
			{"Mutex.Unlock (last hold)", m.Unlock, mk},
			{"Mutex.Lock (again)", m.Lock, mk},
			{"Mutex.ForceUnlock (another owner)", force(m2), mk},
		},
		{
			{"FairMutex.Lock", f.Lock, fk},
			{"FairMutex.Lock (re-entry)", f.Lock, fk},
			{"FairMutex.TryLock (another owner, waiting)", try(f2), nil},
			{"FairMutex.Unlock", f.Unlock, fk},
			{"FairMutex.Unlock (last hold)", f.Unlock, fk},
			{"FairMutex.Lock (again)", f.Lock, fk},
			{"FairMutex.ForceUnlock (another owner)", force(f2), fk},
		},
		{
			{"SpinMutex.Lock", sp.Lock, []string{sp.Key()}},
			{"SpinMutex.Unlock", sp.Unlock, []string{sp.Key()}},
		},
		{
			{"RWMutex.Lock", rw.Lock, rk},
			{"RWMutex.Lock (re-entry)", rw.Lock, rk},
			{"RWMutex.RLock (by the writer)", rw.RLock, rk},
			{"RWMutex.TryLock (another owner, waiting)", try(rw2), nil},
			{"RWMutex.RUnlock", rw.RUnlock, rk},
			{"RWMutex.Unlock", rw.Unlock, rk},
			{"RWMutex.Unlock (last hold)", rw.Unlock, rk},
			{"RWMutex.RLock", rw.RLock, rk},
			{"RWMutex.RLock (another owner)", rw2.RLock, rk},
			{"RWMutex.RUnlock (another owner)", rw2.RUnlock, rk},
			{"RWMutex.RUnlock", rw.RUnlock, rk},
			{"RWMutex.Lock (again)", rw.Lock, rk},
			{"RWMutex.ForceUnlock (another owner)", force(rw2), rk},
		},
		{
			{"Semaphore.TrySetPermits", func(ctx context.Context) error { _, err := sem.TrySetPermits(ctx, 2); return err }, []string{sem.Key()}},
			{"Semaphore.TryAcquire", func(ctx context.Context) error { _, err := sem.TryAcquire(ctx, 1, 0); return err }, []string{sem.Key()}},
			{"Semaphore.TryAcquire (too many)", func(ctx context.Context) error { _, err := sem.TryAcquire(ctx, 5, 0); return err }, []string{sem.Key()}},
			{"Semaphore.Release", func(ctx context.Context) error { return sem.Release(ctx, 1) }, []string{sem.Key()}},
			{"Semaphore.AddPermits", func(ctx context.Context) error { return sem.AddPermits(ctx, 1) }, []string{sem.Key()}},
			{"Semaphore.DrainPermits", func(ctx context.Context) error { _, err := sem.DrainPermits(ctx); return err }, []string{sem.Key()}},
			{"Semaphore.ReleaseIfExists", func(ctx context.Context) error { _, err := sem.ReleaseIfExists(ctx, 1); return err }, []string{sem.Key()}},
			{"Semaphore.Delete", func(ctx context.Context) error { _, err := sem.Delete(ctx); return err }, []string{sem.Key()}},
			{"Semaphore.Release (creates it)", func(ctx context.Context) error { return sem.Release(ctx, 1) }, []string{sem.Key()}},
			{"Semaphore.Delete (again)", func(ctx context.Context) error { _, err := sem.Delete(ctx); return err }, []string{sem.Key()}},
		},
		{
			{"PermitSemaphore.TrySetPermits", func(ctx context.Context) error { _, err := ps.TrySetPermits(ctx, 1); return err }, []string{ps.Key()}},
			{"PermitSemaphore.AddPermits", func(ctx context.Context) error { return ps.AddPermits(ctx, 1) }, []string{ps.Key()}},
			{"PermitSemaphore.TryAcquire", func(ctx context.Context) error {
				p, _, err := ps.TryAcquire(ctx, 0, 2*time.Second)
				permit = p
				return err
			}, []string{ps.Key() + ":leases"}},
			{"PermitSemaphore.Extend (shorter)", func(ctx context.Context) error {
				if permit.ID == "" {
					return nil
				}
				return ps.Extend(ctx, permit.ID, time.Second)
			}, []string{ps.Key() + ":leases"}},
			{"PermitSemaphore.Extend (longer)", func(ctx context.Context) error {
				if permit.ID == "" {
					return nil
				}
				return ps.Extend(ctx, permit.ID, 3*time.Second)
			}, []string{ps.Key() + ":leases"}},
			{"PermitSemaphore.Release", func(ctx context.Context) error {
				if permit.ID == "" {
					return nil
				}
				return ps.Release(ctx, permit.ID)
			}, []string{ps.Key() + ":leases"}},
			{"PermitSemaphore.Delete", func(ctx context.Context) error { _, err := ps.Delete(ctx); return err }, []string{ps.Key()}},
		},
		{
			{"CountDownLatch.TrySetCount", func(ctx context.Context) error { _, err := l.TrySetCount(ctx, 2); return err }, []string{l.Key()}},
			{"CountDownLatch.CountDown", l.CountDown, []string{l.Key()}},
			{"CountDownLatch.CountDown (to zero)", l.CountDown, []string{l.Key()}},
			{"CountDownLatch.TrySetCount (again)", func(ctx context.Context) error { _, err := l.TrySetCount(ctx, 1); return err }, []string{l.Key()}},
			{"CountDownLatch.Delete", func(ctx context.Context) error { _, err := l.Delete(ctx); return err }, []string{l.Key()}},
		},
		{
			{"MultiLock.Lock", ml.Lock, nil},
			{"MultiLock.Unlock", ml.Unlock, nil},
		},
	}
}
