-- Rate budgets (docs/design.md §17): a key may carry a request rate and a
-- token rate per minute, set by an operator and/or learned by its nodes,
-- and each node gets a demand-proportional share of each, granted and
-- acknowledged with its concurrency share. fleetlimit.heartbeat_rates is
-- fleetlimit.heartbeat followed by the rate rule, the SQL twin of
-- coord.State.Heartbeat; fleetlimit.heartbeat stays for nodes of the
-- previous version, whose rows carry no rate. set_rates is the operator's
-- partial change of a key's rates.
--
-- Rates are bigint units per minute in [0, 1000000000]; 0 is none.

-- +goose Up

ALTER TABLE fleetlimit.keys
    ADD COLUMN rpm_limit bigint NOT NULL DEFAULT 0 CHECK (rpm_limit BETWEEN 0 AND 1000000000),
    ADD COLUMN tpm_limit bigint NOT NULL DEFAULT 0 CHECK (tpm_limit BETWEEN 0 AND 1000000000),
    ADD COLUMN rpm       bigint NOT NULL DEFAULT 0 CHECK (rpm BETWEEN 0 AND 1000000000),
    ADD COLUMN tpm       bigint NOT NULL DEFAULT 0 CHECK (tpm BETWEEN 0 AND 1000000000);

ALTER TABLE fleetlimit.nodes
    ADD COLUMN rpm_local  bigint NOT NULL DEFAULT 0 CHECK (rpm_local BETWEEN 0 AND 1000000000),
    ADD COLUMN tpm_local  bigint NOT NULL DEFAULT 0 CHECK (tpm_local BETWEEN 0 AND 1000000000),
    ADD COLUMN rpm_demand bigint NOT NULL DEFAULT 0 CHECK (rpm_demand BETWEEN 0 AND 1000000000),
    ADD COLUMN tpm_demand bigint NOT NULL DEFAULT 0 CHECK (tpm_demand BETWEEN 0 AND 1000000000),
    ADD COLUMN rpm_share  bigint NOT NULL DEFAULT 0 CHECK (rpm_share BETWEEN 0 AND 1000000000),
    ADD COLUMN tpm_share  bigint NOT NULL DEFAULT 0 CHECK (tpm_share BETWEEN 0 AND 1000000000),
    ADD COLUMN rpm_high   bigint NOT NULL DEFAULT 0 CHECK (rpm_high BETWEEN 0 AND 1000000000),
    ADD COLUMN tpm_high   bigint NOT NULL DEFAULT 0 CHECK (tpm_high BETWEEN 0 AND 1000000000),
    ADD CHECK (rpm_high >= rpm_share AND tpm_high >= tpm_share);

-- +goose StatementBegin
-- rate_fold is one dimension's rate: the aggregate of the learned values
-- (lower median or min; NULL when nobody learns one) capped by the
-- operator's rate when it is not 0; the operator's rate alone without
-- learned values.
CREATE FUNCTION fleetlimit.rate_fold(p_learned bigint[], p_aggregate text, p_limit bigint)
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
-- rate_share is one dimension's share: ⌈l·want/(others + want)⌉ capped by
-- what the other rows reserve, and in learning mode by what the node
-- applies; 0 without a rate, demand or eligibility.
CREATE FUNCTION fleetlimit.rate_share(p_l bigint, p_eligible boolean, p_want bigint, p_others bigint,
                                      p_reserve bigint, p_learning boolean, p_applied bigint)
RETURNS bigint LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE
        WHEN p_l = 0 OR NOT p_eligible OR p_want = 0 THEN 0
        WHEN p_learning THEN least(p_applied, greatest(0, least((p_l * p_want + p_others + p_want - 1) / (p_others + p_want),
                                                                p_l - p_reserve)))
        ELSE greatest(0, least((p_l * p_want + p_others + p_want - 1) / (p_others + p_want), p_l - p_reserve))
    END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- heartbeat_rates_at is fleetlimit.heartbeat_at followed by the rate rule
-- (coord.State.rateGrant): the key's rates, the node's rate shares, one
-- generation for the grant when either share changes, and the rate
-- acknowledgement. Rate parameters are checked first, then the others by
-- heartbeat_at: coord.Report.Validate's order.
CREATE FUNCTION fleetlimit.heartbeat_rates_at(
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
    v_rpm_dem  bigint;
    v_tpm_dem  bigint;
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

    -- The other rows: learned rates and demand of the members, reserves of
    -- the rows whose lease runs and that did not depart.
    SELECT array_agg(o.rpm_local) FILTER (WHERE x.member AND o.rpm_local > 0),
           array_agg(o.tpm_local) FILTER (WHERE x.member AND o.tpm_local > 0),
           coalesce(sum(o.rpm_demand) FILTER (WHERE x.member AND NOT o.draining), 0),
           coalesce(sum(o.tpm_demand) FILTER (WHERE x.member AND NOT o.draining), 0),
           coalesce(sum(greatest(o.rpm_high, o.rpm_share)) FILTER (WHERE x.leased), 0),
           coalesce(sum(greatest(o.tpm_high, o.tpm_share)) FILTER (WHERE x.leased), 0)
      INTO v_rpm_votes, v_tpm_votes, v_rpm_dem, v_tpm_dem, v_rpm_res, v_tpm_res
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
    v_rpm_sh := fleetlimit.rate_share(v_rpm, NOT n.draining, p_rpm_demand, v_rpm_dem, v_rpm_res, g.learning,
                                      p_rpm_applied);
    v_tpm_sh := fleetlimit.rate_share(v_tpm, NOT n.draining, p_tpm_demand, v_tpm_dem, v_tpm_res, g.learning,
                                      p_tpm_applied);

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
-- heartbeat_rates is heartbeat_rates_at at now().
CREATE FUNCTION fleetlimit.heartbeat_rates(
    p_key text, p_node_id text, p_instance text, p_seq bigint, p_l_local bigint, p_inflight bigint,
    p_demand bigint, p_epoch bigint, p_applied_gen bigint, p_lease_ttl_us bigint, p_max_request_us bigint,
    p_labels jsonb, p_rpm_local bigint, p_tpm_local bigint, p_rpm_demand bigint, p_tpm_demand bigint,
    p_rpm_applied bigint, p_tpm_applied bigint
)
RETURNS TABLE (share integer, l_global integer, epoch bigint, generation bigint, lease_remaining_us bigint,
               status text, learning boolean, peer_inflight bigint, live_nodes integer, stale boolean,
               rpm bigint, tpm bigint, rpm_share bigint, tpm_share bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN QUERY SELECT * FROM fleetlimit.heartbeat_rates_at(p_key, p_node_id, p_instance, p_seq, p_l_local,
        p_inflight, p_demand, p_epoch, p_applied_gen, p_lease_ttl_us, p_max_request_us, p_labels, p_rpm_local,
        p_tpm_local, p_rpm_demand, p_tpm_demand, p_rpm_applied, p_tpm_applied, now());
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- set_rates changes a key's operator rates in one statement
-- (coord.State.SetRates): a rate whose p_set_* is false keeps its value,
-- 0 removes it. Returns the new rates. FL005, FL003.
CREATE FUNCTION fleetlimit.set_rates(p_key text, p_set_rpm boolean, p_rpm bigint, p_set_tpm boolean, p_tpm bigint)
RETURNS TABLE (rpm_limit bigint, tpm_limit bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    k fleetlimit.keys%ROWTYPE;
BEGIN
    IF p_set_rpm AND (p_rpm IS NULL OR p_rpm NOT BETWEEN 0 AND 1000000000) THEN
        RAISE EXCEPTION USING ERRCODE = 'FL005',
            MESSAGE = format('rpm = %s, want 0..1000000000 (0 removes it)', coalesce(p_rpm::text, 'null'));
    END IF;
    IF p_set_tpm AND (p_tpm IS NULL OR p_tpm NOT BETWEEN 0 AND 1000000000) THEN
        RAISE EXCEPTION USING ERRCODE = 'FL005',
            MESSAGE = format('tpm = %s, want 0..1000000000 (0 removes it)', coalesce(p_tpm::text, 'null'));
    END IF;
    k := fleetlimit.lock_key(p_key);
    IF p_set_rpm THEN
        k.rpm_limit := p_rpm;
    END IF;
    IF p_set_tpm THEN
        k.tpm_limit := p_tpm;
    END IF;
    UPDATE fleetlimit.keys AS kk SET rpm_limit = k.rpm_limit, tpm_limit = k.tpm_limit WHERE kk.key = p_key;
    RETURN QUERY SELECT k.rpm_limit, k.tpm_limit;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION fleetlimit.schema_version()
RETURNS integer LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 5 $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- grant_role as in 00004, with heartbeat_rates for nodes and set_rates for
-- operators.
CREATE OR REPLACE FUNCTION fleetlimit.grant_role(p_role text, p_kind text)
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF p_kind NOT IN ('node', 'operator') THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format('kind %L, want ''node'' or ''operator''', p_kind);
    END IF;
    EXECUTE format('GRANT USAGE ON SCHEMA fleetlimit TO %I', p_role);
    EXECUTE format('GRANT EXECUTE ON FUNCTION fleetlimit.schema_version() TO %I', p_role);
    IF p_kind = 'node' THEN
        EXECUTE format('GRANT EXECUTE ON FUNCTION fleetlimit.heartbeat(text, text, text, bigint, bigint, bigint, bigint, '
                       'bigint, bigint, bigint, bigint, jsonb), fleetlimit.leave(text, text, text, bigint, bigint), '
                       'fleetlimit.heartbeat_rates(text, text, text, bigint, bigint, bigint, bigint, bigint, bigint, '
                       'bigint, bigint, jsonb, bigint, bigint, bigint, bigint, bigint, bigint) TO %I',
                       p_role);
    ELSE
        EXECUTE format('GRANT SELECT ON fleetlimit.keys, fleetlimit.nodes, fleetlimit.drains, fleetlimit.evictions TO %I',
                       p_role);
        EXECUTE format('GRANT EXECUTE ON FUNCTION fleetlimit.drain(text, text), fleetlimit.undrain(text, text), '
                       'fleetlimit.evict(text, text), fleetlimit.relearn(text), '
                       'fleetlimit.set_limits(text, integer, integer), fleetlimit.set_aggregate(text, text), '
                       'fleetlimit.update_limits(text, boolean, integer, boolean, integer), '
                       'fleetlimit.create_key(text, integer, integer), fleetlimit.delete_key(text, boolean), '
                       'fleetlimit.set_rates(text, boolean, bigint, boolean, bigint) TO %I',
                       p_role);
        IF to_regclass('public.fleetlimit_schema_version') IS NOT NULL THEN
            EXECUTE format('GRANT SELECT ON public.fleetlimit_schema_version TO %I', p_role);
        END IF;
    END IF;
END
$$;
-- +goose StatementEnd

REVOKE ALL ON FUNCTION fleetlimit.rate_fold(bigint[], text, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION fleetlimit.rate_share(bigint, boolean, bigint, bigint, bigint, boolean, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION fleetlimit.heartbeat_rates_at(text, text, text, bigint, bigint, bigint, bigint, bigint, bigint,
    bigint, bigint, jsonb, bigint, bigint, bigint, bigint, bigint, bigint, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION fleetlimit.heartbeat_rates(text, text, text, bigint, bigint, bigint, bigint, bigint, bigint,
    bigint, bigint, jsonb, bigint, bigint, bigint, bigint, bigint, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION fleetlimit.set_rates(text, boolean, bigint, boolean, bigint) FROM PUBLIC;

-- +goose StatementBegin
-- The roles that may already heartbeat (fleetlimit.heartbeat) get the
-- heartbeat that carries rates, and those that may already set a key's
-- limits (fleetlimit.set_limits, an operator's) may set its rates: this
-- migration's down drops both functions, so without this a rollback to
-- version 4 and a later up would leave the rights grant_role gave short
-- of what it gives. PUBLIC too, if a deployment opened them to it.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END AS grantee,
                    p.oid = 'fleetlimit.set_limits(text, integer, integer)'::regprocedure AS operator
               FROM pg_proc AS p CROSS JOIN LATERAL aclexplode(p.proacl) AS a
              WHERE p.oid IN ('fleetlimit.heartbeat(text, text, text, bigint, bigint, bigint, bigint, bigint, bigint, '
                              'bigint, bigint, jsonb)'::regprocedure,
                              'fleetlimit.set_limits(text, integer, integer)'::regprocedure)
                AND a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner LOOP
        IF r.operator THEN
            EXECUTE format('GRANT EXECUTE ON FUNCTION fleetlimit.set_rates(text, boolean, bigint, boolean, bigint) TO %s',
                           r.grantee);
        ELSE
            EXECUTE format('GRANT EXECUTE ON FUNCTION fleetlimit.heartbeat_rates(text, text, text, bigint, bigint, bigint, '
                           'bigint, bigint, bigint, bigint, bigint, jsonb, bigint, bigint, bigint, bigint, bigint, bigint) TO %s',
                           r.grantee);
        END IF;
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose Down

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION fleetlimit.grant_role(p_role text, p_kind text)
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF p_kind NOT IN ('node', 'operator') THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format('kind %L, want ''node'' or ''operator''', p_kind);
    END IF;
    EXECUTE format('GRANT USAGE ON SCHEMA fleetlimit TO %I', p_role);
    EXECUTE format('GRANT EXECUTE ON FUNCTION fleetlimit.schema_version() TO %I', p_role);
    IF p_kind = 'node' THEN
        EXECUTE format('GRANT EXECUTE ON FUNCTION fleetlimit.heartbeat(text, text, text, bigint, bigint, bigint, bigint, '
                       'bigint, bigint, bigint, bigint, jsonb), fleetlimit.leave(text, text, text, bigint, bigint) TO %I',
                       p_role);
    ELSE
        EXECUTE format('GRANT SELECT ON fleetlimit.keys, fleetlimit.nodes, fleetlimit.drains, fleetlimit.evictions TO %I',
                       p_role);
        EXECUTE format('GRANT EXECUTE ON FUNCTION fleetlimit.drain(text, text), fleetlimit.undrain(text, text), '
                       'fleetlimit.evict(text, text), fleetlimit.relearn(text), '
                       'fleetlimit.set_limits(text, integer, integer), fleetlimit.set_aggregate(text, text), '
                       'fleetlimit.update_limits(text, boolean, integer, boolean, integer), '
                       'fleetlimit.create_key(text, integer, integer), fleetlimit.delete_key(text, boolean) TO %I',
                       p_role);
        IF to_regclass('public.fleetlimit_schema_version') IS NOT NULL THEN
            EXECUTE format('GRANT SELECT ON public.fleetlimit_schema_version TO %I', p_role);
        END IF;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION fleetlimit.schema_version()
RETURNS integer LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 4 $$;
-- +goose StatementEnd
DROP FUNCTION fleetlimit.set_rates(text, boolean, bigint, boolean, bigint);
DROP FUNCTION fleetlimit.heartbeat_rates(text, text, text, bigint, bigint, bigint, bigint, bigint, bigint, bigint,
    bigint, jsonb, bigint, bigint, bigint, bigint, bigint, bigint);
DROP FUNCTION fleetlimit.heartbeat_rates_at(text, text, text, bigint, bigint, bigint, bigint, bigint, bigint, bigint,
    bigint, jsonb, bigint, bigint, bigint, bigint, bigint, bigint, timestamptz);
DROP FUNCTION fleetlimit.rate_share(bigint, boolean, bigint, bigint, bigint, boolean, bigint);
DROP FUNCTION fleetlimit.rate_fold(bigint[], text, bigint);
ALTER TABLE fleetlimit.nodes
    DROP COLUMN rpm_local, DROP COLUMN tpm_local, DROP COLUMN rpm_demand, DROP COLUMN tpm_demand,
    DROP COLUMN rpm_share, DROP COLUMN tpm_share, DROP COLUMN rpm_high, DROP COLUMN tpm_high;
ALTER TABLE fleetlimit.keys DROP COLUMN rpm_limit, DROP COLUMN tpm_limit, DROP COLUMN rpm, DROP COLUMN tpm;
