package cli

import (
	"context"
	"errors"
	"fmt"
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
