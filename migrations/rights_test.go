package migrations_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/fleettest"
	"github.com/fleetlimit/fleetlimit/migrations"
)

func TestMain(m *testing.M) { fleettest.Main(m) }

// TestRollbackKeepsRights: rolling the schema back to any version from 4
// on (the first with roles' rights) and up again leaves a node's and an
// operator's rights as Grant gave them. A migration that drops a function
// on the way down creates it again without rights on the way up, so its
// up grants it to the roles that hold the rights it goes with.
func TestRollbackKeepsRights(t *testing.T) {
	t.Parallel()
	for v := int64(4); v < coord.SchemaVersion; v++ {
		t.Run(fmt.Sprintf("down to %d", v), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			pool := fleettest.Pool(t)
			node, operator := newRole(t, pool), newRole(t, pool)
			require.NoError(t, migrations.Grant(ctx, pool, node, "node"))
			require.NoError(t, migrations.Grant(ctx, pool, operator, "operator"))
			before := map[string][]string{"node": rights(t, pool, node), "operator": rights(t, pool, operator)}
			require.Contains(t, before["operator"], "EXECUTE fleetlimit.set_rates(text,boolean,bigint,boolean,bigint)")
			require.Contains(t, before["operator"], "EXECUTE fleetlimit.unchecked_keys()")

			require.NoError(t, migrations.DownTo(ctx, pool, v))
			require.NoError(t, migrations.Up(ctx, pool))
			after := map[string][]string{"node": rights(t, pool, node), "operator": rights(t, pool, operator)}
			require.Equal(t, before, after)
		})
	}
}

// newRole creates a login role for the test, dropped with what it was
// granted at t's cleanup.
func newRole(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	role := fmt.Sprintf("fl_rights_%d", time.Now().UnixNano())
	_, err := pool.Exec(t.Context(), "CREATE ROLE "+role+" LOGIN")
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP OWNED BY "+role)
		_, _ = pool.Exec(context.Background(), "DROP ROLE "+role)
	})
	return role
}

// rights lists what role may do in the fleetlimit schema: EXECUTE on its
// functions and the table privileges, sorted.
func rights(t *testing.T, pool *pgxpool.Pool, role string) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), `
		SELECT 'EXECUTE ' || regexp_replace(p.oid::regprocedure::text, ',\s*', ',', 'g')
		  FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
		 WHERE n.nspname = 'fleetlimit' AND has_function_privilege($1, p.oid, 'EXECUTE')
		UNION ALL
		SELECT priv || ' ' || c.oid::regclass::text
		  FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
		 CROSS JOIN unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE']) AS priv
		 WHERE n.nspname = 'fleetlimit' AND c.relkind IN ('r', 'v') AND has_table_privilege($1, c.oid, priv)
		ORDER BY 1`, role)
	require.NoError(t, err)
	list, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return list
}

// TestEveryFunctionHasAFixedSearchPath: at every version from 4 on (the
// first to fix it) every function of the schema runs with search_path
// pg_catalog, pg_temp, so an object a caller's session puts first on its
// path can stand in for none the function names. A migration that
// replaces a function (CREATE OR REPLACE resets what its command leaves
// out) must say so again, on the way up and on the way down.
func TestEveryFunctionHasAFixedSearchPath(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := fleettest.Pool(t)
	for v := int64(coord.SchemaVersion); v >= 4; v-- {
		require.NoError(t, migrations.DownTo(ctx, pool, v))
		rows, err := pool.Query(ctx, `
			SELECT p.oid::regprocedure::text FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
			 WHERE n.nspname = 'fleetlimit'
			   AND NOT coalesce('search_path=pg_catalog, pg_temp' = ANY (p.proconfig), false)
			 ORDER BY 1`)
		require.NoError(t, err)
		loose, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.Empty(t, loose, "at version %d", v)
	}
	require.NoError(t, migrations.Up(ctx, pool))
}
