package coordtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/fleet"
	"github.com/fleetlimit/fleetlimit/fleettest"
)

// roleDSN creates a login role with kind's rights ("node", "operator", or
// "" for none) on the database of dsn and returns a DSN that connects as
// it. The role is dropped at cleanup.
func roleDSN(t *testing.T, admin *pgxpool.Pool, dsn, kind string) string {
	t.Helper()
	ctx := context.Background()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "fl_" + kind + "_" + hex.EncodeToString(b)
	password := hex.EncodeToString(b) + "pw"
	_, err := admin.Exec(ctx, "CREATE ROLE "+pgx.Identifier{name}.Sanitize()+" LOGIN PASSWORD '"+password+"'")
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = admin.Exec(ctx, "DROP OWNED BY "+pgx.Identifier{name}.Sanitize())
		_, _ = admin.Exec(ctx, "DROP ROLE "+pgx.Identifier{name}.Sanitize())
	})
	if kind != "" {
		_, err = admin.Exec(ctx, `SELECT fleetlimit.grant_role($1, $2)`, name, kind)
		require.NoError(t, err)
	}
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	u.User = url.UserPassword(name, password)
	return u.String()
}

func connectAs(t *testing.T, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// denied requires err to be Postgres's "permission denied".
func denied(t *testing.T, err error, what string) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "%s: want permission denied, got %v", what, err)
	require.Equal(t, "42501", pgErr.Code, "%s: %v", what, err)
}

// TestCreateKeyWithRatesIsOneStep: a key created with rates is written
// with them in one transaction. The rates were a second statement: an
// operator role that may create keys but not set rates (its rights half
// given back after a rollback, say) created the key and failed, and the
// key stayed without its rates, for nodes to join uncapped.
func TestCreateKeyWithRatesIsOneStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := fleettest.DSN(t)
	admin := connectAs(t, dsn)
	opDSN := roleDSN(t, admin, dsn, "operator")
	u, err := url.Parse(opDSN)
	require.NoError(t, err)
	op, err := coord.NewPostgres(connectAs(t, opDSN))
	require.NoError(t, err)

	rates := coord.Rates{Requests: 600, Tokens: 90000}
	require.NoError(t, op.CreateKey(ctx, "with-rates", nil, new(7), coord.WithRates(rates)))
	keys, err := op.Keys(ctx)
	require.NoError(t, err)
	require.Len(t, keys, 1)
	require.Equal(t, rates, keys[0].RateLimit)
	require.Equal(t, 7, *keys[0].MaxLimit)

	_, err = admin.Exec(ctx, "REVOKE EXECUTE ON FUNCTION fleetlimit.set_rates(text, boolean, bigint, boolean, bigint) FROM "+
		pgx.Identifier{u.User.Username()}.Sanitize())
	require.NoError(t, err)
	err = op.CreateKey(ctx, "half", nil, new(7), coord.WithRates(rates))
	require.ErrorIs(t, err, coord.ErrPermission)
	require.ErrorContains(t, err, "coord: create key:")
	keys, err = op.Keys(ctx)
	require.NoError(t, err)
	require.Len(t, keys, 1, "no key was created")
	require.NoError(t, op.CreateKey(ctx, "plain", nil, nil), "a key without rates needs no right on set_rates")

	err = op.CreateKey(ctx, "bad", nil, nil, coord.WithRates(coord.Rates{Requests: -1}))
	require.ErrorIs(t, err, coord.ErrInvalidOverride)
	require.ErrorContains(t, err, "rpm = -1")
}

// TestRoles: a node role may heartbeat and leave and nothing else; an
// operator role may read the tables and do the operator's verbs but not
// heartbeat, write the tables or pass a clock; a role without a grant may
// do nothing; nobody but the owner reaches the test clock.
func TestRoles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := fleettest.DSN(t)
	admin := connectAs(t, dsn)
	nodeDB := connectAs(t, roleDSN(t, admin, dsn, "node"))
	opDB := connectAs(t, roleDSN(t, admin, dsn, "operator"))
	noneDB := connectAs(t, roleDSN(t, admin, dsn, ""))

	// The node's verbs.
	node, err := coord.NewPostgres(nodeDB)
	require.NoError(t, err)
	require.NoError(t, node.CheckSchema(ctx))
	g, err := node.Heartbeat(ctx, coord.Report{Key: "k", NodeID: "a", Instance: "a-1", Seq: 1, LLocal: 8, Demand: 1,
		LeaseTTL: time.Minute})
	require.NoError(t, err)
	require.Equal(t, 8, g.Share)
	_, err = node.Heartbeat(ctx, coord.Report{Key: "k", NodeID: "b", Instance: "b-1", Seq: 1, LLocal: 8, Demand: 1,
		LeaseTTL: time.Minute})
	require.NoError(t, err)
	require.NoError(t, node.Leave(ctx, coord.Departure{Key: "k", NodeID: "b", Instance: "b-1"}))

	// Everything else is refused to the node, the test clock included.
	later := time.Now().Add(time.Hour)
	for what, sql := range map[string]string{
		"update nodes":      `UPDATE fleetlimit.nodes SET share = 100`,
		"update keys":       `UPDATE fleetlimit.keys SET max_limit = 1`,
		"read nodes":        `SELECT * FROM fleetlimit.nodes`,
		"drain":             `SELECT fleetlimit.drain('k', 'a')`,
		"evict":             `SELECT fleetlimit.evict('k', 'a')`,
		"set limits":        `SELECT fleetlimit.set_limits('k', 1, 2)`,
		"update limits":     `SELECT * FROM fleetlimit.update_limits('k', true, 1, false, NULL)`,
		"delete key":        `SELECT fleetlimit.delete_key('k', true)`,
		"time travel":       `SELECT * FROM fleetlimit.heartbeat_at('k', 'c', 'c-1', 1, 8, 0, 1, 0, 0, 60000000, 0, '{}', $1)`,
		"leave at":          `SELECT fleetlimit.leave_at('k', 'a', 'a-1', 0, 0, $1)`,
		"waiting at":        `SELECT * FROM fleetlimit.heartbeat_waiting_at('k', 'c', 'c-1', 1, 8, 0, 1, 0, 0, 60000000, 0, '{}', 0, 0, 0, 0, 0, 0, 0, 0, $1)`,
		"the core function": `SELECT fleetlimit.set_flags('k', 'a', true, NULL, $1)`,
		"unchecked keys":    `SELECT * FROM fleetlimit.unchecked_keys()`,
	} {
		args := []any{}
		if len(sql) > 0 && containsParam(sql) {
			args = append(args, later)
		}
		_, err := nodeDB.Exec(ctx, sql, args...)
		denied(t, err, "node: "+what)
	}

	// The operator's verbs.
	op, err := coord.NewPostgres(opDB)
	require.NoError(t, err)
	keys, err := op.Keys(ctx)
	require.NoError(t, err)
	require.Len(t, keys, 1)
	require.False(t, keys[0].Unchecked)
	_, err = op.Nodes(ctx, "k")
	require.NoError(t, err)
	// As after a failover: the operator sees that the key's next check
	// starts learning mode, and a drain is such a check.
	_, err = admin.Exec(ctx, `UPDATE fleetlimit.keys SET incarnation = 'before a failover' WHERE key = 'k'`)
	require.NoError(t, err)
	keys, err = op.Keys(ctx)
	require.NoError(t, err)
	require.True(t, keys[0].Unchecked)
	require.NoError(t, op.Drain(ctx, "k", "a"))
	keys, err = op.Keys(ctx)
	require.NoError(t, err)
	require.False(t, keys[0].Unchecked)
	require.True(t, keys[0].Learning)
	require.NoError(t, op.Undrain(ctx, "k", "a"))
	_, _, err = op.UpdateLimits(ctx, "k", coord.LimitsChange{SetMax: true, Max: ptr(6)})
	require.NoError(t, err)
	one := 1
	require.NoError(t, op.SetLimits(ctx, "k", &one, nil))
	require.NoError(t, op.SetAggregate(ctx, "k", coord.AggregateMin))
	_, err = op.Relearn(ctx, "k")
	require.NoError(t, err)
	require.NoError(t, op.CreateKey(ctx, "k2", nil, ptr(3)))
	require.NoError(t, op.DeleteKey(ctx, "k2", false))
	require.NoError(t, op.Evict(ctx, "k", "a"))
	for what, sql := range map[string]string{
		"heartbeat":    `SELECT * FROM fleetlimit.heartbeat('k', 'c', 'c-1', 1, 8, 0, 1, 0, 0, 60000000, 0)`,
		"waiting":      `SELECT * FROM fleetlimit.heartbeat_waiting('k', 'c', 'c-1', 1, 8, 0, 1, 0, 0, 60000000, 0, '{}', 0, 0, 0, 0, 0, 0, 0, 0)`,
		"update":       `UPDATE fleetlimit.nodes SET share = 100`,
		"delete":       `DELETE FROM fleetlimit.nodes`,
		"time travel":  `SELECT * FROM fleetlimit.heartbeat_at('k', 'c', 'c-1', 1, 8, 0, 1, 0, 0, 60000000, 0, '{}', $1)`,
		"drain at":     `SELECT fleetlimit.drain_at('k', 'a', $1)`,
		"grant":        `SELECT fleetlimit.grant_role('someone', 'operator')`,
		"unchecked at": `SELECT * FROM fleetlimit.unchecked_keys_at($1)`,
	} {
		args := []any{}
		if containsParam(sql) {
			args = append(args, later)
		}
		_, err := opDB.Exec(ctx, sql, args...)
		denied(t, err, "operator: "+what)
	}

	// A role without a grant reaches nothing.
	for what, sql := range map[string]string{
		"heartbeat":      `SELECT * FROM fleetlimit.heartbeat('k', 'c', 'c-1', 1, 8, 0, 1, 0, 0, 60000000, 0)`,
		"read keys":      `SELECT * FROM fleetlimit.keys`,
		"drain":          `SELECT fleetlimit.drain('k', 'a')`,
		"unchecked keys": `SELECT * FROM fleetlimit.unchecked_keys()`,
	} {
		_, err := noneDB.Exec(ctx, sql)
		denied(t, err, "no grant: "+what)
	}

	// Through the library, the refusal is ErrPermission, and a node that
	// cannot start says who grants what it lacks.
	none, err := coord.NewPostgres(noneDB)
	require.NoError(t, err)
	_, err = none.Heartbeat(ctx, coord.Report{Key: "k", NodeID: "c", Instance: "c-1", Seq: 1, LLocal: 8, Demand: 1, LeaseTTL: time.Minute})
	require.ErrorIs(t, err, coord.ErrPermission)
	denied(t, err, "no grant: coord heartbeat")
	n, err := fleet.New(noneDB, fleet.Config{Key: "k", NodeID: "c", Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	err = n.Start(ctx)
	require.ErrorIs(t, err, coord.ErrPermission)
	require.ErrorContains(t, err, "(the schema owner grants a node's role its rights with 'fleetctl grant node ROLE')")
	stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = n.Stop(stopCtx)
}

func containsParam(sql string) bool {
	for i := 0; i+1 < len(sql); i++ {
		if sql[i] == '$' && sql[i+1] == '1' {
			return true
		}
	}
	return false
}

func ptr(v int) *int { return &v }

// TestKeysWithReadRightsGivenByHand: a role given only USAGE and SELECT
// on the tables, by hand, still lists the keys: without EXECUTE on
// fleetlimit.unchecked_keys it cannot tell which keys a loss left
// unchecked, so every key reads as checked, while the owner's listing
// shows it.
func TestKeysWithReadRightsGivenByHand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := fleettest.DSN(t)
	admin := connectAs(t, dsn)
	readerDSN := roleDSN(t, admin, dsn, "")
	u, err := url.Parse(readerDSN)
	require.NoError(t, err)
	role := pgx.Identifier{u.User.Username()}.Sanitize()
	_, err = admin.Exec(ctx, "GRANT USAGE ON SCHEMA fleetlimit TO "+role+"; GRANT SELECT ON ALL TABLES IN SCHEMA fleetlimit TO "+role)
	require.NoError(t, err)
	owner, err := coord.NewPostgres(admin)
	require.NoError(t, err)
	_, err = owner.Heartbeat(ctx, coord.Report{Key: "k", NodeID: "a", Instance: "a-1", Seq: 1, LLocal: 8, Demand: 1,
		LeaseTTL: time.Minute})
	require.NoError(t, err)
	_, err = admin.Exec(ctx, `UPDATE fleetlimit.keys SET incarnation = 'before a failover' WHERE key = 'k'`)
	require.NoError(t, err)

	reader, err := coord.NewPostgres(connectAs(t, readerDSN))
	require.NoError(t, err)
	keys, err := reader.Keys(ctx)
	require.NoError(t, err)
	require.Len(t, keys, 1)
	require.False(t, keys[0].Unchecked, "the reader cannot tell")
	keys, err = owner.Keys(ctx)
	require.NoError(t, err)
	require.True(t, keys[0].Unchecked)
}
