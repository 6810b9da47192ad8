-- The coordinator's functions. Each is one transaction and one round trip
-- for its caller; every one of them locks the key row FOR UPDATE before it
-- reads or writes the key's nodes, so all writers of a key serialize on that
-- one row lock and take no other lock first: no deadlocks, and no
-- serialization failures at READ COMMITTED.
--
-- Errors are raised with fleetlimit's own SQLSTATEs:
--   FL001 invalid report, FL002 node id in use, FL003 unknown key,
--   FL004 unknown node, FL005 invalid override.
--
-- Integer arithmetic only; every division is integer division of
-- non-negative numbers (floor), exactly as the Go core (coord.State) does.

-- +goose Up

-- +goose StatementBegin
CREATE FUNCTION fleetlimit.check_name(p_field text, p_value text, p_min integer)
RETURNS void LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_value IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'FL001', MESSAGE = format('%s: null, want %s..200 bytes', p_field, p_min);
    END IF;
    IF octet_length(p_value) NOT BETWEEN p_min AND 200 THEN
        RAISE EXCEPTION USING ERRCODE = 'FL001',
            MESSAGE = format('%s: %s bytes, want %s..200', p_field, octet_length(p_value), p_min);
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION fleetlimit.check_count(p_field text, p_value bigint, p_lowest bigint, p_highest bigint)
RETURNS void LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_value IS NULL OR p_value NOT BETWEEN p_lowest AND p_highest THEN
        RAISE EXCEPTION USING ERRCODE = 'FL001',
            MESSAGE = format('%s = %s, want %s..%s', p_field, coalesce(p_value::text, 'null'), p_lowest, p_highest);
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- check_labels accepts a JSON object of at most 32 string values, names of
-- 1..200 bytes and values of at most 200 bytes.
CREATE FUNCTION fleetlimit.check_labels(p_labels jsonb)
RETURNS void LANGUAGE plpgsql IMMUTABLE AS $$
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

-- +goose StatementBegin
-- set_limits sets the key's override of L_global (NULL: no bound); FL005
-- for a bound outside 1..1000000 or max < min, checked before the key.
CREATE FUNCTION fleetlimit.set_limits(p_key text, p_min integer, p_max integer)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF p_min IS NOT NULL AND p_min NOT BETWEEN 1 AND 1000000 THEN
        RAISE EXCEPTION USING ERRCODE = 'FL005', MESSAGE = format('min = %s, want 1..1000000', p_min);
    END IF;
    IF p_max IS NOT NULL AND p_max NOT BETWEEN 1 AND 1000000 THEN
        RAISE EXCEPTION USING ERRCODE = 'FL005', MESSAGE = format('max = %s, want 1..1000000', p_max);
    END IF;
    IF p_max < p_min THEN
        RAISE EXCEPTION USING ERRCODE = 'FL005', MESSAGE = format('max = %s is below min = %s', p_max, p_min);
    END IF;
    UPDATE fleetlimit.keys AS kk SET min_limit = p_min, max_limit = p_max WHERE kk.key = p_key;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'FL003', MESSAGE = left(quote_literal(coalesce(p_key, 'null')), 42);
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- set_aggregate sets how the key folds l_local into L_global; FL005 for an
-- unknown aggregate.
CREATE FUNCTION fleetlimit.set_aggregate(p_key text, p_aggregate text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF p_aggregate IS NULL OR p_aggregate NOT IN ('lower_median', 'min') THEN
        RAISE EXCEPTION USING ERRCODE = 'FL005',
            MESSAGE = format('aggregate = %s, want ''lower_median'' or ''min''', left(quote_nullable(p_aggregate), 42));
    END IF;
    UPDATE fleetlimit.keys AS kk SET aggregate = p_aggregate WHERE kk.key = p_key;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'FL003', MESSAGE = left(quote_literal(coalesce(p_key, 'null')), 42);
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION fleetlimit.set_aggregate(text, text);
DROP FUNCTION fleetlimit.set_limits(text, integer, integer);
DROP FUNCTION fleetlimit.leave(text, text, text);
DROP FUNCTION fleetlimit.evict(text, text);
DROP FUNCTION fleetlimit.undrain(text, text);
DROP FUNCTION fleetlimit.drain(text, text);
DROP FUNCTION fleetlimit.set_node_flags(text, text, boolean, boolean);
DROP FUNCTION fleetlimit.lock_node(text, text);
DROP FUNCTION fleetlimit.heartbeat(text, text, text, bigint, bigint, bigint, bigint, bigint, bigint, jsonb, timestamptz);
DROP FUNCTION fleetlimit.check_labels(jsonb);
DROP FUNCTION fleetlimit.check_count(text, bigint, bigint, bigint);
DROP FUNCTION fleetlimit.check_name(text, text, integer);
