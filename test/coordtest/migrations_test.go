package coordtest

import (
	"cmp"
	"context"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/fleettest"
	"github.com/fleetlimit/fleetlimit/migrations"
)

// TestMigrationsUpDownUp migrates a bare database up, all the way down and
// up again; down must leave nothing of fleetlimit behind.
func TestMigrationsUpDownUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := emptyPool(t)

	objects := func() (schemas, functions int) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT
		    (SELECT count(*) FROM pg_namespace WHERE nspname = 'fleetlimit'),
		    (SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'fleetlimit')`,
		).Scan(&schemas, &functions))
		return schemas, functions
	}
	heartbeat := func() {
		p, err := coord.NewPostgres(pool)
		require.NoError(t, err)
		g, err := p.Heartbeat(ctx, coord.Report{Key: "k", NodeID: "n", Instance: "i", Seq: 1, LLocal: 3, Demand: 1, LeaseTTL: time.Second})
		require.NoError(t, err)
		require.Equal(t, 3, g.Share)
	}

	for round := range 2 {
		require.NoError(t, migrations.Up(ctx, pool), "round %d", round)
		schemas, functions := objects()
		require.Equal(t, 1, schemas)
		require.Positive(t, functions)
		heartbeat()

		require.NoError(t, migrations.DownTo(ctx, pool, 0), "round %d", round)
		schemas, functions = objects()
		require.Zero(t, schemas)
		require.Zero(t, functions)
	}
	require.NoError(t, migrations.Up(ctx, pool))
	heartbeat()
}

// TestResetRemovesVersionTable: Reset leaves nothing fleetlimit created,
// its version table included, and reading the status afterwards creates
// nothing either.
func TestResetRemovesVersionTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := emptyPool(t)
	versionTable := func() bool {
		var exists bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, migrations.VersionTable).Scan(&exists))
		return exists
	}

	require.NoError(t, migrations.Up(ctx, pool))
	require.True(t, versionTable())
	require.NoError(t, migrations.Reset(ctx, pool))
	require.False(t, versionTable(), "Reset drops the version table")

	st, err := migrations.Status(ctx, pool)
	require.NoError(t, err)
	require.Len(t, st, coord.SchemaVersion)
	for _, s := range st {
		require.Equal(t, goose.StatePending, s.State, "version %d", s.Source.Version)
	}
	pending, err := migrations.HasPending(ctx, pool)
	require.NoError(t, err)
	require.True(t, pending)
	require.False(t, versionTable(), "reading the status creates nothing")

	require.NoError(t, migrations.Up(ctx, pool), "a reset database migrates again")
	pending, err = migrations.HasPending(ctx, pool)
	require.NoError(t, err)
	require.False(t, pending)
	require.NoError(t, migrations.Reset(ctx, pool))
	require.NoError(t, migrations.Reset(ctx, pool), "a second reset finds nothing to do")
	require.False(t, versionTable())
}

// TestResetAfterDroppedByHand: a migrated database whose fleetlimit
// schema, or whose version table, was dropped by hand is reported by
// every reader and by Up (ErrSchemaGone, ErrVersionTableGone), and Up
// creates nothing; Reset removes what is left, a second Reset finds
// nothing to do, and the database migrates again.
func TestResetAfterDroppedByHand(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, drop string
		want       error
	}{
		{"schema", `DROP SCHEMA fleetlimit CASCADE`, migrations.ErrSchemaGone},
		{"version table", `DROP TABLE ` + migrations.VersionTable, migrations.ErrVersionTableGone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := emptyPool(t)
			require.NoError(t, migrations.Up(ctx, pool))
			_, err := pool.Exec(ctx, tc.drop)
			require.NoError(t, err)
			hadTable := hasVersionTable(t, pool)

			_, err = migrations.Status(ctx, pool)
			require.ErrorIs(t, err, tc.want)
			_, err = migrations.HasPending(ctx, pool)
			require.ErrorIs(t, err, tc.want)
			require.ErrorIs(t, migrations.Up(ctx, pool), tc.want)
			require.Equal(t, hadTable, hasVersionTable(t, pool), "Up created no table")

			require.NoError(t, migrations.Reset(ctx, pool))
			require.False(t, hasVersionTable(t, pool))
			var schema bool
			require.NoError(t, pool.QueryRow(ctx, `SELECT to_regnamespace('fleetlimit') IS NOT NULL`).Scan(&schema))
			require.False(t, schema)
			require.NoError(t, migrations.Reset(ctx, pool), "a second reset finds nothing to do")
			require.NoError(t, migrations.Up(ctx, pool))
			pending, err := migrations.HasPending(ctx, pool)
			require.NoError(t, err)
			require.False(t, pending)
		})
	}
}

// TestDownToRefusesWhatStatusReports: in every state Status reports as an
// error, DownTo returns that error before goose runs: it rolls nothing
// back and creates no version table. Without the check, goose would make
// an empty version table where the one dropped by hand was (a state Reset
// could no longer clear), run migration 5's down on a schema at 6 through
// a stale table, or make a table of its own in the first schema of a
// search path that does not reach the one that records the schema. Reset
// afterwards does what it does in that state.
func TestDownToRefusesWhatStatusReports(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// setup brings a fresh database into the state, and returns the
		// pool to call DownTo on.
		setup func(t *testing.T, pool *pgxpool.Pool) *pgxpool.Pool
		want  error
		// resets: Reset through the same pool then leaves nothing.
		resets bool
	}{
		{"schema gone", func(t *testing.T, pool *pgxpool.Pool) *pgxpool.Pool {
			require.NoError(t, migrations.Up(context.Background(), pool))
			_, err := pool.Exec(context.Background(), `DROP SCHEMA fleetlimit CASCADE`)
			require.NoError(t, err)
			return pool
		}, migrations.ErrSchemaGone, true},
		{"version table gone", func(t *testing.T, pool *pgxpool.Pool) *pgxpool.Pool {
			require.NoError(t, migrations.Up(context.Background(), pool))
			_, err := pool.Exec(context.Background(), `DROP TABLE `+migrations.VersionTable)
			require.NoError(t, err)
			return pool
		}, migrations.ErrVersionTableGone, true},
		{"schema unrecorded", func(t *testing.T, pool *pgxpool.Pool) *pgxpool.Pool {
			ctx := context.Background()
			_, err := pool.Exec(ctx, `CREATE SCHEMA own; CREATE SCHEMA other`)
			require.NoError(t, err)
			require.NoError(t, migrations.Up(ctx, withSearchPath(t, pool, "own, public")))
			return withSearchPath(t, pool, "other, public")
		}, migrations.ErrSchemaUnrecorded, false},
		{"stale version table", func(t *testing.T, pool *pgxpool.Pool) *pgxpool.Pool {
			ctx := context.Background()
			_, err := pool.Exec(ctx, `CREATE SCHEMA a; CREATE SCHEMA b`)
			require.NoError(t, err)
			pa, pb := withSearchPath(t, pool, "a"), withSearchPath(t, pool, "b")
			require.NoError(t, migrations.Up(ctx, pa))
			require.NoError(t, migrations.DownTo(ctx, pa, 5)) // a records 5
			_, err = pool.Exec(ctx, `DROP SCHEMA fleetlimit CASCADE`)
			require.NoError(t, err)
			require.NoError(t, migrations.Up(ctx, pb)) // the schema and b at the newest version
			return withSearchPath(t, pool, "a, b")
		}, migrations.ErrVersionMismatch, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := emptyPool(t)
			caller := tc.setup(t, pool)
			_, err := migrations.Status(ctx, caller)
			require.ErrorIs(t, err, tc.want)
			before := migrationState(t, pool)

			for _, to := range []int64{4, 0} {
				require.ErrorIs(t, migrations.DownTo(ctx, caller, to), tc.want, "DownTo(%d)", to)
				require.Equal(t, before, migrationState(t, pool), "DownTo(%d) changed nothing", to)
			}
			_, err = migrations.Status(ctx, caller)
			require.ErrorIs(t, err, tc.want, "Status reports the same state")

			if !tc.resets {
				require.ErrorIs(t, migrations.Reset(ctx, caller), tc.want)
				require.Equal(t, before, migrationState(t, pool))
				return
			}
			require.NoError(t, migrations.Reset(ctx, caller))
			require.Equal(t, "schema: none; version tables: none", migrationState(t, pool))
		})
	}
}

// migrationState describes what the database behind pool holds of
// fleetlimit's migrations: whether the fleetlimit schema exists and the
// version its schema_version() returns, and every version table with the
// versions it records.
func migrationState(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	var schema, function bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT to_regnamespace('fleetlimit') IS NOT NULL,
	       to_regprocedure('fleetlimit.schema_version()') IS NOT NULL`).Scan(&schema, &function))
	switch {
	case !schema:
		b.WriteString("schema: none")
	case !function:
		b.WriteString("schema: without schema_version()")
	default:
		var v int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT fleetlimit.schema_version()`).Scan(&v))
		fmt.Fprintf(&b, "schema: at %d", v)
	}
	b.WriteString("; version tables:")
	rows, err := pool.Query(ctx, `SELECT n.nspname FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
	 WHERE c.relname = $1 AND c.relkind = 'r' ORDER BY 1`, migrations.VersionTable)
	require.NoError(t, err)
	schemas, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	if len(schemas) == 0 {
		b.WriteString(" none")
	}
	for _, s := range schemas {
		var versions string
		require.NoError(t, pool.QueryRow(ctx, fmt.Sprintf(`SELECT coalesce(string_agg(version_id::text, ',' ORDER BY id), '')
		  FROM %s`, pgx.Identifier{s, migrations.VersionTable}.Sanitize())).Scan(&versions))
		fmt.Fprintf(&b, " %s [%s]", s, versions)
	}
	return b.String()
}

// TestResetRemovesAnEmptyVersionTable: a version table that records no
// migration (a full rollback, a failed first migration) is removed too.
func TestResetRemovesAnEmptyVersionTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := emptyPool(t)
	require.NoError(t, migrations.DownTo(ctx, pool, 0), "goose creates its table on any call")
	require.True(t, hasVersionTable(t, pool))
	require.NoError(t, migrations.Reset(ctx, pool))
	require.False(t, hasVersionTable(t, pool))

	// One made by hand, without goose's version 0 row: goose refuses to
	// roll back on it ("missing zero version"), and there is nothing to.
	_, err := pool.Exec(ctx, `CREATE TABLE `+migrations.VersionTable+
		` (id serial, version_id bigint, is_applied boolean, tstamp timestamp DEFAULT now())`)
	require.NoError(t, err)
	require.NoError(t, migrations.Reset(ctx, pool))
	require.False(t, hasVersionTable(t, pool))
}

// TestConcurrentResetsLeaveNothing: resets and status reads at once leave
// neither the schema nor the version table (a read no longer creates it
// after a reset dropped it, and a reset that finds it gone is done).
func TestConcurrentResetsLeaveNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := emptyPool(t)
	for round := range 3 {
		require.NoError(t, migrations.Up(ctx, pool), "round %d", round)
		errs := make(chan error, 6)
		for i := range cap(errs) {
			go func() {
				if i < 2 {
					errs <- migrations.Reset(ctx, pool)
					return
				}
				_, err := migrations.Status(ctx, pool)
				errs <- err
			}()
		}
		for range cap(errs) {
			require.NoError(t, <-errs, "round %d", round)
		}
		require.False(t, hasVersionTable(t, pool), "round %d", round)
		var schema bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT to_regnamespace('fleetlimit') IS NOT NULL`).Scan(&schema))
		require.False(t, schema, "round %d", round)
	}
}

// TestVersionTableOnTheSearchPath: the version table is where goose puts
// it, the first schema of the migrating role's search path. A role whose
// path reaches it elsewhere reads it, and Up is a no-op for it that
// creates no table of its own; a goose run for that role (a reset) is
// refused rather than run on a new empty table of its own. A role whose
// path does not reach it is told the schema is unrecorded, not that
// nothing is applied.
func TestVersionTableOnTheSearchPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tableIn := func(pool *pgxpool.Pool, schema string) bool {
		var ok bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, schema+"."+migrations.VersionTable).Scan(&ok))
		return ok
	}
	pool := emptyPool(t)
	_, err := pool.Exec(ctx, `CREATE SCHEMA own; CREATE SCHEMA other`)
	require.NoError(t, err)
	migrator := withSearchPath(t, pool, "own, public")
	require.NoError(t, migrations.Up(ctx, migrator))
	require.True(t, tableIn(pool, "own"), "goose puts the table in the first schema")

	reader := withSearchPath(t, pool, "other, own")
	pending, err := migrations.HasPending(ctx, reader)
	require.NoError(t, err)
	require.False(t, pending, "the table on the path records every migration")
	require.NoError(t, migrations.Up(ctx, reader), "nothing to do")
	require.False(t, tableIn(pool, "other"), "no version table in the reader's first schema")
	require.ErrorIs(t, migrations.Reset(ctx, reader), migrations.ErrVersionTableElsewhere)
	require.False(t, tableIn(pool, "other"))

	stranger := withSearchPath(t, pool, "other, public")
	_, err = migrations.Status(ctx, stranger)
	require.ErrorIs(t, err, migrations.ErrSchemaUnrecorded)
	require.ErrorIs(t, migrations.Up(ctx, stranger), migrations.ErrSchemaUnrecorded)
	require.False(t, tableIn(pool, "other"))

	require.NoError(t, migrations.Reset(ctx, migrator))
	require.False(t, tableIn(pool, "own"))
	_, err = migrations.Status(ctx, stranger)
	require.NoError(t, err, "nothing left to disagree")
}

// TestConcurrentUpsWithTwoSearchPaths: two Ups at once on a fresh
// database, from search paths with different first schemas: one
// migrates; the other finds the schema recorded elsewhere
// (ErrSchemaUnrecorded) and leaves no empty version table of its own.
func TestConcurrentUpsWithTwoSearchPaths(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for round := range 3 {
		pool := emptyPool(t)
		_, err := pool.Exec(ctx, `CREATE SCHEMA s1; CREATE SCHEMA s2`)
		require.NoError(t, err)
		paths := []*pgxpool.Pool{withSearchPath(t, pool, "s1, public"), withSearchPath(t, pool, "s2, public")}
		errs := []<-chan error{}
		for _, p := range paths {
			ch := make(chan error, 1)
			go func() { ch <- migrations.Up(ctx, p) }()
			errs = append(errs, ch)
		}
		won := 0
		for _, ch := range errs {
			if err := <-ch; err == nil {
				won++
			} else {
				require.ErrorIs(t, err, migrations.ErrSchemaUnrecorded, "round %d", round)
			}
		}
		require.Equal(t, 1, won, "round %d: one Up migrates", round)
		var tables int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relname = $1 AND relkind = 'r'`,
			migrations.VersionTable).Scan(&tables))
		require.Equal(t, 1, tables, "round %d: no empty version table is left", round)
	}
}

// TestStaleVersionTable: the fleetlimit schema dropped by hand and
// migrated again from another search path leaves two version tables; once
// they disagree (a rollback through the new one), a reader whose path
// reaches the old one first is told so, with both versions, the schemas
// and the way out, rather than that the schema is up to date; Up refuses.
// The way out works.
func TestStaleVersionTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := emptyPool(t)
	_, err := pool.Exec(ctx, `CREATE SCHEMA a; CREATE SCHEMA b`)
	require.NoError(t, err)
	pa, pb := withSearchPath(t, pool, "a"), withSearchPath(t, pool, "b")
	require.NoError(t, migrations.Up(ctx, pa))
	_, err = pool.Exec(ctx, `DROP SCHEMA fleetlimit CASCADE`)
	require.NoError(t, err)
	require.NoError(t, migrations.Up(ctx, pb))
	reader := withSearchPath(t, pool, "a, b")
	pending, err := migrations.HasPending(ctx, reader)
	require.NoError(t, err)
	require.False(t, pending, "both tables record the newest version, as the schema is")

	require.NoError(t, migrations.DownTo(ctx, pb, 5))
	_, err = migrations.Status(ctx, reader)
	require.ErrorIs(t, err, migrations.ErrVersionMismatch)
	require.ErrorContains(t, err, fmt.Sprintf("the one in schema a records version %d, but fleetlimit.schema_version() says 5; ", coord.SchemaVersion)+
		"the one in schema b records version 5: drop the stale table "+
		`(DROP TABLE "a"."fleetlimit_schema_version") and migrate with a search path that starts with b`)
	_, err = migrations.HasPending(ctx, reader)
	require.ErrorIs(t, err, migrations.ErrVersionMismatch)
	require.ErrorIs(t, migrations.Up(ctx, reader), migrations.ErrVersionMismatch)

	// Older than the function.
	require.NoError(t, migrations.DownTo(ctx, pb, 3))
	_, err = migrations.Status(ctx, reader)
	require.ErrorIs(t, err, migrations.ErrVersionMismatch)
	require.ErrorContains(t, err, fmt.Sprintf("the one in schema a records version %d, but the schema has no fleetlimit.schema_version(), which version 4 added", coord.SchemaVersion))

	// The way out.
	_, err = pool.Exec(ctx, `DROP TABLE "a"."fleetlimit_schema_version"`)
	require.NoError(t, err)
	require.NoError(t, migrations.Up(ctx, pb))
	pending, err = migrations.HasPending(ctx, reader)
	require.NoError(t, err)
	require.False(t, pending)
	var v int
	require.NoError(t, pool.QueryRow(ctx, `SELECT fleetlimit.schema_version()`).Scan(&v))
	require.Equal(t, coord.SchemaVersion, v)
}

// TestNewestVersionRowsLost: the only version table, with its newest
// rows deleted by hand, is not stale: the error gives the INSERT that puts
// them back (not a DROP TABLE, after which only a reset, which loses every
// key, would be left), and the INSERT works.
func TestNewestVersionRowsLost(t *testing.T) {
	t.Parallel()
	t.Run("table", func(t *testing.T) { t.Parallel(); newestVersionRowsLost(t, false) })
	// A partitioned version table is found as an ordinary one is: the
	// INSERT names its schema.
	t.Run("partitioned", func(t *testing.T) { t.Parallel(); newestVersionRowsLost(t, true) })
}

func newestVersionRowsLost(t *testing.T, partitioned bool) {
	ctx := context.Background()
	pool := emptyPool(t)
	require.NoError(t, migrations.Up(ctx, pool))
	if partitioned {
		v := migrations.VersionTable
		_, err := pool.Exec(ctx, `ALTER TABLE `+v+` RENAME TO plain_version;
			CREATE TABLE `+v+` (LIKE plain_version INCLUDING DEFAULTS INCLUDING IDENTITY) PARTITION BY RANGE (id);
			CREATE TABLE `+v+`_all PARTITION OF `+v+` FOR VALUES FROM (MINVALUE) TO (MAXVALUE);
			INSERT INTO `+v+` SELECT * FROM plain_version;
			SELECT setval(pg_get_serial_sequence('`+v+`', 'id'), max(id)) FROM `+v+`;
			DROP TABLE plain_version`)
		require.NoError(t, err)
	}
	var last int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT max(id) FROM `+migrations.VersionTable).Scan(&last))
	_, err := pool.Exec(ctx, `DELETE FROM `+migrations.VersionTable+` WHERE version_id >= $1`, coord.SchemaVersion-1)
	require.NoError(t, err)

	_, err = migrations.Status(ctx, pool)
	require.ErrorIs(t, err, migrations.ErrVersionMismatch)
	want := fmt.Sprintf(`INSERT INTO "public"."fleetlimit_schema_version" (id, version_id, is_applied) VALUES (%d, %d, true), (%d, %d, true)`,
		last-1, coord.SchemaVersion-1, last, coord.SchemaVersion)
	require.ErrorContains(t, err, fmt.Sprintf("the one in schema public records version %d, but fleetlimit.schema_version() says %d: "+
		"it is the only version table, and it may have lost the rows of the newest migrations (deleted by hand?); ", coord.SchemaVersion-2, coord.SchemaVersion)+
		"if the fleetlimit schema holds what they made, as schema_version() says, put the rows back: "+want)
	require.NotContains(t, err.Error(), "DROP TABLE")
	require.ErrorIs(t, migrations.Up(ctx, pool), migrations.ErrVersionMismatch)

	putRowsBack(t, pool, want, coord.SchemaVersion-2)
}

// putRowsBack runs insert, the INSERT an error gave, and checks that the
// rows it put back leave nothing pending and roll back in order, to
// version downTo and up again.
func putRowsBack(t *testing.T, pool *pgxpool.Pool, insert string, downTo int64) {
	t.Helper()
	ctx := context.Background()
	_, err := pool.Exec(ctx, insert)
	require.NoError(t, err)
	pending, err := migrations.HasPending(ctx, pool)
	require.NoError(t, err)
	require.False(t, pending)
	require.NoError(t, migrations.DownTo(ctx, pool, downTo), "the rows put back roll back in order")
	require.NoError(t, migrations.Up(ctx, pool))
}

// TestEveryVersionRowLost: the only version table, emptied by hand, gets
// the INSERT of every row, as one that lost its newest rows does (not the
// advice for a table on another role's search path), and the INSERT works.
func TestEveryVersionRowLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := emptyPool(t)
	require.NoError(t, migrations.Up(ctx, pool))
	_, err := pool.Exec(ctx, `DELETE FROM `+migrations.VersionTable+` WHERE version_id > 0`)
	require.NoError(t, err)

	_, err = migrations.Status(ctx, pool)
	require.ErrorIs(t, err, migrations.ErrVersionMismatch)
	require.NotErrorIs(t, err, migrations.ErrSchemaUnrecorded)
	require.ErrorContains(t, err, fmt.Sprintf("the one in schema public records version 0, but fleetlimit.schema_version() says %d: "+
		"it is the only version table, and it may have lost the rows of the newest migrations", coord.SchemaVersion))
	_, fix, ok := strings.Cut(err.Error(), "put the rows back: ")
	require.True(t, ok, err.Error())
	putRowsBack(t, pool, fix, coord.SchemaVersion-1)
}

// TestVersionTableAheadOfTheSchema: the only version table recording a
// migration the schema no longer holds (a schema restored from an older
// dump) gets the DELETE that takes the newer rows out (not a DROP TABLE,
// after which only a reset, which loses every key, would be left), and
// the DELETE works: up applies the migration again and the keys stay.
func TestVersionTableAheadOfTheSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := emptyPool(t)
	require.NoError(t, migrations.Up(ctx, pool))
	_, err := pool.Exec(ctx, `INSERT INTO fleetlimit.keys (key) VALUES ('kept')`)
	require.NoError(t, err)
	var id int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT max(id) FROM `+migrations.VersionTable+` WHERE version_id = $1`, coord.SchemaVersion).Scan(&id))
	require.NoError(t, migrations.DownTo(ctx, pool, coord.SchemaVersion-1))
	_, err = pool.Exec(ctx, `INSERT INTO `+migrations.VersionTable+` (id, version_id, is_applied) VALUES ($1, $2, true)`, id, coord.SchemaVersion)
	require.NoError(t, err)

	_, err = migrations.Status(ctx, pool)
	require.ErrorIs(t, err, migrations.ErrVersionMismatch)
	fix := fmt.Sprintf(`DELETE FROM "public"."fleetlimit_schema_version" WHERE version_id > %d`, coord.SchemaVersion-1)
	require.ErrorContains(t, err, fmt.Sprintf("the one in schema public records version %d, but fleetlimit.schema_version() says %d: "+
		"it is the only version table, and it may record migrations the schema no longer holds (restored from an older dump?); "+
		"if the fleetlimit schema holds what version %d made, as schema_version() says, delete the newer rows, "+
		"and up applies those migrations again: %s", coord.SchemaVersion, coord.SchemaVersion-1, coord.SchemaVersion-1, fix))
	require.NotContains(t, err.Error(), "DROP TABLE")
	require.ErrorIs(t, migrations.Up(ctx, pool), migrations.ErrVersionMismatch)

	_, err = pool.Exec(ctx, fix)
	require.NoError(t, err)
	require.NoError(t, migrations.Up(ctx, pool))
	var v, keys int
	require.NoError(t, pool.QueryRow(ctx, `SELECT fleetlimit.schema_version(), (SELECT count(*) FROM fleetlimit.keys WHERE key = 'kept')`).Scan(&v, &keys))
	require.Equal(t, coord.SchemaVersion, v)
	require.Equal(t, 1, keys)

	// A schema older than schema_version() (version 4) cannot say its
	// version: the DELETE names the dump's.
	require.NoError(t, migrations.DownTo(ctx, pool, 3))
	for version := int64(4); version <= coord.SchemaVersion; version++ {
		_, err = pool.Exec(ctx, `INSERT INTO `+migrations.VersionTable+` (version_id, is_applied) VALUES ($1, true)`, version)
		require.NoError(t, err)
	}
	_, err = migrations.Status(ctx, pool)
	require.ErrorIs(t, err, migrations.ErrVersionMismatch)
	require.ErrorContains(t, err, `it is the only version table, and it may record migrations the schema no longer holds `+
		`(restored from an older dump?); if so, delete the rows above the version the dump was taken at, V (below 4), `+
		`and up applies those migrations again: DELETE FROM "public"."fleetlimit_schema_version" WHERE version_id > V`)
	require.NotContains(t, err.Error(), "DROP TABLE")
	_, err = pool.Exec(ctx, `DELETE FROM `+migrations.VersionTable+` WHERE version_id > 3`)
	require.NoError(t, err)
	require.NoError(t, migrations.Up(ctx, pool))
}

// TestConcurrentDownsReportWhatEachDid: runs that roll back to the same
// version at once roll it back once; one reports the step, the others
// that there was nothing left, each from what it found under the lock.
func TestConcurrentDownsReportWhatEachDid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := emptyPool(t)
	require.NoError(t, migrations.Up(ctx, pool))
	type versions struct{ before, after int64 }
	got := make([]versions, 3)
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() {
			before, after, err := migrations.DownVersions(ctx, pool, coord.SchemaVersion-1)
			assert.NoError(t, err)
			got[i] = versions{before, after}
		})
	}
	wg.Wait()
	slices.SortFunc(got, func(a, b versions) int { return cmp.Compare(b.before, a.before) })
	top, below := int64(coord.SchemaVersion), int64(coord.SchemaVersion-1)
	require.Equal(t, []versions{{top, below}, {below, below}, {below, below}}, got)

	before, after, err := migrations.DownVersions(ctx, pool, coord.SchemaVersion-3)
	require.NoError(t, err)
	require.Equal(t, versions{below, top - 3}, versions{before, after}, "two steps")
}

// TestNoSchemaOnTheSearchPath: a search path none of whose schemas
// exists gets an error that names it and says what to do, not goose's
// failure to create its table; with the schema created, Up puts the table
// there.
func TestNoSchemaOnTheSearchPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := emptyPool(t)
	lost := withSearchPath(t, pool, `nosuch, "Also None"`)
	for name, err := range map[string]error{
		"Up":     migrations.Up(ctx, lost),
		"DownTo": migrations.DownTo(ctx, lost, 0),
	} {
		require.ErrorIs(t, err, migrations.ErrNoSchemaOnPath, name)
		require.ErrorContains(t, err, `search_path is "nosuch, \"Also None\""; create its first schema`, name)
		require.NotContains(t, err.Error(), "no schema has been selected", name)
	}
	_, err := pool.Exec(ctx, `CREATE SCHEMA nosuch`)
	require.NoError(t, err)
	require.NoError(t, migrations.Up(ctx, lost))
	var ok bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, "nosuch."+migrations.VersionTable).Scan(&ok))
	require.True(t, ok)
}

// withSearchPath opens a pool like pool's whose sessions have the given
// search path, closed at t's cleanup.
func withSearchPath(t *testing.T, pool *pgxpool.Pool, path string) *pgxpool.Pool {
	t.Helper()
	cfg := pool.Config().Copy()
	cfg.ConnConfig.RuntimeParams["search_path"] = path
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

// TestAppliedAtInAnyTimeZone: goose records when a migration was applied
// in the session's local time; Status reports the instant, whatever the
// server's TimeZone.
func TestAppliedAtInAnyTimeZone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := emptyPool(t).Config().Copy()
	cfg.ConnConfig.RuntimeParams["timezone"] = "Asia/Tokyo"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	before := time.Now()
	require.NoError(t, migrations.Up(ctx, pool))
	st, err := migrations.Status(ctx, pool)
	require.NoError(t, err)
	for _, s := range st {
		require.Equal(t, goose.StateApplied, s.State)
		require.WithinRange(t, s.AppliedAt, before.Add(-time.Minute), time.Now().Add(time.Minute), "version %d", s.Source.Version)
	}
}

// hasVersionTable reports whether pool's search path reaches a version
// table.
func hasVersionTable(t *testing.T, pool *pgxpool.Pool) bool {
	t.Helper()
	table, err := migrations.HasVersionTable(context.Background(), pool)
	require.NoError(t, err)
	return table
}

// TestSchemaVersionMatches: the newest embedded migration is the version
// coord needs, and a migrated database says so.
func TestSchemaVersionMatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	names, err := fs.Glob(migrations.FS(), "*.sql")
	require.NoError(t, err)
	newest := names[len(names)-1]
	v, err := strconv.Atoi(strings.SplitN(path.Base(newest), "_", 2)[0])
	require.NoError(t, err)
	require.Equal(t, coord.SchemaVersion, v, "coord.SchemaVersion is not the newest migration %s", newest)

	p, err := coord.NewPostgres(fleettest.Pool(t))
	require.NoError(t, err)
	require.NoError(t, p.CheckSchema(ctx))

	pool := emptyPool(t)
	require.NoError(t, migrations.Up(ctx, pool))
	require.NoError(t, migrations.DownTo(ctx, pool, 3))
	old, err := coord.NewPostgres(pool)
	require.NoError(t, err)
	require.ErrorIs(t, old.CheckSchema(ctx), coord.ErrSchema, "a schema at version 3")
}

// TestSchemaNewerThanThisBuild: a database a newer build migrated (one
// version past coord.SchemaVersion, with the function that says so) is
// listed with that version, has nothing pending, and is left as it is:
// Up applies nothing, DownTo and Reset refuse with ErrSchemaNewer naming
// both versions, and nodes of this build still heartbeat on it.
func TestSchemaNewerThanThisBuild(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := emptyPool(t)
	require.NoError(t, migrations.Up(ctx, pool))
	newer := int64(coord.SchemaVersion + 1)
	_, err := pool.Exec(ctx, fmt.Sprintf(`
		INSERT INTO %s (version_id, is_applied) VALUES (%d, true);
		CREATE OR REPLACE FUNCTION fleetlimit.schema_version()
		RETURNS integer LANGUAGE sql IMMUTABLE AS $$ SELECT %d $$`, migrations.VersionTable, newer, newer))
	require.NoError(t, err)

	st, err := migrations.Status(ctx, pool)
	require.NoError(t, err)
	last := st[len(st)-1]
	require.Equal(t, newer, last.Source.Version)
	require.Equal(t, goose.StateApplied, last.State)
	require.Empty(t, last.Source.Path, "this build has no file for it")
	n, newest := migrations.Newer(st)
	require.Equal(t, newer, n)
	require.Equal(t, int64(coord.SchemaVersion), newest)

	pending, err := migrations.HasPending(ctx, pool)
	require.NoError(t, err)
	require.False(t, pending)
	before, after, err := migrations.UpVersions(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, [2]int64{newer, newer}, [2]int64{before, after})

	want := fmt.Sprintf("the database is at version %d, and this build's newest migration is %d", newer, coord.SchemaVersion)
	err = migrations.DownTo(ctx, pool, 5)
	require.ErrorIs(t, err, migrations.ErrSchemaNewer)
	require.ErrorContains(t, err, want)
	err = migrations.Reset(ctx, pool)
	require.ErrorIs(t, err, migrations.ErrSchemaNewer)
	require.ErrorContains(t, err, want)

	st, err = migrations.Status(ctx, pool)
	require.NoError(t, err)
	n, _ = migrations.Newer(st)
	require.Equal(t, newer, n, "nothing was rolled back")
	for _, s := range st {
		require.Equal(t, goose.StateApplied, s.State, "version %d", s.Source.Version)
	}
	p, err := coord.NewPostgres(pool)
	require.NoError(t, err)
	require.NoError(t, p.CheckSchema(ctx))
	g, err := p.Heartbeat(ctx, coord.Report{Key: "k", NodeID: "n", Instance: "i", Seq: 1, LLocal: 3, Demand: 1, LeaseTTL: time.Second})
	require.NoError(t, err)
	require.Equal(t, 3, g.Share)
}

// TestAVersionGapIsRefused: a version table that lost the row of an old
// migration (deleted by hand) while newer ones stay recorded. goose would
// refuse to go up with its own words, and would roll down past the gap,
// leaving what the old migration made in a schema the table says is
// older. Up, Reset and DownTo to or past the gap (goose stops at the
// version below a missing one, leaving what it made) now refuse with
// ErrVersionGap, changing nothing; a rollback that stops above the gap
// runs. The rows
// the error gives, at the ids the deleted ones left free (goose rolls
// back in the order of the ids), restore the table: a rollback past them
// then runs in order.
func TestAVersionGapIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := emptyPool(t)
	require.NoError(t, migrations.Up(ctx, pool))
	var id3, id5 int
	require.NoError(t, pool.QueryRow(ctx, fmt.Sprintf(`SELECT
	    (SELECT id FROM %[1]s WHERE version_id = 3), (SELECT id FROM %[1]s WHERE version_id = 5)`, migrations.VersionTable)).Scan(&id3, &id5))
	_, err := pool.Exec(ctx, fmt.Sprintf(`DELETE FROM %s WHERE version_id IN (3, 5)`, migrations.VersionTable))
	require.NoError(t, err)

	want := fmt.Sprintf("%05d is applied, and not 00003, 00005 (a row deleted by hand?)", coord.SchemaVersion)
	var schema string
	require.NoError(t, pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema))
	fix := fmt.Sprintf("INSERT INTO %s (id, version_id, is_applied) VALUES (%d, 3, true), (%d, 5, true)",
		pgx.Identifier{schema, migrations.VersionTable}.Sanitize(), id3, id5)
	err = migrations.Up(ctx, pool)
	require.ErrorIs(t, err, migrations.ErrVersionGap)
	require.ErrorContains(t, err, want)
	require.ErrorContains(t, err, fix)
	require.ErrorIs(t, migrations.CheckGap(ctx, pool, 0), migrations.ErrVersionGap)
	for _, to := range []int64{2, 3, 4, 5} {
		err = migrations.DownTo(ctx, pool, to)
		require.ErrorIs(t, err, migrations.ErrVersionGap, "down to %d", to)
		require.ErrorContains(t, err, want)
	}
	require.ErrorIs(t, migrations.Reset(ctx, pool), migrations.ErrVersionGap)
	// A rollback that stops above the gaps does not pass them.
	require.NoError(t, migrations.DownTo(ctx, pool, coord.SchemaVersion-1))
	err = migrations.Up(ctx, pool)
	require.ErrorIs(t, err, migrations.ErrVersionGap)
	require.ErrorContains(t, err, fmt.Sprintf("%05d is applied, and not 00003, 00005", coord.SchemaVersion-1))

	st, err := migrations.Status(ctx, pool)
	require.NoError(t, err)
	for _, s := range st {
		want := goose.StateApplied
		if s.Source.Version == 3 || s.Source.Version == 5 || s.Source.Version == coord.SchemaVersion {
			want = goose.StatePending
		}
		require.Equal(t, want, s.State, "version %d: nothing was applied or rolled back", s.Source.Version)
	}

	_, err = pool.Exec(ctx, fix)
	require.NoError(t, err)
	require.NoError(t, migrations.CheckGap(ctx, pool, 0))
	require.NoError(t, migrations.Up(ctx, pool))
	pending, err := migrations.HasPending(ctx, pool)
	require.NoError(t, err)
	require.False(t, pending)
	require.NoError(t, migrations.DownTo(ctx, pool, 2))
	require.NoError(t, migrations.Up(ctx, pool))
	p, err := coord.NewPostgres(pool)
	require.NoError(t, err)
	require.NoError(t, p.CheckSchema(ctx))
}
