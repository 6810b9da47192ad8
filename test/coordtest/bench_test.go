package coordtest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/fleettest"
)

// benchConns is how many connections (and goroutines) heartbeat at once.
const benchConns = 8

// BenchmarkHeartbeat measures Postgres heartbeats on one key whose rows
// already exist, at 10, 100 and 1,000 nodes: 8 goroutines cycle through the
// nodes, each heartbeat a new seq with a changing in-flight, so grants move.
// It reports heartbeats/s (all calls serialize on the key's row lock, so
// this is the key's capacity). The pgbench sub-benchmark runs pgbench's
// built-in simple-update script on a scratch database of the same server,
// for scale; it skips when pgbench is not installed. FLEET_PGBENCH_SECONDS
// sets its duration (default 10).
func BenchmarkHeartbeat(b *testing.B) {
	for _, nodes := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) { benchHeartbeat(b, nodes) })
	}
	b.Run("pgbench-simple-update", benchPgbench)
}

func benchHeartbeat(b *testing.B, nodes int) {
	ctx := context.Background()
	pool := openPool(b, benchConns)
	p, err := coord.NewPostgres(pool)
	require.NoError(b, err)
	seqs := make([]atomic.Int64, nodes)
	report := func(i int, seq int64) coord.Report {
		return coord.Report{Key: "bench", NodeID: fmt.Sprintf("node-%04d", i), Instance: "run-1", Seq: seq,
			LLocal: 10 * nodes, Inflight: int(seq % 5), Demand: int(seq%7) + 1, LeaseTTL: time.Minute}
	}
	for i := range nodes {
		_, err := p.Heartbeat(ctx, report(i, seqs[i].Add(1)))
		require.NoError(b, err)
	}
	var next atomic.Int64
	b.SetParallelism((benchConns + 1) / 2) // × GOMAXPROCS goroutines
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := int(next.Add(1)) % nodes
			if _, err := p.Heartbeat(ctx, report(i, seqs[i].Add(1))); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "heartbeats/s")
}

var tpsLine = regexp.MustCompile(`(?m)^tps = ([0-9.]+) \(without initial connection time\)`)

func benchPgbench(b *testing.B) {
	pgbench, err := exec.LookPath("pgbench")
	if err != nil {
		b.Skip("pgbench is not installed (apt-get install postgresql-client): no simple-update comparison")
	}
	seconds := 10
	if s := os.Getenv("FLEET_PGBENCH_SECONDS"); s != "" {
		if seconds, err = strconv.Atoi(s); err != nil || seconds < 1 {
			b.Fatalf("FLEET_PGBENCH_SECONDS=%q: want a positive number of seconds", s)
		}
	}
	dsn := fleettest.EmptyDSN(b)
	run := func(args ...string) string {
		var out bytes.Buffer
		cmd := exec.Command(pgbench, append(args, dsn)...)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			b.Fatalf("pgbench %v: %v\n%s", args, err, out.String())
		}
		return out.String()
	}
	run("-i", "-q", "-s", "1")
	b.ResetTimer()
	for range b.N { // one 10-second run: the framework stops at b.N = 1
		out := run("-b", "simple-update", "-T", strconv.Itoa(seconds), "-c", "8", "-j", "2")
		m := tpsLine.FindStringSubmatch(out)
		if m == nil {
			b.Fatalf("no tps in pgbench output:\n%s", out)
		}
		tps, _ := strconv.ParseFloat(m[1], 64)
		b.ReportMetric(tps, "tps")
	}
}
