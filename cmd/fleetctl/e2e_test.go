package main_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/fleettest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// binDir holds the fleetctl binary built for this test binary.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fleetctl-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := fleettest.Run(m)
	_ = os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

var (
	buildOnce sync.Once
	buildErr  error
)

// fleetctl returns the path of the fleetctl binary, building it once per
// test binary.
func fleetctl(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(binDir, "fleetctl")
	buildOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return bin
}

// result is what one run of fleetctl produced.
type result struct {
	stdout, stderr string
	code           int
	elapsed        time.Duration
}

// cleanEnv is the test process's environment without anything that would
// pick a database for fleetctl.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if name == "FLEET_DATABASE_URL" || name == "DATABASE_URL" || strings.HasPrefix(name, "PG") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// command prepares fleetctl args with a clean environment plus extra.
func command(t *testing.T, ctx context.Context, extra []string, args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	cmd := exec.CommandContext(ctx, fleetctl(t), args...)
	cmd.Env = cleanEnv(extra...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	return cmd, &stdout, &stderr
}

// runEnv runs fleetctl with extra environment variables, bounded by a
// minute.
func runEnv(t *testing.T, extra []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd, stdout, stderr := command(t, ctx, extra, args...)
	begin := time.Now()
	err := cmd.Run()
	res := result{stdout: stdout.String(), stderr: stderr.String(), elapsed: time.Since(begin)}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
		res.code = exitErr.ExitCode()
	default:
		t.Fatalf("fleetctl %s: %v", strings.Join(args, " "), err)
	}
	return res
}

// run runs fleetctl against dsn (passed in FLEET_DATABASE_URL when not
// empty).
func run(t *testing.T, dsn string, args ...string) result {
	t.Helper()
	var extra []string
	if dsn != "" {
		extra = []string{"FLEET_DATABASE_URL=" + dsn}
	}
	return runEnv(t, extra, args...)
}

// mustRun runs fleetctl and requires exit status 0 and an empty stderr.
func mustRun(t *testing.T, dsn string, args ...string) string {
	t.Helper()
	res := run(t, dsn, args...)
	require.Equal(t, 0, res.code, "fleetctl %s: stderr: %s", strings.Join(args, " "), res.stderr)
	require.Empty(t, res.stderr, "fleetctl %s", strings.Join(args, " "))
	return res.stdout
}

// Volatile parts of the output, masked before comparing with golden files:
// durations (lease remaining) keep their width with every digit replaced
// by #, a heartbeat's age becomes "#.#s ago" whatever its length, and
// timestamps become TIME.
var (
	durationRE = regexp.MustCompile(`\b(\d+h\d{2}m|\d+m\d{2}s|\d+\.\ds|\d+s)\b`)
	// ageRE is a heartbeat's age and its cell's padding: "1.2s ago" under
	// 10s, "12s ago" from then on (a slow machine gets there between the
	// seed and the last command).
	ageRE       = regexp.MustCompile(`\b(\d+\.\ds|\d+s|\d+m\d{2}s) ago( *)`)
	timestampRE = regexp.MustCompile(`\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})`)
	digitRE     = regexp.MustCompile(`\d`)
)

func mask(s string) string {
	s = timestampRE.ReplaceAllStringFunc(s, func(ts string) string {
		return "TIME" + strings.Repeat(" ", max(0, len(ts)-4))
	})
	s = ageRE.ReplaceAllStringFunc(s, func(age string) string {
		return "#.#s ago" + strings.Repeat(" ", max(0, len(age)-len("#.#s ago")))
	})
	return durationRE.ReplaceAllStringFunc(s, func(d string) string { return digitRE.ReplaceAllString(d, "#") })
}

// golden compares got, masked, with testdata/name.golden, or rewrites the
// file under -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	got = mask(got)
	path := filepath.Join("testdata", name+".golden")
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "missing golden file; run go test ./cmd/fleetctl -run %s -update", t.Name())
	require.Equal(t, string(want), got, "output differs from %s (rerun with -update if the change is intended)", path)
}

// seed builds a fleet state through the coordinator, with leases long
// enough that nothing expires during a test except worker-1 on "batch":
//
//	api:   node-a (l_local 40, inflight 3, demand 10, zone=a; it learned
//	       600 requests and 90000 tokens per minute and wants 300 and
//	       40000) and node-b (l_local 20, inflight 1, demand 5, zone=b;
//	       learned 500 requests per minute, no token rate, wants 100 and
//	       20000), three rounds of heartbeats each acknowledging the
//	       previous grant, so the shares have converged (13 + 7 = L_global
//	       20; the key's rates are 500 rpm, the lower median, and 90000 tpm);
//	batch: worker-2 (l_local 8, demand 1), then worker-1 with a 100ms lease, expired.
func seed(t *testing.T, dsn string) {
	t.Helper()
	fleetctl(t) // built first, so the heartbeats' ages stay short
	ctx := t.Context()
	c := coordinator(t, dsn)
	api := []coord.Report{
		{Key: "api", NodeID: "node-a", Instance: "i-a", LLocal: 40, Inflight: 3, Demand: 10, LeaseTTL: time.Hour, Labels: map[string]string{"zone": "a"},
			RateLocal: coord.Rates{Requests: 600, Tokens: 90000}, RateDemand: coord.Rates{Requests: 300, Tokens: 40000},
			RateUsed: coord.Rates{Requests: 270, Tokens: 28000}},
		{Key: "api", NodeID: "node-b", Instance: "i-b", LLocal: 20, Inflight: 1, Demand: 5, LeaseTTL: time.Hour, Labels: map[string]string{"zone": "b"},
			RateLocal: coord.Rates{Requests: 500}, RateDemand: coord.Rates{Requests: 100, Tokens: 20000},
			RateUsed: coord.Rates{Requests: 24}},
	}
	for round := int64(1); round <= 3; round++ {
		for i := range api {
			api[i].Seq = round
			g, err := c.Heartbeat(ctx, api[i])
			require.NoError(t, err)
			api[i].Epoch, api[i].AppliedGen, api[i].RateApplied = g.Epoch, g.Generation, g.RateShare
		}
	}
	for _, r := range []coord.Report{
		{Key: "batch", NodeID: "worker-2", Instance: "i-2", Seq: 1, LLocal: 8, Demand: 1, LeaseTTL: time.Hour},
		{Key: "batch", NodeID: "worker-1", Instance: "i-1", Seq: 1, LLocal: 8, Inflight: 2, Demand: 2, LeaseTTL: 100 * time.Millisecond},
	} {
		_, err := c.Heartbeat(ctx, r)
		require.NoError(t, err)
	}
	time.Sleep(150 * time.Millisecond) // let worker-1's lease run out
}

func TestReadCommandsGolden(t *testing.T) {
	t.Parallel()
	dsn := fleettest.DSN(t)
	seed(t, dsn)

	golden(t, "keys", mustRun(t, dsn, "keys"))
	golden(t, "nodes_api", mustRun(t, dsn, "nodes", "api"))
	golden(t, "nodes_batch", mustRun(t, dsn, "nodes", "batch"))
	golden(t, "limits_get", mustRun(t, dsn, "limits", "get", "api"))
	golden(t, "migrate_status", mustRun(t, dsn, "migrate", "status"))
	golden(t, "watch_plain", mustRun(t, dsn, "watch", "api", "--count", "2", "--interval", "50ms"))
	// Flags may come before the arguments too, and -o is --output.
	golden(t, "nodes_api", mustRun(t, dsn, "nodes", "-o", "table", "api"))
}

func TestWriteCommandsGolden(t *testing.T) {
	t.Parallel()
	dsn := fleettest.DSN(t)
	seed(t, dsn)

	var out strings.Builder
	step := func(args ...string) {
		fmt.Fprintf(&out, "$ fleetctl %s\n%s", strings.Join(args, " "), mustRun(t, dsn, args...))
	}
	step("limits", "set", "api", "--max", "30", "--min", "5")
	// The operator's rates take effect at the key's next heartbeat: until
	// then the key's rate is still what its nodes learned.
	step("limits", "set", "api", "--rpm", "450", "--tpm", "120000")
	step("limits", "set", "api", "--clear-min")
	step("limits", "set", "api", "--tpm", "0")
	step("limits", "set", "api", "--aggregate", "MIN", "--max", "25") // any case, as --output
	step("limits", "set", "api", "--aggregate", "lower_median", "--max", "30")
	step("limits", "get", "api")
	step("drain", "api", "node-a")
	step("drain", "api", "node-a")
	step("nodes", "api")
	step("undrain", "api", "node-a")
	step("undrain", "api", "node-a")
	step("evict", "api", "node-b")
	step("undrain", "api", "node-b")
	step("relearn", "api")
	step("drain", "api", "node-a")
	step("undrain", "api", "node-a")
	step("keys", "create", "quota", "--max", "024", "--rpm", "0600") // leading zeros are decimal
	step("keys")
	step("nodes", "api")
	step("limits", "set", "api", "--clear-max")
	golden(t, "write_commands", out.String())

	// --wait on a node whose lease and request bound have run out returns
	// at once.
	res := run(t, dsn, "drain", "batch", "worker-1", "--wait")
	require.Equal(t, 0, res.code, res.stderr)
	require.Equal(t, "node \"worker-1\" on key \"batch\" is draining\n"+
		"node \"worker-1\" on key \"batch\" is drained: it holds no capacity (the drain stays until undrain)\n", res.stdout)
	// worker-2 never heartbeats again, so it never acknowledges the drain:
	// the share it may still enforce stays reserved.
	res = run(t, dsn, "drain", "batch", "worker-2", "--wait", "--timeout", "300ms")
	require.Equal(t, 3, res.code, res.stderr)
	require.Contains(t, res.stderr, "fleetctl: drain: node \"worker-2\" on key \"batch\" still holds 8 (0 in flight) "+
		"after 300ms; it stays draining (fleetctl undrain batch worker-2 to undo)\n")
}

func TestExitCodes(t *testing.T) {
	t.Parallel()
	dsn := fleettest.DSN(t)
	seed(t, dsn)

	tests := []struct {
		args   []string
		code   int
		stderr string // the first line of stderr, exactly
	}{
		{[]string{"bogus"}, 2, `fleetctl: unknown command "bogus"`},
		{[]string{"help", "bogus"}, 2, `fleetctl: unknown command "bogus"`},
		{[]string{"migrate", "sideways"}, 2, `fleetctl: migrate: unknown command "sideways"`},
		{[]string{"limits"}, 2, `fleetctl: limits: missing command`},
		{[]string{}, 2, `fleetctl: missing command`},
		{[]string{"keys", "--output", "yaml"}, 2, `fleetctl: keys: invalid value "yaml" for --output: want table or json`},
		{[]string{"nodes", "api", "-o", "yaml"}, 2, `fleetctl: nodes: invalid value "yaml" for --output: want table or json`},
		{[]string{"limits", "get", "api", "-o", "yaml"}, 2, `fleetctl: limits get: invalid value "yaml" for --output: want table or json`},
		{[]string{"migrate", "status", "-o", "yaml"}, 2, `fleetctl: migrate status: invalid value "yaml" for --output: want table or json`},
		{[]string{"watch", "api", "-o", "yaml"}, 2, `fleetctl: watch: invalid value "yaml" for --output: want table or json`},
		{[]string{"keys", "--bogus"}, 2, `fleetctl: keys: flag provided but not defined: --bogus`},
		{[]string{"nodes"}, 2, `fleetctl: nodes: missing argument KEY`},
		{[]string{"drain", "api"}, 2, `fleetctl: drain: missing argument NODE`},
		{[]string{"evict", "api", "node-a", "extra"}, 2, `fleetctl: evict: unexpected argument "extra"`},
		{[]string{"drain", "api", "node-a", "--timeout", "soon"}, 2, `fleetctl: drain: invalid value "soon" for --timeout: want a duration such as 500ms, 30s or 1m30s`},
		{[]string{"limits", "set", "api", "--max", "0"}, 2, `fleetctl: limits set: invalid value 0 for --max: want 1..1000000 (use --clear-max to remove the bound)`},
		{[]string{"limits", "set", "api", "--min", "-3"}, 2, `fleetctl: limits set: invalid value -3 for --min: want 1..1000000 (use --clear-min to remove the bound)`},
		{[]string{"limits", "set", "api", "--max", "ten"}, 2, `fleetctl: limits set: invalid value "ten" for --max: want a decimal integer`},
		{[]string{"limits", "set", "api"}, 2, `fleetctl: limits set: nothing to set: give --min, --max, --clear-min, --clear-max, --rpm, --tpm or --aggregate`},
		{[]string{"limits", "set", "api", "--max", "5", "--aggregate", "sum"}, 2, `fleetctl: limits set: invalid value "sum" for --aggregate: want lower_median or min`},
		{[]string{"limits", "set", "nope", "--aggregate", "min"}, 1, `fleetctl: limits set: unknown key "nope" (to cap a key before any node joins: fleetctl keys create --max N nope)`},
		{[]string{"limits", "set", "api", "--rpm", "-1"}, 2, `fleetctl: limits set: invalid value -1 for --rpm: want 0..1000000000 (0 removes the rate)`},
		{[]string{"limits", "set", "api", "--min", "5", "--tpm", "1000000001"}, 2, `fleetctl: limits set: invalid value 1000000001 for --tpm: want 0..1000000000 (0 removes the rate)`},
		{[]string{"limits", "set", "api", "--rpm", "fast"}, 2, `fleetctl: limits set: invalid value "fast" for --rpm: want a decimal integer`},
		{[]string{"limits", "set", "api", "--rpm", "0x600"}, 2, `fleetctl: limits set: invalid value "0x600" for --rpm: want a decimal integer`},
		{[]string{"limits", "set", "api", "--tpm", "6_000"}, 2, `fleetctl: limits set: invalid value "6_000" for --tpm: want a decimal integer`},
		{[]string{"limits", "set", "api", "--tpm", "99999999999999999999"}, 2, `fleetctl: limits set: invalid value "99999999999999999999" for --tpm: out of range: want 0..1000000000`},
		{[]string{"keys", "create", "k9", "--min", "012", "--max", "0x10"}, 2, `fleetctl: keys create: invalid value "0x10" for --max: want a decimal integer`},
		{[]string{"keys", "create", "fresh", "--tpm", "-5"}, 2, `fleetctl: keys create: invalid value -5 for --tpm: want 0..1000000000 (0 removes the rate)`},
		{[]string{"limits", "set", "nope", "--rpm", "5"}, 1, `fleetctl: limits set: unknown key "nope" (to cap a key before any node joins: fleetctl keys create --max N nope)`},
		{[]string{"limits", "set", "api", "--max", "5", "--clear-max"}, 2, `fleetctl: limits set: --max and --clear-max contradict each other`},
		{[]string{"watch", "api", "--count", "-1"}, 2, `fleetctl: watch: invalid value -1 for --count: want >= 0`},
		{[]string{"demo", "--nodes", "0"}, 2, `fleetctl: demo: invalid value 0 for --nodes: want 1..32`},
		{[]string{"--statement-timeout", "-1s", "keys"}, 2, `fleetctl: keys: invalid value -1s for --statement-timeout: want 0 (no timeout) or whole milliseconds in [1ms, 596h31m23.647s]`},
		{[]string{"--statement-timeout", "1000h", "keys"}, 2, `fleetctl: keys: invalid value 1000h for --statement-timeout: want 0 (no timeout) or whole milliseconds in [1ms, 596h31m23.647s]`},
		{[]string{"nodes", "nope"}, 1, `fleetctl: nodes: unknown key "nope"`},
		{[]string{"limits", "get", "nope"}, 1, `fleetctl: limits get: unknown key "nope"`},
		{[]string{"watch", "nope", "--count", "1"}, 1, `fleetctl: watch: unknown key "nope"`},
		{[]string{"drain", "api", "ghost"}, 1, `fleetctl: drain: unknown node "ghost" on key "api"`},
		{[]string{"drain", "api", " node-a"}, 1, `fleetctl: drain: unknown node " node-a" on key "api" (it begins or ends with white space or a byte order mark, which fleet.New refuses in a node id)`},
		{[]string{"limits", "set", "api ", "--max", "5"}, 1, `fleetctl: limits set: unknown key "api " (it begins or ends with white space or a byte order mark, which fleet.New refuses in a key)`},
		{[]string{"nodes", "api "}, 1, `fleetctl: nodes: unknown key "api " (it begins or ends with white space or a byte order mark, which fleet.New refuses in a key)`},
		{[]string{"undrain", "nope", "ghost"}, 1, `fleetctl: undrain: unknown key "nope"`},
		{[]string{"evict", "api", "ghost"}, 1, `fleetctl: evict: unknown node "ghost" on key "api"`},
		{[]string{"limits", "set", "api", "--min", "50", "--max", "10"}, 2, `fleetctl: limits set: --max 10 is below --min 50`},
		{[]string{"migrate", "validate"}, 0, ``},
		{[]string{"version"}, 0, ``},
		{[]string{"--help"}, 0, ``},
		{[]string{"drain", "--help"}, 0, ``},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, "_"), func(t *testing.T) {
			t.Parallel()
			res := run(t, dsn, tt.args...)
			require.Equal(t, tt.code, res.code, "stdout: %s\nstderr: %s", res.stdout, res.stderr)
			first, _, _ := strings.Cut(res.stderr, "\n")
			require.Equal(t, tt.stderr, first)
			require.NotContains(t, res.stderr, "goroutine ", "no stack trace")
			if tt.code == 2 && len(tt.args) > 0 {
				require.Contains(t, res.stderr, "--help' for usage.", "usage errors point at help")
			}
		})
	}
}

// TestLimitsSetCrossingTheStoredBound: a --min above the max the key has
// (or a --max below its min) is refused, and the error says the other
// bound is the stored one and how to move it.
func TestLimitsSetCrossingTheStoredBound(t *testing.T) {
	t.Parallel()
	dsn := fleettest.DSN(t)
	seed(t, dsn)
	mustRun(t, dsn, "limits", "set", "api", "--max", "6")
	res := run(t, dsn, "limits", "set", "api", "--min", "10")
	require.Equal(t, 1, res.code, res.stderr)
	require.Equal(t, "fleetctl: limits set: invalid override: max = 6 is below min = 10 "+
		"(the max is the one the key has: give --max too, or --clear-max)\n", res.stderr)
	mustRun(t, dsn, "limits", "set", "api", "--clear-max", "--min", "4")
	res = run(t, dsn, "limits", "set", "api", "--max", "2")
	require.Equal(t, 1, res.code, res.stderr)
	require.Equal(t, "fleetctl: limits set: invalid override: max = 2 is below min = 4 "+
		"(the min is the one the key has: give --min too, or --clear-min)\n", res.stderr)
	require.Contains(t, mustRun(t, dsn, "limits", "get", "api"), "MIN")
	mustRun(t, dsn, "limits", "set", "api", "--max", "10", "--min", "8")
}

func TestVersion(t *testing.T) {
	t.Parallel()
	res := run(t, "", "version")
	require.Equal(t, 0, res.code, res.stderr)
	require.Regexp(t, `^fleetctl (devel|v\S+) \(go\S+\)\n$`, res.stdout)
	require.Contains(t, res.stdout, runtime.Version())
}

func TestUnreachableDatabase(t *testing.T) {
	t.Parallel()
	res := run(t, "", "--database-url", "postgres://127.0.0.1:1/x", "keys")
	require.Equal(t, 1, res.code)
	require.Equal(t, "fleetctl: cannot connect to 127.0.0.1:1: connection refused\n", res.stderr)
	require.Empty(t, res.stdout)
	require.Less(t, res.elapsed, 5*time.Second, "within the connect timeout")

	// The flag wins over the environment.
	res = runEnv(t, []string{"FLEET_DATABASE_URL=postgres://127.0.0.1:2/x", "DATABASE_URL=postgres://127.0.0.1:3/x"},
		"keys", "--database-url", "postgres://127.0.0.1:1/x")
	require.Equal(t, "fleetctl: cannot connect to 127.0.0.1:1: connection refused\n", res.stderr)
	res = runEnv(t, []string{"FLEET_DATABASE_URL=postgres://127.0.0.1:2/x", "DATABASE_URL=postgres://127.0.0.1:3/x"}, "keys")
	require.Equal(t, "fleetctl: cannot connect to 127.0.0.1:2: connection refused\n", res.stderr)
	res = runEnv(t, []string{"DATABASE_URL=postgres://127.0.0.1:3/x"}, "keys")
	require.Equal(t, "fleetctl: cannot connect to 127.0.0.1:3: connection refused\n", res.stderr)
	res = runEnv(t, []string{"PGHOST=127.0.0.1", "PGPORT=4"}, "keys")
	require.Equal(t, "fleetctl: cannot connect to 127.0.0.1:4: connection refused\n", res.stderr)
	// With no database given at all, the error says how to give one.
	res = runEnv(t, []string{"PGCONNECT_TIMEOUT=1"}, "keys")
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, "No database was given: name one with --database-url or $FLEET_DATABASE_URL")
}

func TestMigrateCommands(t *testing.T) {
	t.Parallel()
	dsn := fleettest.EmptyDSN(t)

	res := run(t, dsn, "migrate", "validate")
	require.Equal(t, 3, res.code, res.stderr)
	require.Regexp(t, `^fleetctl: migrate validate: \d+ migration\(s\) pending: schema at version 0; run 'fleetctl migrate up'\n$`, res.stderr)

	var out strings.Builder
	step := func(args ...string) {
		fmt.Fprintf(&out, "$ fleetctl %s\n%s", strings.Join(args, " "), mustRun(t, dsn, args...))
	}
	step("migrate", "status")
	step("migrate", "up")
	step("migrate", "up")
	step("migrate", "validate")
	step("migrate", "down")
	step("migrate", "status")
	step("migrate", "down", "--to", "1")
	step("migrate", "up")
	step("migrate", "down", "--to", "1")
	golden(t, "migrate_commands", out.String())

	// Down to version 4 keeps the rights 'fleetctl grant' gave; below it
	// they go, and the rollback says so.
	mustRun(t, dsn, "migrate", "up")
	require.Equal(t, fmt.Sprintf("rolled back from version %d to 4\n", coord.SchemaVersion), mustRun(t, dsn, "migrate", "down", "--to", "4"))
	require.Contains(t, mustRun(t, dsn, "migrate", "down", "--to", "3"), "run 'fleetctl grant' again for each node and operator role")
	mustRun(t, dsn, "migrate", "down", "--to", "1")

	// Down never goes to zero: that is reset, which must be confirmed.
	res = run(t, dsn, "migrate", "down")
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, "rolling it back removes the whole schema and every key; use 'fleetctl migrate reset'")
	res = run(t, dsn, "migrate", "down", "--to", "0")
	require.Equal(t, 2, res.code, res.stderr)
	res = run(t, dsn, "migrate", "reset")
	require.Equal(t, 2, res.code, res.stderr)
	require.Contains(t, res.stderr, "give --yes to confirm")
	require.Contains(t, mustRun(t, dsn, "migrate", "status"), "applied", "a refused reset changes nothing")
	require.Equal(t, "rolled back from version 1 to 0: the fleetlimit schema and its version table are gone\n", mustRun(t, dsn, "migrate", "reset", "--yes"))
	require.NotContains(t, mustRun(t, dsn, "migrate", "status"), "applied", "after a reset every migration is pending")

	res = run(t, dsn, "keys")
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, "run 'fleetctl migrate up'", "a missing schema gets a hint")
}

// TestMaskKeepsWidth checks the golden masking itself.
func TestMaskKeepsWidth(t *testing.T) {
	t.Parallel()
	in := "node-a  59m59s  0.1s ago  x 2026-11-22T17:40:50.067Z 12s 2h05m 40"
	got := mask(in)
	require.Equal(t, len(in), len(got))
	require.Equal(t, "node-a  ##m##s  #.#s ago  x TIME                     ##s #h##m 40", got)

	// An age of 10s or more reads as one under 10s, in the same cell.
	for _, age := range []string{"12s ago ", "2m05s ago"} {
		in := "node-a  " + age + "  active"
		require.Equal(t, "node-a  #.#s ago"+strings.Repeat(" ", len(age)-8)+"  active", mask(in), age)
	}
}

// TestMigrateResetRefusesLiveNodes: reset refuses while nodes are live on
// any key, even with --yes, unless --force.
func TestMigrateResetRefusesLiveNodes(t *testing.T) {
	t.Parallel()
	dsn := fleettest.DSN(t)
	seed(t, dsn)
	mustRun(t, dsn, "keys", "create", "idle") // a key with no live node is not counted
	res := run(t, dsn, "migrate", "reset", "--yes")
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, "3 nodes are live on 2 keys")
	require.Contains(t, mustRun(t, dsn, "keys"), "api", "nothing was removed")
	require.Contains(t, mustRun(t, dsn, "migrate", "reset", "--yes", "--force"), "the fleetlimit schema and its version table are gone")
}

// TestLimitsSetSaysWhatItChanged: a change written before a failure says
// so, here the read-back on a schema from before the rate usage columns
// (version 5).
func TestLimitsSetSaysWhatItChanged(t *testing.T) {
	t.Parallel()
	dsn := fleettest.DSN(t)
	mustRun(t, dsn, "keys", "create", "api")
	mustRun(t, dsn, "migrate", "down", "--to", "5")
	res := run(t, dsn, "limits", "set", "api", "--max", "10")
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, `key "api" was changed, but reading it back failed: `)
	require.Contains(t, res.stderr, "fleetctl migrate up")
}

// TestKeysDeleteRefusesAnOlderSchema: keys delete needs the schema this
// fleetctl was built for, whose delete_key refuses while capacity is held
// (since version 10); on version 9 the key would go with the capacity. The
// listings still read an older schema, which is what a rollback's
// refusals point at.
func TestKeysDeleteRefusesAnOlderSchema(t *testing.T) {
	t.Parallel()
	dsn := fleettest.DSN(t)
	leaveHolding(t, coordinator(t, dsn), "held", 7)
	mustRun(t, dsn, "migrate", "down", "--to", "9", "--force")
	res := run(t, dsn, "keys", "delete", "held")
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, fmt.Sprintf("run 'fleetctl migrate up' as the schema owner): the database is at version 9, this library needs %d", coord.SchemaVersion))
	require.Regexp(t, `(?m)^held\s.*\snormal$`, mustRun(t, dsn, "keys"), "the key is there, and keys reads schema 9")
	require.Contains(t, mustRun(t, dsn, "nodes", "held"), "departed")
}

// TestKeysDeleteWaitsAfterALoss: after a failover to a replica that
// missed the last heartbeats, the rows show a node that still runs as
// gone; keys delete refuses, says why and what to do, and deletes
// nothing, until learning mode has ended; --force deletes anyway.
func TestKeysDeleteWaitsAfterALoss(t *testing.T) {
	t.Parallel()
	dsn := fleettest.DSN(t)
	c := coordinator(t, dsn)
	mustRun(t, dsn, "keys", "create", "lost", "--max", "24")
	_, err := c.Heartbeat(t.Context(), coord.Report{Key: "lost", NodeID: "n", Instance: "i", Seq: 1, LLocal: 10,
		Demand: 10, Inflight: 3, LeaseTTL: time.Hour})
	require.NoError(t, err)
	pool, err := pgxpool.New(t.Context(), dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pool.Exec(t.Context(), `UPDATE fleetlimit.keys SET incarnation = 'before the failover' WHERE key = 'lost'`)
	require.NoError(t, err)
	_, err = pool.Exec(t.Context(), `DELETE FROM fleetlimit.nodes WHERE key = 'lost'`)
	require.NoError(t, err)

	res := run(t, dsn, "keys", "delete", "lost")
	require.Equal(t, 1, res.code)
	require.Equal(t, `fleetctl: keys delete: key "lost" may have nodes its rows do not show (key 'lost' has not been checked `+
		`since the database's incarnation changed): the database may have lost its last heartbeats (a failover, `+
		`a restore, a server restart), and a node still running under a forgotten grant would re-create the key without `+
		`its min/max and rates; wait until learning mode ends (it starts at the key's next heartbeat; 'fleetctl keys' `+
		`shows MODE), or, if no node of the key runs, give --force`+"\n", res.stderr)
	require.Regexp(t, `(?m)^lost\s.*\s24\s.*\sunchecked$`, mustRun(t, dsn, "keys"),
		"nothing was deleted, and the key's next heartbeat starts learning mode")
	require.True(t, decodeJSON[[]keyJSON](t, mustRun(t, dsn, "keys", "-o", "json"))[0].Unchecked)
	// relearn on a key no node ever held anything on ends learning at
	// once, and says that the key stays unchecked.
	mustRun(t, dsn, "keys", "create", "never")
	_, err = pool.Exec(t.Context(), `UPDATE fleetlimit.keys SET incarnation = 'before the failover' WHERE key = 'never'`)
	require.NoError(t, err)
	require.Equal(t, `key "never": no node holds a lease or a request on it, so learning mode ended at once; the key stays `+
		`unchecked (the database changed since its last heartbeat): its next heartbeat starts learning mode again, and `+
		`'fleetctl keys delete' refuses it until then (--force deletes it if no node of the key runs)`+"\n", mustRun(t, dsn, "relearn", "never"))
	require.Regexp(t, `(?m)^never\s.*\sunchecked$`, mustRun(t, dsn, "keys"))
	require.Equal(t, "key \"never\" deleted\n", mustRun(t, dsn, "keys", "delete", "never", "--force"))

	// Another node's heartbeat sees the change: learning mode, for an
	// hour (the node's lease).
	_, err = c.Heartbeat(t.Context(), coord.Report{Key: "lost", NodeID: "m", Instance: "j", Seq: 1, LLocal: 10,
		Demand: 1, LeaseTTL: time.Hour})
	require.NoError(t, err)
	require.Regexp(t, `(?m)^lost\s.*\slearning$`, mustRun(t, dsn, "keys"))
	res = run(t, dsn, "keys", "delete", "lost")
	require.Equal(t, 1, res.code)
	require.Regexp(t, `^fleetctl: keys delete: key "lost" may have nodes its rows do not show \(key 'lost' is in learning mode until \S+Z\): `, res.stderr)
	require.Equal(t, "key \"lost\" deleted\n", mustRun(t, dsn, "keys", "delete", "lost", "--force"))
}

// coordinator connects a coordinator to dsn for the test; its pool
// closes when the test ends.
func coordinator(t *testing.T, dsn string) *coord.Postgres {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	c, err := coord.NewPostgres(pool)
	require.NoError(t, err)
	return c
}

// leaveHolding makes node n of key leave with inflight requests still
// running, which its row holds for an hour.
func leaveHolding(t *testing.T, c *coord.Postgres, key string, inflight int) {
	t.Helper()
	_, err := c.Heartbeat(t.Context(), coord.Report{Key: key, NodeID: "n", Instance: "i", Seq: 1, LLocal: 10,
		Demand: 10, Inflight: inflight, LeaseTTL: time.Hour})
	require.NoError(t, err)
	require.NoError(t, c.Leave(t.Context(), coord.Departure{Key: key, NodeID: "n", Instance: "i", Inflight: inflight, Hold: time.Hour}))
}

// TestEvictSaysWhenNoInstanceIsLeft: a node whose rows all left, or were
// evicted already, has no instance to fence; evict says so and leaves the
// rows as they were (before, a departed row was shown as evicted).
func TestEvictSaysWhenNoInstanceIsLeft(t *testing.T) {
	t.Parallel()
	dsn := fleettest.DSN(t)
	c := coordinator(t, dsn)
	leaveHolding(t, c, "gone", 3)
	require.Equal(t, `node "n" on key "gone" has left (its rows are departed: their instances admit nothing more, `+
		"and hold what they had in flight until their HOLD ends); nothing to evict, nothing changed\n",
		mustRun(t, dsn, "evict", "gone", "n"))
	require.Contains(t, mustRun(t, dsn, "nodes", "gone"), "departed")

	_, err := c.Heartbeat(t.Context(), coord.Report{Key: "live", NodeID: "n", Instance: "i", Seq: 1, LLocal: 10,
		Demand: 1, LeaseTTL: time.Hour})
	require.NoError(t, err)
	require.Equal(t, "node \"n\" on key \"live\" is evicted\n", mustRun(t, dsn, "evict", "live", "n"))
	require.Equal(t, "node \"n\" on key \"live\" was already evicted; nothing changed\n", mustRun(t, dsn, "evict", "live", "n"))

	// A new instance may join after an eviction; once it has left too,
	// the node id has an evicted row and a departed one.
	_, err = c.Heartbeat(t.Context(), coord.Report{Key: "live", NodeID: "n", Instance: "i2", Seq: 1, LLocal: 10,
		Demand: 1, Inflight: 1, LeaseTTL: time.Hour})
	require.NoError(t, err)
	require.NoError(t, c.Leave(t.Context(), coord.Departure{Key: "live", NodeID: "n", Instance: "i2", Inflight: 1, Hold: time.Hour}))
	require.Equal(t, `node "n" on key "live" has no instance to fence (its rows left or were evicted already, `+
		"and hold what they had in flight until their HOLD ends); nothing changed\n", mustRun(t, dsn, "evict", "live", "n"))
	nodes := mustRun(t, dsn, "nodes", "live")
	require.Contains(t, nodes, "departed")
	require.Contains(t, nodes, "evicted")
}

// TestMigrateRefusesHeldCapacity: reset and down refuse, unless --force,
// while a row of a node that is gone holds capacity for requests that
// may still run, as keys delete does: a schema reset and migrated up
// again would grant that capacity beside them, and an older one guards
// it less. Here a departed row holds slots and an evicted one a rate
// share. The count reads the columns of whatever schema it finds.
func TestMigrateRefusesHeldCapacity(t *testing.T) {
	t.Parallel()
	dsn := fleettest.DSN(t)
	c := coordinator(t, dsn)
	leaveHolding(t, c, "held", 7)
	mustRun(t, dsn, "keys", "create", "rated", "--rpm", "600")
	r := coord.Report{Key: "rated", NodeID: "e", Instance: "i", LLocal: 10, LeaseTTL: time.Hour,
		RateLocal: coord.Rates{Requests: 600}, RateDemand: coord.Rates{Requests: 300}}
	for seq := int64(1); seq <= 2; seq++ {
		r.Seq = seq
		g, err := c.Heartbeat(t.Context(), r)
		require.NoError(t, err)
		r.Epoch, r.AppliedGen, r.RateApplied = g.Epoch, g.Generation, g.RateShare
	}
	require.Positive(t, r.RateApplied.Requests, "the node holds a rate share")
	mustRun(t, dsn, "evict", "rated", "e")

	const refusal = "2 rows of nodes that expired, left or were evicted still hold capacity (7 slots and 1 evicted instance's rate share) for " +
		"requests that may still run, on keys \"held\", \"rated\" (the rows, with their HOLD and LEASE, are in 'fleetctl nodes KEY'): " +
		"after %s that capacity could be granted again beside those requests; wait until 1 row's hold ends and " +
		"1 evicted instance's lease ends, or give --force\n"
	for _, to := range []string{"", "9", "5"} {
		if to != "" {
			require.Contains(t, mustRun(t, dsn, "migrate", "down", "--to", to, "--force"), "rolled back from version")
		}
		res := run(t, dsn, "migrate", "reset", "--yes")
		require.Equal(t, 1, res.code, to)
		require.Equal(t, "fleetctl: migrate reset: "+fmt.Sprintf(refusal, "resetting"), res.stderr, to)
		res = run(t, dsn, "migrate", "down")
		require.Equal(t, 1, res.code, to)
		require.Equal(t, "fleetctl: migrate down: "+fmt.Sprintf(refusal, "rolling the schema back"), res.stderr, to)
	}
	// Below version 5 no rate share is held: the departed row's slots are.
	require.Contains(t, mustRun(t, dsn, "migrate", "down", "--to", "4", "--force"), "rolled back from version 5 to 4")
	res := run(t, dsn, "migrate", "reset", "--yes")
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, `1 row of nodes that expired, left or were evicted still holds capacity (7 slots) for requests that may still run, on key "held" (`)
	require.Contains(t, mustRun(t, dsn, "migrate", "status"), "00004", "nothing more was rolled back")
	require.Contains(t, mustRun(t, dsn, "migrate", "reset", "--yes", "--force"), "the fleetlimit schema and its version table are gone")
}

// TestRelearnWithoutNodes: a key no node ever joined has nothing to
// relearn, and relearn says so instead of naming a learning mode that
// has already ended.
func TestRelearnWithoutNodes(t *testing.T) {
	t.Parallel()
	dsn := fleettest.DSN(t)
	mustRun(t, dsn, "keys", "create", "idle")
	require.Contains(t, mustRun(t, dsn, "relearn", "idle"), `key "idle": no node holds a lease or a request on it, so learning mode ended at once`)
	require.Contains(t, mustRun(t, dsn, "keys"), "normal")
}

// TestMigrateDownRefusesLiveNodes: down refuses while nodes are live on
// any key unless --force, and changes nothing when it refuses.
func TestMigrateDownRefusesLiveNodes(t *testing.T) {
	t.Parallel()
	dsn := fleettest.DSN(t)
	seed(t, dsn)
	before := mustRun(t, dsn, "migrate", "status")
	res := run(t, dsn, "migrate", "down")
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, "3 nodes are live on 2 keys: rolling the schema back now would fail their fleets closed")
	require.Equal(t, before, mustRun(t, dsn, "migrate", "status"), "nothing was rolled back")
	require.Contains(t, mustRun(t, dsn, "migrate", "down", "--force"),
		fmt.Sprintf("rolled back from version %d to %d", coord.SchemaVersion, coord.SchemaVersion-1))
	// On an older schema the nodes still count.
	res = run(t, dsn, "migrate", "down")
	require.Equal(t, 1, res.code, res.stderr)
	require.Contains(t, res.stderr, "3 nodes are live on 2 keys")
	require.Contains(t, mustRun(t, dsn, "migrate", "down", "--to", "2", "--force"),
		fmt.Sprintf("rolled back from version %d to 2", coord.SchemaVersion-1))
	res = run(t, dsn, "migrate", "reset", "--yes")
	require.Equal(t, 1, res.code, res.stderr)
	require.Contains(t, res.stderr, "3 nodes are live on 2 keys: resetting now")
}

// TestKeysCreateDelete: a key capped before any node joins keeps the cap
// in its first grant; delete refuses while nodes are live unless --force.
func TestKeysCreateDelete(t *testing.T) {
	t.Parallel()
	dsn := fleettest.DSN(t)
	res := run(t, dsn, "limits", "set", "quota", "--max", "24")
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, "fleetctl keys create --max N quota")
	require.Equal(t, "key \"quota\" created (min -, max 24)\n", mustRun(t, dsn, "keys", "create", "quota", "--max", "24"))
	res = run(t, dsn, "keys", "create", "quota")
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, `key "quota" exists`)
	res = run(t, dsn, "keys", "create", "bad", "--min", "9", "--max", "3")
	require.Equal(t, 2, res.code, res.stderr)

	c := coordinator(t, dsn)
	g, err := c.Heartbeat(t.Context(), coord.Report{Key: "quota", NodeID: "n", Instance: "i", Seq: 1, LLocal: 100,
		Demand: 5, LeaseTTL: time.Hour})
	require.NoError(t, err)
	require.Equal(t, 24, g.LGlobal, "the first grant honours the cap set before the node joined")
	require.Equal(t, 24, g.Share)
	out := mustRun(t, dsn, "limits", "set", "quota", "--max", "20")
	require.Contains(t, out, "L_GLOBAL moves within the new bounds at the key's next heartbeat\n",
		"L_GLOBAL 24 beside MAX 20 is said to be the old one")
	require.NotContains(t, mustRun(t, dsn, "limits", "set", "quota", "--max", "24"), "moves within")
	out = mustRun(t, dsn, "limits", "set", "quota", "--clear-max")
	require.NotContains(t, out, "moves within")
	require.Contains(t, out, "L_GLOBAL follows the nodes' estimates without the cleared bound from the key's next heartbeat\n",
		"the max that held L_GLOBAL at 24, cleared, leaves it free to move")
	require.NotContains(t, mustRun(t, dsn, "limits", "set", "quota", "--clear-max"), "follows", "no max to clear")

	res = run(t, dsn, "keys", "delete", "quota")
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, "nodes are live on key \"quota\"")
	require.Equal(t, "key \"quota\" deleted\n", mustRun(t, dsn, "keys", "delete", "quota", "--force"))
	require.NotContains(t, mustRun(t, dsn, "keys"), "quota")
	// A live node's next heartbeat re-creates the key, without its
	// override, in learning mode.
	g2, err := c.Heartbeat(t.Context(), coord.Report{Key: "quota", NodeID: "n", Instance: "i", Seq: 2, LLocal: 100,
		Demand: 5, LeaseTTL: time.Hour, Epoch: g.Epoch, AppliedGen: g.Generation})
	require.NoError(t, err)
	require.Equal(t, 100, g2.LGlobal, "the cap went with the key")
	require.Contains(t, mustRun(t, dsn, "keys"), "learning")
	mustRun(t, dsn, "keys", "delete", "quota", "--force")
	res = run(t, dsn, "keys", "delete", "quota")
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, `unknown key "quota"`)

	// A node that left with 7 requests still running holds them: a key
	// deleted now, and re-created by the next node to join, would grant
	// them again beside those requests.
	mustRun(t, dsn, "keys", "create", "held", "--max", "10")
	g, err = c.Heartbeat(t.Context(), coord.Report{Key: "held", NodeID: "n", Instance: "i", Seq: 1, LLocal: 10,
		Demand: 10, Inflight: 7, LeaseTTL: time.Hour})
	require.NoError(t, err)
	require.NoError(t, c.Leave(t.Context(), coord.Departure{Key: "held", NodeID: "n", Instance: "i", Inflight: 7, Hold: time.Hour}))
	res = run(t, dsn, "keys", "delete", "held")
	require.Equal(t, 1, res.code)
	require.Regexp(t, `^fleetctl: keys delete: key "held" holds capacity for requests that may still run `+
		`\(1 row holds 7 slots on key 'held' until \S+Z; the rows are in fleetctl nodes held\): `+
		`a node that joins after the delete would be granted it again beside them; wait for the hold to end, or give --force\n$`, res.stderr)
	require.Contains(t, mustRun(t, dsn, "keys"), "held", "nothing was deleted")
	require.Equal(t, "key \"held\" deleted\n", mustRun(t, dsn, "keys", "delete", "held", "--force"))

	// A node that left with nothing in flight holds nothing, though its
	// row's hold has not ended: the key goes.
	_, err = c.Heartbeat(t.Context(), coord.Report{Key: "clean", NodeID: "n", Instance: "i", Seq: 1, LLocal: 10,
		Demand: 10, LeaseTTL: time.Hour})
	require.NoError(t, err)
	require.NoError(t, c.Leave(t.Context(), coord.Departure{Key: "clean", NodeID: "n", Instance: "i"}))
	require.Equal(t, "key \"clean\" deleted\n", mustRun(t, dsn, "keys", "delete", "clean"))
}

// TestConcurrentLimitsSet: many limits set --min and --max on one key at
// once all stay: each is one statement, not a read and a write.
func TestConcurrentLimitsSet(t *testing.T) {
	t.Parallel()
	dsn := fleettest.DSN(t)
	mustRun(t, dsn, "keys", "create", "k")
	c := coordinator(t, dsn)
	for round := range 20 {
		lo, hi := 1+round, 1000+round
		var wg sync.WaitGroup
		wg.Go(func() {
			_, _, err := c.UpdateLimits(t.Context(), "k", coord.LimitsChange{SetMin: true, Min: &lo})
			require.NoError(t, err)
		})
		wg.Go(func() {
			_, _, err := c.UpdateLimits(t.Context(), "k", coord.LimitsChange{SetMax: true, Max: &hi})
			require.NoError(t, err)
		})
		wg.Wait()
		keys, err := c.Keys(t.Context())
		require.NoError(t, err)
		require.Equal(t, lo, *keys[0].MinLimit, "round %d: the --min change was lost", round)
		require.Equal(t, hi, *keys[0].MaxLimit, "round %d: the --max change was lost", round)
	}
	// And through the CLI, both flags at once.
	require.Contains(t, mustRun(t, dsn, "limits", "set", "k", "--min", "5", "--max", "7"), "5    7")
}

// TestGrant: fleetctl grant hands an existing role a node's rights.
func TestGrant(t *testing.T) {
	t.Parallel()
	dsn := fleettest.DSN(t)
	pool, err := pgxpool.New(t.Context(), dsn)
	require.NoError(t, err)
	defer pool.Close()
	role := fmt.Sprintf("fl_grant_%d", time.Now().UnixNano())
	_, err = pool.Exec(t.Context(), "CREATE ROLE "+role+" LOGIN PASSWORD 'fl-grant-pw'")
	require.NoError(t, err)
	defer func() {
		_, _ = pool.Exec(context.Background(), "DROP OWNED BY "+role)
		_, _ = pool.Exec(context.Background(), "DROP ROLE "+role)
	}()
	require.Equal(t, fmt.Sprintf("role %q has a fleet node's rights\n", role), mustRun(t, dsn, "grant", "node", role))
	var ok bool
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT has_function_privilege($1,
		'fleetlimit.heartbeat(text, text, text, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint, jsonb)',
		'EXECUTE')`, role).Scan(&ok))
	require.True(t, ok)
	res := run(t, dsn, "grant", "admin", role)
	require.Equal(t, 2, res.code, res.stderr)
	res = run(t, dsn, "grant", "node", "no_such_role_xyz")
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, `role "no_such_role_xyz" does not exist`)
	require.Contains(t, res.stderr, `(create the role first: CREATE ROLE "no_such_role_xyz" LOGIN)`)

	// public is every role: the grant_role function's %I leaves it
	// unquoted, which gave every role of the cluster the rights.
	for _, public := range []string{"public", "PUBLIC"} {
		res = run(t, dsn, "grant", "operator", public)
		require.Equal(t, 1, res.code)
		require.Contains(t, res.stderr, fmt.Sprintf("grant operator rights to %q: that is PUBLIC, every role in the cluster", public))
	}
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT has_function_privilege('public', 'fleetlimit.evict(text, text)', 'EXECUTE')`).Scan(&ok))
	require.False(t, ok, "PUBLIC got nothing")

	// A name longer than the server keeps whole would be cut to another
	// role's: refused, and that role gets nor loses anything.
	cut := role + strings.Repeat("x", 63-len(role))
	_, err = pool.Exec(t.Context(), "CREATE ROLE "+cut)
	require.NoError(t, err)
	defer func() { _, _ = pool.Exec(context.Background(), "DROP OWNED BY "+cut+"; DROP ROLE "+cut) }()
	for _, args := range [][]string{{"grant", "operator", cut + "XYZ"}, {"revoke", cut + "XYZ"}} {
		res = run(t, dsn, args...)
		require.Equal(t, 1, res.code, res.stderr)
		require.Contains(t, res.stderr, fmt.Sprintf("%q: role name too long: over the server's max_identifier_length of 63 bytes; "+
			"Postgres would read it as %q, and a role by that name, if any, would get or lose the rights", cut+"XYZ", cut))
	}
	mustRun(t, dsn, "grant", "operator", cut)
	res = run(t, dsn, "revoke", cut+"XYZ")
	require.Equal(t, 1, res.code, res.stderr)
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT has_table_privilege($1, 'fleetlimit.keys', 'SELECT')`, cut).Scan(&ok))
	require.True(t, ok, "a refused revoke took nothing from the role its name would be cut to")

	// A node may not read the migrations, and is told which role may.
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	u.User = url.UserPassword(role, "fl-grant-pw")
	for _, cmd := range []string{"status", "validate"} {
		res = run(t, u.String(), "migrate", cmd)
		require.Equal(t, 1, res.code, res.stderr)
		require.Contains(t, res.stderr, "permission denied")
		require.Contains(t, res.stderr, "a role granted operator rights will do (fleetctl grant operator ROLE, as the owner)")
	}

	// Nor migrate: it is told which role it is and which role may.
	var owner string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'fleetlimit'`).Scan(&owner))
	mayNot := fmt.Sprintf("the role lacks a privilege that migrating takes: role %q does not own the fleetlimit schema "+
		"(a node's or an operator's rights do not include changing it); run migrations as its owner, %q", role, owner)
	res = run(t, u.String(), "migrate", "up")
	require.Equal(t, 1, res.code, res.stderr)
	require.Contains(t, res.stderr, "permission denied for table fleetlimit_schema_version")
	require.Contains(t, res.stderr, mayNot)

	// An operator may read them but not migrate, and is told who may.
	mustRun(t, dsn, "grant", "operator", role)
	require.Contains(t, mustRun(t, u.String(), "migrate", "validate"), "schema is up to date")
	before := mustRun(t, dsn, "migrate", "status")
	res = run(t, u.String(), "migrate", "down", "--force")
	require.Equal(t, 1, res.code, res.stderr)
	require.Contains(t, res.stderr, fmt.Sprintf("migrations: rolling back %05d failed and changed nothing; nothing was rolled back: ", coord.SchemaVersion))
	require.NotContains(t, res.stderr, "partial")
	require.Contains(t, res.stderr, "permission denied")
	require.Contains(t, res.stderr, mayNot)
	require.NotContains(t, res.stderr, "(run 'fleetctl migrate' as the owner", "said once")
	require.Equal(t, before, mustRun(t, dsn, "migrate", "status"))
	res = run(t, u.String(), "grant", "node", role)
	require.Equal(t, 1, res.code, res.stderr)
	require.Contains(t, res.stderr, "(grant is the schema owner's to run: the role that ran 'fleetctl migrate up')")
	res = run(t, u.String(), "revoke", role)
	require.Equal(t, 1, res.code, res.stderr)
	require.Contains(t, res.stderr, "(revoke is the schema owner's to run: the role that ran 'fleetctl migrate up')")

	// revoke takes both kinds' rights, and the version table's.
	rights := func() []bool {
		t.Helper()
		var fn, tbl, schema, version bool
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT
			has_function_privilege($1, 'fleetlimit.heartbeat(text, text, text, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint, jsonb)', 'EXECUTE')
			OR has_function_privilege($1, 'fleetlimit.evict(text, text)', 'EXECUTE'),
			has_table_privilege($1, 'fleetlimit.keys', 'SELECT'),
			has_schema_privilege($1, 'fleetlimit', 'USAGE'),
			has_table_privilege($1, 'fleetlimit_schema_version', 'SELECT')`, role).Scan(&fn, &tbl, &schema, &version))
		return []bool{fn, tbl, schema, version}
	}
	require.Equal(t, []bool{true, true, true, true}, rights())
	require.Equal(t, fmt.Sprintf("role %q has no fleetlimit rights\n", role), mustRun(t, dsn, "revoke", role))
	require.Equal(t, []bool{false, false, false, false}, rights())
	res = run(t, u.String(), "keys")
	require.Equal(t, 1, res.code, res.stderr)
	require.Contains(t, res.stderr, "permission denied")
	require.Equal(t, fmt.Sprintf("role %q has no fleetlimit rights\n", role), mustRun(t, dsn, "revoke", role), "twice is no error")

	res = run(t, dsn, "revoke", "no_such_role_xyz")
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, `does not exist (SQLSTATE 42704): a role that does not exist holds no rights; nothing changed`)
	res = run(t, dsn, "revoke", "Public")
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, `revoke the rights of "Public": that is PUBLIC`)
	res = run(t, dsn, "revoke", owner)
	require.Equal(t, 1, res.code)
	require.Contains(t, res.stderr, "the schema owner's rights cannot be revoked: it owns the fleetlimit schema")
	res = run(t, dsn, "revoke")
	require.Equal(t, 2, res.code, res.stderr)
}

// heartbeatAPI sends one more round of seed's heartbeats on "api", each
// acknowledging the node's newest grant.
func heartbeatAPI(t *testing.T, dsn string) {
	t.Helper()
	ctx := t.Context()
	c := coordinator(t, dsn)
	nodes, err := c.Nodes(ctx, "api")
	require.NoError(t, err)
	for _, n := range nodes {
		_, err := c.Heartbeat(ctx, coord.Report{Key: "api", NodeID: n.NodeID, Instance: n.Instance, Seq: n.Seq + 1,
			Epoch: n.Epoch, AppliedGen: n.GrantedGen, RateApplied: n.RateShare, LLocal: n.LLocal, Inflight: n.Inflight,
			Demand: n.Demand, RateLocal: n.RateLocal, RateDemand: n.RateDemand, RateUsed: n.RateUsed, LeaseTTL: time.Hour, Labels: n.Labels})
		require.NoError(t, err)
	}
}

// TestRatesGolden: the operator's rates cap what the nodes learned from
// the key's next heartbeat on, and the rate shares follow.
func TestRatesGolden(t *testing.T) {
	t.Parallel()
	dsn := fleettest.DSN(t)
	seed(t, dsn)

	var out strings.Builder
	step := func(args ...string) {
		fmt.Fprintf(&out, "$ fleetctl %s\n%s", strings.Join(args, " "), mustRun(t, dsn, args...))
	}
	step("keys")
	step("limits", "set", "api", "--rpm", "400", "--tpm", "60000")
	fmt.Fprintf(&out, "# (the nodes of api heartbeat)\n")
	heartbeatAPI(t, dsn)
	step("keys")
	step("nodes", "api")
	step("limits", "set", "api", "--tpm", "0")
	step("limits", "get", "api")
	golden(t, "rates", out.String())
}

// TestMigrateRefusesAVersionGap: a version table that lost an old
// migration's row (deleted by hand). validate, up, reset and a down to or
// past it say so and give the rows that restore it, instead of sending
// the user to an up that refuses; once restored, all run.
func TestMigrateRefusesAVersionGap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := fleettest.EmptyDSN(t)
	mustRun(t, dsn, "migrate", "up")
	pool, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	defer pool.Close()
	var id int
	require.NoError(t, pool.QueryRow(ctx, `DELETE FROM fleetlimit_schema_version WHERE version_id = 3 RETURNING id`).Scan(&id))

	fix := fmt.Sprintf(`INSERT INTO "public"."fleetlimit_schema_version" (id, version_id, is_applied) VALUES (%d, 3, true)`, id)
	for _, args := range [][]string{{"migrate", "validate"}, {"migrate", "up"}, {"migrate", "down", "--to", "2"},
		{"migrate", "down", "--to", "3"}, {"migrate", "reset", "--yes"}} {
		res := run(t, dsn, args...)
		require.Equal(t, 1, res.code, "%v: %s", args, res.stderr)
		require.Contains(t, res.stderr, fmt.Sprintf("%05d is applied, and not 00003", coord.SchemaVersion), args)
		require.Contains(t, res.stderr, fix, args)
	}
	_, err = pool.Exec(ctx, fix)
	require.NoError(t, err)
	mustRun(t, dsn, "migrate", "validate")
	mustRun(t, dsn, "migrate", "down", "--to", "2")
	mustRun(t, dsn, "migrate", "up")

	// A lone row of the newest version: not the first migration.
	_, err = pool.Exec(ctx, `DELETE FROM fleetlimit_schema_version WHERE version_id BETWEEN 1 AND $1`, coord.SchemaVersion-1)
	require.NoError(t, err)
	res := run(t, dsn, "migrate", "down")
	require.Equal(t, 1, res.code, res.stderr)
	require.Contains(t, res.stderr, fmt.Sprintf("%05d is applied, and not 00001, ", coord.SchemaVersion))
	require.NotContains(t, res.stderr, "first migration")
}
