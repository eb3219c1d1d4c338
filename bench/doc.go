// Package bench holds relock's benchmarks, run with
//
//	go test -run '^$' -bench . -benchmem ./bench/
//
// against a redis-server that each benchmark starts on a free port (skipped when none is
// installed). Besides time and allocations, they report what the design budgets: client-sent
// commands per acquisition (from INFO commandstats: a script counts once, whatever it runs
// inside), hand-off time in round trips (against a PING round trip measured in the same
// run), and goroutines per held lock. Compare runs with benchstat.
//
// The Cluster benchmarks (cluster_test.go) start a real Redis Cluster of three masters and
// three replicas (and, for the throughput comparison, a standalone server and a one-master
// cluster); they need redis-cli too, take minutes (a renewal round of 100,000 held locks waits
// for its lease) and are skipped under -short. Their figures, with the commands that took
// them, are in bench/compare/README.md, "Cluster scale (issue 11)".
package bench
