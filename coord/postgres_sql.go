package coord

import "fmt"

// The SQL the Postgres coordinator sends. Every value is a parameter; the
// protocol itself lives in the fleetlimit.* functions of the migrations.
//
// A timed statement has two forms: the production one, whose function
// reads the database's now(), and the test one, calling the function's
// *_at twin with the injected clock's time (WithClock) as its last
// parameter; only the schema owner may call the *_at twins. In the read
// queries, a $n of type timestamptz named "now" is NULL in production.
var (
	sqlHeartbeat = timed{
		`SELECT share, l_global, epoch, generation, lease_remaining_us, status, learning, peer_inflight,
       live_nodes, stale, rpm, tpm, rpm_share, tpm_share, waiting
FROM fleetlimit.heartbeat_waiting($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18,
                                  $19, $20)`,
		`SELECT share, l_global, epoch, generation, lease_remaining_us, status, learning, peer_inflight,
       live_nodes, stale, rpm, tpm, rpm_share, tpm_share, waiting
FROM fleetlimit.heartbeat_waiting_at($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18,
                                     $19, $20, $21)`}
	sqlLeave     = timed{`SELECT fleetlimit.leave($1, $2, $3, $4, $5)`, `SELECT fleetlimit.leave_at($1, $2, $3, $4, $5, $6)`}
	sqlDrain     = timed{`SELECT fleetlimit.drain($1, $2)`, `SELECT fleetlimit.drain_at($1, $2, $3)`}
	sqlUndrain   = timed{`SELECT fleetlimit.undrain($1, $2)`, `SELECT fleetlimit.undrain_at($1, $2, $3)`}
	sqlEvict     = timed{`SELECT fleetlimit.evict($1, $2)`, `SELECT fleetlimit.evict_at($1, $2, $3)`}
	sqlRelearn   = timed{`SELECT fleetlimit.relearn($1)`, `SELECT fleetlimit.relearn_at($1, $2)`}
	sqlCreateKey = timed{`SELECT fleetlimit.create_key($1, $2, $3)`, `SELECT fleetlimit.create_key_at($1, $2, $3, $4)`}
	sqlDeleteKey = timed{`SELECT fleetlimit.delete_key($1, $2)`, `SELECT fleetlimit.delete_key_at($1, $2, $3)`}
)

// timed is a statement in its production and test forms.
type timed struct{ prod, test string }

const (
	sqlSetLimits    = `SELECT fleetlimit.set_limits($1, $2, $3)`
	sqlUpdateLimits = `SELECT min_limit, max_limit FROM fleetlimit.update_limits($1, $2, $3, $4, $5)`
	sqlSetAggr      = `SELECT fleetlimit.set_aggregate($1, $2)`
	sqlSetRates     = `SELECT rpm_limit, tpm_limit FROM fleetlimit.set_rates($1, $2, $3, $4, $5)`
	sqlSchemaVer    = `SELECT fleetlimit.schema_version()`

	// $1: now. %s: the relation of the keys not checked since the
	// database lost state (see sqlKeys and sqlKeysUnknown).
	sqlKeysFrom = `WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now)
SELECT k.key, k.l_global, k.min_limit, k.max_limit, k.aggregate, k.epoch, k.generation, k.learning_until,
       coalesce(k.learning_until > t.now, false), k.created_at,
       (SELECT coalesce(array_agg(d.node_id ORDER BY d.node_id COLLATE "C"), '{}')
          FROM fleetlimit.drains AS d WHERE d.key = k.key),
       (SELECT count(*) FROM fleetlimit.evictions AS e WHERE e.key = k.key),
       count(n.node_id) FILTER (WHERE n.lease_expires_at > t.now AND NOT (n.evicted OR n.departed)),
       coalesce(sum(n.share) FILTER (WHERE n.lease_expires_at > t.now AND NOT (n.evicted OR n.departed)), 0),
       coalesce(sum(n.inflight) FILTER (WHERE n.lease_expires_at > t.now AND NOT (n.evicted OR n.departed)), 0),
       count(n.node_id) FILTER (WHERE NOT (n.lease_expires_at > t.now AND NOT (n.evicted OR n.departed))
                                  AND (n.hold_until > t.now AND greatest(n.unacked_high, n.share, n.inflight) > 0
                                       OR n.lease_expires_at > t.now AND NOT n.departed
                                          AND greatest(n.rpm_high, n.rpm_share, n.tpm_high, n.tpm_share) > 0)),
       coalesce(sum(greatest(n.unacked_high, n.share, n.inflight))
                FILTER (WHERE n.hold_until > t.now
                          AND NOT (n.lease_expires_at > t.now AND NOT (n.evicted OR n.departed))), 0),
       k.rpm_limit, k.tpm_limit, k.rpm, k.tpm,
       coalesce(sum(n.rpm_share) FILTER (WHERE n.lease_expires_at > t.now AND NOT (n.evicted OR n.departed)), 0),
       coalesce(sum(n.tpm_share) FILTER (WHERE n.lease_expires_at > t.now AND NOT (n.evicted OR n.departed)), 0),
       coalesce(sum(n.rpm_used) FILTER (WHERE n.lease_expires_at > t.now AND NOT (n.evicted OR n.departed)), 0),
       coalesce(sum(n.tpm_used) FILTER (WHERE n.lease_expires_at > t.now AND NOT (n.evicted OR n.departed)), 0),
       u.key IS NOT NULL
  FROM t CROSS JOIN fleetlimit.keys AS k
  LEFT JOIN %s AS u ON u.key = k.key
  LEFT JOIN fleetlimit.nodes AS n ON n.key = k.key
 GROUP BY k.key, t.now, u.key
 ORDER BY k.key COLLATE "C"`

	// $1: key, $2: now.
	sqlNodes = `SELECT coalesce($2::timestamptz, now()), n.node_id, n.instance, n.seq, n.l_local, n.inflight,
       n.demand, n.share, n.epoch, n.granted_gen, n.applied_gen, n.unacked_high, n.lease_expires_at,
       n.hold_until, n.draining, n.evicted, n.departed, n.joined_at, n.heartbeat_at, n.labels, n.measuring,
       n.rpm_local, n.tpm_local, n.rpm_demand, n.tpm_demand, n.rpm_share, n.tpm_share, n.rpm_high, n.tpm_high,
       n.rpm_used, n.tpm_used
  FROM fleetlimit.nodes AS n
 WHERE n.key = $1
 ORDER BY n.node_id COLLATE "C", n.instance COLLATE "C"`

	sqlKeyExists = `SELECT EXISTS (SELECT 1 FROM fleetlimit.keys WHERE key = $1)`
)

var (
	// sqlKeys lists the keys, each with whether it is unchecked
	// (fleetlimit.unchecked_keys, from schema version 14 on); the test form
	// passes the test clock's now.
	sqlKeys = timed{
		prod: fmt.Sprintf(sqlKeysFrom, "fleetlimit.unchecked_keys()"),
		test: fmt.Sprintf(sqlKeysFrom, "fleetlimit.unchecked_keys_at($1::timestamptz)"),
	}
	// sqlChecksKeys tells whether the session may run sqlKeys's function:
	// false on a schema without it, or for a role without EXECUTE on it.
	sqlChecksKeys = timed{
		prod: `SELECT coalesce(has_function_privilege(to_regprocedure('fleetlimit.unchecked_keys()'), 'EXECUTE'), false)`,
		test: `SELECT coalesce(has_function_privilege(to_regprocedure('fleetlimit.unchecked_keys_at(timestamptz)'), 'EXECUTE'), false)`,
	}
	// sqlKeysUnknown lists them where that cannot be told (an older schema,
	// a role that may not run unchecked_keys): none is unchecked.
	sqlKeysUnknown = fmt.Sprintf(sqlKeysFrom, "(SELECT NULL::text AS key WHERE false)")
)
