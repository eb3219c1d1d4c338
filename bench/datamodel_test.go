package bench

import (
	"crypto/sha1"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/lua"
)

// BenchmarkScriptCycle measures an uncontended acquire+release pair sent straight through a
// rueidis client (DisableCache, one goroutine: rueidis's synchronous path), for the data
// models and script forms issues 10 and 23 weigh: relock's own scripts (lock protocol v2: a
// hash owner -> count, sequence number, token; a fence raised by INCR) sent with EVALSHA, the
// same two script bodies loaded once as a Redis Function library and sent with FCALL, a
// string lock (SET NX PX inside a script, the value packing owner, count, request id and
// token) with a fence written with TIME and SET ... GET, with the fence's INCR (string-incr),
// without a fence, and with the acquire as two plain commands (incr+set: INCR, then SET NX
// PX GET, no script), two scripts that call nothing (empty-pair), and the peers' shape (SET
// NX PX, then a GET+DEL script). It reports the wall time per cycle (ns/op) and Redis's own
// time per cycle (redis_us/op: INFO commandstats usec of EVALSHA and FCALL, inner calls
// included, plus SET and INCR sent alone).
func BenchmarkScriptCycle(b *testing.B) {
	srv := redistest.Start(b)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	const owner = "h:0b8d9c1e7f1a4a559a3e1d2c3b4a5f60:1"
	const fence = `local now = redis.call('time')
local token = now[1] .. string.rep('0', 6 - #now[2]) .. now[2]
redis.call('set', KEYS[2], token, 'px', '86400000', 'get')
`
	load := func(src string) string {
		if err := c.Do(bg, c.B().ScriptLoad().Script(src).Build()).Error(); err != nil {
			b.Fatal(err)
		}
		sum := sha1.Sum([]byte(src))
		return hex.EncodeToString(sum[:])
	}
	keys := []string{"{relock:cycle}", "{relock:cycle}:fence"}
	evalsha := func(sha string, keys []string, args ...string) rueidis.Completed {
		return c.B().Evalsha().Sha1(sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	}
	acq, rel := load(lua.Acquire.Text(true)), load(lua.Release.Text(true))
	// The same bodies as a Function library: a function's body is the script's (KEYS and ARGV
	// are its parameters), defined once by FUNCTION LOAD.
	lib := "#!lua name=relockbench\n" +
		"redis.register_function('relock_acquire', function(KEYS, ARGV)\n" + lua.Acquire.Text(false) + "\nend)\n" +
		"redis.register_function{function_name='relock_release', flags={'allow-oom'}, callback=function(KEYS, ARGV)\n" +
		lua.Release.Text(false) + "\nend}\n"
	if err := c.Do(bg, c.B().FunctionLoad().Replace().FunctionCode(lib).Build()).Error(); err != nil {
		b.Fatal(err)
	}
	fcall := func(f string, keys []string, args ...string) rueidis.Completed {
		return c.B().Fcall().Function(f).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	}
	strAcq := load(fence + `redis.call('set', KEYS[1], ARGV[2] .. '|1|' .. ARGV[3] .. '|' .. token, 'nx', 'px', ARGV[1]) return 1`)
	strAcqNoFence := load(`redis.call('set', KEYS[1], ARGV[2] .. '|1|' .. ARGV[3], 'nx', 'px', ARGV[1]) return 1`)
	// string-incr is the shape issue 23 names as the only route to 6 server calls per cycle:
	// the fence's INCR first (the token), then SET NX PX GET, which grants or answers the
	// holder's value in one call; the release reads the value and checks owner and sequence
	// in Lua before the DEL.
	strIncrAcq := load(`local token = redis.call('incr', KEYS[2])
local old = redis.call('set', KEYS[1], ARGV[2] .. '|1|' .. ARGV[3] .. '|' .. token, 'nx', 'px', ARGV[1], 'get')
if not old then return {1, token, 1} end
return {0, redis.call('pttl', KEYS[1])}`)
	strIncrRel := load(`local v = redis.call('get', KEYS[1])
if not v then return -1 end
local o, n, q = string.match(v, '^([^|]*)|(%d+)|([^|]*)|')
if o ~= ARGV[1] then return -1 end
if q == ARGV[2] then return tonumber(n) end
redis.call('del', KEYS[1]) return 0`)
	empty := load(`return 0`)
	strRel := load(`local v = redis.call('get', KEYS[1]) redis.call('del', KEYS[1]) return 0`)
	peerRel := load(`if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0`)
	// seq is the i-th operation's sequence number, as a Client numbers them.
	seq := func(i int) string { return "0b8d9c1e7f1a4a559a3e1d2c3b4a5f60." + strconv.Itoa(i+1) }
	for _, p := range []struct {
		name  string
		cycle func(i int) []rueidis.Completed
	}{
		{"relock-hash", func(i int) []rueidis.Completed {
			return []rueidis.Completed{evalsha(acq, keys, "30000", owner, seq(2*i), ""), evalsha(rel, keys[:1], owner, seq(2*i+1), "P{relock:cycle}:released", "")}
		}},
		{"relock-hash-fcall", func(i int) []rueidis.Completed {
			return []rueidis.Completed{fcall("relock_acquire", keys, "30000", owner, seq(2*i), ""), fcall("relock_release", keys[:1], owner, seq(2*i+1), "P{relock:cycle}:released", "")}
		}},
		{"string-fenced", func(i int) []rueidis.Completed {
			return []rueidis.Completed{evalsha(strAcq, keys, "30000", owner, "a"+strconv.Itoa(i)), evalsha(strRel, keys[:1])}
		}},
		{"string-incr", func(i int) []rueidis.Completed {
			return []rueidis.Completed{evalsha(strIncrAcq, keys, "30000", owner, seq(2*i)), evalsha(strIncrRel, keys[:1], owner, seq(2*i+1))}
		}},
		// incr+set: the acquire as two plain commands (no script): the fence's INCR, then SET NX
		// PX GET with the token in the value; the release as string-incr's.
		{"incr+set", func(i int) []rueidis.Completed {
			return []rueidis.Completed{c.B().Incr().Key(keys[1]).Build(),
				c.B().Set().Key(keys[0]).Value(owner + "|1|" + seq(2*i) + "|1").Nx().Get().PxMilliseconds(30000).Build(),
				evalsha(strIncrRel, keys[:1], owner, seq(2*i+1))}
		}},
		// empty-pair: two scripts that call nothing: what running a script costs by itself.
		{"empty-pair", func(i int) []rueidis.Completed {
			return []rueidis.Completed{evalsha(empty, keys, "30000", owner, seq(2*i)), evalsha(empty, keys[:1], owner, seq(2*i+1))}
		}},
		{"string-unfenced", func(i int) []rueidis.Completed {
			return []rueidis.Completed{evalsha(strAcqNoFence, keys[:1], "30000", owner, "a"+strconv.Itoa(i)), evalsha(strRel, keys[:1])}
		}},
		{"setnx+eval", func(int) []rueidis.Completed {
			return []rueidis.Completed{c.B().Set().Key(keys[0]).Value(owner).Nx().PxMilliseconds(30000).Build(), evalsha(peerRel, keys[:1], owner)}
		}},
	} {
		b.Run(p.name, func(b *testing.B) {
			run := func(i int) {
				for _, cmd := range p.cycle(i) {
					if err := c.Do(bg, cmd).Error(); err != nil && !rueidis.IsRedisNil(err) { // SET ... GET of no key
						b.Fatal(err)
					}
				}
			}
			for i := 0; i < 100; i++ {
				run(i)
			}
			srv.ResetStats(b)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				run(i)
			}
			b.StopTimer()
			b.ReportMetric(float64(commandUsec(b, srv, "evalsha", "fcall", "set", "incr"))/float64(b.N), "redis_us/op")
		})
	}
}

// commandUsec is the usec INFO commandstats reports for the named commands, summed.
func commandUsec(b *testing.B, srv *redistest.Server, names ...string) int64 {
	msg := srv.Do(b, "INFO", "commandstats")
	text, err := msg.ToString()
	if err != nil {
		b.Fatal(err)
	}
	var sum int64
	for _, line := range strings.Split(text, "\n") {
		for _, n := range names {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+n+":"); ok {
				for _, f := range strings.Split(rest, ",") {
					if v, ok := strings.CutPrefix(f, "usec="); ok {
						u, _ := strconv.ParseInt(v, 10, 64)
						sum += u
					}
				}
			}
		}
	}
	return sum
}
