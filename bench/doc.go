// Package bench holds relock's benchmarks, run with
//
//	go test -run '^$' -bench . -benchmem ./bench/
//
// against a redis-server that each benchmark starts on a free port (skipped when none is
// installed). Besides time and allocations, they report what the design budgets: client-sent
// commands per acquisition (from INFO commandstats: a script counts once, whatever it runs
// inside), hand-off time in round trips (against a PING round trip measured in the same
// run), and goroutines per held lock. Compare runs with benchstat.
package bench
