-- Waiting members (docs/design.md §4, step 9): a grant counts the key's
-- other members that want capacity — demand > 0 at their last report, not
-- draining — and hold a share of 0 (coord.Grant.Waiting), when more
-- members want capacity than L_global holds: the floors of 1 then add up
-- to more than L_global, and a node whose share is 0 stays so until a
-- holder's demand ends; a holder that sees members waiting can take
-- turns with them.
-- fleetlimit.heartbeat_waiting is fleetlimit.heartbeat_rates (the 20-
-- parameter form of 00006) followed by that count, returned as one more
-- column. heartbeat, heartbeat_rates and their *_at twins are left as
-- they are, so nodes of the previous version keep heartbeating during a
-- rolling upgrade.

-- +goose Up

-- +goose StatementBegin
-- heartbeat_waiting_at is fleetlimit.heartbeat_rates_at followed by the
-- count of the key's other rows (not this node id and instance) that are
-- members (lease running, neither evicted nor departed), not draining,
-- with demand > 0 and a share of 0, as stored at their last report — 0
-- unless the members that want capacity (those rows, this one included,
-- whatever their share) outnumber L_global: while every floor of 1 fits,
-- a member granted 0 gets its floor once the reserves drain. The
-- count is taken after heartbeat_rates_at, in the same transaction and
-- under its lock on the key, over the same rows coord.State.Heartbeat
-- counts on every path: the fresh grant (the rows whose hold ended are
-- deleted by then, and were no members), a stale report, a departed or
-- evicted row (its own row is left out), an evicted instance whose row
-- has gone (it has no row to leave out).
CREATE FUNCTION fleetlimit.heartbeat_waiting_at(
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
    p_rpm_used       bigint,
    p_tpm_used       bigint,
    p_now            timestamptz
)
RETURNS TABLE (share integer, l_global integer, epoch bigint, generation bigint, lease_remaining_us bigint,
               status text, learning boolean, peer_inflight bigint, live_nodes integer, stale boolean,
               rpm bigint, tpm bigint, rpm_share bigint, tpm_share bigint, waiting integer)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    v_now     timestamptz := coalesce(p_now, now());
    g         record;
    v_waiting bigint;
    v_wanting bigint;
BEGIN
    SELECT * INTO g FROM fleetlimit.heartbeat_rates_at(p_key, p_node_id, p_instance, p_seq, p_l_local, p_inflight,
        p_demand, p_epoch, p_applied_gen, p_lease_ttl_us, p_max_request_us, p_labels, p_rpm_local, p_tpm_local,
        p_rpm_demand, p_tpm_demand, p_rpm_applied, p_tpm_applied, p_rpm_used, p_tpm_used, v_now) AS h;
    SELECT count(*) FILTER (WHERE NOT (o.node_id = p_node_id AND o.instance = p_instance) AND o.share = 0),
           count(*)
      INTO v_waiting, v_wanting
      FROM fleetlimit.nodes AS o
     WHERE o.key = p_key AND o.lease_expires_at > v_now AND NOT (o.evicted OR o.departed)
       AND NOT o.draining AND o.demand > 0;
    IF v_wanting <= g.l_global THEN
        v_waiting := 0; -- every floor of 1 fits
    END IF;
    RETURN QUERY SELECT g.share, g.l_global, g.epoch, g.generation, g.lease_remaining_us, g.status, g.learning,
        g.peer_inflight, g.live_nodes, g.stale, g.rpm, g.tpm, g.rpm_share, g.tpm_share, v_waiting::integer;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- heartbeat_waiting is heartbeat_waiting_at at now().
CREATE FUNCTION fleetlimit.heartbeat_waiting(
    p_key text, p_node_id text, p_instance text, p_seq bigint, p_l_local bigint, p_inflight bigint,
    p_demand bigint, p_epoch bigint, p_applied_gen bigint, p_lease_ttl_us bigint, p_max_request_us bigint,
    p_labels jsonb, p_rpm_local bigint, p_tpm_local bigint, p_rpm_demand bigint, p_tpm_demand bigint,
    p_rpm_applied bigint, p_tpm_applied bigint, p_rpm_used bigint, p_tpm_used bigint
)
RETURNS TABLE (share integer, l_global integer, epoch bigint, generation bigint, lease_remaining_us bigint,
               status text, learning boolean, peer_inflight bigint, live_nodes integer, stale boolean,
               rpm bigint, tpm bigint, rpm_share bigint, tpm_share bigint, waiting integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN QUERY SELECT * FROM fleetlimit.heartbeat_waiting_at(p_key, p_node_id, p_instance, p_seq, p_l_local,
        p_inflight, p_demand, p_epoch, p_applied_gen, p_lease_ttl_us, p_max_request_us, p_labels, p_rpm_local,
        p_tpm_local, p_rpm_demand, p_tpm_demand, p_rpm_applied, p_tpm_applied, p_rpm_used, p_tpm_used, now());
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION fleetlimit.schema_version()
RETURNS integer LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 8 $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- grant_role as in 00006, with heartbeat_waiting for nodes.
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
                       'bigint, bigint, jsonb, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint), '
                       'fleetlimit.heartbeat_waiting(text, text, text, bigint, bigint, bigint, bigint, bigint, bigint, '
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

REVOKE ALL ON FUNCTION fleetlimit.heartbeat_waiting_at(text, text, text, bigint, bigint, bigint, bigint, bigint, bigint,
    bigint, bigint, jsonb, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION fleetlimit.heartbeat_waiting(text, text, text, bigint, bigint, bigint, bigint, bigint, bigint,
    bigint, bigint, jsonb, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint) FROM PUBLIC;

-- +goose StatementBegin
-- The roles that may already heartbeat with rates (either form of
-- heartbeat_rates, by grant_role or by hand, directly or through a role
-- they inherit from) get heartbeat_waiting, so that nodes keep
-- heartbeating once they run the version that needs this schema. When
-- PUBLIC may (a deployment opened them to it), PUBLIC gets it, which
-- covers every role, present and future. Predefined roles (pg_*) and
-- superusers, who need no grant, are skipped.
DO $$
DECLARE
    v_rates  regprocedure[] := ARRAY[
        'fleetlimit.heartbeat_rates(text, text, text, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint, '
        'jsonb, bigint, bigint, bigint, bigint, bigint, bigint)'::regprocedure,
        'fleetlimit.heartbeat_rates(text, text, text, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint, '
        'jsonb, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint)'::regprocedure];
    v_grant  text := 'GRANT EXECUTE ON FUNCTION fleetlimit.heartbeat_waiting(text, text, text, bigint, bigint, '
        'bigint, bigint, bigint, bigint, bigint, bigint, jsonb, bigint, bigint, bigint, bigint, bigint, bigint, '
        'bigint, bigint) TO %s';
    r        name;
BEGIN
    IF EXISTS (SELECT 1 FROM unnest(v_rates) AS f WHERE has_function_privilege('public', f, 'EXECUTE')) THEN
        EXECUTE format(v_grant, 'PUBLIC');
        RETURN;
    END IF;
    FOR r IN SELECT a.rolname FROM pg_roles AS a
              WHERE a.rolname NOT LIKE 'pg\_%' AND NOT a.rolsuper
                AND EXISTS (SELECT 1 FROM unnest(v_rates) AS f WHERE has_function_privilege(a.oid, f, 'EXECUTE'))
              ORDER BY a.rolname LOOP
        EXECUTE format(v_grant, quote_ident(r));
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose Down

-- +goose StatementBegin
-- grant_role as in 00006.
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

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION fleetlimit.schema_version()
RETURNS integer LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 7 $$;
-- +goose StatementEnd
DROP FUNCTION fleetlimit.heartbeat_waiting(text, text, text, bigint, bigint, bigint, bigint, bigint, bigint, bigint,
    bigint, jsonb, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint);
DROP FUNCTION fleetlimit.heartbeat_waiting_at(text, text, text, bigint, bigint, bigint, bigint, bigint, bigint, bigint,
    bigint, jsonb, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint, timestamptz);
