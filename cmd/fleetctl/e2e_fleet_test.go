package main_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/fleet"
	"github.com/fleetlimit/fleetlimit/fleettest"
	"github.com/fleetlimit/fleetlimit/internal/pgtemp"
)

// TestDrainWaitsForLiveNode runs a real fleet node in this process with one
// lease held, and checks that drain --wait returns only after the lease is
// released and the node has reported 0 in flight.
func TestDrainWaitsForLiveNode(t *testing.T) {
	t.Parallel()
	dsn := fleettest.DSN(t)
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, pool.Ping(ctx), "a warm connection for the first heartbeat")

	node, err := fleet.New(pool, fleet.Config{
		Key:               "live",
		NodeID:            "worker",
		HeartbeatInterval: 100 * time.Millisecond,
		LeaseTTL:          2 * time.Second,
		HeartbeatTimeout:  time.Second, // generous: the race detector and a shared machine are slow
		Limiter:           adaptive.Config{InitialLimit: 4},
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	require.NoError(t, node.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = node.Stop(stopCtx)
	})
	lease, err := node.Acquire(ctx)
	require.NoError(t, err)
	released := false
	t.Cleanup(func() {
		if !released {
			lease.Release()
		}
	})

	admin, err := coord.NewPostgres(pool)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		nodes, err := admin.Nodes(ctx, "live")
		return err == nil && len(nodes) == 1 && nodes[0].Inflight == 1
	}, 10*time.Second, 20*time.Millisecond, "the node reports its lease")

	// While the lease is held, a short wait times out: exit status 3.
	res := run(t, dsn, "drain", "live", "worker", "--wait", "--timeout", "500ms")
	require.Equal(t, 3, res.code, res.stderr)
	// It holds its share until it acknowledges the drain's grant of 0 (two
	// heartbeats), then its one request.
	require.Regexp(t, `fleetctl: drain: node "worker" on key "live" still holds [1-9]\d* \(1 in flight\) after 500ms`, res.stderr)

	// A long wait returns once the lease is released, and not before.
	runCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd, stdout, stderr := command(t, runCtx, []string{"FLEET_DATABASE_URL=" + dsn}, "drain", "--wait", "--timeout", "30s", "live", "worker")
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Fatalf("drain --wait returned while the lease was held: %v\nstdout: %s\nstderr: %s", err, stdout, stderr)
	case <-time.After(1500 * time.Millisecond):
	}
	releasedAt := time.Now()
	lease.Release()
	released = true
	var waitErr error
	select {
	case waitErr = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("drain --wait did not return after the lease was released")
	}
	returnedAfter := time.Since(releasedAt)
	require.NoError(t, waitErr, "stderr: %s", stderr)
	require.Less(t, returnedAfter, 5*time.Second)
	require.Equal(t, "node \"worker\" on key \"live\" was already draining; nothing changed\n"+
		"node \"worker\" on key \"live\" is drained: it holds no capacity (the drain stays until undrain)\n", stdout.String(),
		"the timed-out wait above left the drain in place")
	require.Contains(t, stderr.String(), `waiting for node "worker": 1 in flight`)

	require.Eventually(t, func() bool { return node.State().Status == coord.StatusDraining }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, 0, node.State().Share)
	require.Equal(t, 0, mustCode(t, dsn, "undrain", "live", "worker"))
}

func mustCode(t *testing.T, dsn string, args ...string) int {
	t.Helper()
	res := run(t, dsn, args...)
	require.Empty(t, res.stderr)
	return res.code
}

// summaryLines are the lines every demo summary has.
var summaryLines = []*regexp.Regexp{
	regexp.MustCompile(`(?m)^fleetctl demo summary$`),
	regexp.MustCompile(`(?m)^  duration +\d+\.\ds$`),
	regexp.MustCompile(`(?m)^  capacity +40 → 20 at [\d.]+s → 60 at [\d.]+s \(hidden from the nodes`),
	regexp.MustCompile(`(?m)^  goodput +\d+\.\d req/s \(\d+ successful requests`),
	regexp.MustCompile(`(?m)^  rate-limited +\d+ 429s = [\d.]+% of \d+ requests sent$`),
	regexp.MustCompile(`(?m)^  max concurrency +\d+ at the provider \(capacity at most 60\)$`),
	regexp.MustCompile(`(?m)^  over capacity +[\d.]+s of [\d.]+s \([\d.]+%\)$`),
	regexp.MustCompile(`(?m)^    NODE +MEAN SHARE +LAST SHARE +SUCCESSES +429S`),
	regexp.MustCompile(`(?m)^    node-1 +[\d.]+ +\d+ +[1-9]\d* +\d+`),
	regexp.MustCompile(`(?m)^    node-2 +[\d.]+ +\d+ +[1-9]\d* +\d+`),
}

func checkSummary(t *testing.T, res result) {
	t.Helper()
	require.Equal(t, 0, res.code, "stdout: %s\nstderr: %s", res.stdout, res.stderr)
	for _, re := range summaryLines {
		require.Regexp(t, re, res.stdout)
	}
	require.NotRegexp(t, `(?m)^  errors `, res.stdout, "a request the run's end leaves no time for is not an error")
	require.Less(t, res.elapsed, time.Minute)
}

// requireThrowawayPostgres skips t without the Postgres binaries the
// demo's throwaway cluster needs, or fails it where Postgres is required (CI).
func requireThrowawayPostgres(t *testing.T) {
	t.Helper()
	_, err := pgtemp.FindBinDir()
	if err == nil {
		return
	}
	if ci := os.Getenv("CI"); os.Getenv("FLEET_REQUIRE_PG") == "1" || (ci != "" && ci != "false" && ci != "0") {
		t.Fatalf("no Postgres binaries for the demo's throwaway cluster: %v", err)
	}
	t.Skipf("no Postgres binaries for the demo's throwaway cluster: %v", err)
}

// TestDemoThrowawayCluster runs the demo with no database named: it starts
// its own Postgres, and says so in its first line.
func TestDemoThrowawayCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo runs for several seconds")
	}
	requireThrowawayPostgres(t)
	t.Parallel()
	res := run(t, "", "demo", "--duration", "5s", "--nodes", "2", "--workers", "16")
	checkSummary(t, res)
	require.Contains(t, res.stdout, "throwaway cluster on 127.0.0.1:")
	require.True(t, strings.HasPrefix(res.stderr, "demo database: a throwaway Postgres cluster on 127.0.0.1"), res.stderr)
	// Not a terminal: one plain line per refresh, no ANSI sequences.
	require.NotContains(t, res.stdout, "\x1b[")
	require.Regexp(t, `(?m)^TIME +key="fleetctl-demo-[^"]+" l_global=\d+ .* capacity=40 `, mask(res.stdout))
}

// TestDemoNamedDatabase runs the demo on the database named by
// --database-url: it uses a key of its own and leaves every other row alone.
func TestDemoNamedDatabase(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo runs for several seconds")
	}
	t.Parallel()
	dsn := fleettest.DSN(t)
	seed(t, dsn)
	before := mustRun(t, dsn, "keys")

	res := runEnv(t, nil, "demo", "--database-url", dsn, "--duration", "4s", "--nodes", "2", "--workers", "8",
		"--interval", "250ms")
	checkSummary(t, res)
	require.Contains(t, res.stdout, "(from --database-url)")
	require.True(t, strings.HasPrefix(res.stderr, "demo database: database "), res.stderr)
	require.NotContains(t, res.stderr, "throwaway")

	require.Equal(t, before, mustRun(t, dsn, "keys"), "the demo deleted its key and touched nothing else")
	require.True(t, strings.Contains(mustRun(t, dsn, "nodes", "api"), "node-a"))
}

// TestDemoIgnoresDatabaseURL: with $DATABASE_URL (and $FLEET_DATABASE_URL)
// set but no --database-url, the demo uses a throwaway cluster and never
// touches that database: it stays without a fleetlimit schema. A blank
// $FLEET_DATABASE_URL, which the other commands refuse, does not stop it
// either.
func TestDemoIgnoresDatabaseURL(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo runs for several seconds")
	}
	requireThrowawayPostgres(t)
	t.Parallel()
	dsn := fleettest.EmptyDSN(t)
	for _, fleetURL := range []string{dsn, " "} {
		res := runEnv(t, []string{"DATABASE_URL=" + dsn, "FLEET_DATABASE_URL=" + fleetURL}, "demo", "--duration", "3s",
			"--nodes", "2", "--workers", "4")
		checkSummary(t, res)
		require.True(t, strings.HasPrefix(res.stderr, "demo database: a throwaway Postgres cluster"), res.stderr)
	}
	out := run(t, dsn, "migrate", "status")
	require.Equal(t, 0, out.code, out.stderr)
	require.NotContains(t, out.stdout, "applied", "the demo migrated $DATABASE_URL")
}

// TestDemoInterrupted sends SIGINT to the demo's whole process group, as
// Ctrl-C at a terminal does, while the fleet runs: the demo stops, prints
// the summary of the run so far, cleans up, and exits 0; its throwaway
// Postgres, in a process group of its own, is stopped in order rather than
// killed under it.
func TestDemoInterrupted(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo runs for several seconds")
	}
	requireThrowawayPostgres(t)
	t.Parallel()
	cmd := exec.Command(fleetctl(t), "demo", "--duration", "60s", "--nodes", "2", "--workers", "8", "--interval", "200ms")
	cmd.Env = cleanEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.WaitDelay = 5 * time.Second
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	var out strings.Builder
	running := make(chan struct{})
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(stdout)
		seen := 0
		for sc.Scan() {
			out.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), " key=") {
				if seen++; seen == 3 {
					close(running)
				}
			}
		}
	}()
	select {
	case <-running:
	case <-time.After(45 * time.Second):
		t.Fatalf("the demo never ran")
	}
	begin := time.Now()
	require.NoError(t, syscall.Kill(-cmd.Process.Pid, syscall.SIGINT))
	<-copied
	err = cmd.Wait()
	require.NoError(t, err, "stderr: %s", stderr.String())
	require.Less(t, time.Since(begin), 20*time.Second)
	res := result{code: 0, stdout: out.String(), stderr: stderr.String()}
	require.Regexp(t, `(?m)^fleetctl demo summary$`, res.stdout)
	require.Regexp(t, `(?m)^  goodput +\d+\.\d req/s`, res.stdout)
	require.Contains(t, res.stderr, "interrupted after")
	require.NotContains(t, res.stderr+res.stdout, "FATAL")
}
