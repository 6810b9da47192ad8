package coordtest

import (
	"context"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pressly/goose/v3"
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
