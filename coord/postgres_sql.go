package coord

// The SQL the Postgres coordinator sends. Every value is a parameter; the
// protocol itself lives in the fleetlimit.* functions of the migrations.
// A $n of type timestamptz named "now" is NULL in production (the database
// uses now()) and the injected clock's time in tests (WithClock).
const (
	sqlHeartbeat = `SELECT share, l_global, epoch, generation, lease_remaining_us, status, learning, peer_inflight,
       live_nodes, stale
FROM fleetlimit.heartbeat($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`

	sqlLeave     = `SELECT fleetlimit.leave($1, $2, $3, $4, $5, $6)`
	sqlDrain     = `SELECT fleetlimit.drain($1, $2, $3)`
	sqlUndrain   = `SELECT fleetlimit.undrain($1, $2, $3)`
	sqlEvict     = `SELECT fleetlimit.evict($1, $2, $3)`
	sqlSetLimits = `SELECT fleetlimit.set_limits($1, $2, $3)`
	sqlSetAggr   = `SELECT fleetlimit.set_aggregate($1, $2)`
	sqlRelearn   = `SELECT fleetlimit.relearn($1, $2)`

	// $1: now.
	sqlKeys = `WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now)
SELECT k.key, k.l_global, k.min_limit, k.max_limit, k.aggregate, k.epoch, k.generation, k.learning_until,
       coalesce(k.learning_until > t.now, false), k.created_at,
       (SELECT coalesce(array_agg(d.node_id ORDER BY d.node_id COLLATE "C"), '{}')
          FROM fleetlimit.drains AS d WHERE d.key = k.key),
       (SELECT count(*) FROM fleetlimit.evictions AS e WHERE e.key = k.key),
       count(n.node_id) FILTER (WHERE n.lease_expires_at > t.now AND NOT (n.evicted OR n.departed)),
       coalesce(sum(n.share) FILTER (WHERE n.lease_expires_at > t.now AND NOT (n.evicted OR n.departed)), 0),
       coalesce(sum(n.inflight) FILTER (WHERE n.lease_expires_at > t.now AND NOT (n.evicted OR n.departed)), 0),
       count(n.node_id) FILTER (WHERE n.hold_until > t.now
                                  AND NOT (n.lease_expires_at > t.now AND NOT (n.evicted OR n.departed))),
       coalesce(sum(greatest(n.unacked_high, n.share, n.inflight))
                FILTER (WHERE n.hold_until > t.now
                          AND NOT (n.lease_expires_at > t.now AND NOT (n.evicted OR n.departed))), 0)
  FROM t CROSS JOIN fleetlimit.keys AS k
  LEFT JOIN fleetlimit.nodes AS n ON n.key = k.key
 GROUP BY k.key, t.now
 ORDER BY k.key COLLATE "C"`

	// $1: key, $2: now.
	sqlNodes = `SELECT coalesce($2::timestamptz, now()), n.node_id, n.instance, n.seq, n.l_local, n.inflight,
       n.demand, n.share, n.epoch, n.granted_gen, n.applied_gen, n.unacked_high, n.lease_expires_at,
       n.hold_until, n.draining, n.evicted, n.departed, n.joined_at, n.heartbeat_at, n.labels
  FROM fleetlimit.nodes AS n
 WHERE n.key = $1
 ORDER BY n.node_id COLLATE "C", n.instance COLLATE "C"`

	sqlKeyExists = `SELECT EXISTS (SELECT 1 FROM fleetlimit.keys WHERE key = $1)`
)
