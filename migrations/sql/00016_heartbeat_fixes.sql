-- The heartbeat's three SQL defects (docs/design.md §10, §4).
--
-- - A heartbeat that created a key's row, or found it created, and had it
--   deleted (DeleteKey with force) before it could lock it went on
--   without a key and failed writing the node's row (23502 on
--   granted_gen); the caller retried. It now creates the row again.
-- - After evidence of lost state, learn moved the key's epoch past the
--   key's and the server's clock, not past the report's: on a server
--   whose clock runs behind the one that issued the report's epoch, the
--   node's next reports (still of that epoch until it applies the new
--   grant) were evidence again, and the key learned once more. The new
--   epoch now passes the report's too, as coord.State does.
-- - check_labels named no label when only a value was bad: it quoted
--   the bad name, which was null.

-- +goose Up

-- +goose StatementBegin
-- check_labels accepts a JSON object of at most 32 string values, names of
-- 1..200 bytes and values of at most 200 bytes.
CREATE OR REPLACE FUNCTION fleetlimit.check_labels(p_labels jsonb)
RETURNS void LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_count     integer;
    v_bad_name  text;
    v_bad_value text;
BEGIN
    IF jsonb_typeof(p_labels) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'FL001',
            MESSAGE = format('labels: a JSON %s, want an object', jsonb_typeof(p_labels));
    END IF;
    IF p_labels = '{}'::jsonb THEN
        RETURN;
    END IF;
    SELECT count(*),
           min(e.key) FILTER (WHERE octet_length(e.key) NOT BETWEEN 1 AND 200),
           min(e.key) FILTER (WHERE jsonb_typeof(e.value) <> 'string' OR octet_length(e.value #>> '{}') > 200)
      INTO v_count, v_bad_name, v_bad_value
      FROM jsonb_each(p_labels) AS e;
    IF v_count > 32 THEN
        RAISE EXCEPTION USING ERRCODE = 'FL001',
            MESSAGE = format('labels: %s entries, want at most 32', v_count);
    END IF;
    IF v_bad_name IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'FL001',
            MESSAGE = format('label name: %s bytes, want 1..200', octet_length(v_bad_name));
    END IF;
    IF v_bad_value IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'FL001',
            MESSAGE = format('label %s: want a string of at most 200 bytes', left(quote_literal(v_bad_value), 42));
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- heartbeat_at is the whole protocol step for one report, the SQL twin of
-- coord.State.Incarnate followed by coord.State.Heartbeat.
--
-- Time: v_now is p_now when given (tests only), else now(), the start of
-- the caller's transaction. now() is never later than the real time of any
-- decision taken here, so a lease is never judged expired early, and a
-- node's own deadline (send time + lease_remaining_us) never passes the
-- stored lease_expires_at.
CREATE OR REPLACE FUNCTION fleetlimit.heartbeat_at(
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
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
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
    v_measuring     boolean;
    v_any_gone      boolean := false;
    v_all_members   boolean;
    v_m             integer;
    v_k             integer;
    v_l             integer;
    v_target        bigint;
    v_demands       bigint[];
    v_node_ids      text[];
    v_instances     text[];
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

    -- 1. Lock the key row, creating it on first use. A row created by
    -- another call, or this one, may be deleted (DeleteKey with force)
    -- before it is locked: then it is created again.
    LOOP
        SELECT * INTO k FROM fleetlimit.keys AS kk WHERE kk.key = p_key FOR UPDATE;
        EXIT WHEN FOUND;
        INSERT INTO fleetlimit.keys AS kk (key, created_at, epoch)
             VALUES (p_key, v_now, (extract(epoch FROM v_now) * 1000000)::bigint)
            ON CONFLICT (key) DO NOTHING;
    END LOOP;
    k0 := k;

    -- 2. The database's incarnation, then the report's evidence of lost
    -- state. (Another instance's member row refusing the report is found
    -- in the pass over the rows, below, before anything is written.)
    k := fleetlimit.incarnate(k, v_now, p_lease_ttl_us, p_max_request_us);
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
        -- The new epoch passes the report's too, which a server whose
        -- clock runs behind the lost one's may not reach.
        IF p_epoch >= k.epoch AND p_epoch < 9223372036854775807 THEN
            k.epoch := p_epoch + 1;
        END IF;
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
                   labels = p_labels, measuring = n.share > 0 OR p_inflight > 0 OR (n.measuring AND p_demand > 0 AND NOT n.draining)
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
    -- report, its in-flight in it), whose l_local rests on samples, or
    -- that voted at the report before and still want capacity (demand >
    -- 0, not draining): a member that lost its share when L_global fell
    -- keeps its vote while it waits for one. When none votes, L_global
    -- stays; a key without one yet (0) takes every member's.
    v_measuring := v_old_share > 0 OR p_inflight > 0 OR (v_found AND n.measuring AND p_demand > 0 AND NOT v_draining);
    v_self_votes := v_measuring;
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
    -- demand: 1 plus its part of the rest, max(0, L_global − eligible),
    -- split among the eligible members (not draining, demand > 0, self
    -- included) by largest remainder, so the targets add up to
    -- max(eligible, L_global). The other rows whose hold ended are gone.
    v_target := 0;
    IF NOT v_draining AND p_demand > 0 THEN
        SELECT array_agg(o.demand), array_agg(o.node_id), array_agg(o.instance)
          INTO v_demands, v_node_ids, v_instances
          FROM fleetlimit.nodes AS o
         WHERE o.key = p_key AND NOT (o.node_id = p_node_id AND o.instance = p_instance)
           AND o.lease_expires_at > v_now AND NOT (o.evicted OR o.departed OR o.draining) AND o.demand > 0;
        v_target := 1 + fleetlimit.apportion(greatest(0, v_l - v_eligible), p_demand, p_node_id, p_instance,
                                             v_demands, v_node_ids, v_instances);
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
               measuring = v_measuring
         WHERE o.key = p_key AND o.node_id = p_node_id AND o.instance = p_instance;
    ELSE
        INSERT INTO fleetlimit.nodes AS o
               (key, node_id, instance, seq, l_local, inflight, demand, share, epoch, granted_gen, applied_gen,
                unacked_high, lease_expires_at, hold_until, draining, evicted, departed, joined_at, heartbeat_at,
                labels, measuring)
        VALUES (p_key, p_node_id, p_instance, p_seq, p_l_local, p_inflight, p_demand, v_share, v_row_epoch,
                v_granted, p_applied_gen, v_unacked, v_lease,
                v_lease + p_max_request_us * interval '1 microsecond', v_draining, false, false, v_joined, v_now,
                p_labels, v_measuring);
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
CREATE OR REPLACE FUNCTION fleetlimit.schema_version()
RETURNS integer LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 16 $$;
-- +goose StatementEnd

-- +goose Down

-- +goose StatementBegin
-- check_labels as in 00002 (its search_path as 00004 set it).
-- check_labels accepts a JSON object of at most 32 string values, names of
-- 1..200 bytes and values of at most 200 bytes.
CREATE OR REPLACE FUNCTION fleetlimit.check_labels(p_labels jsonb)
RETURNS void LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_count     integer;
    v_bad_name  text;
    v_bad_value text;
BEGIN
    IF jsonb_typeof(p_labels) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'FL001',
            MESSAGE = format('labels: a JSON %s, want an object', jsonb_typeof(p_labels));
    END IF;
    IF p_labels = '{}'::jsonb THEN
        RETURN;
    END IF;
    SELECT count(*),
           min(e.key) FILTER (WHERE octet_length(e.key) NOT BETWEEN 1 AND 200),
           min(e.key) FILTER (WHERE jsonb_typeof(e.value) <> 'string' OR octet_length(e.value #>> '{}') > 200)
      INTO v_count, v_bad_name, v_bad_value
      FROM jsonb_each(p_labels) AS e;
    IF v_count > 32 THEN
        RAISE EXCEPTION USING ERRCODE = 'FL001',
            MESSAGE = format('labels: %s entries, want at most 32', v_count);
    END IF;
    IF v_bad_name IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'FL001',
            MESSAGE = format('label name: %s bytes, want 1..200', octet_length(v_bad_name));
    END IF;
    IF v_bad_value IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'FL001',
            MESSAGE = format('label %s: want a string of at most 200 bytes', left(quote_literal(v_bad_name), 42));
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- heartbeat_at as in 00013.
-- heartbeat_at is the whole protocol step for one report, the SQL twin of
-- coord.State.Incarnate followed by coord.State.Heartbeat.
--
-- Time: v_now is p_now when given (tests only), else now(), the start of
-- the caller's transaction. now() is never later than the real time of any
-- decision taken here, so a lease is never judged expired early, and a
-- node's own deadline (send time + lease_remaining_us) never passes the
-- stored lease_expires_at.
CREATE OR REPLACE FUNCTION fleetlimit.heartbeat_at(
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
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
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
    v_measuring     boolean;
    v_any_gone      boolean := false;
    v_all_members   boolean;
    v_m             integer;
    v_k             integer;
    v_l             integer;
    v_target        bigint;
    v_demands       bigint[];
    v_node_ids      text[];
    v_instances     text[];
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
    k := fleetlimit.incarnate(k, v_now, p_lease_ttl_us, p_max_request_us);
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
                   labels = p_labels, measuring = n.share > 0 OR p_inflight > 0 OR (n.measuring AND p_demand > 0 AND NOT n.draining)
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
    -- report, its in-flight in it), whose l_local rests on samples, or
    -- that voted at the report before and still want capacity (demand >
    -- 0, not draining): a member that lost its share when L_global fell
    -- keeps its vote while it waits for one. When none votes, L_global
    -- stays; a key without one yet (0) takes every member's.
    v_measuring := v_old_share > 0 OR p_inflight > 0 OR (v_found AND n.measuring AND p_demand > 0 AND NOT v_draining);
    v_self_votes := v_measuring;
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
    -- demand: 1 plus its part of the rest, max(0, L_global − eligible),
    -- split among the eligible members (not draining, demand > 0, self
    -- included) by largest remainder, so the targets add up to
    -- max(eligible, L_global). The other rows whose hold ended are gone.
    v_target := 0;
    IF NOT v_draining AND p_demand > 0 THEN
        SELECT array_agg(o.demand), array_agg(o.node_id), array_agg(o.instance)
          INTO v_demands, v_node_ids, v_instances
          FROM fleetlimit.nodes AS o
         WHERE o.key = p_key AND NOT (o.node_id = p_node_id AND o.instance = p_instance)
           AND o.lease_expires_at > v_now AND NOT (o.evicted OR o.departed OR o.draining) AND o.demand > 0;
        v_target := 1 + fleetlimit.apportion(greatest(0, v_l - v_eligible), p_demand, p_node_id, p_instance,
                                             v_demands, v_node_ids, v_instances);
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
               measuring = v_measuring
         WHERE o.key = p_key AND o.node_id = p_node_id AND o.instance = p_instance;
    ELSE
        INSERT INTO fleetlimit.nodes AS o
               (key, node_id, instance, seq, l_local, inflight, demand, share, epoch, granted_gen, applied_gen,
                unacked_high, lease_expires_at, hold_until, draining, evicted, departed, joined_at, heartbeat_at,
                labels, measuring)
        VALUES (p_key, p_node_id, p_instance, p_seq, p_l_local, p_inflight, p_demand, v_share, v_row_epoch,
                v_granted, p_applied_gen, v_unacked, v_lease,
                v_lease + p_max_request_us * interval '1 microsecond', v_draining, false, false, v_joined, v_now,
                p_labels, v_measuring);
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
CREATE OR REPLACE FUNCTION fleetlimit.schema_version()
RETURNS integer LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 15 $$;
-- +goose StatementEnd
