package bench

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
// time per cycle (redis_us/op: INFO commandstats usec of the commands the client sent;
// EVALSHA's and FCALL's include the calls the script ran, which commandstats also counts
// under their own names, so a name's usec counts only its top-level calls' share: usec *
// sent / calls).
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
	hashRel := load(`if redis.call('hget', KEYS[1], 'o') ~= ARGV[1] then return -1 end
redis.call('del', KEYS[1]) return 0`)
	empty := load(`return 0`)
	fastRel := load(lua.FastRelease.Text(true))
	fastAcq := load("#!lua\nif redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2]) then return redis.call('incr', KEYS[2]) end return 0")
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
		// set+incr: the acquire as two plain commands in the order that keeps tokens rising
		// without a script (SET NX PX GET, then the fence's INCR, one round trip: the token is
		// the INCR's answer, and cannot be in the value; DESIGN section 16), the release as
		// string-incr's.
		{"set+incr", func(i int) []rueidis.Completed {
			return []rueidis.Completed{c.B().Set().Key(keys[0]).Value(owner + "|1|" + seq(2*i) + "|").Nx().Get().PxMilliseconds(30000).Build(),
				c.B().Incr().Key(keys[1]).Build(),
				evalsha(strIncrRel, keys[:1], owner, seq(2*i+1))}
		}},
		// multi-hsetnx: the hash kept, the acquire as one transaction without a script
		// (HSETNX of a holder field that every grant would write, PEXPIRE NX, the fence's
		// INCR), the release a hash script that checks the holder field.
		{"multi-hsetnx", func(i int) []rueidis.Completed {
			return []rueidis.Completed{c.B().Multi().Build(),
				c.B().Hsetnx().Key(keys[0]).Field("o").Value(owner + "|" + seq(2*i)).Build(),
				c.B().Pexpire().Key(keys[0]).Milliseconds(30000).Nx().Build(),
				c.B().Incr().Key(keys[1]).Build(),
				c.B().Exec().Build(),
				evalsha(hashRel, keys[:1], owner+"|"+seq(2*i), seq(2*i+1))}
		}},
		// fast-multi: the fast grant as it is sent (MULTI, SET NX PX of the fast form, the
		// fence's INCR, EXEC), and its release by fast_release.lua.
		{"fast-multi", func(i int) []rueidis.Completed {
			return []rueidis.Completed{c.B().Multi().Build(),
				c.B().Arbitrary("SET").Keys(keys[0]).Args("~"+owner+" "+seq(2*i), "NX", "PX", "30000").Build(),
				c.B().Incr().Key(keys[1]).Build(),
				c.B().Exec().Build(),
				evalsha(fastRel, keys[:1], owner, seq(2*i), "")}
		}},
		// fast-script: the same grant as one small script (SET NX PX, then INCR when it
		// granted), the same release.
		{"fast-script", func(i int) []rueidis.Completed {
			return []rueidis.Completed{evalsha(fastAcq, keys, "~"+owner+" "+seq(2*i), "30000"), evalsha(fastRel, keys[:1], owner, seq(2*i), "")}
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
				cmds := p.cycle(i)
				if cmds[0].Commands()[0] == "MULTI" { // a transaction goes as one pipeline, on one connection
					n := 0
					for cmds[n].Commands()[0] != "EXEC" {
						n++
					}
					for _, r := range c.DoMulti(bg, cmds[:n+1]...) {
						if err := r.Error(); err != nil {
							b.Fatal(err)
						}
					}
					cmds = cmds[n+1:]
				}
				for _, cmd := range cmds {
					if err := c.Do(bg, cmd).Error(); err != nil && !rueidis.IsRedisNil(err) { // SET ... GET of no key
						b.Fatal(err)
					}
				}
			}
			for i := 0; i < 100; i++ {
				run(i)
			}
			srv.ResetStats(b)
			cpu0 := serverCPU(b, srv)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				run(i)
			}
			b.StopTimer()
			b.ReportMetric(float64((serverCPU(b, srv)-cpu0).Nanoseconds())/1e3/float64(b.N), "server_cpu_us/op")
			sent := map[string]int64{}
			inMulti := false
			for _, cmd := range p.cycle(0) {
				name := strings.ToLower(cmd.Commands()[0])
				if !inMulti || name == "exec" { // a transaction's commands run inside its EXEC
					sent[name] += int64(b.N)
				}
				inMulti = name == "multi" || inMulti && name != "exec"
			}
			b.ReportMetric(sentUsec(b, srv, sent)/float64(b.N), "redis_us/op")
		})
	}
}

// sentUsec is the server time INFO commandstats reports for the commands the client sent,
// sent[name] of each: a name's usec times the share of its calls that were sent (the rest
// ran inside scripts, whose own usec includes them).
func sentUsec(b *testing.B, srv *redistest.Server, sent map[string]int64) float64 {
	msg := srv.Do(b, "INFO", "commandstats")
	text, err := msg.ToString()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(text, "\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":")
		if !ok || sent[name] == 0 {
			continue
		}
		var calls, usec int64
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				calls, _ = strconv.ParseInt(v, 10, 64)
			} else if v, ok := strings.CutPrefix(f, "usec="); ok {
				usec, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		if calls > 0 {
			sum += float64(usec) * min(1, float64(sent[name])/float64(calls))
		}
	}
	return sum
}

// BenchmarkFastGrantShape weighs the fast grant's two atomic shapes under rueidis's
// auto-pipelining, where a server's CPU goes to executing and parsing commands rather than to a
// round trip each (BenchmarkScriptCycle is one goroutine on the synchronous path): g
// goroutines, each with a lock of its own, run acquire+release cycles as the transaction
// (fast-multi: MULTI, SET NX PX, INCR, EXEC; 4 commands parsed and answered) or as one small
// script (fast-script: EVALSHA running SET NX PX and INCR), the release by fast_release.lua
// either way, beside the peers' shape (setnx+eval). It reports the client's and the server's
// CPU per cycle (getrusage, INFO cpu) and Redis's own time (commandstats usec, redis_us/op).
func BenchmarkFastGrantShape(b *testing.B) {
	srv := redistest.Start(b)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	load := func(src string) string {
		if err := c.Do(bg, c.B().ScriptLoad().Script(src).Build()).Error(); err != nil {
			b.Fatal(err)
		}
		sum := sha1.Sum([]byte(src))
		return hex.EncodeToString(sum[:])
	}
	evalsha := func(sha string, keys []string, args ...string) rueidis.Completed {
		return c.B().Evalsha().Sha1(sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	}
	fastRel := load(lua.FastRelease.Text(true))
	fastAcq := load("if redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2]) then return redis.call('incr', KEYS[2]) end return 0")
	peerRel := load(`if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0`)
	const owner = "h:0b8d9c1e7f1a4a559a3e1d2c3b4a5f60:1"
	shapes := []struct {
		name string
		sent map[string]int64 // top-level commands per cycle
		run  func(keys []string, i int) error
	}{
		{"fast-multi", map[string]int64{"exec": 1, "evalsha": 1}, func(keys []string, i int) error {
			v := "~" + owner + " " + strconv.Itoa(i)
			for _, r := range c.DoMulti(bg, c.B().Multi().Build(),
				c.B().Arbitrary("SET").Keys(keys[0]).Args(v, "NX", "PX", "30000").Build(),
				c.B().Incr().Key(keys[1]).Build(),
				c.B().Exec().Build()) {
				if err := r.Error(); err != nil {
					return err
				}
			}
			return c.Do(bg, evalsha(fastRel, keys[:1], owner, strconv.Itoa(i), "")).Error()
		}},
		{"fast-script", map[string]int64{"evalsha": 2}, func(keys []string, i int) error {
			v := "~" + owner + " " + strconv.Itoa(i)
			if err := c.Do(bg, evalsha(fastAcq, keys, v, "30000")).Error(); err != nil {
				return err
			}
			return c.Do(bg, evalsha(fastRel, keys[:1], owner, strconv.Itoa(i), "")).Error()
		}},
		{"setnx+eval", map[string]int64{"set": 1, "evalsha": 1}, func(keys []string, _ int) error {
			if err := c.Do(bg, c.B().Set().Key(keys[0]).Value(owner).Nx().PxMilliseconds(30000).Build()).Error(); err != nil {
				return err
			}
			return c.Do(bg, evalsha(peerRel, keys[:1], owner)).Error()
		}},
	}
	for _, g := range []int{1, 8, 64} {
		for _, p := range shapes {
			b.Run(fmt.Sprintf("%s/g=%d", p.name, g), func(b *testing.B) {
				var next atomic.Int64
				work := func(id, n int) {
					keys := []string{fmt.Sprintf("{shape-%d}", id), fmt.Sprintf("{shape-%d}:fence", id)}
					for i := 0; i < n; i++ {
						if err := p.run(keys, i); err != nil {
							b.Error(err)
							return
						}
					}
				}
				var wg sync.WaitGroup
				for id := range g { // warm-up
					wg.Add(1)
					go func() { defer wg.Done(); work(id, 50) }()
				}
				wg.Wait()
				srv.ResetStats(b)
				c0, s0 := processCPU(), serverCPU(b, srv)
				b.ResetTimer()
				for id := range g {
					wg.Add(1)
					go func() {
						defer wg.Done()
						keys := []string{fmt.Sprintf("{shape-%d}", id), fmt.Sprintf("{shape-%d}:fence", id)}
						for i := 0; ; i++ {
							if next.Add(1) > int64(b.N) {
								return
							}
							if err := p.run(keys, i); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				b.StopTimer()
				c1, s1 := processCPU(), serverCPU(b, srv)
				b.ReportMetric(float64((c1-c0).Nanoseconds())/1e3/float64(b.N), "client_cpu_us/op")
				b.ReportMetric(float64((s1-s0).Nanoseconds())/1e3/float64(b.N), "server_cpu_us/op")
				sent := map[string]int64{}
				for k, v := range p.sent {
					sent[k] = v * int64(b.N)
				}
				b.ReportMetric(sentUsec(b, srv, sent)/float64(b.N), "redis_us/op")
			})
		}
	}
}
