package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// tiny bounds a smoke run to a few seconds.
var tiny = settings{warm: 20 * time.Millisecond, window: 150 * time.Millisecond, handoffDur: 300 * time.Millisecond,
	handoffMax: 5, heldLocks: 100, heldLease: 300 * time.Millisecond, rounds: 1, pingPairs: 100,
	rtt: defaultRTT, rttPingPairs: 20}

// TestSmoke runs every scenario for every library briefly and checks the outputs' shape,
// that no library broke mutual exclusion, that the uncontended-rtt rows went through the
// delay proxy, and that the uncontended rows have their Redis and allocation figures.
func TestSmoke(t *testing.T) {
	if os.Getenv("REDIS_ADDR") == "" {
		if _, err := exec.LookPath("redis-server"); err != nil {
			t.Skip("no redis-server on PATH and no REDIS_ADDR")
		}
	}
	dir := t.TempDir()
	csvPath := filepath.Join(dir, "out.csv")
	var md bytes.Buffer
	if err := run(context.Background(), &md, libs, tiny, csvPath, dir); err != nil {
		t.Fatal(err)
	}
	recs := readCSV(t, csvPath)
	if !slices.Equal(recs[0], []string{"lib", "scenario", "goroutines", "ops_per_sec", "p50_us", "p99_us", "max_us", "jain", "cmds_per_op", "violations", "errors",
		"server_calls_per_op", "redis_usec_per_op", "redis_cpu_usec_per_op", "allocs_per_op"}) {
		t.Fatalf("CSV header %v", recs[0])
	}
	if want := 1 + len(libs)*8; len(recs) != want {
		t.Fatalf("CSV has %d records, want %d", len(recs), want)
	}
	rtts := 0
	for _, r := range recs[1:] {
		if r[9] != "0" {
			t.Errorf("%s %s %s: %s mutual-exclusion violations", r[0], r[1], r[2], r[9])
		}
		if r[3] == "0" && r[0] != "redsync-default" && r[0] != "redislock-default" {
			t.Errorf("%s %s %s: no acquisition", r[0], r[1], r[2])
		}
		// A cycle is at least a lock and a release at the server; held rows leave it empty.
		if calls, err := strconv.ParseFloat(r[11], 64); strings.HasPrefix(r[1], "uncontended") && (err != nil || calls < 2) {
			t.Errorf("%s %s %s: server_calls_per_op %q", r[0], r[1], r[2], r[11])
		}
		// A cycle costs Redis time and the client allocations: figures measured, not left out.
		if strings.HasPrefix(r[1], "uncontended") {
			for i := 12; i <= 14; i++ {
				if v, err := strconv.ParseFloat(r[i], 64); err != nil || v <= 0 {
					t.Errorf("%s %s %s: %s %q", r[0], r[1], r[2], recs[0][i], r[i])
				}
			}
		}
		if strings.HasPrefix(r[1], "held-") && r[11]+r[12]+r[13]+r[14] != "" {
			t.Errorf("%s %s: per-acquisition figures %v for the held scenario", r[0], r[1], r[11:])
		}
		if r[1] == "uncontended-rtt" {
			rtts++
			// Every Lock is at least one round trip through the proxy.
			if p50, err := strconv.ParseFloat(r[4], 64); err != nil || p50 < float64(tiny.rtt/time.Microsecond) {
				t.Errorf("%s: Lock p50 %q us through a %v proxy: the proxy added nothing", r[0], r[4], tiny.rtt)
			}
		}
	}
	if rtts != len(libs) {
		t.Errorf("%d uncontended-rtt rows, want one per library (%d)", rtts, len(libs))
	}
	for _, png := range []string{"throughput.png", "hotkey-waits.png"} {
		if st, err := os.Stat(filepath.Join(dir, png)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", png, err)
		}
	}
	for _, want := range []string{"| relock | hotkey | 16 |", "| relock | uncontended-rtt | 1 |", "Cycle of uncontended, 1 goroutine",
		"Cycle of uncontended-rtt, 1 goroutine through a proxy adding 1ms", "| relock-new | ",
		"| uncontended, 8 goroutine(s): ops/s >= 1.3x |", "| (context) uncontended through a 1ms round trip, 1 goroutine",
		"| uncontended-rtt, 1 goroutine: cycle p50 <= 1.2x two back-to-back PINGs through a 1ms round trip",
		"| uncontended, 1 goroutine: Redis usec per cycle <= 2x the cheapest peer's |", "| uncontended, 1 goroutine: <= 6 server calls per cycle |",
		"| relock | uncontended, 64 goroutine(s) | 1 |", "| relock | hotkey, 16 goroutine(s) | 1 |"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("Markdown output lacks %q:\n%s", want, md.String())
		}
	}
}

// TestRESPParser_allocatesNothing: counting a command already seen allocates nothing, so
// that the allocations over a window (allocs_per_op) are the library's, not the counting's.
func TestRESPParser_allocatesNothing(t *testing.T) {
	var p respParser
	req := []byte("*3\r\n$7\r\nEVALSHA\r\n$2\r\nab\r\n$1\r\n0\r\n*1\r\n$4\r\nPING\r\n")
	p.feed(req) // the names' first sight allocates their counters
	if n := testing.AllocsPerRun(100, func() { p.feed(req) }); n != 0 {
		t.Fatalf("counting two known commands allocates %v, want 0", n)
	}
}

func TestRESPParser(t *testing.T) {
	before, _ := sent.snapshot()
	var p respParser
	req := "*3\r\n$7\r\nEVALSHA\r\n$2\r\nab\r\n$1\r\n0\r\n*1\r\n$4\r\nPING\r\n*2\r\n$3\r\nGET\r\n$12\r\nhello\r\nworld\r\n"
	// Fed byte by byte, as a worst case of split writes.
	for i := range len(req) {
		p.feed([]byte{req[i]})
	}
	after, names := sent.snapshot()
	if after-before != 3 {
		t.Fatalf("counted %d commands, want 3", after-before)
	}
	for _, n := range []string{"evalsha", "ping", "get"} {
		if names[n] == 0 {
			t.Errorf("%s not counted: %v", n, names)
		}
	}
}

// TestSmokeRedLock runs the RedLock comparison briefly: every configuration and scenario,
// no violation, every configuration acquires; and, through proxies that add a round-trip
// time (-rtt), relock's configurations over 3 servers.
func TestSmokeRedLock(t *testing.T) {
	if os.Getenv("REDIS_ADDR") != "" {
		t.Skip("the RedLock comparison starts its own servers")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("no redis-server on PATH")
	}
	for _, tc := range []struct {
		name string
		rtt  time.Duration
		libs []string // nil: all
	}{
		{"direct", 0, nil},
		{"rtt", 2 * time.Millisecond, []string{"relock", "relock-redlock-3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sel []redLib
			for _, l := range redLibs() {
				if tc.libs == nil || slices.Contains(tc.libs, l.name) {
					sel = append(sel, l)
				}
			}
			csvPath := filepath.Join(t.TempDir(), "red.csv")
			var md bytes.Buffer
			if err := runRedLockCompare(context.Background(), &md, sel, tiny, csvPath, tc.rtt); err != nil {
				t.Fatal(err)
			}
			recs := readCSV(t, csvPath)
			if want := 1 + len(sel)*len(redScenarios); len(recs) != want {
				t.Fatalf("CSV has %d records, want %d", len(recs), want)
			}
			for _, r := range recs[1:] {
				if r[9] != "0" {
					t.Errorf("%s %s %s: %s mutual-exclusion violations", r[0], r[1], r[2], r[9])
				}
				if r[3] == "0" && !strings.HasPrefix(r[0], "redsync-default") {
					t.Errorf("%s %s %s: no acquisition", r[0], r[1], r[2])
				}
				if tc.rtt > 0 && r[1] == "uncontended" && r[2] == "1" {
					// A cycle is at least two round trips (acquire, release) through the proxy.
					if p50, _ := strconv.ParseFloat(r[len(r)-2], 64); p50 < float64(2*tc.rtt/time.Microsecond) {
						t.Errorf("%s: cycle p50 %v us through a %v proxy: the proxy added nothing", r[0], p50, tc.rtt)
					}
				}
			}
			if tc.libs == nil && !strings.Contains(md.String(), "Targets (relock-redlock-5") {
				t.Errorf("no targets table:\n%s", md.String())
			}
			if tc.rtt > 0 && !strings.Contains(md.String(), "proxy adding at least 2ms per round trip") {
				t.Errorf("the table does not say the servers were reached through proxies:\n%s", md.String())
			}
		})
	}
}

func TestRttOf(t *testing.T) {
	for _, tc := range []struct {
		redlock, set bool
		v, want      time.Duration
		err          bool
	}{
		{false, false, defaultRTT, defaultRTT, false}, // the main run: uncontended-rtt at 1 ms
		{false, true, 0, 0, false},                    // -rtt 0: the scenario left out
		{false, true, 2 * time.Millisecond, 2 * time.Millisecond, false},
		{true, false, defaultRTT, 0, false}, // -redlock: direct unless told
		{true, true, 2 * time.Millisecond, 2 * time.Millisecond, false},
		{false, true, -time.Millisecond, 0, true},
		{true, true, -time.Millisecond, 0, true},
	} {
		got, err := rttOf(tc.redlock, tc.set, tc.v)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("rttOf(redlock %v, set %v, %v) = %v, %v; want %v, error %v", tc.redlock, tc.set, tc.v, got, err, tc.want, tc.err)
		}
	}
}

// readCSV returns the records of the CSV file at path.
func readCSV(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// TestWriteRoundRatios: each round's ratio is relock's ops/s over the best peer's of that
// round (relock's other configurations are not peers), and the median, min and max are
// over the rounds.
func TestWriteRoundRatios(t *testing.T) {
	k := roundKey("uncontended", 8)
	per := map[string][]map[string]float64{k: {
		{"relock": 90, "relock-nocancel": 500, "redsync-tuned": 100, "redislock-default": 80},
		{"relock": 120, "relock-nocancel": 500, "redsync-tuned": 90, "redislock-default": 100},
		{"relock": 200, "relock-nocancel": 500, "redsync-tuned": 210, "redislock-default": 200},
	}}
	var out bytes.Buffer
	writeRoundRatios(&out, per)
	want := "| relock | uncontended, 8 goroutine(s) | 3 | 0.95x | 0.90x | 1.20x | 0.90x (redsync-tuned), 1.20x (redislock-default), 0.95x (redsync-tuned) |"
	if !strings.Contains(out.String(), want) {
		t.Fatalf("output lacks\n%s\n:\n%s", want, out.String())
	}
	if !strings.Contains(out.String(), "| relock-nocancel | uncontended, 8 goroutine(s) | 3 | 5.00x |") {
		t.Fatalf("relock-nocancel's row (against the peers, not relock):\n%s", out.String())
	}
	if got := median([]float64{1, 2, 3, 4}); got != 2.5 {
		t.Fatalf("median of 1..4 = %v", got)
	}
	out.Reset()
	writeRoundRatios(&out, map[string][]map[string]float64{k: {{"redsync-tuned": 100}}})
	if out.Len() != 0 {
		t.Fatalf("no relock configuration: want nothing written, got %q", out.String())
	}
}
