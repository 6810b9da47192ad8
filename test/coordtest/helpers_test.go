package coordtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/fleettest"
)

// openPool opens a pool of up to maxConns connections on a fresh migrated
// database, closed at tb's cleanup.
func openPool(tb testing.TB, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(fleettest.DSN(tb))
	require.NoError(tb, err)
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(tb, err)
	tb.Cleanup(pool.Close)
	return pool
}

// emptyPool opens a pool on a fresh database with no schema at all,
// closed at tb's cleanup.
func emptyPool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	pool, err := pgxpool.New(context.Background(), fleettest.EmptyDSN(tb))
	require.NoError(tb, err)
	tb.Cleanup(pool.Close)
	return pool
}
