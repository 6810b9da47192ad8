package coordtest

import (
	"context"
	"net/url"
	"strings"
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

// The heartbeat a version-7 node calls (the one that carries usage), and
// the one that counts the members waiting (version 8).
const (
	v7HeartbeatRates = `fleetlimit.heartbeat_rates(text, text, text, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint, ` +
		`jsonb, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint)`
	v8HeartbeatWaiting = `fleetlimit.heartbeat_waiting(text, text, text, bigint, bigint, bigint, bigint, bigint, bigint, bigint, ` +
		`bigint, jsonb, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint)`
)

// TestNodeRoleSurvivesUpgrade: a role that could heartbeat at schema
// version 5 or 7 — given a node's rights by grant_role, by hand with
// heartbeat_rates only, through PUBLIC, or under a name that needs
// quoting — still heartbeats through coord.Postgres, with rates, usage
// and the members waiting, once the schema is migrated to the newest
// version (and after a down to that version and up again), and can still
// call the heartbeat_rates a node of version 7 calls during a rolling
// upgrade. An operator role granted at the same version gets no
// heartbeat (unless PUBLIC has one).
func TestNodeRoleSurvivesUpgrade(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, role string
		from       int64                   // the version the grants are made at
		grants     func(q string) []string // q: the role's quoted name
		public     bool                    // the grants open the heartbeats to PUBLIC
		downUp     bool
	}{
		{name: "grant_role at 5", role: "fl_v5_node", from: 5, grants: func(string) []string {
			return []string{`SELECT fleetlimit.grant_role('fl_v5_node', 'node')`}
		}},
		{name: "heartbeat_rates only at 5", role: "fl_v5_rates_only", from: 5, grants: func(q string) []string {
			return []string{"GRANT USAGE ON SCHEMA fleetlimit TO " + q,
				"GRANT EXECUTE ON FUNCTION " + v5Others + ", " + v5HeartbeatRates + " TO " + q}
		}},
		{name: "PUBLIC at 5", role: "fl_v5_public", from: 5, public: true, grants: func(string) []string {
			return []string{"GRANT USAGE ON SCHEMA fleetlimit TO PUBLIC",
				"GRANT EXECUTE ON FUNCTION " + v5Others + ", " + v5Heartbeat + ", " + v5HeartbeatRates + " TO PUBLIC"}
		}},
		{name: "quoted name at 5", role: `Fl Node-"x"`, from: 5, downUp: true, grants: func(string) []string {
			return []string{`SELECT fleetlimit.grant_role('Fl Node-"x"', 'node')`}
		}},
		{name: "grant_role at 7", role: "fl_v7_node", from: 7, downUp: true, grants: func(string) []string {
			return []string{`SELECT fleetlimit.grant_role('fl_v7_node', 'node')`}
		}},
		{name: "heartbeat_rates only at 7", role: "fl_v7_rates_only", from: 7, downUp: true, grants: func(q string) []string {
			return []string{"GRANT USAGE ON SCHEMA fleetlimit TO " + q,
				"GRANT EXECUTE ON FUNCTION " + v5Others + ", " + v7HeartbeatRates + " TO " + q}
		}},
		{name: "PUBLIC at 7", role: "fl_v7_public", from: 7, public: true, downUp: true, grants: func(string) []string {
			return []string{"GRANT USAGE ON SCHEMA fleetlimit TO PUBLIC",
				"GRANT EXECUTE ON FUNCTION " + v5Others + ", " + v7HeartbeatRates + " TO PUBLIC"}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dsn := fleettest.EmptyDSN(t)
			admin := connectAs(t, dsn)
			require.NoError(t, migrations.Up(ctx, admin))
			require.NoError(t, migrations.DownTo(ctx, admin, c.from))
			nodeDSN := loginRole(t, admin, dsn, c.role, c.grants(pgx.Identifier{c.role}.Sanitize()))
			opRole := c.role + " op"
			loginRole(t, admin, dsn, opRole, []string{"SELECT fleetlimit.grant_role(" + quoteLiteral(opRole) + ", 'operator')"})
			require.NoError(t, migrations.Up(ctx, admin))
			if c.downUp {
				require.NoError(t, migrations.DownTo(ctx, admin, c.from))
				require.NoError(t, migrations.Up(ctx, admin))
			}

			node, err := coord.NewPostgres(connectAs(t, nodeDSN))
			require.NoError(t, err)
			require.NoError(t, node.CheckSchema(ctx))
			_, err = node.Heartbeat(ctx, coord.Report{Key: "k", NodeID: "a", Instance: "a-1", Seq: 1, LLocal: 8,
				Demand: 1, LeaseTTL: time.Minute, RateDemand: coord.Rates{Requests: 60},
				RateUsed: coord.Rates{Requests: 42, Tokens: 7}})
			require.NoError(t, err, "a role that could heartbeat at version %d cannot after the upgrade", c.from)
			owner, err := coord.NewPostgres(admin)
			require.NoError(t, err)
			nodes, err := owner.Nodes(ctx, "k")
			require.NoError(t, err)
			require.Len(t, nodes, 1)
			require.Equal(t, coord.Rates{Requests: 42, Tokens: 7}, nodes[0].RateUsed)

			// b waits behind a, which holds the whole of L_global 1.
			one := 1
			require.NoError(t, owner.SetLimits(ctx, "k", nil, &one))
			_, err = node.Heartbeat(ctx, coord.Report{Key: "k", NodeID: "a", Instance: "a-1", Seq: 2, LLocal: 8,
				Demand: 1, LeaseTTL: time.Minute})
			require.NoError(t, err)
			g, err := node.Heartbeat(ctx, coord.Report{Key: "k", NodeID: "b", Instance: "b-1", Seq: 1, LLocal: 8,
				Demand: 1, LeaseTTL: time.Minute})
			require.NoError(t, err)
			require.Equal(t, 0, g.Share)
			g, err = node.Heartbeat(ctx, coord.Report{Key: "k", NodeID: "a", Instance: "a-1", Seq: 3, LLocal: 8,
				Demand: 1, LeaseTTL: time.Minute})
			require.NoError(t, err)
			require.Equal(t, 1, g.Share)
			require.Equal(t, 1, g.Waiting)

			// A node of version 7 still heartbeats, during a rolling upgrade.
			var share int
			require.NoError(t, connectAs(t, nodeDSN).QueryRow(ctx, `SELECT share FROM fleetlimit.heartbeat_rates(
				'k', 'a', 'a-1', 4, 8, 0, 1, 0, 0, 60000000, 0, '{}', 0, 0, 0, 0, 0, 0, 0, 0)`).Scan(&share))
			require.Equal(t, 1, share)

			var opWaits bool
			require.NoError(t, admin.QueryRow(ctx, `SELECT has_function_privilege($1, $2, 'EXECUTE')`,
				opRole, v8HeartbeatWaiting).Scan(&opWaits))
			require.Equal(t, c.public, opWaits, "the operator may heartbeat_waiting only through PUBLIC")
		})
	}
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

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
