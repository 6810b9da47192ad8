-- A cheaper heartbeat, with the same grants (docs/design.md §4).
--
-- Cached plans: fleetlimit.rate_fold, fleetlimit.rate_share and
-- fleetlimit.apportion, called on every heartbeat, become PL/pgSQL with
-- the same signatures and results for every argument a heartbeat can pass
-- them (a NULL total or want, which the heartbeat's checks refuse, may now
-- give NULL where an overflowing sum of wants raised an error before). A
-- SQL-language function with a SET
-- clause is never inlined, and PostgreSQL before 18 keeps its parsed and
-- planned body only as long as the calling expression's state: one
-- transaction, so one heartbeat. Each heartbeat planned the three bodies
-- anew, about half of its time in the database on a key of 10 nodes. A
-- PL/pgSQL function keeps its plans for the session.
--
-- No rate, no scan: on a key without an operator's rate where no row has
-- learned one, heartbeat_rates_at skips its scan of the other rows, whose
-- result could only split a rate of 0. Finding that no row has one is
-- an index scan of the key's rows that aggregates nothing. (A partial
-- index of the rows with a learned rate would make it cheaper still on
-- large keys, but an index predicate's columns count as indexed, so
-- every heartbeat that changes a learned rate would then be a non-HOT
-- update.)

-- +goose Up

-- +goose StatementBegin
-- rate_fold is one dimension's rate: the aggregate of the learned values
-- (lower median or min) capped by the operator's rate when it is not 0;
-- the operator's rate alone without learned values.
CREATE OR REPLACE FUNCTION fleetlimit.rate_fold(p_learned bigint[], p_aggregate text, p_limit bigint)
RETURNS bigint LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v bigint;
BEGIN
    IF coalesce(cardinality(p_learned), 0) = 0 THEN
        RETURN p_limit;
    END IF;
    IF p_aggregate = 'min' THEN
        SELECT min(x) INTO v FROM unnest(p_learned) AS x;
    ELSE
        SELECT x INTO v FROM unnest(p_learned) AS x ORDER BY x OFFSET (cardinality(p_learned) - 1) / 2 LIMIT 1;
    END IF;
    RETURN CASE WHEN p_limit > 0 THEN least(v, p_limit) ELSE v END;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- apportion is one claim's part of p_total split among it (p_want, row
-- p_node_id, p_instance) and the others (p_wants, rows p_node_ids,
-- p_instances; every want > 0) in proportion to their wants by largest
-- remainder (coord.apportion): with w the summed want, each claim gets
-- ⌊p_total·want/w⌋, and the units left over go one each to the first
-- claims ordered by remainder p_total·want mod w descending, then node id
-- and instance ascending in byte order (COLLATE "C"). The parts add up to
-- p_total.
CREATE OR REPLACE FUNCTION fleetlimit.apportion(p_total bigint, p_want bigint, p_node_id text, p_instance text,
                                                p_wants bigint[], p_node_ids text[], p_instances text[])
RETURNS bigint LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v bigint;
BEGIN
    WITH o AS (SELECT u.want, u.node_id, u.instance
                 FROM unnest(coalesce(p_wants, '{}'), coalesce(p_node_ids, '{}'), coalesce(p_instances, '{}'))
                   AS u(want, node_id, instance)),
         s AS (SELECT p_want + coalesce(sum(o.want), 0)::bigint AS w FROM o)
    SELECT p_total * p_want / s.w
           + CASE WHEN (SELECT count(*) FROM o
                         WHERE p_total * o.want % s.w > p_total * p_want % s.w
                            OR p_total * o.want % s.w = p_total * p_want % s.w
                               AND (o.node_id COLLATE "C" < p_node_id COLLATE "C"
                                    OR o.node_id = p_node_id AND o.instance COLLATE "C" < p_instance COLLATE "C"))
                      < p_total - p_total * p_want / s.w - (SELECT coalesce(sum(p_total * o.want / s.w), 0) FROM o)
                  THEN 1 ELSE 0 END
      INTO v
      FROM s;
    RETURN v;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- rate_share is one dimension's share: the node's part of p_l split by
-- rate demand among it and the other eligible members (fleetlimit.
-- apportion) capped by what the other rows reserve, and in learning mode
-- by what the node applies; 0 without a rate, demand or eligibility.
CREATE OR REPLACE FUNCTION fleetlimit.rate_share(p_l bigint, p_eligible boolean, p_node_id text, p_instance text,
                                                 p_want bigint, p_wants bigint[], p_node_ids text[],
                                                 p_instances text[], p_reserve bigint, p_learning boolean,
                                                 p_applied bigint)
RETURNS bigint LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v bigint;
BEGIN
    IF p_l = 0 OR NOT p_eligible OR p_want = 0 THEN
        RETURN 0;
    END IF;
    v := greatest(0, least(fleetlimit.apportion(p_l, p_want, p_node_id, p_instance, p_wants, p_node_ids, p_instances),
                           p_l - p_reserve));
    IF p_learning THEN
        v := least(p_applied, v);
    END IF;
    RETURN v;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- heartbeat_rates_at is fleetlimit.heartbeat_at followed by the rate rule
-- (coord.State.rateGrant): the key's rates, the node's rate shares, one
-- generation for the grant when either share changes, and the rate
-- acknowledgement. Rate parameters are checked first, then the others by
-- heartbeat_at: coord.Report.Validate's order. As in 00007, but the scan
-- of the other rows is skipped on a key that has no rate.
CREATE OR REPLACE FUNCTION fleetlimit.heartbeat_rates_at(
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
    p_labels         jsonb,
    p_rpm_local      bigint,
    p_tpm_local      bigint,
    p_rpm_demand     bigint,
    p_tpm_demand     bigint,
    p_rpm_applied    bigint,
    p_tpm_applied    bigint,
    p_now            timestamptz
)
RETURNS TABLE (share integer, l_global integer, epoch bigint, generation bigint, lease_remaining_us bigint,
               status text, learning boolean, peer_inflight bigint, live_nodes integer, stale boolean,
               rpm bigint, tpm bigint, rpm_share bigint, tpm_share bigint)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    v_now      timestamptz := coalesce(p_now, now());
    v_gen0     bigint;
    n0         fleetlimit.nodes%ROWTYPE;
    v_found0   boolean;
    g          record;
    k          fleetlimit.keys%ROWTYPE;
    n          fleetlimit.nodes%ROWTYPE;
    v_rpm_high bigint := 0;
    v_tpm_high bigint := 0;
    v_rpm_votes bigint[];
    v_tpm_votes bigint[];
    v_rpm_dem  bigint[];
    v_tpm_dem  bigint[];
    v_rpm_ids  text[];
    v_tpm_ids  text[];
    v_rpm_inst text[];
    v_tpm_inst text[];
    v_rpm_res  bigint;
    v_tpm_res  bigint;
    v_rpm      bigint;
    v_tpm      bigint;
    v_rpm_sh   bigint;
    v_tpm_sh   bigint;
    v_gen      bigint;
BEGIN
    PERFORM fleetlimit.check_count('rate_local.requests', p_rpm_local, 0, 1000000000);
    PERFORM fleetlimit.check_count('rate_local.tokens', p_tpm_local, 0, 1000000000);
    PERFORM fleetlimit.check_count('rate_demand.requests', p_rpm_demand, 0, 1000000000);
    PERFORM fleetlimit.check_count('rate_demand.tokens', p_tpm_demand, 0, 1000000000);
    PERFORM fleetlimit.check_count('rate_applied.requests', p_rpm_applied, 0, 1000000000);
    PERFORM fleetlimit.check_count('rate_applied.tokens', p_tpm_applied, 0, 1000000000);

    -- The row as it was before the report, under the key's lock (a key
    -- that does not exist yet has no row).
    SELECT kk.generation INTO v_gen0 FROM fleetlimit.keys AS kk WHERE kk.key = p_key FOR UPDATE;
    SELECT * INTO n0 FROM fleetlimit.nodes AS nn
     WHERE nn.key = p_key AND nn.node_id = p_node_id AND nn.instance = p_instance;
    v_found0 := FOUND;

    SELECT * INTO g FROM fleetlimit.heartbeat_at(p_key, p_node_id, p_instance, p_seq, p_l_local, p_inflight,
        p_demand, p_epoch, p_applied_gen, p_lease_ttl_us, p_max_request_us, p_labels, v_now) AS h;

    SELECT * INTO k FROM fleetlimit.keys AS kk WHERE kk.key = p_key;
    SELECT * INTO n FROM fleetlimit.nodes AS nn
     WHERE nn.key = p_key AND nn.node_id = p_node_id AND nn.instance = p_instance;

    -- Answered from the stored row: an evicted instance whose row has
    -- gone, a stale report, a departed row.
    IF NOT FOUND THEN
        RETURN QUERY SELECT g.share, g.l_global, g.epoch, g.generation, g.lease_remaining_us, g.status, g.learning,
            g.peer_inflight, g.live_nodes, g.stale, k.rpm, k.tpm, 0::bigint, 0::bigint;
        RETURN;
    END IF;
    IF g.stale OR n0.departed THEN
        RETURN QUERY SELECT g.share, g.l_global, g.epoch, g.generation, g.lease_remaining_us, g.status, g.learning,
            g.peer_inflight, g.live_nodes, g.stale, k.rpm, k.tpm,
            CASE WHEN n.evicted THEN 0 ELSE n.rpm_share END, CASE WHEN n.evicted THEN 0 ELSE n.tpm_share END;
        RETURN;
    END IF;

    -- The report's rates, and its acknowledgement of the row's grant.
    IF v_found0 THEN
        v_rpm_high := n0.rpm_high;
        v_tpm_high := n0.tpm_high;
        IF p_epoch = n0.epoch AND p_applied_gen >= n0.granted_gen THEN
            v_rpm_high := n0.rpm_share;
            v_tpm_high := n0.tpm_share;
        END IF;
    END IF;
    IF n.evicted THEN
        UPDATE fleetlimit.nodes AS o
           SET rpm_local = p_rpm_local, tpm_local = p_tpm_local, rpm_demand = p_rpm_demand,
               tpm_demand = p_tpm_demand, rpm_high = v_rpm_high, tpm_high = v_tpm_high
         WHERE o.key = p_key AND o.node_id = p_node_id AND o.instance = p_instance;
        RETURN QUERY SELECT g.share, g.l_global, g.epoch, g.generation, g.lease_remaining_us, g.status, g.learning,
            g.peer_inflight, g.live_nodes, g.stale, k.rpm, k.tpm, 0::bigint, 0::bigint;
        RETURN;
    END IF;

    -- The other rows: learned rates of the members, the rate demands of
    -- the eligible ones (not draining, demand > 0) with their rows,
    -- reserves of the rows whose lease runs and that did not depart. A key
    -- without an operator's rate where neither this report nor any row
    -- holds a learned rate has no rate to split: rate_fold gives 0, and
    -- rate_share gives 0 whatever the others want, so the scan is skipped.
    IF k.rpm_limit > 0 OR k.tpm_limit > 0 OR p_rpm_local > 0 OR p_tpm_local > 0
       OR EXISTS (SELECT 1 FROM fleetlimit.nodes AS o WHERE o.key = p_key AND (o.rpm_local > 0 OR o.tpm_local > 0)) THEN
        SELECT array_agg(o.rpm_local) FILTER (WHERE x.member AND o.rpm_local > 0),
               array_agg(o.tpm_local) FILTER (WHERE x.member AND o.tpm_local > 0),
               array_agg(o.rpm_demand) FILTER (WHERE x.member AND NOT o.draining AND o.rpm_demand > 0),
               array_agg(o.node_id) FILTER (WHERE x.member AND NOT o.draining AND o.rpm_demand > 0),
               array_agg(o.instance) FILTER (WHERE x.member AND NOT o.draining AND o.rpm_demand > 0),
               array_agg(o.tpm_demand) FILTER (WHERE x.member AND NOT o.draining AND o.tpm_demand > 0),
               array_agg(o.node_id) FILTER (WHERE x.member AND NOT o.draining AND o.tpm_demand > 0),
               array_agg(o.instance) FILTER (WHERE x.member AND NOT o.draining AND o.tpm_demand > 0),
               coalesce(sum(greatest(o.rpm_high, o.rpm_share)) FILTER (WHERE x.leased), 0),
               coalesce(sum(greatest(o.tpm_high, o.tpm_share)) FILTER (WHERE x.leased), 0)
          INTO v_rpm_votes, v_tpm_votes, v_rpm_dem, v_rpm_ids, v_rpm_inst, v_tpm_dem, v_tpm_ids, v_tpm_inst,
               v_rpm_res, v_tpm_res
          FROM fleetlimit.nodes AS o
         CROSS JOIN LATERAL (SELECT o.lease_expires_at > v_now AND NOT (o.evicted OR o.departed) AS member,
                                    o.lease_expires_at > v_now AND NOT o.departed AS leased) AS x
         WHERE o.key = p_key AND NOT (o.node_id = p_node_id AND o.instance = p_instance);
    END IF;
    IF p_rpm_local > 0 THEN
        v_rpm_votes := array_append(v_rpm_votes, p_rpm_local);
    END IF;
    IF p_tpm_local > 0 THEN
        v_tpm_votes := array_append(v_tpm_votes, p_tpm_local);
    END IF;
    v_rpm := fleetlimit.rate_fold(v_rpm_votes, k.aggregate, k.rpm_limit);
    v_tpm := fleetlimit.rate_fold(v_tpm_votes, k.aggregate, k.tpm_limit);
    v_rpm_sh := fleetlimit.rate_share(v_rpm, NOT n.draining, p_node_id, p_instance, p_rpm_demand, v_rpm_dem,
                                      v_rpm_ids, v_rpm_inst, v_rpm_res, g.learning, p_rpm_applied);
    v_tpm_sh := fleetlimit.rate_share(v_tpm, NOT n.draining, p_node_id, p_instance, p_tpm_demand, v_tpm_dem,
                                      v_tpm_ids, v_tpm_inst, v_tpm_res, g.learning, p_tpm_applied);

    -- One generation per grant: heartbeat_at issued one when the share,
    -- the row or the epoch changed; otherwise a changed rate share takes a
    -- new one here.
    v_gen := n.granted_gen;
    IF n.granted_gen > coalesce(v_gen0, 0) THEN
        v_rpm_high := greatest(v_rpm_high, v_rpm_sh);
        v_tpm_high := greatest(v_tpm_high, v_tpm_sh);
    ELSIF v_rpm_sh <> n.rpm_share OR v_tpm_sh <> n.tpm_share THEN
        k.generation := k.generation + 1;
        v_gen := k.generation;
        v_rpm_high := greatest(v_rpm_high, v_rpm_sh);
        v_tpm_high := greatest(v_tpm_high, v_tpm_sh);
    ELSE
        v_rpm_sh := n.rpm_share;
        v_tpm_sh := n.tpm_share;
    END IF;
    UPDATE fleetlimit.nodes AS o
       SET rpm_local = p_rpm_local, tpm_local = p_tpm_local, rpm_demand = p_rpm_demand, tpm_demand = p_tpm_demand,
           rpm_share = v_rpm_sh, tpm_share = v_tpm_sh, rpm_high = v_rpm_high, tpm_high = v_tpm_high,
           granted_gen = v_gen
     WHERE o.key = p_key AND o.node_id = p_node_id AND o.instance = p_instance;
    UPDATE fleetlimit.keys AS kk SET rpm = v_rpm, tpm = v_tpm, generation = k.generation
     WHERE kk.key = p_key AND (kk.rpm, kk.tpm, kk.generation) IS DISTINCT FROM (v_rpm, v_tpm, k.generation);

    RETURN QUERY SELECT g.share, g.l_global, g.epoch, v_gen, g.lease_remaining_us, g.status, g.learning,
        g.peer_inflight, g.live_nodes, g.stale, v_rpm, v_tpm, v_rpm_sh, v_tpm_sh;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION fleetlimit.schema_version()
RETURNS integer LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 9 $$;
-- +goose StatementEnd

-- +goose Down

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION fleetlimit.schema_version()
RETURNS integer LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 8 $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION fleetlimit.rate_fold(p_learned bigint[], p_aggregate text, p_limit bigint)
RETURNS bigint LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE
        WHEN coalesce(cardinality(p_learned), 0) = 0 THEN p_limit
        ELSE (SELECT CASE WHEN p_limit > 0 THEN least(v, p_limit) ELSE v END
                FROM (SELECT CASE WHEN p_aggregate = 'min' THEN (SELECT min(x) FROM unnest(p_learned) AS x)
                                  ELSE (SELECT x FROM unnest(p_learned) AS x ORDER BY x
                                         OFFSET (cardinality(p_learned) - 1) / 2 LIMIT 1) END AS v) AS f)
    END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION fleetlimit.apportion(p_total bigint, p_want bigint, p_node_id text, p_instance text,
                                     p_wants bigint[], p_node_ids text[], p_instances text[])
RETURNS bigint LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    WITH o AS (SELECT u.want, u.node_id, u.instance
                 FROM unnest(coalesce(p_wants, '{}'), coalesce(p_node_ids, '{}'), coalesce(p_instances, '{}'))
                   AS u(want, node_id, instance)),
         s AS (SELECT p_want + coalesce(sum(o.want), 0)::bigint AS w FROM o)
    SELECT p_total * p_want / s.w
           + CASE WHEN (SELECT count(*) FROM o
                         WHERE p_total * o.want % s.w > p_total * p_want % s.w
                            OR p_total * o.want % s.w = p_total * p_want % s.w
                               AND (o.node_id COLLATE "C" < p_node_id COLLATE "C"
                                    OR o.node_id = p_node_id AND o.instance COLLATE "C" < p_instance COLLATE "C"))
                      < p_total - p_total * p_want / s.w - (SELECT coalesce(sum(p_total * o.want / s.w), 0) FROM o)
                  THEN 1 ELSE 0 END
      FROM s
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION fleetlimit.rate_share(p_l bigint, p_eligible boolean, p_node_id text, p_instance text, p_want bigint,
                                      p_wants bigint[], p_node_ids text[], p_instances text[], p_reserve bigint,
                                      p_learning boolean, p_applied bigint)
RETURNS bigint LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE
        WHEN p_l = 0 OR NOT p_eligible OR p_want = 0 THEN 0
        WHEN p_learning THEN least(p_applied, greatest(0, least(t.target, p_l - p_reserve)))
        ELSE greatest(0, least(t.target, p_l - p_reserve))
    END
      FROM (SELECT CASE WHEN p_l = 0 OR NOT p_eligible OR p_want = 0 THEN 0
                        ELSE fleetlimit.apportion(p_l, p_want, p_node_id, p_instance, p_wants, p_node_ids, p_instances)
                   END AS target) AS t
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- heartbeat_rates_at is fleetlimit.heartbeat_at followed by the rate rule
-- (coord.State.rateGrant): the key's rates, the node's rate shares, one
-- generation for the grant when either share changes, and the rate
-- acknowledgement. Rate parameters are checked first, then the others by
-- heartbeat_at: coord.Report.Validate's order.
CREATE OR REPLACE FUNCTION fleetlimit.heartbeat_rates_at(
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
    p_labels         jsonb,
    p_rpm_local      bigint,
    p_tpm_local      bigint,
    p_rpm_demand     bigint,
    p_tpm_demand     bigint,
    p_rpm_applied    bigint,
    p_tpm_applied    bigint,
    p_now            timestamptz
)
RETURNS TABLE (share integer, l_global integer, epoch bigint, generation bigint, lease_remaining_us bigint,
               status text, learning boolean, peer_inflight bigint, live_nodes integer, stale boolean,
               rpm bigint, tpm bigint, rpm_share bigint, tpm_share bigint)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    v_now      timestamptz := coalesce(p_now, now());
    v_gen0     bigint;
    n0         fleetlimit.nodes%ROWTYPE;
    v_found0   boolean;
    g          record;
    k          fleetlimit.keys%ROWTYPE;
    n          fleetlimit.nodes%ROWTYPE;
    v_rpm_high bigint := 0;
    v_tpm_high bigint := 0;
    v_rpm_votes bigint[];
    v_tpm_votes bigint[];
    v_rpm_dem  bigint[];
    v_tpm_dem  bigint[];
    v_rpm_ids  text[];
    v_tpm_ids  text[];
    v_rpm_inst text[];
    v_tpm_inst text[];
    v_rpm_res  bigint;
    v_tpm_res  bigint;
    v_rpm      bigint;
    v_tpm      bigint;
    v_rpm_sh   bigint;
    v_tpm_sh   bigint;
    v_gen      bigint;
BEGIN
    PERFORM fleetlimit.check_count('rate_local.requests', p_rpm_local, 0, 1000000000);
    PERFORM fleetlimit.check_count('rate_local.tokens', p_tpm_local, 0, 1000000000);
    PERFORM fleetlimit.check_count('rate_demand.requests', p_rpm_demand, 0, 1000000000);
    PERFORM fleetlimit.check_count('rate_demand.tokens', p_tpm_demand, 0, 1000000000);
    PERFORM fleetlimit.check_count('rate_applied.requests', p_rpm_applied, 0, 1000000000);
    PERFORM fleetlimit.check_count('rate_applied.tokens', p_tpm_applied, 0, 1000000000);

    -- The row as it was before the report, under the key's lock (a key
    -- that does not exist yet has no row).
    SELECT kk.generation INTO v_gen0 FROM fleetlimit.keys AS kk WHERE kk.key = p_key FOR UPDATE;
    SELECT * INTO n0 FROM fleetlimit.nodes AS nn
     WHERE nn.key = p_key AND nn.node_id = p_node_id AND nn.instance = p_instance;
    v_found0 := FOUND;

    SELECT * INTO g FROM fleetlimit.heartbeat_at(p_key, p_node_id, p_instance, p_seq, p_l_local, p_inflight,
        p_demand, p_epoch, p_applied_gen, p_lease_ttl_us, p_max_request_us, p_labels, v_now) AS h;

    SELECT * INTO k FROM fleetlimit.keys AS kk WHERE kk.key = p_key;
    SELECT * INTO n FROM fleetlimit.nodes AS nn
     WHERE nn.key = p_key AND nn.node_id = p_node_id AND nn.instance = p_instance;

    -- Answered from the stored row: an evicted instance whose row has
    -- gone, a stale report, a departed row.
    IF NOT FOUND THEN
        RETURN QUERY SELECT g.share, g.l_global, g.epoch, g.generation, g.lease_remaining_us, g.status, g.learning,
            g.peer_inflight, g.live_nodes, g.stale, k.rpm, k.tpm, 0::bigint, 0::bigint;
        RETURN;
    END IF;
    IF g.stale OR n0.departed THEN
        RETURN QUERY SELECT g.share, g.l_global, g.epoch, g.generation, g.lease_remaining_us, g.status, g.learning,
            g.peer_inflight, g.live_nodes, g.stale, k.rpm, k.tpm,
            CASE WHEN n.evicted THEN 0 ELSE n.rpm_share END, CASE WHEN n.evicted THEN 0 ELSE n.tpm_share END;
        RETURN;
    END IF;

    -- The report's rates, and its acknowledgement of the row's grant.
    IF v_found0 THEN
        v_rpm_high := n0.rpm_high;
        v_tpm_high := n0.tpm_high;
        IF p_epoch = n0.epoch AND p_applied_gen >= n0.granted_gen THEN
            v_rpm_high := n0.rpm_share;
            v_tpm_high := n0.tpm_share;
        END IF;
    END IF;
    IF n.evicted THEN
        UPDATE fleetlimit.nodes AS o
           SET rpm_local = p_rpm_local, tpm_local = p_tpm_local, rpm_demand = p_rpm_demand,
               tpm_demand = p_tpm_demand, rpm_high = v_rpm_high, tpm_high = v_tpm_high
         WHERE o.key = p_key AND o.node_id = p_node_id AND o.instance = p_instance;
        RETURN QUERY SELECT g.share, g.l_global, g.epoch, g.generation, g.lease_remaining_us, g.status, g.learning,
            g.peer_inflight, g.live_nodes, g.stale, k.rpm, k.tpm, 0::bigint, 0::bigint;
        RETURN;
    END IF;

    -- The other rows: learned rates of the members, the rate demands of
    -- the eligible ones (not draining, demand > 0) with their rows,
    -- reserves of the rows whose lease runs and that did not depart.
    SELECT array_agg(o.rpm_local) FILTER (WHERE x.member AND o.rpm_local > 0),
           array_agg(o.tpm_local) FILTER (WHERE x.member AND o.tpm_local > 0),
           array_agg(o.rpm_demand) FILTER (WHERE x.member AND NOT o.draining AND o.rpm_demand > 0),
           array_agg(o.node_id) FILTER (WHERE x.member AND NOT o.draining AND o.rpm_demand > 0),
           array_agg(o.instance) FILTER (WHERE x.member AND NOT o.draining AND o.rpm_demand > 0),
           array_agg(o.tpm_demand) FILTER (WHERE x.member AND NOT o.draining AND o.tpm_demand > 0),
           array_agg(o.node_id) FILTER (WHERE x.member AND NOT o.draining AND o.tpm_demand > 0),
           array_agg(o.instance) FILTER (WHERE x.member AND NOT o.draining AND o.tpm_demand > 0),
           coalesce(sum(greatest(o.rpm_high, o.rpm_share)) FILTER (WHERE x.leased), 0),
           coalesce(sum(greatest(o.tpm_high, o.tpm_share)) FILTER (WHERE x.leased), 0)
      INTO v_rpm_votes, v_tpm_votes, v_rpm_dem, v_rpm_ids, v_rpm_inst, v_tpm_dem, v_tpm_ids, v_tpm_inst,
           v_rpm_res, v_tpm_res
      FROM fleetlimit.nodes AS o
     CROSS JOIN LATERAL (SELECT o.lease_expires_at > v_now AND NOT (o.evicted OR o.departed) AS member,
                                o.lease_expires_at > v_now AND NOT o.departed AS leased) AS x
     WHERE o.key = p_key AND NOT (o.node_id = p_node_id AND o.instance = p_instance);
    IF p_rpm_local > 0 THEN
        v_rpm_votes := array_append(v_rpm_votes, p_rpm_local);
    END IF;
    IF p_tpm_local > 0 THEN
        v_tpm_votes := array_append(v_tpm_votes, p_tpm_local);
    END IF;
    v_rpm := fleetlimit.rate_fold(v_rpm_votes, k.aggregate, k.rpm_limit);
    v_tpm := fleetlimit.rate_fold(v_tpm_votes, k.aggregate, k.tpm_limit);
    v_rpm_sh := fleetlimit.rate_share(v_rpm, NOT n.draining, p_node_id, p_instance, p_rpm_demand, v_rpm_dem,
                                      v_rpm_ids, v_rpm_inst, v_rpm_res, g.learning, p_rpm_applied);
    v_tpm_sh := fleetlimit.rate_share(v_tpm, NOT n.draining, p_node_id, p_instance, p_tpm_demand, v_tpm_dem,
                                      v_tpm_ids, v_tpm_inst, v_tpm_res, g.learning, p_tpm_applied);

    -- One generation per grant: heartbeat_at issued one when the share,
    -- the row or the epoch changed; otherwise a changed rate share takes a
    -- new one here.
    v_gen := n.granted_gen;
    IF n.granted_gen > coalesce(v_gen0, 0) THEN
        v_rpm_high := greatest(v_rpm_high, v_rpm_sh);
        v_tpm_high := greatest(v_tpm_high, v_tpm_sh);
    ELSIF v_rpm_sh <> n.rpm_share OR v_tpm_sh <> n.tpm_share THEN
        k.generation := k.generation + 1;
        v_gen := k.generation;
        v_rpm_high := greatest(v_rpm_high, v_rpm_sh);
        v_tpm_high := greatest(v_tpm_high, v_tpm_sh);
    ELSE
        v_rpm_sh := n.rpm_share;
        v_tpm_sh := n.tpm_share;
    END IF;
    UPDATE fleetlimit.nodes AS o
       SET rpm_local = p_rpm_local, tpm_local = p_tpm_local, rpm_demand = p_rpm_demand, tpm_demand = p_tpm_demand,
           rpm_share = v_rpm_sh, tpm_share = v_tpm_sh, rpm_high = v_rpm_high, tpm_high = v_tpm_high,
           granted_gen = v_gen
     WHERE o.key = p_key AND o.node_id = p_node_id AND o.instance = p_instance;
    UPDATE fleetlimit.keys AS kk SET rpm = v_rpm, tpm = v_tpm, generation = k.generation
     WHERE kk.key = p_key AND (kk.rpm, kk.tpm, kk.generation) IS DISTINCT FROM (v_rpm, v_tpm, k.generation);

    RETURN QUERY SELECT g.share, g.l_global, g.epoch, v_gen, g.lease_remaining_us, g.status, g.learning,
        g.peer_inflight, g.live_nodes, g.stale, v_rpm, v_tpm, v_rpm_sh, v_tpm_sh;
END
$$;
-- +goose StatementEnd

