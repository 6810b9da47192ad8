package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/coord"
)

// TestWatchLoopOutlastsFailedRefreshes: a refresh that fails with
// errRefresh (the database restarting) does not end the loop, unless it
// is the last one asked for; any other error ends it at once.
func TestWatchLoopOutlastsFailedRefreshes(t *testing.T) {
	t.Parallel()
	restart := errors.New("FATAL: terminating connection due to administrator command")
	calls := 0
	err := watchLoop(t.Context(), time.Millisecond, 5, func() error {
		calls++
		if calls == 2 || calls == 3 {
			return errRefresh{restart}
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 5, calls, "every refresh ran")

	calls = 0
	err = watchLoop(t.Context(), time.Millisecond, 3, func() error {
		calls++
		if calls == 3 {
			return errRefresh{restart}
		}
		return nil
	})
	require.ErrorIs(t, err, restart, "the last refresh failed: the run fails")
	require.NotErrorAs(t, err, &errRefresh{}, "with the cause's message alone")

	calls = 0
	lasting := errors.New(`unknown key "k"`)
	err = watchLoop(t.Context(), time.Millisecond, 0, func() error {
		calls++
		return lasting
	})
	require.ErrorIs(t, err, lasting)
	require.Equal(t, 1, calls)

	ctx, cancel := context.WithCancel(t.Context())
	err = watchLoop(ctx, time.Millisecond, 0, func() error {
		cancel()
		return errRefresh{context.Canceled}
	})
	require.NoError(t, err, "an interrupt is no failure")
}

// TestPassingErrors: watch goes on after a connection's failure, not
// after an error every later read would meet too.
func TestPassingErrors(t *testing.T) {
	t.Parallel()
	pg := func(code string) error { return fmt.Errorf("coord: keys: %w", &pgconn.PgError{Code: code}) }
	for _, err := range []error{
		pg("57P01"), // admin_shutdown: a restart
		pg("57P03"), // cannot_connect_now: starting up
		pg("08006"), // connection_failure
		pg("25006"), // read_only_sql_transaction: a failover's old primary
		errors.New("unexpected EOF"),
		context.DeadlineExceeded,
	} {
		require.True(t, passing(err), "%v", err)
	}
	for _, err := range []error{
		unknownKeyError("k"),
		fmt.Errorf("coord: keys: %w: no schema", coord.ErrSchema),
		pg("42501"), // insufficient_privilege
		pg("42P01"), // undefined_table
		pg("28P01"), // invalid_password
		pg("3D000"), // invalid_catalog_name: the database is gone
		pg("3F000"), // invalid_schema_name
	} {
		require.False(t, passing(err), "%v", err)
	}
	require.Equal(t, `unknown key "k"`, unknownKeyError("k").Error())
	require.ErrorIs(t, unknownKeyError("k"), coord.ErrUnknownKey)
}

// fakeAdmin answers Keys and Nodes from its fields (Nodes with no rows
// when nodes is nil); the rest of coord.Admin is not used by watch and
// drain --wait.
type fakeAdmin struct {
	coord.Admin
	keys  func(ctx context.Context) ([]coord.KeyInfo, error)
	nodes func(ctx context.Context) ([]coord.NodeInfo, error)
}

func (a *fakeAdmin) Keys(ctx context.Context) ([]coord.KeyInfo, error) { return a.keys(ctx) }
func (a *fakeAdmin) Nodes(ctx context.Context, _ string) ([]coord.NodeInfo, error) {
	if a.nodes != nil {
		return a.nodes(ctx)
	}
	return nil, nil
}

// TestWatcherOutlastsARestart drives watch's refresh through a database
// that restarts, hangs, recovers, then fails for good: each passing
// failure is said once per reason and the frames resume; a hung read ends
// at the refresh's bound; failures that outlast giveUp end the run.
func TestWatcherOutlastsARestart(t *testing.T) {
	t.Parallel()
	var (
		step   int
		warns  []string
		frames int
		notes  []string
		clock  = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	)
	restart := fmt.Errorf("coord: keys: %w", &pgconn.PgError{Severity: "FATAL", Code: "57P01",
		Message: "terminating connection due to administrator command"})
	script := []func(ctx context.Context) ([]coord.KeyInfo, error){
		func(context.Context) ([]coord.KeyInfo, error) { return []coord.KeyInfo{{Key: "k"}}, nil },
		func(context.Context) ([]coord.KeyInfo, error) { return nil, restart },
		func(context.Context) ([]coord.KeyInfo, error) { return nil, restart },
		func(ctx context.Context) ([]coord.KeyInfo, error) { <-ctx.Done(); return nil, ctx.Err() }, // hangs
		func(context.Context) ([]coord.KeyInfo, error) { return []coord.KeyInfo{{Key: "k"}}, nil },
	}
	w := &watcher{
		admin: &fakeAdmin{keys: func(ctx context.Context) ([]coord.KeyInfo, error) {
			f := script[min(step, len(script)-1)]
			step++
			return f(ctx)
		}},
		key: "k", interval: time.Second, timeout: 20 * time.Millisecond, giveUp: time.Minute,
		now:  func() time.Time { return clock },
		show: func(f frame) error { frames++; notes = append(notes, f.Note); return nil },
		warn: func(msg string) { warns = append(warns, msg) },
	}
	for range len(script) {
		err := w.refresh(t.Context())
		var skip errRefresh
		if err != nil && !errors.As(err, &skip) {
			t.Fatalf("refresh ended the run: %v", err)
		}
		clock = clock.Add(time.Second)
	}
	require.Equal(t, 2, frames)
	require.Equal(t, []string{"", "refreshing again after 3 failed refreshes (since " + clock.Add(-time.Second).Local().Format("15:04:05") + ")"}, notes,
		"the frames after a recovery say it, since the live view's redraw clears what stderr said")
	require.Equal(t, []string{
		"a refresh failed; trying again every 1s: coord: keys: FATAL: terminating connection due to administrator command (SQLSTATE 57P01)",
		"a refresh failed; trying again every 1s: no answer within 20ms: context deadline exceeded",
		"refreshing again after 3 failed refreshes",
	}, warns)

	// The last refresh of a counted run that fails says nothing of trying
	// again: its error ends the run.
	warns = nil
	w.last, w.lastWarn = true, ""
	script = []func(ctx context.Context) ([]coord.KeyInfo, error){
		func(context.Context) ([]coord.KeyInfo, error) { return nil, restart },
	}
	require.ErrorAs(t, w.refresh(t.Context()), &errRefresh{})
	require.Empty(t, warns)
	w.last, w.failing = false, 0

	// A database gone for good: the run ends once giveUp has passed.
	script = []func(ctx context.Context) ([]coord.KeyInfo, error){
		func(context.Context) ([]coord.KeyInfo, error) { return nil, restart },
	}
	var err error
	for range 100 {
		err = w.refresh(t.Context())
		clock = clock.Add(10 * time.Second)
		if !errors.As(err, &errRefresh{}) {
			break
		}
	}
	require.ErrorIs(t, err, restart)
	require.ErrorContains(t, err, "no refresh succeeded for 1m (7 failed refreshes)")

	// An unknown key ends it at once.
	w.failing = 0
	script = []func(ctx context.Context) ([]coord.KeyInfo, error){
		func(context.Context) ([]coord.KeyInfo, error) { return nil, nil },
	}
	err = w.refresh(t.Context())
	require.EqualError(t, err, `unknown key "k"`)
}

// TestAdminErrorHints: a role without an operator's rights is told how to
// get them; a missing schema how to make it.
func TestAdminErrorHints(t *testing.T) {
	t.Parallel()
	denied := fmt.Errorf("coord: keys: %w", &pgconn.PgError{Severity: "ERROR", Code: "42501", Message: "permission denied for table keys"})
	err := adminError(denied, "k", "")
	require.ErrorIs(t, err, denied)
	require.EqualError(t, err, "coord: keys: ERROR: permission denied for table keys (SQLSTATE 42501) "+
		"(an operator's role needs 'fleetctl grant operator ROLE', run by the schema owner)")
	missing := &pgconn.PgError{Severity: "ERROR", Code: "42P01", Message: `relation "fleetlimit.keys" does not exist`}
	require.ErrorContains(t, adminError(missing, "k", ""), "(is the schema migrated? run 'fleetctl migrate up')")
}

// TestInterruptedWhileAChangeRuns: a write interrupted (Ctrl-C) while its
// statement still ran says that its change may yet be made, where a bare
// interruption says "interrupted".
func TestInterruptedWhileAChangeRuns(t *testing.T) {
	t.Parallel()
	var said strings.Builder
	late := fmt.Errorf("coord: drain: %w: %w (1s after the context ended)", context.Canceled, coord.ErrOutcomeUnknown)
	require.Equal(t, ExitFailure, exitCode(&said, inCommand("drain", adminError(late, "k", "n"))))
	require.Equal(t, "fleetctl: drain: interrupted while its statement still ran: its change may yet be made; "+
		"look with 'fleetctl keys' or 'fleetctl nodes KEY' before running it again\n", said.String())
	said.Reset()
	require.Equal(t, ExitFailure, exitCode(&said, inCommand("keys", fmt.Errorf("coord: keys: %w", context.Canceled))))
	require.Equal(t, "fleetctl: keys: interrupted\n", said.String())
}

// TestRefreshBound: watch bounds a refresh by the session's own timeouts,
// whichever of the flags and the connection string set them, with three
// statements to a refresh; a session without a statement timeout gets
// watchHang a statement.
func TestRefreshBound(t *testing.T) {
	t.Parallel()
	bound := func(url string, s connSettings) time.Duration {
		s.url = url
		cfg, timeout, err := poolConfig(s)
		require.NoError(t, err)
		return refreshBound(cfg.ConnConfig.ConnectTimeout, timeout)
	}
	defaults := connSettings{statementTimeout: DefaultStatementTimeout, connectTimeout: DefaultConnectTimeout}
	require.Equal(t, 5*time.Second+30*time.Second+time.Second, bound("postgres://u@127.0.0.1/x", defaults))
	require.Equal(t, 30*time.Second+3*time.Minute+time.Second,
		bound("postgres://u@127.0.0.1/x?statement_timeout=60000&connect_timeout=30", defaults), "the URL's")
	require.Equal(t, 5*time.Second+3*time.Minute+time.Second,
		bound("postgres://u@127.0.0.1/x?statement_timeout=1min", defaults), "with a unit")
	longest := defaults
	longest.connectTimeout, longest.connectTimeoutSet = math.MaxInt64, true
	require.Equal(t, time.Duration(math.MaxInt64), bound("postgres://u@127.0.0.1/x", longest), "the longest --connect-timeout saturates")
	off := defaults
	off.statementTimeout, off.statementTimeoutSet = 0, true
	require.Equal(t, 5*time.Second+3*watchHang+time.Second, bound("postgres://u@127.0.0.1/x", off), "--statement-timeout 0")

	require.Equal(t, 5*time.Second+3*watchHang+time.Second,
		bound("postgres://u@127.0.0.1/x?statement_timeout=400us", defaults), "a value the server rounds to none")
	require.Equal(t, 5*time.Second+3*watchHang+time.Second,
		bound("postgres://u@127.0.0.1/x?statement_timeout=soon", defaults), "a value the server refuses")
	require.Equal(t, 5*time.Second+3*1500*time.Millisecond+time.Second,
		bound("postgres://u@127.0.0.1/x?statement_timeout=1.5s", defaults), "a fraction")
	require.Equal(t, 5*time.Second+3*10*time.Minute+time.Second,
		bound("postgres://u@127.0.0.1/x?options=-c%20statement_timeout%3D10min", defaults), "the options'")
}

// TestDrainWaitOutlastsARestart: drain --wait's reads go on through a
// database restart, said once on stderr, and its errors say that the
// drain stays. It ended at the first failed read, saying nothing of the
// drain it had made.
func TestDrainWaitOutlastsARestart(t *testing.T) {
	t.Parallel()
	restart := fmt.Errorf("coord: nodes: %w", &pgconn.PgError{Severity: "FATAL", Code: "57P01",
		Message: "terminating connection due to administrator command"})
	holding := coord.NodeInfo{NodeState: coord.NodeState{NodeID: "w", Draining: true, Inflight: 2}, Reserve: 2}
	drained := coord.NodeInfo{NodeState: coord.NodeState{NodeID: "w", Draining: true}}
	script := []func() ([]coord.NodeInfo, error){
		func() ([]coord.NodeInfo, error) { return []coord.NodeInfo{holding}, nil },
		func() ([]coord.NodeInfo, error) { return nil, restart },
		func() ([]coord.NodeInfo, error) { return nil, restart },
		func() ([]coord.NodeInfo, error) { return []coord.NodeInfo{drained}, nil },
	}
	var step int
	admin := &fakeAdmin{nodes: func(context.Context) ([]coord.NodeInfo, error) {
		f := script[min(step, len(script)-1)]
		step++
		return f()
	}}
	var out, errOut bytes.Buffer
	r := &runner{env: Env{Stdout: &out, Stderr: &errOut}.withDefaults(), parsed: func() {}}
	require.NoError(t, r.waitDrained(t.Context(), admin, "k", "w", 10*time.Second))
	require.Equal(t, "node \"w\" on key \"k\" is drained: it holds no capacity (the drain stays until undrain)\n", out.String())
	require.Equal(t, "waiting for node \"w\": 2 in flight, 2 reserved\n"+
		"a read of node \"w\" failed; trying again until the timeout: coord: nodes: FATAL: terminating connection due to administrator command (SQLSTATE 57P01)\n",
		errOut.String(), "the restart is said once")

	// An error that will not pass ends the wait at once, saying that the
	// drain stays.
	step = 0
	script = []func() ([]coord.NodeInfo, error){
		func() ([]coord.NodeInfo, error) {
			return nil, fmt.Errorf("coord: nodes: %w", &pgconn.PgError{Code: "42501", Message: "permission denied"})
		},
	}
	err := r.waitDrained(t.Context(), admin, "k", "w", 10*time.Second)
	require.ErrorContains(t, err, `node "w" on key "k" stays draining (fleetctl undrain k w to undo; fleetctl drain --wait k w to wait again): `)
	require.ErrorContains(t, err, "permission denied")
	require.Equal(t, 1, step)

	// A key deleted while the wait reads took the drain with it: the
	// error says so, not that the drain stays.
	step = 0
	script = []func() ([]coord.NodeInfo, error){
		func() ([]coord.NodeInfo, error) { return []coord.NodeInfo{holding}, nil },
		func() ([]coord.NodeInfo, error) { return nil, fmt.Errorf("coord: nodes: %w", coord.ErrUnknownKey) },
	}
	err = r.waitDrained(t.Context(), admin, "k", "w", 10*time.Second)
	require.ErrorContains(t, err, `key "k" was deleted while the drain of node "w" waited: the drain mark went with it, `+
		"and a node that joins makes the key again without one: ")
	require.NotContains(t, err.Error(), "stays draining")

	// A read that hangs ends at the timeout, which is the failed check.
	step = 0
	admin.nodes = func(ctx context.Context) ([]coord.NodeInfo, error) {
		if step++; step == 1 {
			return []coord.NodeInfo{holding}, nil
		}
		<-ctx.Done()
		return nil, fmt.Errorf("coord: nodes: %w", ctx.Err())
	}
	err = r.waitDrained(t.Context(), admin, "k", "w", 200*time.Millisecond)
	require.EqualError(t, err, `node "w" on key "k" still holds 2 (2 in flight) after 200ms; it stays draining (fleetctl undrain k w to undo)`)
	var exit *exitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, ExitCheckFailed, exit.code)

	// A timeout shorter than a read still lets the first read finish: the
	// outcome is the timeout's failed check, with the node's counts.
	admin.nodes = func(ctx context.Context) ([]coord.NodeInfo, error) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
			return []coord.NodeInfo{holding}, nil
		}
	}
	err = r.waitDrained(t.Context(), admin, "k", "w", time.Nanosecond)
	require.EqualError(t, err, `node "w" on key "k" still holds 2 (2 in flight) after 1ns; it stays draining (fleetctl undrain k w to undo)`)
	require.ErrorAs(t, err, &exit)
	require.Equal(t, ExitCheckFailed, exit.code)

	// Ctrl-C says the drain stays too.
	ctx, cancel := context.WithCancel(t.Context())
	admin.nodes = func(context.Context) ([]coord.NodeInfo, error) {
		cancel()
		return []coord.NodeInfo{holding}, nil
	}
	err = r.waitDrained(ctx, admin, "k", "w", 10*time.Second)
	var said bytes.Buffer
	require.Equal(t, ExitFailure, exitCode(&said, inCommand("drain", err)))
	require.Equal(t, "fleetctl: drain: node \"w\" on key \"k\" stays draining (fleetctl undrain k w to undo; "+
		"fleetctl drain --wait k w to wait again): interrupted\n", said.String())
}
