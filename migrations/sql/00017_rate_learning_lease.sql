-- Learning mode (docs/design.md §10, §17) capped every rate share at what
-- its node paces to (Report.RateApplied) for as long as it capped the
-- concurrency shares: the key's longest lease plus its longest request
-- bound. A node fenced by the loss (a Postgres restart long enough to make
-- a heartbeat fail fences a node on the default 2-s lease) paces to 0, so
-- a fleet's rate stayed at 0 for the request bound, 5 minutes by default.
-- A rate is spent when a request is sent, and a node sends nothing once
-- its lease has run out, so a rate share the lost state granted ends with
-- its lease: the cap now lasts the longest lease the key or the database
-- recorded, from the key's epoch (which the loss moved to its detection
-- time or later). The concurrency shares keep the lease plus the bound.

-- +goose Up

-- +goose StatementBegin
-- heartbeat_rates_at is fleetlimit.heartbeat_at followed by the rate rule
-- (coord.State.rateGrant): the key's rates, the node's rate shares, one
-- generation for the grant when either share changes, and the rate
-- acknowledgement. As in 00009, but learning mode caps the rate shares
-- for one lease from the key's epoch.
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
    v_db_lease bigint;
    v_rate_learning boolean;
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
    -- Learning mode caps the rate shares for one lease from the key's
    -- epoch, the key's or the database's longest (coord.KeyState.
    -- rateLearning): a rate share the lost state granted ends with its
    -- lease, and the loss moved the epoch to its detection time or later.
    -- Compared in microseconds, as epochs are.
    v_rate_learning := g.learning;
    IF v_rate_learning THEN
        SELECT coalesce(max(d.max_lease_ttl_us), 0) INTO v_db_lease FROM fleetlimit.database_state AS d;
        v_rate_learning := (extract(epoch FROM v_now) * 1000000)::bigint
                           - greatest(k.max_lease_ttl_us, v_db_lease) < k.epoch;
    END IF;
    v_rpm_sh := fleetlimit.rate_share(v_rpm, NOT n.draining, p_node_id, p_instance, p_rpm_demand, v_rpm_dem,
                                      v_rpm_ids, v_rpm_inst, v_rpm_res, v_rate_learning, p_rpm_applied);
    v_tpm_sh := fleetlimit.rate_share(v_tpm, NOT n.draining, p_node_id, p_instance, p_tpm_demand, v_tpm_dem,
                                      v_tpm_ids, v_tpm_inst, v_tpm_res, v_rate_learning, p_tpm_applied);

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
RETURNS integer LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 17 $$;
-- +goose StatementEnd

-- +goose Down

-- +goose StatementBegin
-- heartbeat_rates_at as 00009 left it.
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
RETURNS integer LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 16 $$;
-- +goose StatementEnd
