package pgtemp_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/internal/pgtemp"
)

// durable is what a cluster that is restarted, crashed and replicated needs.
var durable = map[string]string{
	"fsync":              "on",
	"synchronous_commit": "on",
	"full_page_writes":   "on",
	"wal_level":          "replica",
	"max_wal_senders":    "10",
}

func queryInt(ctx context.Context, t *testing.T, dsn, sql string) int {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int
	require.NoError(t, conn.QueryRow(ctx, sql).Scan(&n))
	return n
}

func exec(ctx context.Context, t *testing.T, dsn, sql string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	require.NoError(t, err)
}

func TestRestartAndStopServerKeepPortAndData(t *testing.T) {
	t.Parallel()
	requirePostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	c, err := pgtemp.Start(ctx, pgtemp.Options{Settings: durable})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Stop()) })
	dsn, port := c.DSN("postgres"), c.Port()
	exec(ctx, t, dsn, "CREATE TABLE t (v int); INSERT INTO t VALUES (1)")

	require.NoError(t, c.Restart(ctx))
	require.Equal(t, port, c.Port())
	require.True(t, c.Running())
	require.Equal(t, 1, queryInt(ctx, t, dsn, "SELECT count(*) FROM t"))

	for _, mode := range []pgtemp.ShutdownMode{pgtemp.ShutdownImmediate, pgtemp.ShutdownKill, pgtemp.ShutdownFast} {
		exec(ctx, t, dsn, "INSERT INTO t VALUES (1)")
		require.NoError(t, c.StopServer(mode), "%v", mode)
		require.False(t, c.Running())
		_, err := pgx.Connect(ctx, dsn)
		require.Error(t, err, "the server is down after StopServer(%v)", mode)
		require.NoError(t, c.StopServer(mode), "stopping a stopped server")
		require.NoError(t, c.StartServer(ctx), "%v", mode)
		require.Error(t, c.StartServer(ctx), "starting a running server")
	}
	require.Equal(t, 4, queryInt(ctx, t, dsn, "SELECT count(*) FROM t"), "committed rows survive every mode")

	require.NoError(t, c.StopServer(pgtemp.ShutdownImmediate))
	require.NoError(t, c.Stop(), "Stop after StopServer is not an error")
}

func TestReplicaFollowsAndPromotes(t *testing.T) {
	t.Parallel()
	requirePostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	primary, err := pgtemp.Start(ctx, pgtemp.Options{Settings: durable})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, primary.Stop()) })
	exec(ctx, t, primary.DSN("postgres"), "CREATE TABLE t (v int); INSERT INTO t VALUES (1)")

	replica, err := pgtemp.StartReplica(ctx, primary.Addr(), pgtemp.Options{Settings: durable})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, replica.Stop()) })
	require.NotEqual(t, primary.Port(), replica.Port())
	require.Equal(t, 1, queryInt(ctx, t, replica.DSN("postgres"), "SELECT pg_is_in_recovery()::int"))

	exec(ctx, t, primary.DSN("postgres"), "INSERT INTO t VALUES (2)")
	require.Eventually(t, func() bool {
		return queryInt(ctx, t, replica.DSN("postgres"), "SELECT count(*) FROM t") == 2
	}, 30*time.Second, 20*time.Millisecond, "the replica streams the primary's writes")

	require.NoError(t, primary.StopServer(pgtemp.ShutdownKill))
	require.NoError(t, replica.Promote(ctx))
	require.Equal(t, 0, queryInt(ctx, t, replica.DSN("postgres"), "SELECT pg_is_in_recovery()::int"))
	exec(ctx, t, replica.DSN("postgres"), "INSERT INTO t VALUES (3)")
	require.NoError(t, replica.Restart(ctx))
	require.Equal(t, 3, queryInt(ctx, t, replica.DSN("postgres"), "SELECT count(*) FROM t"), "a promoted replica restarts as a primary")
}

func TestStartReplicaBadSource(t *testing.T) {
	t.Parallel()
	requirePostgres(t)
	_, err := pgtemp.StartReplica(context.Background(), "not-an-address", pgtemp.Options{})
	require.ErrorContains(t, err, "source")
}
