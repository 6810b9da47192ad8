// Package chaos is the fleet's acceptance test under real faults: separate
// node processes (chaosnode) share one key through a real Postgres, each
// through its own TCP proxy (toxiproxy, in process), and send requests,
// through one more proxy, to a provider in the test process that counts
// the requests in flight at every moment, serving each to its end whether
// or not its client is still there. Faults — kill -9, SIGSTOP, partitions
// that drop or hold bytes, database restarts and outages, a failover to a
// replica that missed the last writes, rolling SIGTERM restarts, eviction,
// drain across a lease lapse, the proxy in front of the provider closing
// every connection — are injected throughout one run, and the test asserts
// the product's promise as seen from outside: the provider never had more
// requests in flight than the operator's max on the key.
//
// TestChaos injects about a hundred faults of every kind, overlapping;
// TestChaosFreeze freezes one node process at a time (SIGSTOP for longer
// than its lease, then SIGCONT), twelve times; TestChaosUpstreamCut closes
// the connections to the provider twelve times, one at a time (requests
// that had no response yet are ones http.Transport would send again).
// TestEvictDuringRestart,
// in process, evicts a busy node inside a database restart and just after
// it: from a lease after the eviction committed, the node admits nothing.
// Run them with
//
//	go test -count=1 -v -run 'TestChaos|TestEvictDuringRestart' ./test/chaos/
//
// FLEET_CHAOS_FAULTS sets how many faults to inject (default 100, about three
// minutes), FLEET_CHAOS_SEED replays a schedule, FLEET_CHAOS_LOGDIR keeps
// every node's log, the report and every violation (violations.tsv), in a
// directory per test.
// Faults overlap by default, so a violation counts for every fault whose
// window was open; FLEET_CHAOS_MODE=solo injects them one at a time instead
// (about 6s per fault), so that each violation has a single cause. It needs the Postgres server binaries
// (initdb, postgres, pg_ctl, pg_basebackup) and skips without them, unless
// CI or FLEET_REQUIRE_PG=1 is set; -short skips it.
package chaos
