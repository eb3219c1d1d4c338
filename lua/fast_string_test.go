package lua_test

import (
	"testing"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/lua"
)

// TestOtherKinds_fastString: the semaphores' and the latch's scripts, which share a Mutex's
// key (rlock's semKeysFor, CountDownLatch), answer WRONGTYPE on its fast form written as a
// string, ghost or not, and leave it, as on its hash form: they know no fast form. It passed
// before the string form's readers too (the string is not a count, nor a hash).
func TestOtherKinds_fastString(t *testing.T) {
	eachServer(t, func(t *testing.T, tc server) {
		r := newFastRig(t, tc, "{fo}", stringShape)
		sem := []string{r.key, r.k(":log"), r.k(":logx")}
		t.Cleanup(func() { r.do("DEL", r.k(":log"), r.k(":logx"), r.k(":req")) })
		calls := []struct {
			name string
			run  func() rueidis.RedisResult
		}{
			{"sem_acquire", func() rueidis.RedisResult { return r.run(lua.SemAcquire, sem, "1", "r1", "10000") }},
			{"sem_release", func() rueidis.RedisResult { return r.run(lua.SemRelease, sem, "1", "r1", "10000", "P{fo}", "0") }},
			{"sem_set", func() rueidis.RedisResult { return r.run(lua.SemSet, sem, "1", "r1", "10000", "P{fo}", "0") }},
			{"sem_drain", func() rueidis.RedisResult { return r.run(lua.SemDrain, sem, "r1", "10000") }},
			{"sem_delete", func() rueidis.RedisResult { return r.run(lua.SemDelete, sem[:1]) }},
			{"latch_set", func() rueidis.RedisResult { return r.run(lua.LatchSet, []string{r.key, r.k(":req")}, "2", "10000") }},
			{"latch_count_down", func() rueidis.RedisResult {
				return r.run(lua.LatchCountDown, []string{r.key, r.k(":req")}, "P{fo}", "*", "10000")
			}},
			{"latch_delete", func() rueidis.RedisResult {
				return r.run(lua.LatchDelete, []string{r.key, r.k(":req")}, "P{fo}", "*", "10000")
			}},
			{"psem_state", func() rueidis.RedisResult { return r.run(lua.PsemState, []string{r.key, r.k(":leases")}, "") }},
			{"psem_acquire", func() rueidis.RedisResult {
				return r.run(lua.PsemAcquire, []string{r.key, r.k(":leases")}, "p1", "10000")
			}},
			{"psem_delete", func() rueidis.RedisResult { return r.run(lua.PsemDelete, []string{r.key, r.k(":leases")}) }},
		}
		for _, c := range calls {
			for _, ghost := range []bool{false, true} {
				r.clear()
				r.fast()
				if ghost {
					r.spend(fastSeq, 60000)
				}
				if res := c.run(); !wrongType(res) || !r.intact() {
					t.Fatalf("%s on a string fast form (ghost %v): %v, want WRONGTYPE and kept", c.name, ghost, res.Error())
				}
			}
		}
	})
}
