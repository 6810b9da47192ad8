-- The key listing shows the keys that will enter learning mode at their next
-- check (docs/design.md §10).
--
-- A key learns that the database lost state only when it is checked: at a
-- heartbeat, or an operator's drain, undrain or eviction. Until
-- then the listing read its learning mode from the key's row, which a
-- loss restores as it was, so a key not checked since a failover, a
-- restore or a server restart showed as normal while its next heartbeat
-- would put it in learning mode, and delete_key refused it. Telling needs
-- the database's incarnation, which only the owner computes
-- (fleetlimit.incarnation() is not open to operators), and the database's
-- own record, which operators cannot read. unchecked_keys, run with the
-- owner's rights, names those keys.

-- +goose Up

-- +goose StatementBegin
-- unchecked_keys lists the keys whose next check puts them in learning
-- mode, as fleetlimit.incarnate would (coord.State.Incarnate): a key that
-- recorded another incarnation of the database than the current one, and
-- a key that never recorded one while the database's own record is of
-- another incarnation and holds a lease or request bound (the database's
-- check then enters learning mode, and the key's first check takes it).
-- It lists nothing on a server in recovery, which cannot tell its
-- incarnation (a primary's keys are checked on the primary).
CREATE FUNCTION fleetlimit.unchecked_keys()
RETURNS TABLE (key text) LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_inc text;
BEGIN
    IF pg_is_in_recovery() THEN
        RETURN;
    END IF;
    v_inc := fleetlimit.incarnation();
    RETURN QUERY
    SELECT k.key FROM fleetlimit.keys AS k CROSS JOIN fleetlimit.database_state AS d
     WHERE k.incarnation <> v_inc
        OR k.incarnation IS NULL AND d.incarnation <> v_inc AND (d.max_lease_ttl_us > 0 OR d.max_request_us > 0);
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION fleetlimit.unchecked_keys() FROM PUBLIC;

-- +goose StatementBegin
-- The roles that may already read the keys (an operator, by grant_role or
-- by hand, directly or through a role they inherit from) get
-- unchecked_keys, so that their key listing keeps working. When PUBLIC
-- may read them (a deployment opened the table to it), PUBLIC gets it.
-- Predefined roles (pg_*) and superusers, who need no grant, are skipped.
DO $$
DECLARE
    v_grant text := 'GRANT EXECUTE ON FUNCTION fleetlimit.unchecked_keys() TO %s';
    r       name;
BEGIN
    IF has_table_privilege('public', 'fleetlimit.keys', 'SELECT') THEN
        EXECUTE format(v_grant, 'PUBLIC');
        RETURN;
    END IF;
    FOR r IN SELECT a.rolname FROM pg_roles AS a
              WHERE a.rolname NOT LIKE 'pg\_%' AND NOT a.rolsuper
                AND has_table_privilege(a.oid, 'fleetlimit.keys', 'SELECT')
              ORDER BY a.rolname LOOP
        EXECUTE format(v_grant, quote_ident(r));
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
