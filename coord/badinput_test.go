package coord_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/fleettest"
)

// snapshot returns every row of the fleetlimit tables as text.
func snapshot(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var keys, nodes, drains, evictions string
	err := pool.QueryRow(context.Background(), `SELECT
	    (SELECT coalesce(json_agg(k ORDER BY k.key COLLATE "C"), '[]')::text FROM fleetlimit.keys AS k),
	    (SELECT coalesce(json_agg(n ORDER BY n.key COLLATE "C", n.node_id COLLATE "C", n.instance COLLATE "C"), '[]')::text FROM fleetlimit.nodes AS n),
	    (SELECT coalesce(json_agg(d ORDER BY d.key COLLATE "C", d.node_id COLLATE "C"), '[]')::text FROM fleetlimit.drains AS d),
	    (SELECT coalesce(json_agg(e ORDER BY e.key COLLATE "C", e.node_id COLLATE "C", e.instance COLLATE "C"), '[]')::text FROM fleetlimit.evictions AS e)`,
	).Scan(&keys, &nodes, &drains, &evictions)
	require.NoError(t, err)
	return keys + "\n" + nodes + "\n" + drains + "\n" + evictions
}

func sqlstate(err error) string {
	if pgErr, ok := err.(*pgconn.PgError); ok {
		return pgErr.Code
	}
	return ""
}

func TestBadInputLeavesTablesUnchanged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := fleettest.Pool(t)
	p := newPostgres(t, pool)
	raw := newPostgres(t, pool)
	coord.SetSkipValidation(raw, true)

	// Some state to protect, on leases that outlast the test however
	// slow the machine: an expired lease would let another instance in.
	for _, id := range []string{"a", "b"} {
		r := rep(id, 1, 8, 1, 2, 0)
		r.LeaseTTL = 10 * time.Minute
		_, err := p.Heartbeat(ctx, r)
		require.NoError(t, err)
	}
	before := snapshot(t, pool)

	long := strings.Repeat("x", 10<<10)
	for _, tc := range []struct {
		name   string
		mutate func(r *coord.Report)
	}{
		{"empty key", func(r *coord.Report) { r.Key = "" }},
		{"empty node id", func(r *coord.Report) { r.NodeID = "" }},
		{"10 KB node id", func(r *coord.Report) { r.NodeID = long }},
		{"10 KB instance", func(r *coord.Report) { r.Instance = long }},
		{"NUL byte in key", func(r *coord.Report) { r.Key = "k\x00" }},
		{"invalid UTF-8 node id", func(r *coord.Report) { r.NodeID = "\xc3\x28" }},
		{"negative seq", func(r *coord.Report) { r.Seq = -1 }},
		{"l_local 0", func(r *coord.Report) { r.LLocal = 0 }},
		{"l_local MaxInt64", func(r *coord.Report) { r.LLocal = 1<<63 - 1 }},
		{"inflight MinInt64", func(r *coord.Report) { r.Inflight = -1 << 63 }},
		{"demand over max", func(r *coord.Report) { r.Demand = coord.MaxCount + 1 }},
		{"negative applied gen", func(r *coord.Report) { r.AppliedGen = -1 }},
		{"zero lease", func(r *coord.Report) { r.LeaseTTL = 0 }},
		{"NUL in label", func(r *coord.Report) { r.Labels = map[string]string{"a": "\x00"} }},
		{"10 KB label", func(r *coord.Report) { r.Labels = map[string]string{"a": long} }},
	} {
		r := rep("a", 99, 8, 1, 2, 0)
		tc.mutate(&r)
		for _, impl := range []*coord.Postgres{p, raw} {
			_, err := impl.Heartbeat(ctx, r)
			require.ErrorIs(t, err, coord.ErrInvalidReport, "%s (validated in Go: %v)", tc.name, !coord.SkipsValidation(impl))
			require.LessOrEqual(t, len(err.Error()), 300, "%s: the error must not echo the whole value", tc.name)
		}
		require.Equal(t, before, snapshot(t, pool), tc.name)
	}

	// Raw SQL callers meet the same checks in the function…
	for _, tc := range []struct {
		name, sql, state string
		args             []any
	}{
		{"function: l_local overflow", `SELECT * FROM fleetlimit.heartbeat('k', 'a', 'a-1', 99, 9223372036854775807, 0, 0, 0, 0, 2000000, 0)`, "FL001", nil},
		{"function: negative inflight", `SELECT * FROM fleetlimit.heartbeat('k', 'a', 'a-1', 99, 4, -1, 0, 0, 0, 2000000, 0)`, "FL001", nil},
		{"function: null key", `SELECT * FROM fleetlimit.heartbeat(NULL, 'a', 'a-1', 99, 4, 0, 0, 0, 0, 2000000, 0)`, "FL001", nil},
		{"function: null seq", `SELECT * FROM fleetlimit.heartbeat('k', 'a', 'a-1', NULL, 4, 0, 0, 0, 0, 2000000, 0)`, "FL001", nil},
		{"function: long node id", `SELECT * FROM fleetlimit.heartbeat('k', $1, 'a-1', 99, 4, 0, 0, 0, 0, 2000000, 0)`, "FL001", []any{long}},
		{"function: 2-hour lease", `SELECT * FROM fleetlimit.heartbeat('k', 'a', 'a-1', 99, 4, 0, 0, 0, 0, 7200000000, 0)`, "FL001", nil},
		{"function: labels array", `SELECT * FROM fleetlimit.heartbeat('k', 'a', 'a-1', 99, 4, 0, 0, 0, 0, 2000000, 0, '[1]')`, "FL001", nil},
		{"function: label number", `SELECT * FROM fleetlimit.heartbeat('k', 'a', 'a-1', 99, 4, 0, 0, 0, 0, 2000000, 0, '{"a": 1}')`, "FL001", nil},
		{"function: other instance", `SELECT * FROM fleetlimit.heartbeat('k', 'a', 'intruder', 99, 4, 0, 0, 0, 0, 2000000, 0)`, "FL002", nil},
		{"function: min limit 0", `SELECT fleetlimit.set_limits('k', 0, NULL)`, "FL005", nil},
		{"function: max below min", `SELECT fleetlimit.set_limits('k', 5, 4)`, "FL005", nil},
		{"function: unknown aggregate", `SELECT fleetlimit.set_aggregate('k', 'sum')`, "FL005", nil},
		{"function: unknown key", `SELECT fleetlimit.drain('nope', 'a')`, "FL003", nil},
		{"function: unknown node", `SELECT fleetlimit.evict('k', 'nope')`, "FL004", nil},
		{"function: negative epoch", `SELECT * FROM fleetlimit.heartbeat('k', 'a', 'a-1', 99, 4, 0, 0, -1, 0, 2000000, 0)`, "FL001", nil},
		{"function: 2-day request bound", `SELECT * FROM fleetlimit.heartbeat('k', 'a', 'a-1', 99, 4, 0, 0, 0, 0, 2000000, 172800000000)`, "FL001", nil},
		{"function: leave with negative in-flight", `SELECT fleetlimit.leave('k', 'a', 'a-1', -1, 0)`, "FL001", nil},
		{"function: leave of another instance", `SELECT fleetlimit.leave('k', 'a', 'intruder', 0, 0)`, "FL004", nil},
		{"table: departed with a share", `UPDATE fleetlimit.nodes SET departed = true WHERE share > 0`, "23514", nil},
		{"table: hold before the lease end", `UPDATE fleetlimit.nodes SET hold_until = lease_expires_at - interval '1 second'`, "23514", nil},
		// …and the tables' CHECK constraints stop writes that bypass it.
		{"table: l_local 0", `UPDATE fleetlimit.nodes SET l_local = 0`, "23514", nil},
		{"table: inflight over max", `UPDATE fleetlimit.nodes SET inflight = 2000000`, "23514", nil},
		{"table: share above unacked_high", `UPDATE fleetlimit.nodes SET share = unacked_high + 1`, "23514", nil},
		{"table: draining with a share", `UPDATE fleetlimit.nodes SET draining = true WHERE share > 0`, "23514", nil},
		{"table: empty node id", `UPDATE fleetlimit.nodes SET node_id = ''`, "23514", nil},
		{"table: labels not an object", `UPDATE fleetlimit.nodes SET labels = '"x"'`, "23514", nil},
		{"table: min above max", `UPDATE fleetlimit.keys SET min_limit = 5, max_limit = 4`, "23514", nil},
		{"table: negative generation", `UPDATE fleetlimit.keys SET generation = -1`, "23514", nil},
		{"table: epoch 0", `UPDATE fleetlimit.keys SET epoch = 0`, "23514", nil},
		{"table: 201-byte key", `INSERT INTO fleetlimit.keys (key) VALUES (repeat('é', 101))`, "23514", nil},
		{"table: l_local overflow", `UPDATE fleetlimit.nodes SET l_local = 9223372036854775807`, "22003", nil},
	} {
		_, err := pool.Exec(ctx, tc.sql, tc.args...)
		require.Error(t, err, tc.name)
		require.Equal(t, tc.state, sqlstate(err), "%s: %v", tc.name, err)
		require.Equal(t, before, snapshot(t, pool), tc.name)
	}

	// Operator calls with bad values fail cleanly too.
	zero, five, four := 0, 5, 4
	require.ErrorIs(t, p.SetLimits(ctx, "k", &zero, nil), coord.ErrInvalidOverride)
	require.ErrorIs(t, p.SetLimits(ctx, "k", &five, &four), coord.ErrInvalidOverride)
	require.ErrorIs(t, p.SetAggregate(ctx, "k", "sum"), coord.ErrInvalidOverride)
	require.ErrorIs(t, p.Drain(ctx, "k\x00", "a"), coord.ErrUnknownKey)
	require.ErrorIs(t, p.Evict(ctx, "k", long), coord.ErrUnknownNode)
	require.ErrorIs(t, p.Leave(ctx, coord.Departure{Key: "k", NodeID: "a", Instance: "\xff"}), coord.ErrInvalidReport)
	require.ErrorIs(t, raw.Leave(ctx, coord.Departure{Key: "k", NodeID: "a", Instance: "a-1", Inflight: -5}), coord.ErrInvalidReport)
	require.ErrorIs(t, p.Leave(ctx, coord.Departure{Key: "k", NodeID: "a", Instance: "a-1", Hold: -time.Second}), coord.ErrInvalidReport)
	_, err := p.Nodes(ctx, "")
	require.ErrorIs(t, err, coord.ErrUnknownKey)
	require.Equal(t, before, snapshot(t, pool))
}

// TestMetacharactersAreData uses keys, node ids and labels full of SQL
// syntax; they must be stored and returned as given.
func TestMetacharactersAreData(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := fleettest.Pool(t)
	p := newPostgres(t, pool)
	names := []string{
		`'; DROP TABLE fleetlimit.nodes; --`,
		`" OR 1=1; --`,
		`\'; SELECT pg_sleep(10); --`,
		`$1 $$ $body$ %s %d ?`,
		`ключ 🔑 ü ß 中文`,
		`a'b"c\d`,
	}
	for i, name := range names {
		r := rep("x", 1, 4, 0, 1, 0)
		r.Key, r.NodeID, r.Instance = name, name, name
		r.Labels = map[string]string{name: name}
		g, err := p.Heartbeat(ctx, r)
		require.NoError(t, err, name)
		require.Equal(t, 4, g.Share, name)

		nodes, err := p.Nodes(ctx, name)
		require.NoError(t, err, name)
		require.Len(t, nodes, 1)
		require.Equal(t, name, nodes[0].NodeID)
		require.Equal(t, name, nodes[0].Instance)
		require.Equal(t, map[string]string{name: name}, nodes[0].Labels)
		require.NoError(t, p.Drain(ctx, name, name))
		require.NoError(t, p.Evict(ctx, name, name))
		four := 4
		require.NoError(t, p.SetLimits(ctx, name, nil, &four))

		keys, err := p.Keys(ctx)
		require.NoError(t, err)
		require.Len(t, keys, i+1)
	}
	var tables int
	require.NoError(t, pool.QueryRow(ctx,
		`SELECT count(*) FROM pg_tables WHERE schemaname = 'fleetlimit'`).Scan(&tables))
	require.Equal(t, 5, tables, "keys, nodes, drains, evictions, database_state")
	for _, name := range names {
		require.NoError(t, p.Leave(ctx, coord.Departure{Key: name, NodeID: name, Instance: name}))
	}
}

func TestValidName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"api", true},
		{"é", true},
		{strings.Repeat("a", coord.MaxNameBytes), true},
		{"", false},
		{strings.Repeat("a", coord.MaxNameBytes+1), false},
		{"a\x00b", false},
		{"\xff", false},
	} {
		if got := coord.ValidName(tc.name); got != tc.want {
			t.Errorf("ValidName(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestLabelCheckNamesTheLabel: a raw SQL caller whose label value is not
// a short string was told "label : want a string…", the label's name
// lost (the check quoted the bad name, which was null); Go's own check,
// which Heartbeat runs first, names it.
func TestLabelCheckNamesTheLabel(t *testing.T) {
	t.Parallel()
	pool := fleettest.Pool(t)
	_, err := pool.Exec(context.Background(),
		`SELECT * FROM fleetlimit.heartbeat('k', 'a', 'a-1', 1, 4, 0, 0, 0, 0, 2000000, 0, '{"tier": 1}')`)
	require.Equal(t, "FL001", sqlstate(err), "%v", err)
	require.ErrorContains(t, err, `label 'tier': want a string of at most 200 bytes`)
}
