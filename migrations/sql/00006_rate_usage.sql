-- Rate usage (docs/design.md §17): each node reports what it sent in the
-- minute before each heartbeat, requests and tokens (the estimates
-- debited, corrected by the settled costs), so an operator sees
-- each node's usage next to its rate share. Usage is shown, never used by
-- the rate rule. fleetlimit.heartbeat_rates_at gains p_rpm_used and
-- p_tpm_used and stores them where it stores the rate demand (a report
-- that is neither stale nor from a departed row); the 18-parameter form
-- stays for nodes of the previous version, which leave usage at 0.

-- +goose Up

ALTER TABLE fleetlimit.nodes
    ADD COLUMN rpm_used bigint NOT NULL DEFAULT 0 CHECK (rpm_used BETWEEN 0 AND 1000000000),
    ADD COLUMN tpm_used bigint NOT NULL DEFAULT 0 CHECK (tpm_used BETWEEN 0 AND 1000000000);

-- +goose StatementBegin
CREATE FUNCTION fleetlimit.heartbeat_rates_at(
    p_key text, p_node_id text, p_instance text, p_seq bigint, p_l_local bigint, p_inflight bigint,
    p_demand bigint, p_epoch bigint, p_applied_gen bigint, p_lease_ttl_us bigint, p_max_request_us bigint,
    p_labels jsonb, p_rpm_local bigint, p_tpm_local bigint, p_rpm_demand bigint, p_tpm_demand bigint,
    p_rpm_applied bigint, p_tpm_applied bigint, p_rpm_used bigint, p_tpm_used bigint, p_now timestamptz
)
RETURNS TABLE (share integer, l_global integer, epoch bigint, generation bigint, lease_remaining_us bigint,
               status text, learning boolean, peer_inflight bigint, live_nodes integer, stale boolean,
               rpm bigint, tpm bigint, rpm_share bigint, tpm_share bigint)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    v_departed boolean;
    g          record;
BEGIN
    PERFORM fleetlimit.check_count('rate_used.requests', p_rpm_used, 0, 1000000000);
    PERFORM fleetlimit.check_count('rate_used.tokens', p_tpm_used, 0, 1000000000);
    SELECT nn.departed INTO v_departed FROM fleetlimit.nodes AS nn
     WHERE nn.key = p_key AND nn.node_id = p_node_id AND nn.instance = p_instance;
    SELECT * INTO g FROM fleetlimit.heartbeat_rates_at(p_key, p_node_id, p_instance, p_seq, p_l_local, p_inflight,
        p_demand, p_epoch, p_applied_gen, p_lease_ttl_us, p_max_request_us, p_labels, p_rpm_local, p_tpm_local,
        p_rpm_demand, p_tpm_demand, p_rpm_applied, p_tpm_applied, p_now) AS h;
    IF NOT g.stale AND NOT coalesce(v_departed, false) THEN
        UPDATE fleetlimit.nodes AS o SET rpm_used = p_rpm_used, tpm_used = p_tpm_used
         WHERE o.key = p_key AND o.node_id = p_node_id AND o.instance = p_instance;
    END IF;
    RETURN QUERY SELECT g.share, g.l_global, g.epoch, g.generation, g.lease_remaining_us, g.status, g.learning,
        g.peer_inflight, g.live_nodes, g.stale, g.rpm, g.tpm, g.rpm_share, g.tpm_share;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- heartbeat_rates is heartbeat_rates_at at now().
CREATE FUNCTION fleetlimit.heartbeat_rates(
    p_key text, p_node_id text, p_instance text, p_seq bigint, p_l_local bigint, p_inflight bigint,
    p_demand bigint, p_epoch bigint, p_applied_gen bigint, p_lease_ttl_us bigint, p_max_request_us bigint,
    p_labels jsonb, p_rpm_local bigint, p_tpm_local bigint, p_rpm_demand bigint, p_tpm_demand bigint,
    p_rpm_applied bigint, p_tpm_applied bigint, p_rpm_used bigint, p_tpm_used bigint
)
RETURNS TABLE (share integer, l_global integer, epoch bigint, generation bigint, lease_remaining_us bigint,
               status text, learning boolean, peer_inflight bigint, live_nodes integer, stale boolean,
               rpm bigint, tpm bigint, rpm_share bigint, tpm_share bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN QUERY SELECT * FROM fleetlimit.heartbeat_rates_at(p_key, p_node_id, p_instance, p_seq, p_l_local,
        p_inflight, p_demand, p_epoch, p_applied_gen, p_lease_ttl_us, p_max_request_us, p_labels, p_rpm_local,
        p_tpm_local, p_rpm_demand, p_tpm_demand, p_rpm_applied, p_tpm_applied, p_rpm_used, p_tpm_used, now());
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION fleetlimit.schema_version()
RETURNS integer LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 6 $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- grant_role as in 00005, with the heartbeat_rates that carries usage.
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
                       'bigint, bigint, jsonb, bigint, bigint, bigint, bigint, bigint, bigint), '
                       'fleetlimit.heartbeat_rates(text, text, text, bigint, bigint, bigint, bigint, bigint, bigint, '
                       'bigint, bigint, jsonb, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint) TO %I',
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

REVOKE ALL ON FUNCTION fleetlimit.heartbeat_rates_at(text, text, text, bigint, bigint, bigint, bigint, bigint, bigint,
    bigint, bigint, jsonb, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION fleetlimit.heartbeat_rates(text, text, text, bigint, bigint, bigint, bigint, bigint, bigint,
    bigint, bigint, jsonb, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint) FROM PUBLIC;

-- +goose StatementBegin
-- The roles that may already heartbeat (fleetlimit.heartbeat or the
-- heartbeat_rates of 00005, by grant_role or by hand; PUBLIC too, if a
-- deployment opened them to it) get both heartbeats that carry rates, so
-- that nodes keep heartbeating once they run the version that needs this
-- schema.
DO $$
DECLARE
    r text;
BEGIN
    FOR r IN SELECT DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END
               FROM pg_proc AS p CROSS JOIN LATERAL aclexplode(p.proacl) AS a
              WHERE p.oid IN ('fleetlimit.heartbeat(text, text, text, bigint, bigint, bigint, bigint, bigint, bigint, '
                              'bigint, bigint, jsonb)'::regprocedure,
                              'fleetlimit.heartbeat_rates(text, text, text, bigint, bigint, bigint, bigint, bigint, '
                              'bigint, bigint, bigint, jsonb, bigint, bigint, bigint, bigint, bigint, bigint)'::regprocedure)
                AND a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION fleetlimit.heartbeat_rates(text, text, text, bigint, bigint, bigint, '
                       'bigint, bigint, bigint, bigint, bigint, jsonb, bigint, bigint, bigint, bigint, bigint, bigint), '
                       'fleetlimit.heartbeat_rates(text, text, text, bigint, bigint, bigint, bigint, bigint, bigint, '
                       'bigint, bigint, jsonb, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint) TO %s', r);
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

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION fleetlimit.schema_version()
RETURNS integer LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 5 $$;
-- +goose StatementEnd
DROP FUNCTION fleetlimit.heartbeat_rates(text, text, text, bigint, bigint, bigint, bigint, bigint, bigint, bigint,
    bigint, jsonb, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint);
DROP FUNCTION fleetlimit.heartbeat_rates_at(text, text, text, bigint, bigint, bigint, bigint, bigint, bigint, bigint,
    bigint, jsonb, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint, timestamptz);
ALTER TABLE fleetlimit.nodes DROP COLUMN rpm_used, DROP COLUMN tpm_used;
