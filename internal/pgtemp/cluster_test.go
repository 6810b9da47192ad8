package pgtemp_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fleetlimit/fleetlimit/internal/pgtemp"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// requirePostgres skips the test when the Postgres binaries are missing,
// unless FLEET_REQUIRE_PG=1 or CI is set, where it fails.
func requirePostgres(t *testing.T) {
	t.Helper()
	_, err := pgtemp.FindBinDir()
	if err == nil {
		return
	}
	if os.Getenv("FLEET_REQUIRE_PG") == "1" || os.Getenv("CI") != "" {
		t.Fatal(err)
	}
	t.Skip(err)
}

func TestStartConnectStop(t *testing.T) {
	t.Parallel()
	requirePostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	cluster, err := pgtemp.Start(ctx, pgtemp.Options{})
	require.NoError(t, err)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			require.NoError(t, cluster.Stop())
		}
	})
	require.Contains(t, cluster.DSN("postgres"), "@127.0.0.1:"+strconv.Itoa(cluster.Port())+"/postgres")

	conn, err := pgx.Connect(ctx, cluster.DSN("postgres"))
	require.NoError(t, err)
	var listen, fsync, maxConns string
	require.NoError(t, conn.QueryRow(ctx,
		"SELECT current_setting('listen_addresses'), current_setting('fsync'), current_setting('max_connections')",
	).Scan(&listen, &fsync, &maxConns))
	require.Equal(t, "127.0.0.1", listen)
	require.Equal(t, "off", fsync)
	require.Equal(t, strconv.Itoa(pgtemp.DefaultMaxConnections), maxConns)
	require.NoError(t, conn.Close(ctx))

	dir := cluster.Dir()
	require.DirExists(t, dir)
	require.NoError(t, cluster.Stop())
	stopped = true
	require.NoDirExists(t, dir)
	require.NoError(t, cluster.Stop(), "a second Stop returns the first result")

	_, err = pgx.Connect(ctx, cluster.DSN("postgres"))
	require.Error(t, err, "the server is gone after Stop")
}

func TestStopDisconnectsOpenSessions(t *testing.T) {
	t.Parallel()
	requirePostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	cluster, err := pgtemp.Start(ctx, pgtemp.Options{MaxConnections: 20, Settings: map[string]string{"work_mem": "8MB"}})
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, cluster.DSN("postgres"))
	require.NoError(t, err)
	defer conn.Close(ctx)
	var workMem string
	require.NoError(t, conn.QueryRow(ctx, "SHOW work_mem").Scan(&workMem))
	require.Equal(t, "8MB", workMem)

	start := time.Now()
	require.NoError(t, cluster.Stop())
	require.Less(t, time.Since(start), 10*time.Second, "a fast shutdown does not wait for open sessions")
}

func TestOptionsValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts pgtemp.Options
		want string
	}{
		{"negative port", pgtemp.Options{Port: -1}, "Options.Port -1 out of range"},
		{"port too large", pgtemp.Options{Port: 70000}, "Options.Port 70000 out of range"},
		{"negative max connections", pgtemp.Options{MaxConnections: -5}, "Options.MaxConnections -5"},
		{"reserved setting", pgtemp.Options{Settings: map[string]string{"listen_addresses": "*"}}, "may not set listen_addresses"},
		{"bin dir without postgres", pgtemp.Options{BinDir: "/nonexistent"}, "Options.BinDir \"/nonexistent\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := pgtemp.Start(context.Background(), tt.opts)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestBinDirMissingIsErrNotInstalled(t *testing.T) {
	t.Parallel()
	_, err := pgtemp.Start(context.Background(), pgtemp.Options{BinDir: t.TempDir()})
	require.True(t, errors.Is(err, pgtemp.ErrNotInstalled), "got %v", err)
}

func TestStartHonoursContext(t *testing.T) {
	t.Parallel()
	requirePostgres(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := pgtemp.Start(ctx, pgtemp.Options{})
	require.ErrorIs(t, err, context.Canceled)
}

// TestDSNIgnoresTargetSessionAttrs starts a cluster with
// PGTARGETSESSIONATTRS asking for a standby, as a shell set up for another
// database may: the cluster's own connection string still reaches it.
func TestDSNIgnoresTargetSessionAttrs(t *testing.T) {
	requirePostgres(t)
	t.Setenv("PGTARGETSESSIONATTRS", "standby")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	cluster, err := pgtemp.Start(ctx, pgtemp.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, cluster.Stop()) })
	conn, err := pgx.Connect(ctx, cluster.DSN("postgres"))
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))
}

// TestStartFailsAtOnceOnARejectedSetting: a PG* variable the new server
// rejects (PGTZ naming no time zone) fails Start with the server's word,
// rather than after its whole timeout with a deadline error.
func TestStartFailsAtOnceOnARejectedSetting(t *testing.T) {
	requirePostgres(t)
	t.Setenv("PGTZ", "No/Such_Zone")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	cluster, err := pgtemp.Start(ctx, pgtemp.Options{})
	if err == nil {
		require.NoError(t, cluster.Stop())
	}
	require.ErrorContains(t, err, "waiting will not help")
	require.ErrorContains(t, err, "TimeZone")
	require.NotErrorIs(t, err, context.DeadlineExceeded)
}
