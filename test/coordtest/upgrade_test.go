package coordtest

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/fleettest"
	"github.com/fleetlimit/fleetlimit/migrations"
)

// The functions a version-5 node calls.
const (
	v5Heartbeat      = `fleetlimit.heartbeat(text, text, text, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint, jsonb)`
	v5HeartbeatRates = `fleetlimit.heartbeat_rates(text, text, text, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint, ` +
		`jsonb, bigint, bigint, bigint, bigint, bigint, bigint)`
	v5Others = `fleetlimit.schema_version(), fleetlimit.leave(text, text, text, bigint, bigint)`
)

// TestNodeRoleSurvivesUpgrade: a role that could heartbeat at schema
// version 5 — given a node's rights by grant_role, by hand with
// heartbeat_rates only, through PUBLIC, or under a name that needs
// quoting — still heartbeats, with rates and usage, once the schema is
// migrated to the newest version (and after a down and up again).
func TestNodeRoleSurvivesUpgrade(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, role string
		grants     func(q string) []string // q: the role's quoted name
		downUp     bool
	}{
		{name: "grant_role", role: "fl_v5_node", grants: func(string) []string {
			return []string{`SELECT fleetlimit.grant_role('fl_v5_node', 'node')`}
		}},
		{name: "heartbeat_rates only", role: "fl_v5_rates_only", grants: func(q string) []string {
			return []string{"GRANT USAGE ON SCHEMA fleetlimit TO " + q,
				"GRANT EXECUTE ON FUNCTION " + v5Others + ", " + v5HeartbeatRates + " TO " + q}
		}},
		{name: "PUBLIC", role: "fl_v5_public", grants: func(string) []string {
			return []string{"GRANT USAGE ON SCHEMA fleetlimit TO PUBLIC",
				"GRANT EXECUTE ON FUNCTION " + v5Others + ", " + v5Heartbeat + ", " + v5HeartbeatRates + " TO PUBLIC"}
		}},
		{name: "quoted name", role: `Fl Node-"x"`, downUp: true, grants: func(string) []string {
			return []string{`SELECT fleetlimit.grant_role('Fl Node-"x"', 'node')`}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dsn := fleettest.EmptyDSN(t)
			admin := connectAs(t, dsn)
			require.NoError(t, migrations.Up(ctx, admin))
			require.NoError(t, migrations.DownTo(ctx, admin, 5))
			nodeDSN := loginRole(t, admin, dsn, c.role, c.grants(pgx.Identifier{c.role}.Sanitize()))
			require.NoError(t, migrations.Up(ctx, admin))
			if c.downUp {
				require.NoError(t, migrations.DownTo(ctx, admin, 5))
				require.NoError(t, migrations.Up(ctx, admin))
			}

			node, err := coord.NewPostgres(connectAs(t, nodeDSN))
			require.NoError(t, err)
			require.NoError(t, node.CheckSchema(ctx))
			_, err = node.Heartbeat(ctx, coord.Report{Key: "k", NodeID: "a", Instance: "a-1", Seq: 1, LLocal: 8,
				Demand: 1, LeaseTTL: time.Minute, RateDemand: coord.Rates{Requests: 60},
				RateUsed: coord.Rates{Requests: 42, Tokens: 7}})
			require.NoError(t, err, "a role that could heartbeat at version 5 cannot after the upgrade")
			owner, err := coord.NewPostgres(admin)
			require.NoError(t, err)
			nodes, err := owner.Nodes(ctx, "k")
			require.NoError(t, err)
			require.Len(t, nodes, 1)
			require.Equal(t, coord.Rates{Requests: 42, Tokens: 7}, nodes[0].RateUsed)
		})
	}
}

// loginRole creates the login role name, runs stmts as the owner, and
// returns a DSN that connects as the role. The role is dropped at cleanup.
func loginRole(t *testing.T, admin *pgxpool.Pool, dsn, name string, stmts []string) string {
	t.Helper()
	ctx := context.Background()
	q := pgx.Identifier{name}.Sanitize()
	_, err := admin.Exec(ctx, "CREATE ROLE "+q+" LOGIN PASSWORD 'pw'")
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP OWNED BY "+q)
		_, _ = admin.Exec(context.Background(), "DROP ROLE "+q)
	})
	for _, s := range stmts {
		_, err := admin.Exec(ctx, s)
		require.NoError(t, err, s)
	}
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	u.User = url.UserPassword(name, "pw")
	return u.String()
}
