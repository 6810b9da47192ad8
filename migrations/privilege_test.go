package migrations_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/fleettest"
	"github.com/fleetlimit/fleetlimit/migrations"
)

// TestRunWithoutTheRightsNamesTheOwner: a role the database refuses a
// privilege that migrating takes — a node's, an operator's, one with no
// rights on a database not yet migrated — is told, by Up, DownTo and
// Reset, which role was refused and which to run them as; the database's
// error, which names the object, stays wrapped. ExplainPrivilege tells a
// caller's own read the same, once.
func TestRunWithoutTheRightsNamesTheOwner(t *testing.T) {
	t.Parallel()
	// refused requires err to be the database's refusal, explained.
	refused := func(t *testing.T, err error, object string, says ...string) {
		t.Helper()
		require.ErrorIs(t, err, migrations.ErrInsufficientPrivilege)
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr), "%v", err)
		require.Equal(t, "42501", pgErr.Code)
		require.ErrorContains(t, err, "permission denied for "+object)
		for _, s := range says {
			require.ErrorContains(t, err, s)
		}
	}

	t.Run("node", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		dsn := fleettest.DSN(t)
		owner := openAs(t, dsn, "")
		node := newPasswordRole(t, owner)
		require.NoError(t, migrations.Grant(ctx, owner, node, "node"))
		as := openAs(t, dsn, node)
		ownerName := schemaOwner(t, owner)
		says := []string{`role "` + node + `" does not own the fleetlimit schema`, `run migrations as its owner, "` + ownerName + `"`}
		_, _, err := migrations.UpVersions(ctx, as)
		refused(t, err, "table fleetlimit_schema_version", says...)
		refused(t, migrations.Up(ctx, as), "table fleetlimit_schema_version", says...)
		refused(t, migrations.DownTo(ctx, as, 5), "table fleetlimit_schema_version", says...)
		refused(t, migrations.Reset(ctx, as), "table fleetlimit_schema_version", says...)
		// A caller's own read on the way to a run is explained alike.
		_, err = migrations.Status(ctx, as)
		refused(t, migrations.ExplainPrivilege(ctx, as, err), "table fleetlimit_schema_version", says...)
		require.NotErrorIs(t, err, migrations.ErrInsufficientPrivilege, "Status, a read, explains nothing itself")
		explained := migrations.ExplainPrivilege(ctx, as, err)
		require.Same(t, explained, migrations.ExplainPrivilege(ctx, as, explained), "explained once")
		require.NoError(t, migrations.ExplainPrivilege(ctx, as, nil))
		other := errors.New("not the database's")
		require.Same(t, other, migrations.ExplainPrivilege(ctx, as, other))
	})

	t.Run("operator", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		dsn := fleettest.DSN(t)
		owner := openAs(t, dsn, "")
		require.NoError(t, migrations.DownTo(ctx, owner, 10))
		op := newPasswordRole(t, owner)
		require.NoError(t, migrations.Grant(ctx, owner, op, "operator"))
		as := openAs(t, dsn, op)
		_, err := migrations.Status(ctx, as)
		require.NoError(t, err, "an operator reads the status")
		says := []string{`role "` + op + `" does not own the fleetlimit schema`, `run migrations as its owner, "` + schemaOwner(t, owner) + `"`}
		_, _, err = migrations.UpVersions(ctx, as)
		refused(t, err, "schema fleetlimit", append(says, "applying 00011 failed and changed nothing")...)
		refused(t, migrations.DownTo(ctx, as, 5), "schema fleetlimit", says...)
		refused(t, migrations.Reset(ctx, as), "schema fleetlimit", says...)
	})

	t.Run("no schema yet", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		dsn := fleettest.EmptyDSN(t)
		owner := openAs(t, dsn, "")
		role := newPasswordRole(t, owner)
		as := openAs(t, dsn, role)
		var dba string
		require.NoError(t, owner.QueryRow(ctx, `SELECT datdba::regrole::text FROM pg_database WHERE datname = current_database()`).Scan(&dba))
		_, _, err := migrations.UpVersions(ctx, as)
		refused(t, err, "schema public", `role "`+role+`" may not create the fleetlimit schema or the version table`,
			`such as the database's owner, "`+dba+`"`)
		var exists bool
		require.NoError(t, owner.QueryRow(ctx, `SELECT to_regclass('fleetlimit_schema_version') IS NOT NULL`).Scan(&exists))
		require.False(t, exists)
	})
}

// newPasswordRole is newRole with the password openAs connects with.
func newPasswordRole(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	role := newRole(t, pool)
	_, err := pool.Exec(t.Context(), "ALTER ROLE "+role+" PASSWORD 'fl-pw'")
	require.NoError(t, err)
	return role
}

// openAs returns a pool on dsn as role (with newPasswordRole's password),
// or as dsn's own role when role is empty, closed at t's cleanup.
func openAs(t *testing.T, dsn, role string) *pgxpool.Pool {
	t.Helper()
	if role != "" {
		u, err := url.Parse(dsn)
		require.NoError(t, err)
		u.User = url.UserPassword(role, "fl-pw")
		dsn = u.String()
	}
	pool, err := pgxpool.New(t.Context(), dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// schemaOwner is the name of the fleetlimit schema's owner.
func schemaOwner(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var owner string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'fleetlimit'`).Scan(&owner))
	return owner
}

// TestPrivilegeAdviceNamesWhoMay: the advice of a refusal names a role
// that may do what was refused: the database's owner is not sent to
// itself, a version table left without its schema names the table's
// owner, and an owner that may not log in is reached through a member.
func TestPrivilegeAdviceNamesWhoMay(t *testing.T) {
	t.Parallel()
	t.Run("the database's owner", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		dsn := fleettest.EmptyDSN(t)
		admin := openAs(t, dsn, "")
		dbo := newPasswordRole(t, admin)
		locked := "locked_" + dbo
		execAll(t, admin,
			"ALTER DATABASE "+pgx.Identifier{dbName(t, admin)}.Sanitize()+" OWNER TO "+dbo,
			"CREATE SCHEMA "+locked,
			"GRANT USAGE ON SCHEMA "+locked+" TO "+dbo,
			"ALTER ROLE "+dbo+" SET search_path = "+locked+", public",
		)
		_, _, err := migrations.UpVersions(ctx, openAs(t, dsn, dbo))
		require.ErrorIs(t, err, migrations.ErrInsufficientPrivilege)
		require.ErrorContains(t, err, "permission denied for schema "+locked)
		require.ErrorContains(t, err, `role "`+dbo+`", the database's owner, may not create the version table in the first schema of its search path`)
	})
	t.Run("a version table without its schema", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		dsn := fleettest.DSN(t)
		admin := openAs(t, dsn, "")
		op := newPasswordRole(t, admin)
		require.NoError(t, migrations.Grant(ctx, admin, op, "operator"))
		tableOwner := newRole(t, admin)
		execAll(t, admin,
			"ALTER TABLE "+migrations.VersionTable+" OWNER TO "+tableOwner,
			"DROP SCHEMA fleetlimit CASCADE",
		)
		err := migrations.Reset(ctx, openAs(t, dsn, op))
		require.ErrorIs(t, err, migrations.ErrInsufficientPrivilege)
		require.ErrorContains(t, err, `role "`+op+`" does not own the version table `+migrations.VersionTable+
			`, and there is no fleetlimit schema; run migrations as its owner, "`+tableOwner+`"`)
	})
	t.Run("an owner that may not log in", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		dsn := fleettest.DSN(t)
		admin := openAs(t, dsn, "")
		group := newRole(t, admin)
		member := newPasswordRole(t, admin)
		execAll(t, admin,
			"ALTER ROLE "+group+" NOLOGIN",
			"ALTER ROLE "+member+" NOINHERIT",
			"GRANT "+group+" TO "+member,
			"ALTER SCHEMA fleetlimit OWNER TO "+group,
		)
		err := migrations.Reset(ctx, openAs(t, dsn, member))
		require.ErrorIs(t, err, migrations.ErrInsufficientPrivilege)
		require.ErrorContains(t, err, `run migrations as its owner, "`+group+`", which may not log in: connect as a member of it with options=-c role=`+group)
		// The advice works: so connected, the member runs as the owner.
		u, err := url.Parse(dsn)
		require.NoError(t, err)
		u.User = url.UserPassword(member, "fl-pw")
		// pgx reads '+' as itself: spaces go as %20.
		opts := "options=" + strings.ReplaceAll(url.QueryEscape("-c role="+group), "+", "%20")
		u.RawQuery = strings.TrimPrefix(u.RawQuery+"&"+opts, "&")
		var current string
		require.NoError(t, openAs(t, u.String(), "").QueryRow(ctx, `SELECT current_user::text`).Scan(&current))
		require.Equal(t, group, current)
	})
}

// dbName is the name of pool's database.
func dbName(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var name string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT current_database()`).Scan(&name))
	return name
}

// execAll runs each statement on pool, in order.
func execAll(t *testing.T, pool *pgxpool.Pool, stmts ...string) {
	t.Helper()
	for _, stmt := range stmts {
		_, err := pool.Exec(t.Context(), stmt)
		require.NoError(t, err, stmt)
	}
}
