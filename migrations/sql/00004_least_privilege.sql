-- Least privilege (docs/design.md §15): every function runs with a fixed
-- search_path; the ones a node or an operator calls run with the schema
-- owner's rights (SECURITY DEFINER), so those roles need no rights on the
-- tables; PUBLIC may execute nothing; fleetlimit.grant_role hands a role the
-- node's or the operator's rights. The test clock leaves the production
-- signatures: each function that took p_now is now an internal *_at twin
-- that only the owner may call, behind a wrapper that reads now(). Adds the
-- operator's key verbs: create_key, delete_key, and update_limits, a
-- partial change of the override in one statement.
--
-- Errors add FL006 key exists and FL007 nodes are live to 00002's SQLSTATEs.

-- +goose Up

ALTER FUNCTION fleetlimit.heartbeat(text, text, text, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint,
                                    jsonb, timestamptz) RENAME TO heartbeat_at;
ALTER FUNCTION fleetlimit.leave(text, text, text, bigint, bigint, timestamptz) RENAME TO leave_at;
ALTER FUNCTION fleetlimit.drain(text, text, timestamptz) RENAME TO drain_at;
ALTER FUNCTION fleetlimit.undrain(text, text, timestamptz) RENAME TO undrain_at;
ALTER FUNCTION fleetlimit.evict(text, text, timestamptz) RENAME TO evict_at;
ALTER FUNCTION fleetlimit.relearn(text, timestamptz) RENAME TO relearn_at;

-- +goose StatementBegin
-- heartbeat is heartbeat_at at now().
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
    p_labels         jsonb DEFAULT '{}'::jsonb
)
RETURNS TABLE (share integer, l_global integer, epoch bigint, generation bigint, lease_remaining_us bigint,
               status text, learning boolean, peer_inflight bigint, live_nodes integer, stale boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN QUERY SELECT * FROM fleetlimit.heartbeat_at(p_key, p_node_id, p_instance, p_seq, p_l_local, p_inflight,
        p_demand, p_epoch, p_applied_gen, p_lease_ttl_us, p_max_request_us, p_labels, now());
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION fleetlimit.leave(p_key text, p_node_id text, p_instance text, p_inflight bigint, p_hold_us bigint)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM fleetlimit.leave_at(p_key, p_node_id, p_instance, p_inflight, p_hold_us, now());
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION fleetlimit.drain(p_key text, p_node_id text)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM fleetlimit.drain_at(p_key, p_node_id, now());
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION fleetlimit.undrain(p_key text, p_node_id text)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM fleetlimit.undrain_at(p_key, p_node_id, now());
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION fleetlimit.evict(p_key text, p_node_id text)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM fleetlimit.evict_at(p_key, p_node_id, now());
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION fleetlimit.relearn(p_key text)
RETURNS timestamptz LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN fleetlimit.relearn_at(p_key, now());
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- check_limits raises FL005 for a bound outside 1..1000000 or max < min.
CREATE FUNCTION fleetlimit.check_limits(p_min integer, p_max integer)
RETURNS void LANGUAGE plpgsql IMMUTABLE AS $$
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
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- update_limits changes the override in one statement (coord.State.
-- UpdateLimits): a bound whose p_set_* is false keeps its value, one set
-- to NULL is removed. Returns the new bounds. FL005, FL003.
CREATE FUNCTION fleetlimit.update_limits(p_key text, p_set_min boolean, p_min integer, p_set_max boolean,
                                         p_max integer)
RETURNS TABLE (min_limit integer, max_limit integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    k fleetlimit.keys%ROWTYPE;
BEGIN
    PERFORM fleetlimit.check_limits(CASE WHEN p_set_min THEN p_min END, CASE WHEN p_set_max THEN p_max END);
    k := fleetlimit.lock_key(p_key);
    IF p_set_min THEN
        k.min_limit := p_min;
    END IF;
    IF p_set_max THEN
        k.max_limit := p_max;
    END IF;
    PERFORM fleetlimit.check_limits(k.min_limit, k.max_limit);
    UPDATE fleetlimit.keys AS kk SET min_limit = k.min_limit, max_limit = k.max_limit WHERE kk.key = p_key;
    RETURN QUERY SELECT k.min_limit, k.max_limit;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- create_key creates a key with an override before any node joins
-- (coord.State is NewState with the limits). FL001 for a bad name, FL005
-- for bad limits, FL006 when the key exists.
CREATE FUNCTION fleetlimit.create_key_at(p_key text, p_min integer, p_max integer, p_now timestamptz)
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM fleetlimit.check_name('key', p_key, 1);
    PERFORM fleetlimit.check_limits(p_min, p_max);
    INSERT INTO fleetlimit.keys AS kk (key, min_limit, max_limit, created_at, epoch)
         VALUES (p_key, p_min, p_max, p_now, (extract(epoch FROM p_now) * 1000000)::bigint)
        ON CONFLICT (key) DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'FL006', MESSAGE = left(quote_literal(p_key), 42);
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION fleetlimit.create_key(p_key text, p_min integer, p_max integer)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM fleetlimit.create_key_at(p_key, p_min, p_max, now());
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- delete_key deletes a key and everything on it: nodes, drains, evictions
-- (ON DELETE CASCADE). FL007 while it has live members, unless p_force;
-- FL003 for an unknown key.
CREATE FUNCTION fleetlimit.delete_key_at(p_key text, p_force boolean, p_now timestamptz)
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_live bigint;
BEGIN
    PERFORM fleetlimit.lock_key(p_key);
    SELECT count(*) INTO v_live FROM fleetlimit.nodes AS o
     WHERE o.key = p_key AND o.lease_expires_at > p_now AND NOT (o.evicted OR o.departed);
    IF v_live > 0 AND NOT coalesce(p_force, false) THEN
        RAISE EXCEPTION USING ERRCODE = 'FL007',
            MESSAGE = format('%s live nodes on key %s', v_live, left(quote_literal(p_key), 42));
    END IF;
    DELETE FROM fleetlimit.keys AS kk WHERE kk.key = p_key;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION fleetlimit.delete_key(p_key text, p_force boolean)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM fleetlimit.delete_key_at(p_key, p_force, now());
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- schema_version is the migration version this schema is at; a node checks
-- it at start. Every later migration replaces it.
CREATE FUNCTION fleetlimit.schema_version()
RETURNS integer LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 4 $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- grant_role gives p_role what a node (p_kind 'node': heartbeat and leave)
-- or an operator (p_kind 'operator': read the tables, drain, undrain,
-- evict, relearn, set and update limits and the aggregate, create and
-- delete keys) needs, and nothing more. It is the schema owner's to call.
CREATE FUNCTION fleetlimit.grant_role(p_role text, p_kind text)
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

ALTER FUNCTION fleetlimit.set_limits(text, integer, integer) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION fleetlimit.set_aggregate(text, text) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

-- +goose StatementBegin
-- Every function gets a fixed search_path, and PUBLIC may run none of
-- them: only the roles grant_role names, and the owner.
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
              WHERE n.nspname = 'fleetlimit' LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = pg_catalog, pg_temp', f);
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
END
$$;
-- +goose StatementEnd
REVOKE ALL ON ALL TABLES IN SCHEMA fleetlimit FROM PUBLIC;
REVOKE ALL ON SCHEMA fleetlimit FROM PUBLIC;

-- +goose Down

-- +goose StatementBegin
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
              WHERE n.nspname = 'fleetlimit' LOOP
        EXECUTE format('ALTER FUNCTION %s RESET search_path', f);
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO PUBLIC', f);
    END LOOP;
END
$$;
-- +goose StatementEnd
ALTER FUNCTION fleetlimit.set_limits(text, integer, integer) SECURITY INVOKER;
ALTER FUNCTION fleetlimit.set_aggregate(text, text) SECURITY INVOKER;
DROP FUNCTION fleetlimit.grant_role(text, text);
DROP FUNCTION fleetlimit.schema_version();
DROP FUNCTION fleetlimit.delete_key(text, boolean);
DROP FUNCTION fleetlimit.delete_key_at(text, boolean, timestamptz);
DROP FUNCTION fleetlimit.create_key(text, integer, integer);
DROP FUNCTION fleetlimit.create_key_at(text, integer, integer, timestamptz);
DROP FUNCTION fleetlimit.update_limits(text, boolean, integer, boolean, integer);
DROP FUNCTION fleetlimit.check_limits(integer, integer);
DROP FUNCTION fleetlimit.relearn(text);
DROP FUNCTION fleetlimit.evict(text, text);
DROP FUNCTION fleetlimit.undrain(text, text);
DROP FUNCTION fleetlimit.drain(text, text);
DROP FUNCTION fleetlimit.leave(text, text, text, bigint, bigint);
DROP FUNCTION fleetlimit.heartbeat(text, text, text, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint, jsonb);
ALTER FUNCTION fleetlimit.relearn_at(text, timestamptz) RENAME TO relearn;
ALTER FUNCTION fleetlimit.evict_at(text, text, timestamptz) RENAME TO evict;
ALTER FUNCTION fleetlimit.undrain_at(text, text, timestamptz) RENAME TO undrain;
ALTER FUNCTION fleetlimit.drain_at(text, text, timestamptz) RENAME TO drain;
ALTER FUNCTION fleetlimit.leave_at(text, text, text, bigint, bigint, timestamptz) RENAME TO leave;
ALTER FUNCTION fleetlimit.heartbeat_at(text, text, text, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint,
                                       jsonb, timestamptz) RENAME TO heartbeat;
