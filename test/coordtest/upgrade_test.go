package coordtest

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/fleettest"
	"github.com/fleetlimit/fleetlimit/migrations"
)

// upgradeHeartbeat sends one heartbeat with rates and usage as p.
func upgradeHeartbeat(ctx context.Context, p *coord.Postgres) error {
	_, err := p.Heartbeat(ctx, coord.Report{Key: "k", NodeID: "a", Instance: "a-1", Seq: 1, LLocal: 8, Demand: 1,
		LeaseTTL: time.Minute, RateUsed: coord.Rates{Requests: 1}})
	return err
}

// TestUpgradeRoleWithRatesOnly: a node role granted by hand exactly what
// a version-5 node calls (heartbeat_rates, leave, schema_version), without
// the 12-parameter heartbeat, keeps heartbeating after the upgrade.
func TestUpgradeRoleWithRatesOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := fleettest.EmptyDSN(t)
	admin := connectAs(t, dsn)
	require.NoError(t, migrations.Up(ctx, admin))
	require.NoError(t, migrations.DownTo(ctx, admin, 5))
	name := "fl_rates_only"
	q := pgx.Identifier{name}.Sanitize()
	for _, s := range []string{
		"CREATE ROLE " + q + " LOGIN PASSWORD 'pw'",
		"GRANT USAGE ON SCHEMA fleetlimit TO " + q,
		"GRANT EXECUTE ON FUNCTION fleetlimit.schema_version(), fleetlimit.leave(text, text, text, bigint, bigint), " +
			"fleetlimit.heartbeat_rates(text, text, text, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint, " +
			"jsonb, bigint, bigint, bigint, bigint, bigint, bigint) TO " + q,
	} {
		_, err := admin.Exec(ctx, s)
		require.NoError(t, err, s)
	}
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP OWNED BY "+q)
		_, _ = admin.Exec(context.Background(), "DROP ROLE "+q)
	})
	u, _ := url.Parse(dsn)
	u.User = url.UserPassword(name, "pw")
	node, err := coord.NewPostgres(connectAs(t, u.String()))
	require.NoError(t, err)

	require.NoError(t, migrations.Up(ctx, admin))
	require.NoError(t, node.CheckSchema(ctx))
	require.NoError(t, upgradeHeartbeat(ctx, node), "a version-5 node role cannot heartbeat after the upgrade")
}

// TestUpgradeQuotedRole: a role whose name needs quoting keeps its
// heartbeat across the upgrade, and across a down and up again.
func TestUpgradeQuotedRole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := fleettest.EmptyDSN(t)
	admin := connectAs(t, dsn)
	require.NoError(t, migrations.Up(ctx, admin))
	require.NoError(t, migrations.DownTo(ctx, admin, 5))
	name := `Fl Node-"x"`
	q := pgx.Identifier{name}.Sanitize()
	_, err := admin.Exec(ctx, "CREATE ROLE "+q+" LOGIN PASSWORD 'pw'")
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP OWNED BY "+q)
		_, _ = admin.Exec(context.Background(), "DROP ROLE "+q)
	})
	_, err = admin.Exec(ctx, `SELECT fleetlimit.grant_role($1, 'node')`, name)
	require.NoError(t, err)
	require.NoError(t, migrations.Up(ctx, admin))
	// Down and up again: the grant comes back.
	require.NoError(t, migrations.DownTo(ctx, admin, 5))
	require.NoError(t, migrations.Up(ctx, admin))
	u, _ := url.Parse(dsn)
	u.User = url.UserPassword(name, "pw")
	node, err := coord.NewPostgres(connectAs(t, u.String()))
	require.NoError(t, err)
	require.NoError(t, upgradeHeartbeat(ctx, node))
}

// TestUpgradePublic: a schema whose node functions were opened to PUBLIC
// at version 5 keeps them open to PUBLIC after the upgrade.
func TestUpgradePublic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := fleettest.EmptyDSN(t)
	admin := connectAs(t, dsn)
	require.NoError(t, migrations.Up(ctx, admin))
	require.NoError(t, migrations.DownTo(ctx, admin, 5))
	name := "fl_public_user"
	q := pgx.Identifier{name}.Sanitize()
	for _, s := range []string{
		"CREATE ROLE " + q + " LOGIN PASSWORD 'pw'",
		"GRANT USAGE ON SCHEMA fleetlimit TO PUBLIC",
		"GRANT EXECUTE ON FUNCTION fleetlimit.schema_version(), fleetlimit.leave(text, text, text, bigint, bigint), " +
			"fleetlimit.heartbeat(text, text, text, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint, jsonb), " +
			"fleetlimit.heartbeat_rates(text, text, text, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint, " +
			"jsonb, bigint, bigint, bigint, bigint, bigint, bigint) TO PUBLIC",
	} {
		_, err := admin.Exec(ctx, s)
		require.NoError(t, err, s)
	}
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP OWNED BY "+q)
		_, _ = admin.Exec(context.Background(), "DROP ROLE "+q)
	})
	u, _ := url.Parse(dsn)
	u.User = url.UserPassword(name, "pw")
	require.NoError(t, migrations.Up(ctx, admin))
	node, err := coord.NewPostgres(connectAs(t, u.String()))
	require.NoError(t, err)
	require.NoError(t, upgradeHeartbeat(ctx, node), "PUBLIC's node rights are not carried to version 6")
}
