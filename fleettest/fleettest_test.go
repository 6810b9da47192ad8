package fleettest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	code := Run(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func databaseExists(t *testing.T, name string) bool {
	t.Helper()
	var exists bool
	require.NoError(t, adminPool.QueryRow(context.Background(),
		"SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists))
	return exists
}

func TestParallelTestsGetDifferentDatabases(t *testing.T) {
	t.Parallel()
	var (
		mu    sync.Mutex
		names []string
	)
	t.Run("group", func(t *testing.T) {
		for i := range 2 {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				t.Parallel()
				pool := Pool(t)
				var name string
				require.NoError(t, pool.QueryRow(context.Background(), "SELECT current_database()").Scan(&name))
				mu.Lock()
				names = append(names, name)
				mu.Unlock()
			})
		}
	})
	require.Len(t, names, 2)
	require.NotEqual(t, names[0], names[1])
	for _, name := range names {
		require.Regexp(t, `^fleetlimit_test_\d+_[0-9a-f]{12}$`, name)
		require.False(t, databaseExists(t, name), "database %s is dropped at the test's cleanup", name)
	}
	t.Logf("backend %s", Backend())
}

func TestPoolHasSchema(t *testing.T) {
	t.Parallel()
	pool := Pool(t)
	var hasSchema bool
	require.NoError(t, pool.QueryRow(context.Background(),
		"SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'fleetlimit')").Scan(&hasSchema))
	require.True(t, hasSchema, "schema fleetlimit exists in a Pool database")
}

func TestDSNHasSchemaAndIsWritable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, DSN(t))
	require.NoError(t, err)
	defer conn.Close(ctx)
	var hasSchema bool
	require.NoError(t, conn.QueryRow(ctx,
		"SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'fleetlimit')").Scan(&hasSchema))
	require.True(t, hasSchema)
	_, err = conn.Exec(ctx, "CREATE TABLE scratch (id int)")
	require.NoError(t, err)
}

func TestEmptyDSNHasNoSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, EmptyDSN(t))
	require.NoError(t, err)
	defer conn.Close(ctx)
	var hasSchema, hasVersionTable bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT
		EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'fleetlimit'),
		EXISTS (SELECT 1 FROM pg_class WHERE relname = 'fleetlimit_schema_version')`).Scan(&hasSchema, &hasVersionTable))
	require.False(t, hasSchema)
	require.False(t, hasVersionTable)
}

func TestTemplateIsMarkedAndClosed(t *testing.T) {
	t.Parallel()
	DSN(t)
	var isTemplate, allowConn bool
	require.NoError(t, adminPool.QueryRow(context.Background(),
		"SELECT datistemplate, datallowconn FROM pg_database WHERE datname = $1", TemplateName()).Scan(&isTemplate, &allowConn))
	require.True(t, isTemplate)
	require.False(t, allowConn)
	require.Regexp(t, `^fleetlimit_tpl_[0-9a-f]{16}$`, TemplateName())
}

func TestBackendServesLoopbackOnly(t *testing.T) {
	t.Parallel()
	dsn := DSN(t)
	if Backend() == BackendDSN {
		t.Skip("the dsn backend's address is the caller's choice")
	}
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	require.True(t, isLoopbackHost(u.Hostname()), "host %s", u.Hostname())
}

func TestDropStaleDatabases(t *testing.T) {
	t.Parallel()
	DSN(t)
	ctx := context.Background()
	now := time.Now()
	stale := fmt.Sprintf("%s%d_%s", testDBPrefix, now.Add(-staleAfter-time.Minute).Unix(), randomHex(6))
	fresh := fmt.Sprintf("%s%d_%s", testDBPrefix, now.Add(-staleAfter+time.Hour).Unix(), randomHex(6))
	for _, name := range []string{stale, fresh} {
		_, err := adminPool.Exec(ctx, "CREATE DATABASE "+ident(name)+" TEMPLATE template0")
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, dropDatabase(context.Background(), adminPool, name)) })
	}
	require.NoError(t, dropStaleDatabases(ctx, adminPool, now))
	require.False(t, databaseExists(t, stale))
	require.True(t, databaseExists(t, fresh))
}

func TestWithDatabase(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"postgres://u:p@127.0.0.1:5432/postgres?sslmode=disable", "postgres://u:p@127.0.0.1:5432/db1?sslmode=disable"},
		{"postgresql://u@localhost/", "postgresql://u@localhost/db1"},
		{"postgres://u@127.0.0.1:5432?dbname=x", "postgres://u@127.0.0.1:5432/db1?dbname=db1"},
		{"host=127.0.0.1 dbname=other user=u", "host=127.0.0.1 dbname=other user=u dbname=db1"},
	}
	for _, tt := range tests {
		got, err := withDatabase(tt.in, "db1")
		require.NoError(t, err)
		require.Equal(t, tt.want, got)
	}
}

func TestCreatedAt(t *testing.T) {
	t.Parallel()
	got, ok := createdAt("fleetlimit_test_1700000000_abcdef012345")
	require.True(t, ok)
	require.Equal(t, int64(1700000000), got.Unix())
	for _, name := range []string{"fleetlimit_tpl_0123", "fleetlimit_test_x_1", "fleetlimit_test_17", "other"} {
		_, ok := createdAt(name)
		require.False(t, ok, name)
	}
}

func TestCheckDaemonHost(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"unix:///var/run/docker.sock", "tcp://127.0.0.1:2375", "tcp://localhost:2376", "tcp://[::1]:2375"} {
		require.NoError(t, checkDaemonHost(ok), ok)
	}
	for _, bad := range []string{"tcp://10.0.0.1:2375", "tcp://docker.example.com:2376", "ssh://user@host", "tcp://172.17.0.1:2375"} {
		require.Error(t, checkDaemonHost(bad), bad)
	}
}

func TestGuardRefusesNonLoopbackOverride(t *testing.T) {
	t.Setenv(envHostOverride, "172.17.0.1")
	require.ErrorIs(t, guardTestcontainersEnv(), errUnsafeEnv)
	t.Setenv(envHostOverride, "127.0.0.1")
	t.Setenv(envRyukDisabled, "false")
	require.ErrorIs(t, guardTestcontainersEnv(), errUnsafeEnv)
	t.Setenv(envRyukDisabled, "true")
	t.Setenv(envDockerHost, "tcp://192.168.1.10:2375")
	require.ErrorIs(t, guardTestcontainersEnv(), errUnsafeEnv)
	t.Setenv(envDockerHost, "unix:///var/run/docker.sock")
	require.NoError(t, guardTestcontainersEnv())
}

func TestOwnerGone(t *testing.T) {
	t.Parallel()
	self := processOwner(os.Getpid())
	if self == "" {
		t.Skip("no /proc here")
	}
	require.False(t, ownerGone(self), "this process is alive")
	parent := processOwner(os.Getppid())
	require.False(t, ownerGone(parent), "the parent is alive")

	ns, _, _ := strings.Cut(self, "/")
	require.True(t, ownerGone(ns+"/"+strconv.Itoa(os.Getpid())+"/1"), "same pid, other start time: pid reused")
	require.True(t, ownerGone(ns+"/999999999/1"), "no such pid")
	require.False(t, ownerGone("pid:[1]/999999999/1"), "another pid namespace is never judged")
	require.False(t, ownerGone("garbage"))
	require.False(t, ownerGone(""))
}
