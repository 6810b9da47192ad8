-- The key listing shows the keys whose next heartbeat will start learning
-- mode (docs/design.md §10).
--
-- A key learns that the database lost state only when it is checked: at a
-- heartbeat, or an operator's drain, undrain or eviction of one of its
-- nodes. Until then the listing read its learning mode from the key's
-- row, which a loss restores as it was, so a key not checked since a
-- failover, a restore or a server restart showed as normal while its next
-- heartbeat would put it in learning mode, and delete_key refused it.
-- Telling needs the database's incarnation, which only the owner computes
-- (fleetlimit.incarnation() is not open to operators), and the database's
-- own record, which operators cannot read. unchecked_keys, run with the
-- owner's rights, names those keys.

-- +goose Up

-- +goose StatementBegin
-- unchecked_keys_at lists the keys whose next heartbeat at p_now puts
-- them in learning mode whatever its report, as fleetlimit.incarnate
-- would (coord.State.Unchecked): a key that recorded another incarnation
-- of the database than the current one, and a key that recorded none
-- while the database's own check leaves it in learning mode — its record
-- is of another incarnation and holds a lease or request bound, or it is
-- in learning mode already. (A key that recorded none may also learn for
-- its first heartbeat's own bounds; that depends on the report.) A
-- missing database_state row counts as incarnate re-creates it: of the
-- current incarnation, not learning. It lists nothing on a server in
-- recovery, which cannot tell its incarnation (keys are checked on the
-- primary).
CREATE FUNCTION fleetlimit.unchecked_keys_at(p_now timestamptz)
RETURNS TABLE (key text) LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_inc text;
BEGIN
    IF pg_is_in_recovery() THEN
        RETURN;
    END IF;
    v_inc := fleetlimit.incarnation();
    RETURN QUERY
    SELECT k.key FROM fleetlimit.keys AS k LEFT JOIN fleetlimit.database_state AS d ON true
     WHERE k.incarnation <> v_inc
        OR k.incarnation IS NULL
           AND (d.incarnation <> v_inc AND d.max_lease_ttl_us + d.max_request_us > 0 OR d.learning_until > p_now);
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION fleetlimit.unchecked_keys_at(timestamptz) FROM PUBLIC;

-- +goose StatementBegin
-- unchecked_keys is unchecked_keys_at at now(), with the owner's rights.
CREATE FUNCTION fleetlimit.unchecked_keys()
RETURNS TABLE (key text) LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN QUERY SELECT * FROM fleetlimit.unchecked_keys_at(now());
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION fleetlimit.unchecked_keys() FROM PUBLIC;

-- +goose StatementBegin
-- The roles granted SELECT on the keys themselves (an operator, by
-- grant_role or by hand; not a role that only inherits it, which the role
-- it inherits from covers) get unchecked_keys, so that their key listing
-- keeps showing which keys are unchecked. When PUBLIC holds it (a
-- deployment opened the table to it), PUBLIC gets it. Superusers, who need
-- no grant, are skipped.
DO $$
DECLARE
    v_grant text := 'GRANT EXECUTE ON FUNCTION fleetlimit.unchecked_keys() TO %s';
    r       text;
BEGIN
    FOR r IN SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(o.rolname) END
               FROM pg_class AS c CROSS JOIN aclexplode(c.relacl) AS a
               LEFT JOIN pg_roles AS o ON o.oid = a.grantee
              WHERE c.oid = 'fleetlimit.keys'::regclass AND a.privilege_type = 'SELECT'
                AND (a.grantee = 0 OR NOT o.rolsuper)
              ORDER BY 1 LOOP
        EXECUTE format(v_grant, r);
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- grant_role as in 00008, with unchecked_keys for operators.
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
                       'fleetlimit.set_rates(text, boolean, bigint, boolean, bigint), fleetlimit.unchecked_keys() TO %I',
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
RETURNS integer LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 14 $$;
-- +goose StatementEnd

-- +goose Down

-- +goose StatementBegin
-- grant_role as in 00008.
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

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION fleetlimit.schema_version()
RETURNS integer LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 13 $$;
-- +goose StatementEnd
DROP FUNCTION fleetlimit.unchecked_keys();
DROP FUNCTION fleetlimit.unchecked_keys_at(timestamptz);
