-- Requests, not admissions (docs/design.md §5–§8): a node row per instance,
-- whose reserve is held until every request the instance may have admitted
-- has ended; drain marks that belong to the node id and survive lapses;
-- evicted instances that never come back; and a key epoch with learning
-- mode for a database that lost state.
--
-- The functions are the SQL twins of coord.State.Heartbeat, Leave, Drain,
-- Undrain, Evict and Incarnate: the two must agree bit for bit, which the
-- conformance test checks. Errors keep the SQLSTATEs of 00002.

-- +goose Up

-- A key's epoch starts as its creation time in microseconds, whoever
-- creates the row.
ALTER TABLE fleetlimit.keys
    ADD COLUMN epoch            bigint      NOT NULL DEFAULT (extract(epoch FROM now()) * 1000000)::bigint,
    ADD COLUMN incarnation      text,
    ADD COLUMN learning_until   timestamptz,
    ADD COLUMN max_lease_ttl_us bigint      NOT NULL DEFAULT 0 CHECK (max_lease_ttl_us >= 0),
    ADD COLUMN max_request_us   bigint      NOT NULL DEFAULT 0 CHECK (max_request_us >= 0);
UPDATE fleetlimit.keys SET epoch = (extract(epoch FROM created_at) * 1000000)::bigint;
ALTER TABLE fleetlimit.keys ADD CHECK (epoch > 0);

-- drains: an operator's drain marks. A mark belongs to the node id, not to
-- a row, so it survives lease lapses, restarts and takeovers until undrain.
CREATE TABLE fleetlimit.drains (
    key        text        NOT NULL REFERENCES fleetlimit.keys (key) ON DELETE CASCADE,
    node_id    text        NOT NULL CHECK (octet_length(node_id) BETWEEN 1 AND 200),
    drained_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (key, node_id)
);
INSERT INTO fleetlimit.drains (key, node_id) SELECT key, node_id FROM fleetlimit.nodes WHERE draining;

-- evictions: evicted instances whose rows have gone (their hold ended).
-- Such an instance's reports are answered 'evicted' for as long as the key
-- exists, so it never joins again.
CREATE TABLE fleetlimit.evictions (
    key        text        NOT NULL REFERENCES fleetlimit.keys (key) ON DELETE CASCADE,
    node_id    text        NOT NULL CHECK (octet_length(node_id) BETWEEN 1 AND 200),
    instance   text        NOT NULL CHECK (octet_length(instance) BETWEEN 1 AND 200),
    evicted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (key, node_id, instance)
);

-- nodes: now one row per instance. hold_until is when every request the
-- instance may have admitted has ended; the row's reserve counts until
-- then, member or not.
ALTER TABLE fleetlimit.nodes
    ADD COLUMN epoch      bigint      NOT NULL DEFAULT 0 CHECK (epoch >= 0),
    ADD COLUMN hold_until timestamptz,
    ADD COLUMN departed   boolean     NOT NULL DEFAULT false,
    -- measuring: at the row's last report the instance held a share from
    -- before that report or had requests in flight, so its l_local rests
    -- on samples and votes (a joiner's first report does not).
    ADD COLUMN measuring  boolean     NOT NULL DEFAULT false;
UPDATE fleetlimit.nodes AS n
   SET hold_until = n.lease_expires_at, epoch = k.epoch
  FROM fleetlimit.keys AS k WHERE k.key = n.key;
ALTER TABLE fleetlimit.nodes
    ALTER COLUMN hold_until SET NOT NULL,
    ADD CHECK (hold_until >= lease_expires_at),
    ADD CHECK (NOT departed OR share = 0),
    DROP CONSTRAINT nodes_pkey,
    ADD PRIMARY KEY (key, node_id, instance);

DROP FUNCTION fleetlimit.evict(text, text);
DROP FUNCTION fleetlimit.undrain(text, text);
DROP FUNCTION fleetlimit.drain(text, text);
DROP FUNCTION fleetlimit.set_node_flags(text, text, boolean, boolean);
DROP FUNCTION fleetlimit.leave(text, text, text);
DROP FUNCTION fleetlimit.lock_node(text, text);
DROP FUNCTION fleetlimit.heartbeat(text, text, text, bigint, bigint, bigint, bigint, bigint, bigint, jsonb, timestamptz);

-- +goose StatementBegin
-- incarnation names the database history this session writes to: the
-- cluster's system identifier, the database's oid (a restored dump gets a
-- new one), the server's start time (a restore from a file-system snapshot
-- or a base backup, or a crash with fsync off, can only show itself by a
-- restart, so every server start counts as a possible loss) and the
-- timeline of the current WAL (a promoted replica or a point-in-time
-- restore starts a new one). The first three cannot change under an open
-- session and are read once per session into the setting
-- fleetlimit.cluster; the timeline, which a promotion changes under an
-- open session, is read every time. (heartbeat commits with at least
-- synchronous_commit = local, so that setting cannot lose its grants.)
CREATE FUNCTION fleetlimit.incarnation()
RETURNS text LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_cluster text := current_setting('fleetlimit.cluster', true);
BEGIN
    IF v_cluster IS NULL OR v_cluster = '' THEN
        v_cluster := concat_ws('/',
            (SELECT system_identifier FROM pg_control_system()),
            (SELECT oid FROM pg_database WHERE datname = current_database()),
            (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint);
        PERFORM set_config('fleetlimit.cluster', v_cluster, false);
    END IF;
    RETURN concat_ws('/', v_cluster, 'fleetlimit.keys'::regclass::oid,
                     substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8));
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- incarnate checks the database's incarnation against a locked key's
-- (coord.State.Incarnate): the first check records it; a change puts the
-- key in learning mode.
CREATE FUNCTION fleetlimit.incarnate(k fleetlimit.keys, p_now timestamptz)
RETURNS fleetlimit.keys LANGUAGE plpgsql AS $$
DECLARE
    v_inc text := fleetlimit.incarnation();
BEGIN
    IF k.incarnation IS NULL THEN
        k.incarnation := v_inc;
    ELSIF k.incarnation <> v_inc THEN
        k := fleetlimit.learn(k, p_now, 0, 0);
        k.incarnation := v_inc;
    END IF;
    RETURN k;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- learn puts a locked key in learning mode at p_now (coord.State.learn):
-- a new epoch past every epoch the lost state can have issued, and no grant
-- above a node's proven in-flight until the key's longest lease and request
-- bound (the report's included) have run out from now.
CREATE FUNCTION fleetlimit.learn(k fleetlimit.keys, p_now timestamptz, p_lease_ttl_us bigint, p_request_us bigint)
RETURNS fleetlimit.keys LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_until timestamptz;
BEGIN
    k.epoch := greatest((extract(epoch FROM p_now) * 1000000)::bigint, k.epoch + 1);
    v_until := p_now + (greatest(k.max_lease_ttl_us, p_lease_ttl_us) + greatest(k.max_request_us, p_request_us))
                       * interval '1 microsecond';
    IF k.learning_until IS NULL OR v_until > k.learning_until THEN
        k.learning_until := v_until;
    END IF;
    RETURN k;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- node_status is coord.NodeState.Status.
CREATE FUNCTION fleetlimit.node_status(n fleetlimit.nodes, p_now timestamptz)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN n.evicted THEN 'evicted'
                WHEN n.departed THEN 'departed'
                WHEN n.lease_expires_at <= p_now THEN 'expired'
                WHEN n.draining THEN 'draining'
                ELSE 'active' END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- heartbeat is the whole protocol step for one report, the SQL twin of
-- coord.State.Incarnate followed by coord.State.Heartbeat.
--
-- Time: v_now is p_now when given (tests only), else now(), the start of
-- the caller's transaction. now() is never later than the real time of any
-- decision taken here, so a lease is never judged expired early, and a
-- node's own deadline (send time + lease_remaining_us) never passes the
-- stored lease_expires_at.
CREATE FUNCTION fleetlimit.heartbeat(
    p_key            text,
    p_node_id        text,
    p_instance       text,
    p_seq            bigint,
    p_l_local        bigint,
    p_inflight       bigint,
    p_demand         bigint,
    p_epoch          bigint,
    p_applied_gen    bigint,
    p_lease_ttl_us   bigint,
    p_max_request_us bigint,
    p_labels         jsonb       DEFAULT '{}'::jsonb,
    p_now            timestamptz DEFAULT NULL
)
RETURNS TABLE (
    share              integer,
    l_global           integer,
    epoch              bigint,
    generation         bigint,
    lease_remaining_us bigint,
    status             text,
    learning           boolean,
    peer_inflight      bigint,
    live_nodes         integer,
    stale              boolean
)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_now           timestamptz := coalesce(p_now, now());
    k               fleetlimit.keys%ROWTYPE;
    k0              fleetlimit.keys%ROWTYPE;
    n               fleetlimit.nodes%ROWTYPE;
    v_found         boolean;
    v_until         timestamptz;
    v_draining      boolean;
    v_old_share     integer := 0;
    v_row_epoch     bigint  := 0;
    v_granted       bigint  := 0;
    v_unacked       integer := 0;
    v_joined        timestamptz := v_now;
    v_lease         timestamptz;
    v_members       bigint;
    v_peer_inflight bigint;
    v_peer_reserve  bigint;
    v_eligible      bigint;
    v_sum_demand    bigint;
    v_l_locals      integer[];
    v_voters        integer[];
    v_self_votes    boolean;
    v_any_gone      boolean := false;
    v_all_members   boolean;
    v_m             integer;
    v_k             integer;
    v_l             integer;
    v_target        bigint;
    v_share         integer;
    v_learning      boolean;
BEGIN
    -- Validate (same bounds and order as coord.Report.Validate).
    PERFORM fleetlimit.check_name('key', p_key, 1);
    PERFORM fleetlimit.check_name('node_id', p_node_id, 1);
    PERFORM fleetlimit.check_name('instance', p_instance, 1);
    PERFORM fleetlimit.check_count('seq', p_seq, 0, 9223372036854775807);
    PERFORM fleetlimit.check_count('l_local', p_l_local, 1, 1000000);
    PERFORM fleetlimit.check_count('inflight', p_inflight, 0, 1000000);
    PERFORM fleetlimit.check_count('demand', p_demand, 0, 1000000);
    PERFORM fleetlimit.check_count('epoch', p_epoch, 0, 9223372036854775807);
    PERFORM fleetlimit.check_count('applied_gen', p_applied_gen, 0, 9223372036854775807);
    PERFORM fleetlimit.check_count('lease_ttl_us', p_lease_ttl_us, 100000, 3600000000);
    PERFORM fleetlimit.check_count('max_request_us', p_max_request_us, 0, 86400000000);
    p_labels := coalesce(p_labels, '{}'::jsonb);
    PERFORM fleetlimit.check_labels(p_labels);
    -- A grant that a crash could forget after the node enforces it would
    -- break the bound: this transaction's commit is flushed locally even
    -- when the session's synchronous_commit is off.
    IF current_setting('synchronous_commit') = 'off' THEN
        PERFORM set_config('synchronous_commit', 'local', true);
    END IF;

    -- 1. Lock the key row, creating it on first use.
    SELECT * INTO k FROM fleetlimit.keys AS kk WHERE kk.key = p_key FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO fleetlimit.keys AS kk (key, created_at, epoch)
             VALUES (p_key, v_now, (extract(epoch FROM v_now) * 1000000)::bigint)
            ON CONFLICT (key) DO NOTHING;
        SELECT * INTO k FROM fleetlimit.keys AS kk WHERE kk.key = p_key FOR UPDATE;
    END IF;
    k0 := k;

    -- 2. The database's incarnation, then the report's evidence of lost
    -- state. (Another instance's member row refusing the report is found
    -- in the pass over the rows, below, before anything is written.)
    k := fleetlimit.incarnate(k, v_now);
    SELECT * INTO n FROM fleetlimit.nodes AS nn
     WHERE nn.key = p_key AND nn.node_id = p_node_id AND nn.instance = p_instance;
    v_found := FOUND;
    -- An evicted instance whose row has gone.
    IF NOT v_found AND EXISTS (SELECT 1 FROM fleetlimit.evictions AS e
                                WHERE e.key = p_key AND e.node_id = p_node_id AND e.instance = p_instance) THEN
        IF k IS DISTINCT FROM k0 THEN
            UPDATE fleetlimit.keys AS kk
               SET epoch = k.epoch, incarnation = k.incarnation, learning_until = k.learning_until
             WHERE kk.key = p_key;
        END IF;
        SELECT coalesce(sum(o.inflight) FILTER (WHERE o.hold_until > v_now), 0),
               count(*) FILTER (WHERE o.lease_expires_at > v_now AND NOT (o.evicted OR o.departed))
          INTO v_peer_inflight, v_members
          FROM fleetlimit.nodes AS o WHERE o.key = p_key;
        RETURN QUERY SELECT 0, k.l_global, 0::bigint, 0::bigint, 0::bigint, 'evicted'::text,
            k.learning_until IS NOT NULL AND k.learning_until > v_now, v_peer_inflight, v_members::integer, false;
        RETURN;
    END IF;
    IF p_epoch <> 0 AND (p_epoch > k.epoch
                         OR (p_epoch = k.epoch AND p_applied_gen > k.generation)
                         OR (NOT v_found AND (p_inflight > 0 OR k.generation = 0))
                         OR (v_found AND n.epoch = p_epoch AND p_applied_gen > n.granted_gen)) THEN
        k := fleetlimit.learn(k, v_now, p_lease_ttl_us, p_max_request_us);
    END IF;
    v_learning := k.learning_until IS NOT NULL AND k.learning_until > v_now;

    -- The instance's own row: stale, departed and evicted rows are answered
    -- from the row; an evicted row takes the report's counts first.
    IF v_found AND (p_seq <= n.seq OR n.departed OR n.evicted) THEN
        IF NOT (p_seq <= n.seq OR n.departed) THEN
            IF p_epoch = n.epoch AND p_applied_gen >= n.granted_gen THEN
                n.unacked_high := n.share;
            END IF;
            UPDATE fleetlimit.nodes AS o
               SET seq = p_seq, l_local = p_l_local, inflight = p_inflight, demand = p_demand,
                   applied_gen = p_applied_gen, unacked_high = n.unacked_high, heartbeat_at = v_now,
                   labels = p_labels, measuring = n.share > 0 OR p_inflight > 0
             WHERE o.key = p_key AND o.node_id = p_node_id AND o.instance = p_instance;
        END IF;
        IF k IS DISTINCT FROM k0 THEN
            UPDATE fleetlimit.keys AS kk
               SET epoch = k.epoch, incarnation = k.incarnation, learning_until = k.learning_until
             WHERE kk.key = p_key;
        END IF;
        SELECT coalesce(sum(o.inflight) FILTER (WHERE o.hold_until > v_now), 0),
               count(*) FILTER (WHERE o.lease_expires_at > v_now AND NOT (o.evicted OR o.departed))
          INTO v_peer_inflight, v_members
          FROM fleetlimit.nodes AS o
         WHERE o.key = p_key AND NOT (o.node_id = p_node_id AND o.instance = p_instance);
        RETURN QUERY SELECT
            n.share,
            k.l_global,
            n.epoch,
            n.granted_gen,
            greatest(0, ((extract(epoch FROM n.lease_expires_at) - extract(epoch FROM v_now)) * 1000000)::bigint),
            fleetlimit.node_status(n, v_now),
            v_learning,
            v_peer_inflight,
            (v_members + CASE WHEN n.lease_expires_at > v_now AND NOT (n.evicted OR n.departed) THEN 1 ELSE 0 END)::integer,
            p_seq <= n.seq OR n.departed;
        RETURN;
    END IF;

    v_draining := EXISTS (SELECT 1 FROM fleetlimit.drains AS d WHERE d.key = p_key AND d.node_id = p_node_id);
    IF v_found THEN
        v_old_share := n.share;
        v_row_epoch := n.epoch;
        v_granted   := n.granted_gen;
        v_unacked   := n.unacked_high;
        v_joined    := n.joined_at;
    END IF;

    -- 3. Acknowledge: the node enforces its newest grant.
    IF p_epoch = v_row_epoch AND p_applied_gen >= v_granted THEN
        v_unacked := v_old_share;
    END IF;

    -- 4–5. One pass over the other rows: the members' totals and sorted
    -- l_local values, the reserves of every row still holding, whether
    -- another instance of the node id is a member (which refuses the
    -- report), and whether any row's hold has ended: those rows count for
    -- nothing and are deleted, an evicted one's instance remembered in
    -- evictions. In the
    -- common case every other row is a member (its lease runs, it is
    -- neither evicted nor departed) and so still holding: the first,
    -- cheaper pass has no per-row state to decide and is the answer. When
    -- it finds a row that is not, a second pass decides each row's state
    -- once (OFFSET 0 keeps the inner query from being folded into the
    -- aggregates).
    SELECT count(*),
           coalesce(sum(o.inflight), 0),
           coalesce(sum(greatest(o.unacked_high, o.share, o.inflight)), 0),
           count(*) FILTER (WHERE NOT o.draining AND o.demand > 0),
           coalesce(sum(o.demand) FILTER (WHERE NOT o.draining), 0),
           array_agg(o.l_local ORDER BY o.l_local),
           array_agg(o.l_local ORDER BY o.l_local) FILTER (WHERE o.measuring),
           min(o.lease_expires_at) FILTER (WHERE o.node_id = p_node_id),
           min(o.lease_expires_at) > v_now AND NOT bool_or(o.evicted OR o.departed)
      INTO v_members, v_peer_inflight, v_peer_reserve, v_eligible, v_sum_demand, v_l_locals, v_voters, v_until,
           v_all_members
      FROM fleetlimit.nodes AS o
     WHERE o.key = p_key AND NOT (o.node_id = p_node_id AND o.instance = p_instance);
    IF NOT coalesce(v_all_members, true) THEN
        SELECT count(*) FILTER (WHERE x.member),
               coalesce(sum(x.inflight) FILTER (WHERE x.holding), 0),
               coalesce(sum(x.reserve) FILTER (WHERE x.holding), 0),
               count(*) FILTER (WHERE x.member AND NOT x.draining AND x.demand > 0),
               coalesce(sum(x.demand) FILTER (WHERE x.member AND NOT x.draining), 0),
               array_agg(x.l_local ORDER BY x.l_local) FILTER (WHERE x.member),
               array_agg(x.l_local ORDER BY x.l_local) FILTER (WHERE x.member AND x.measuring),
               coalesce(bool_or(x.gone), false),
               min(x.lease_expires_at) FILTER (WHERE x.member AND x.node_id = p_node_id)
          INTO v_members, v_peer_inflight, v_peer_reserve, v_eligible, v_sum_demand, v_l_locals, v_voters,
               v_any_gone, v_until
          FROM (SELECT o.node_id, o.inflight, o.demand, o.l_local, o.measuring, o.draining, o.lease_expires_at,
                       greatest(o.unacked_high, o.share, o.inflight) AS reserve,
                       o.lease_expires_at > v_now AND NOT (o.evicted OR o.departed) AS member,
                       o.hold_until > v_now AS holding,
                       o.hold_until <= v_now AS gone
                  FROM fleetlimit.nodes AS o
                 WHERE o.key = p_key AND NOT (o.node_id = p_node_id AND o.instance = p_instance)
                OFFSET 0) AS x;
    END IF;
    IF v_until IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'FL002',
            MESSAGE = format('node %s is held by another live instance until %s',
                             left(quote_literal(p_node_id), 42), v_until);
    END IF;
    IF v_any_gone THEN
        WITH gone AS (
            DELETE FROM fleetlimit.nodes AS o
             WHERE o.key = p_key AND NOT (o.node_id = p_node_id AND o.instance = p_instance)
               AND o.hold_until <= v_now
            RETURNING o.node_id, o.instance, o.evicted)
        INSERT INTO fleetlimit.evictions AS e (key, node_id, instance, evicted_at)
        SELECT p_key, g.node_id, g.instance, v_now FROM gone AS g WHERE g.evicted
            ON CONFLICT DO NOTHING;
    END IF;

    IF NOT v_draining AND p_demand > 0 THEN
        v_eligible := v_eligible + 1;
        v_sum_demand := v_sum_demand + p_demand;
    END IF;
    -- The voters: members that, at their last report, held a share from
    -- before it or had requests in flight (self: its share before this
    -- report, its in-flight in it), whose l_local rests on recent samples. When none does, L_global stays; a key without one
    -- yet (0) takes every member's.
    v_self_votes := v_old_share > 0 OR p_inflight > 0;
    IF v_self_votes OR v_voters IS NOT NULL THEN
        v_l_locals := v_voters;
    ELSIF k.l_global > 0 THEN
        v_l_locals := ARRAY[k.l_global];
    ELSE
        v_self_votes := true;
    END IF;
    -- Fold l_local over the m voters' sorted values a[1..m], and self's x
    -- when it votes. The lower median of m + 1 values is the k-th smallest,
    -- k = (m + 2) / 2; with x inserted into a, that is a[k] if x ≥ a[k],
    -- a[k-1] if x < a[k-1], else x: greatest(a[k-1], least(x, a[k])),
    -- where greatest and least ignore the NULL of an index out of bounds
    -- (k - 1 = 0, or k = m + 1). Without x, it is a[(m + 1) / 2].
    v_m := coalesce(cardinality(v_l_locals), 0);
    IF NOT v_self_votes THEN
        IF k.aggregate = 'min' THEN
            v_l := v_l_locals[1];
        ELSE
            v_l := v_l_locals[(v_m + 1) / 2];
        END IF;
    ELSIF k.aggregate = 'min' THEN
        v_l := least(p_l_local, v_l_locals[1]);
    ELSE
        v_k := (v_m + 2) / 2;
        v_l := greatest(v_l_locals[v_k - 1], least(p_l_local, v_l_locals[v_k]));
    END IF;
    IF k.max_limit IS NOT NULL AND v_l > k.max_limit THEN
        v_l := k.max_limit;
    END IF;
    IF k.min_limit IS NOT NULL AND v_l < k.min_limit THEN
        v_l := k.min_limit;
    END IF;

    -- 6. Demand-proportional target with a floor of 1, for a node with
    -- demand, rounded up so no remainder is left ungranted (the occupancy
    -- cap keeps the shares within L_global).
    v_target := 0;
    IF NOT v_draining AND p_demand > 0 THEN
        v_target := 1 + (greatest(0, v_l - v_eligible) * p_demand + v_sum_demand - 1) / v_sum_demand;
    END IF;

    -- 7. Occupancy cap; in learning mode, no more than the node proves: its
    -- in-flight, or the share this epoch already granted it.
    v_share := greatest(0, least(v_target, v_l - v_peer_reserve));
    IF v_learning THEN
        v_share := least(v_share, greatest(p_inflight,
                                           CASE WHEN v_found AND v_row_epoch = k.epoch THEN v_old_share ELSE 0 END));
    END IF;

    -- 8. New generation when the grant changes, on a fresh row, and on a
    -- row whose grant is of an older epoch.
    IF NOT v_found OR v_share <> v_old_share OR v_row_epoch <> k.epoch THEN
        k.generation := k.generation + 1;
        v_granted := k.generation;
        v_row_epoch := k.epoch;
        v_unacked := greatest(v_unacked, v_share);
    END IF;
    k.l_global := v_l;
    k.max_lease_ttl_us := greatest(k.max_lease_ttl_us, p_lease_ttl_us);
    k.max_request_us := greatest(k.max_request_us, p_max_request_us);

    v_lease := v_now + p_lease_ttl_us * interval '1 microsecond';
    IF v_found THEN
        UPDATE fleetlimit.nodes AS o
           SET seq = p_seq, l_local = p_l_local, inflight = p_inflight, demand = p_demand, share = v_share,
               epoch = v_row_epoch, granted_gen = v_granted, applied_gen = p_applied_gen,
               unacked_high = v_unacked, lease_expires_at = v_lease,
               hold_until = v_lease + p_max_request_us * interval '1 microsecond',
               draining = v_draining, heartbeat_at = v_now, labels = p_labels,
               measuring = v_old_share > 0 OR p_inflight > 0
         WHERE o.key = p_key AND o.node_id = p_node_id AND o.instance = p_instance;
    ELSE
        INSERT INTO fleetlimit.nodes AS o
               (key, node_id, instance, seq, l_local, inflight, demand, share, epoch, granted_gen, applied_gen,
                unacked_high, lease_expires_at, hold_until, draining, evicted, departed, joined_at, heartbeat_at,
                labels, measuring)
        VALUES (p_key, p_node_id, p_instance, p_seq, p_l_local, p_inflight, p_demand, v_share, v_row_epoch,
                v_granted, p_applied_gen, v_unacked, v_lease,
                v_lease + p_max_request_us * interval '1 microsecond', v_draining, false, false, v_joined, v_now,
                p_labels, v_old_share > 0 OR p_inflight > 0);
    END IF;

    IF k IS DISTINCT FROM k0 THEN
        UPDATE fleetlimit.keys AS kk
           SET epoch = k.epoch, generation = k.generation, l_global = k.l_global, incarnation = k.incarnation,
               learning_until = k.learning_until, max_lease_ttl_us = k.max_lease_ttl_us,
               max_request_us = k.max_request_us
         WHERE kk.key = p_key;
    END IF;

    RETURN QUERY SELECT
        v_share,
        v_l,
        v_row_epoch,
        v_granted,
        p_lease_ttl_us,
        CASE WHEN v_draining THEN 'draining' ELSE 'active' END,
        v_learning,
        v_peer_inflight,
        (v_members + 1)::integer,
        false;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- lock_key locks p_key's row; FL003 when there is none.
CREATE FUNCTION fleetlimit.lock_key(p_key text)
RETURNS fleetlimit.keys LANGUAGE plpgsql AS $$
DECLARE
    k fleetlimit.keys%ROWTYPE;
BEGIN
    SELECT * INTO k FROM fleetlimit.keys AS kk WHERE kk.key = p_key FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'FL003', MESSAGE = left(quote_literal(coalesce(p_key, 'null')), 42);
    END IF;
    RETURN k;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- set_flags sets draining and/or evicted (NULL leaves a flag alone) on every
-- row of p_node_id; setting either drops each positive share to 0 under a
-- new generation, rows in instance order (coord.State.revoke). FL004 when
-- the node id has no row, and, for a drain flag, no drain mark.
CREATE FUNCTION fleetlimit.set_flags(p_key text, p_node_id text, p_draining boolean, p_evicted boolean,
                                     p_now timestamptz DEFAULT NULL)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    k  fleetlimit.keys%ROWTYPE;
    k0 fleetlimit.keys%ROWTYPE;
    n  fleetlimit.nodes%ROWTYPE;
BEGIN
    k := fleetlimit.lock_key(p_key);
    k0 := k;
    -- A grant revoked after a loss must be of the new epoch.
    k := fleetlimit.incarnate(k, coalesce(p_now, now()));
    IF NOT EXISTS (SELECT 1 FROM fleetlimit.nodes AS o WHERE o.key = p_key AND o.node_id = p_node_id)
       AND (coalesce(p_evicted, false)
            OR NOT EXISTS (SELECT 1 FROM fleetlimit.drains AS d WHERE d.key = p_key AND d.node_id = p_node_id)) THEN
        RAISE EXCEPTION USING ERRCODE = 'FL004',
            MESSAGE = format('%s on key %s', left(quote_literal(coalesce(p_node_id, 'null')), 42), left(quote_literal(p_key), 42));
    END IF;
    IF p_draining THEN
        INSERT INTO fleetlimit.drains AS d (key, node_id) VALUES (p_key, p_node_id) ON CONFLICT DO NOTHING;
    ELSIF NOT p_draining THEN
        DELETE FROM fleetlimit.drains AS d WHERE d.key = p_key AND d.node_id = p_node_id;
    END IF;
    FOR n IN SELECT * FROM fleetlimit.nodes AS o WHERE o.key = p_key AND o.node_id = p_node_id
              ORDER BY o.instance COLLATE "C" LOOP
        n.draining := coalesce(p_draining, n.draining);
        n.evicted := n.evicted OR coalesce(p_evicted, false);
        IF (n.draining OR n.evicted) AND n.share > 0 THEN
            k.generation := k.generation + 1;
            n.share := 0;
            n.epoch := k.epoch;
            n.granted_gen := k.generation;
        END IF;
        UPDATE fleetlimit.nodes AS o
           SET draining = n.draining, evicted = n.evicted, share = n.share, epoch = n.epoch,
               granted_gen = n.granted_gen
         WHERE o.key = p_key AND o.node_id = p_node_id AND o.instance = n.instance;
    END LOOP;
    IF k IS DISTINCT FROM k0 THEN
        UPDATE fleetlimit.keys AS kk
           SET generation = k.generation, epoch = k.epoch, incarnation = k.incarnation,
               learning_until = k.learning_until
         WHERE kk.key = p_key;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION fleetlimit.drain(p_key text, p_node_id text, p_now timestamptz DEFAULT NULL)
RETURNS void LANGUAGE sql AS $$
    SELECT fleetlimit.set_flags(p_key, p_node_id, true, NULL, p_now);
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION fleetlimit.undrain(p_key text, p_node_id text, p_now timestamptz DEFAULT NULL)
RETURNS void LANGUAGE sql AS $$
    SELECT fleetlimit.set_flags(p_key, p_node_id, false, NULL, p_now);
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- evict fences every instance of the node id for good; a new instance may
-- join at once.
CREATE FUNCTION fleetlimit.evict(p_key text, p_node_id text, p_now timestamptz DEFAULT NULL)
RETURNS void LANGUAGE sql AS $$
    SELECT fleetlimit.set_flags(p_key, p_node_id, NULL, true, p_now);
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- leave takes an instance's last word (coord.State.Leave): its row stops
-- being a member and reserves p_inflight until p_hold_us from now; it stays,
-- departed, until its old hold would have ended, so that late reports are
-- answered as stale. FL001 for a departure out of bounds, FL003, FL004 when
-- the key has no row of the instance (an evicted instance whose row has
-- gone may leave again, which changes nothing).
CREATE FUNCTION fleetlimit.leave(p_key text, p_node_id text, p_instance text, p_inflight bigint, p_hold_us bigint,
                                 p_now timestamptz DEFAULT NULL)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, now());
BEGIN
    PERFORM fleetlimit.check_name('key', p_key, 1);
    PERFORM fleetlimit.check_name('node_id', p_node_id, 1);
    PERFORM fleetlimit.check_name('instance', p_instance, 1);
    PERFORM fleetlimit.check_count('inflight', p_inflight, 0, 1000000);
    PERFORM fleetlimit.check_count('hold_us', p_hold_us, 0, 86400000000);
    PERFORM fleetlimit.lock_key(p_key);
    UPDATE fleetlimit.nodes AS o
       SET departed = true, share = 0, unacked_high = 0, inflight = p_inflight, demand = 0,
           lease_expires_at = least(o.lease_expires_at, v_now),
           hold_until = greatest(o.hold_until,
                                 v_now + CASE WHEN p_inflight > 0 THEN p_hold_us ELSE 0 END * interval '1 microsecond')
     WHERE o.key = p_key AND o.node_id = p_node_id AND o.instance = p_instance;
    IF NOT FOUND AND NOT EXISTS (SELECT 1 FROM fleetlimit.evictions AS e
                                  WHERE e.key = p_key AND e.node_id = p_node_id AND e.instance = p_instance) THEN
        RAISE EXCEPTION USING ERRCODE = 'FL004',
            MESSAGE = format('%s (this instance) on key %s', left(quote_literal(p_node_id), 42), left(quote_literal(p_key), 42));
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- relearn puts a key in learning mode now (coord.State.Relearn), for an
-- operator who restored its tables in a way the incarnation cannot see;
-- FL003 for an unknown key.
CREATE FUNCTION fleetlimit.relearn(p_key text, p_now timestamptz DEFAULT NULL)
RETURNS timestamptz LANGUAGE plpgsql AS $$
DECLARE
    k fleetlimit.keys%ROWTYPE;
BEGIN
    k := fleetlimit.lock_key(p_key);
    k := fleetlimit.learn(k, coalesce(p_now, now()), 0, 0);
    UPDATE fleetlimit.keys AS kk SET epoch = k.epoch, learning_until = k.learning_until WHERE kk.key = p_key;
    RETURN k.learning_until;
END
$$;
-- +goose StatementEnd

-- +goose Down

DROP FUNCTION fleetlimit.relearn(text, timestamptz);
DROP FUNCTION fleetlimit.leave(text, text, text, bigint, bigint, timestamptz);
DROP FUNCTION fleetlimit.evict(text, text, timestamptz);
DROP FUNCTION fleetlimit.undrain(text, text, timestamptz);
DROP FUNCTION fleetlimit.drain(text, text, timestamptz);
DROP FUNCTION fleetlimit.set_flags(text, text, boolean, boolean, timestamptz);
DROP FUNCTION fleetlimit.lock_key(text);
DROP FUNCTION fleetlimit.heartbeat(text, text, text, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint, jsonb, timestamptz);
DROP FUNCTION fleetlimit.node_status(fleetlimit.nodes, timestamptz);
DROP FUNCTION fleetlimit.incarnate(fleetlimit.keys, timestamptz);
DROP FUNCTION fleetlimit.learn(fleetlimit.keys, timestamptz, bigint, bigint);
DROP FUNCTION fleetlimit.incarnation();

-- One row per node id again: keep each node id's most recent row.
DELETE FROM fleetlimit.nodes AS o
 USING fleetlimit.nodes AS newer
 WHERE newer.key = o.key AND newer.node_id = o.node_id
   AND (newer.heartbeat_at, newer.instance) > (o.heartbeat_at, o.instance);
UPDATE fleetlimit.nodes AS o SET draining = true
  FROM fleetlimit.drains AS d WHERE d.key = o.key AND d.node_id = o.node_id;
ALTER TABLE fleetlimit.nodes
    DROP CONSTRAINT nodes_pkey,
    ADD PRIMARY KEY (key, node_id),
    DROP COLUMN measuring,
    DROP COLUMN departed,
    DROP COLUMN hold_until,
    DROP COLUMN epoch;
DROP TABLE fleetlimit.evictions;
DROP TABLE fleetlimit.drains;
ALTER TABLE fleetlimit.keys
    DROP COLUMN max_request_us,
    DROP COLUMN max_lease_ttl_us,
    DROP COLUMN learning_until,
    DROP COLUMN incarnation,
    DROP COLUMN epoch;

-- The functions of 00002, as they were.

-- +goose StatementBegin
-- heartbeat is the whole protocol step of DESIGN §4 for one report, the SQL
-- twin of coord.State.Heartbeat: the two must agree bit for bit, which the
-- conformance test checks.
--
-- Time: v_now is p_now when given (tests only), else now(), the start of
-- the caller's transaction. now() is never later than the real time of any
-- decision taken here, so a lease is never judged expired early, and a
-- node's own deadline (send time + lease_remaining_us) never passes the
-- stored lease_expires_at.
CREATE FUNCTION fleetlimit.heartbeat(
    p_key          text,
    p_node_id      text,
    p_instance     text,
    p_seq          bigint,
    p_l_local      bigint,
    p_inflight     bigint,
    p_demand       bigint,
    p_applied_gen  bigint,
    p_lease_ttl_us bigint,
    p_labels       jsonb       DEFAULT '{}'::jsonb,
    p_now          timestamptz DEFAULT NULL
)
RETURNS TABLE (
    share              integer,
    l_global           integer,
    generation         bigint,
    lease_remaining_us bigint,
    status             text,
    peer_inflight      bigint,
    live_nodes         integer,
    stale              boolean
)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_now          timestamptz := coalesce(p_now, now());
    k              fleetlimit.keys%ROWTYPE;
    n              fleetlimit.nodes%ROWTYPE;
    v_found        boolean;
    v_live         boolean;
    v_draining     boolean := false;
    v_old_share    integer := 0;
    v_granted      bigint  := 0;
    v_unacked      integer := 0;
    v_joined       timestamptz := v_now;
    v_oldest       timestamptz;
    v_pass         integer;
    v_live_nodes   bigint;
    v_peer_inflight bigint;
    v_peer_reserve bigint;
    v_eligible     bigint;
    v_sum_demand   bigint;
    v_l_locals     integer[];
    v_m            integer;
    v_k            integer;
    v_l            integer;
    v_target       bigint;
    v_share        integer;
    v_gen          bigint;
BEGIN
    -- Validate (same bounds and order as coord.Report.Validate).
    PERFORM fleetlimit.check_name('key', p_key, 1);
    PERFORM fleetlimit.check_name('node_id', p_node_id, 1);
    PERFORM fleetlimit.check_name('instance', p_instance, 1);
    PERFORM fleetlimit.check_count('seq', p_seq, 0, 9223372036854775807);
    PERFORM fleetlimit.check_count('l_local', p_l_local, 1, 1000000);
    PERFORM fleetlimit.check_count('inflight', p_inflight, 0, 1000000);
    PERFORM fleetlimit.check_count('demand', p_demand, 0, 1000000);
    PERFORM fleetlimit.check_count('applied_gen', p_applied_gen, 0, 9223372036854775807);
    PERFORM fleetlimit.check_count('lease_ttl_us', p_lease_ttl_us, 100000, 3600000000);
    p_labels := coalesce(p_labels, '{}'::jsonb);
    PERFORM fleetlimit.check_labels(p_labels);

    -- 1. Lock the key row, creating it on first use.
    SELECT * INTO k FROM fleetlimit.keys AS kk WHERE kk.key = p_key FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO fleetlimit.keys AS kk (key, created_at) VALUES (p_key, v_now)
            ON CONFLICT (key) DO NOTHING;
        SELECT * INTO k FROM fleetlimit.keys AS kk WHERE kk.key = p_key FOR UPDATE;
    END IF;

    -- 2. Instance collision, stale seq, evicted: answer from the stored row.
    SELECT * INTO n FROM fleetlimit.nodes AS nn WHERE nn.key = p_key AND nn.node_id = p_node_id;
    v_found := FOUND;
    v_live := v_found AND n.lease_expires_at > v_now;
    IF v_live THEN
        IF n.instance <> p_instance THEN
            RAISE EXCEPTION USING ERRCODE = 'FL002',
                MESSAGE = format('node %s is held by instance %s until %s',
                                 left(quote_literal(n.node_id), 42), left(quote_literal(n.instance), 42), n.lease_expires_at);
        END IF;
        IF p_seq <= n.seq OR n.evicted THEN
            SELECT coalesce(sum(o.inflight), 0), count(*) + 1
              INTO v_peer_inflight, v_live_nodes
              FROM fleetlimit.nodes AS o
             WHERE o.key = p_key AND o.node_id <> p_node_id AND o.lease_expires_at > v_now;
            RETURN QUERY SELECT
                n.share,
                k.l_global,
                n.granted_gen,
                ((extract(epoch FROM n.lease_expires_at) - extract(epoch FROM v_now)) * 1000000)::bigint,
                CASE WHEN n.evicted THEN 'evicted' WHEN n.draining THEN 'draining' ELSE 'active' END,
                v_peer_inflight,
                v_live_nodes::integer,
                p_seq <= n.seq;
            RETURN;
        END IF;
        v_draining  := n.draining;
        v_old_share := n.share;
        v_granted   := n.granted_gen;
        v_unacked   := n.unacked_high;
        v_joined    := n.joined_at;
    END IF;

    -- 3. Acknowledge: the node enforces its newest grant.
    IF p_applied_gen >= v_granted THEN
        v_unacked := v_old_share;
    END IF;

    -- 4–5. One pass over the peers' rows: their totals and, for the fold,
    -- their sorted l_local values (self, with its new values, is added
    -- below). When some peer's lease has run out, delete the expired peers
    -- and pass again: the rare slow path keeps the common one free of
    -- per-row liveness filters.
    FOR v_pass IN 1..2 LOOP
        SELECT count(*),
               min(o.lease_expires_at),
               coalesce(sum(o.inflight), 0),
               coalesce(sum(greatest(o.unacked_high, o.share, o.inflight)), 0),
               count(*) FILTER (WHERE NOT (o.draining OR o.evicted)),
               coalesce(sum(o.demand) FILTER (WHERE NOT (o.draining OR o.evicted)), 0),
               array_agg(o.l_local ORDER BY o.l_local) FILTER (WHERE NOT o.evicted)
          INTO v_live_nodes, v_oldest, v_peer_inflight, v_peer_reserve, v_eligible, v_sum_demand, v_l_locals
          FROM fleetlimit.nodes AS o
         WHERE o.key = p_key AND o.node_id <> p_node_id;
        EXIT WHEN v_oldest IS NULL OR v_oldest > v_now;
        DELETE FROM fleetlimit.nodes AS o
         WHERE o.key = p_key AND o.node_id <> p_node_id AND o.lease_expires_at <= v_now;
    END LOOP;

    v_live_nodes := v_live_nodes + 1;
    IF NOT v_draining THEN
        v_eligible := v_eligible + 1;
        v_sum_demand := v_sum_demand + p_demand;
    END IF;
    -- Fold l_local over the m peers' sorted values a[1..m] and self's x. The
    -- lower median of m + 1 values is the k-th smallest, k = (m + 2) / 2;
    -- with x inserted into a, that is a[k] if x ≥ a[k], a[k-1] if x < a[k-1],
    -- else x: greatest(a[k-1], least(x, a[k])), where greatest and least
    -- ignore the NULL of an index out of bounds (k - 1 = 0, or k = m + 1).
    v_m := coalesce(cardinality(v_l_locals), 0);
    IF k.aggregate = 'min' THEN
        v_l := least(p_l_local, v_l_locals[1]);
    ELSE
        v_k := (v_m + 2) / 2;
        v_l := greatest(v_l_locals[v_k - 1], least(p_l_local, v_l_locals[v_k]));
    END IF;
    IF k.max_limit IS NOT NULL AND v_l > k.max_limit THEN
        v_l := k.max_limit;
    END IF;
    IF k.min_limit IS NOT NULL AND v_l < k.min_limit THEN
        v_l := k.min_limit;
    END IF;

    -- 6. Demand-proportional target with a floor of 1.
    IF v_draining THEN
        v_target := 0;
    ELSIF v_sum_demand = 0 THEN
        v_target := 1 + greatest(0, v_l - v_eligible) / v_eligible;
    ELSE
        v_target := 1 + (greatest(0, v_l - v_eligible) * p_demand) / v_sum_demand;
    END IF;

    -- 7. Occupancy cap.
    v_share := greatest(0, least(v_target, v_l - v_peer_reserve));

    -- 8. New generation when the grant changes, and on a fresh row.
    v_gen := k.generation;
    IF NOT v_live OR v_share <> v_old_share THEN
        v_gen := v_gen + 1;
        v_granted := v_gen;
        v_unacked := greatest(v_unacked, v_share);
    END IF;

    IF v_found THEN
        UPDATE fleetlimit.nodes AS o
           SET instance = p_instance, seq = p_seq, l_local = p_l_local, inflight = p_inflight,
               demand = p_demand, share = v_share, granted_gen = v_granted, applied_gen = p_applied_gen,
               unacked_high = v_unacked, lease_expires_at = v_now + p_lease_ttl_us * interval '1 microsecond',
               draining = v_draining, evicted = false, joined_at = v_joined, heartbeat_at = v_now,
               labels = p_labels
         WHERE o.key = p_key AND o.node_id = p_node_id;
    ELSE
        INSERT INTO fleetlimit.nodes AS o
               (key, node_id, instance, seq, l_local, inflight, demand, share, granted_gen, applied_gen,
                unacked_high, lease_expires_at, draining, evicted, joined_at, heartbeat_at, labels)
        VALUES (p_key, p_node_id, p_instance, p_seq, p_l_local, p_inflight, p_demand, v_share, v_granted,
                p_applied_gen, v_unacked, v_now + p_lease_ttl_us * interval '1 microsecond', false, false,
                v_now, v_now, p_labels);
    END IF;

    IF v_gen <> k.generation OR v_l <> k.l_global THEN
        UPDATE fleetlimit.keys AS kk SET generation = v_gen, l_global = v_l WHERE kk.key = p_key;
    END IF;

    RETURN QUERY SELECT
        v_share,
        v_l,
        v_granted,
        p_lease_ttl_us,
        CASE WHEN v_draining THEN 'draining' ELSE 'active' END,
        v_peer_inflight,
        v_live_nodes::integer,
        false;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- lock_node locks p_key's row and returns p_node_id's row; FL003 or FL004
-- when either is missing.
CREATE FUNCTION fleetlimit.lock_node(p_key text, p_node_id text)
RETURNS fleetlimit.nodes LANGUAGE plpgsql AS $$
DECLARE
    n fleetlimit.nodes%ROWTYPE;
BEGIN
    PERFORM 1 FROM fleetlimit.keys AS kk WHERE kk.key = p_key FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'FL003', MESSAGE = left(quote_literal(coalesce(p_key, 'null')), 42);
    END IF;
    SELECT * INTO n FROM fleetlimit.nodes AS nn WHERE nn.key = p_key AND nn.node_id = p_node_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'FL004',
            MESSAGE = format('%s on key %s', left(quote_literal(coalesce(p_node_id, 'null')), 42), left(quote_literal(p_key), 42));
    END IF;
    RETURN n;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- set_node_flags sets draining and/or evicted (NULL leaves a flag alone).
-- Setting either drops a positive share to 0 under a new generation;
-- unacked_high keeps what the node may still enforce.
CREATE FUNCTION fleetlimit.set_node_flags(p_key text, p_node_id text, p_draining boolean, p_evicted boolean)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    n     fleetlimit.nodes%ROWTYPE;
    v_gen bigint;
BEGIN
    n := fleetlimit.lock_node(p_key, p_node_id);
    n.draining := coalesce(p_draining, n.draining);
    n.evicted := n.evicted OR coalesce(p_evicted, false);
    IF (n.draining OR n.evicted) AND n.share > 0 THEN
        UPDATE fleetlimit.keys AS kk SET generation = kk.generation + 1 WHERE kk.key = p_key
        RETURNING kk.generation INTO v_gen;
        n.share := 0;
        n.granted_gen := v_gen;
    END IF;
    UPDATE fleetlimit.nodes AS o
       SET draining = n.draining, evicted = n.evicted, share = n.share, granted_gen = n.granted_gen
     WHERE o.key = p_key AND o.node_id = p_node_id;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION fleetlimit.drain(p_key text, p_node_id text)
RETURNS void LANGUAGE sql AS $$
    SELECT fleetlimit.set_node_flags(p_key, p_node_id, true, NULL);
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION fleetlimit.undrain(p_key text, p_node_id text)
RETURNS void LANGUAGE sql AS $$
    SELECT fleetlimit.set_node_flags(p_key, p_node_id, false, NULL);
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- evict fences the node: its heartbeats are answered 'evicted' with share 0
-- and no longer renew its lease, so its reserve is held until the lease
-- runs out.
CREATE FUNCTION fleetlimit.evict(p_key text, p_node_id text)
RETURNS void LANGUAGE sql AS $$
    SELECT fleetlimit.set_node_flags(p_key, p_node_id, NULL, true);
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- leave deletes the node's row (a graceful shutdown); FL002 when the row
-- belongs to another instance.
CREATE FUNCTION fleetlimit.leave(p_key text, p_node_id text, p_instance text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    n fleetlimit.nodes%ROWTYPE;
BEGIN
    n := fleetlimit.lock_node(p_key, p_node_id);
    IF n.instance IS DISTINCT FROM p_instance THEN
        RAISE EXCEPTION USING ERRCODE = 'FL002',
            MESSAGE = format('node %s is held by instance %s, not %s', left(quote_literal(n.node_id), 42),
                             left(quote_literal(n.instance), 42), left(quote_literal(coalesce(p_instance, 'null')), 42));
    END IF;
    DELETE FROM fleetlimit.nodes AS o WHERE o.key = p_key AND o.node_id = p_node_id;
END
$$;
-- +goose StatementEnd
