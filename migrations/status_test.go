package migrations_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/fleettest"
	"github.com/fleetlimit/fleetlimit/migrations"
)

// TestVersionTablesAreListedOnce: a look at a version table that records
// nothing while the fleetlimit schema exists lists the database's version
// tables once, whether the table is the only one (its rows deleted by
// hand: the mismatch, with the INSERT) or another records the migrations
// (ErrSchemaUnrecorded, naming its schema).
func TestVersionTablesAreListedOnce(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, sql string
		is        error
		says      string
	}{
		{"only", `DELETE FROM fleetlimit_schema_version WHERE version_id > 0`,
			migrations.ErrVersionMismatch, "it is the only version table"},
		{"another", `CREATE SCHEMA "Mig Own";
		             CREATE TABLE "Mig Own".fleetlimit_schema_version AS SELECT * FROM fleetlimit_schema_version;
		             DELETE FROM fleetlimit_schema_version WHERE version_id > 0`,
			migrations.ErrSchemaUnrecorded, `schemas holding a fleetlimit_schema_version: "Mig Own", public`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pool := openAs(t, fleettest.DSN(t), "")
			_, err := pool.Exec(t.Context(), tt.sql)
			require.NoError(t, err)
			q := &countingQuerier{Querier: pool}
			_, err = migrations.ReadApplied(t.Context(), q)
			require.ErrorIs(t, err, tt.is)
			require.ErrorContains(t, err, tt.says)
			require.Equal(t, 1, q.lists, "the version tables are listed once")
		})
	}
}

// countingQuerier counts the queries that list the version tables: those
// that take the table's name.
type countingQuerier struct {
	migrations.Querier
	lists int
}

func (q *countingQuerier) count(args []any) {
	if len(args) > 0 && args[0] == migrations.VersionTable {
		q.lists++
	}
}

func (q *countingQuerier) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	q.count(args)
	return q.Querier.Query(ctx, sql, args...)
}

func (q *countingQuerier) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	q.count(args)
	return q.Querier.QueryRow(ctx, sql, args...)
}
