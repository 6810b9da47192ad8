-- A key is not deleted while capacity is held on it (docs/design.md §9).
--
-- delete_key refused only while the key had live members. The rows of
-- instances that expired, left or were evicted with requests that may
-- still run hold their reserve until their hold ends, and that reserve
-- is what keeps the members' shares from the capacity those requests
-- use. Deleting the key threw it away with the rows: the first node to
-- come back re-created the key and was granted the whole L_global beside
-- them. Now delete_key also refuses, with FL008, while a row that is no
-- member holds back capacity, unless p_force: a reserve above 0 (its hold
-- has not ended), or a rate reserve (an evicted instance whose lease
-- runs, which may still send).

-- +goose Up

-- +goose StatementBegin
-- delete_key deletes a key and everything on it: nodes, drains, evictions
-- (ON DELETE CASCADE). Unless p_force: FL007 while it has live members,
-- FL008 while a row that is no member still holds back capacity: a
-- reserve above 0 until its hold ends, a rate reserve while its lease
-- runs (evicted, not departed). FL003 for an unknown key.
CREATE OR REPLACE FUNCTION fleetlimit.delete_key_at(p_key text, p_force boolean, p_now timestamptz)
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_live bigint;
    v_held bigint;
    v_reserve bigint;
    v_rated bigint;
    v_until timestamptz;
BEGIN
    PERFORM fleetlimit.lock_key(p_key);
    SELECT count(*) FILTER (WHERE h.member),
           count(*) FILTER (WHERE h.slots OR h.rates),
           coalesce(sum(greatest(o.unacked_high, o.share, o.inflight)) FILTER (WHERE h.slots), 0),
           count(*) FILTER (WHERE h.rates),
           max(greatest(CASE WHEN h.slots THEN o.hold_until END, CASE WHEN h.rates THEN o.lease_expires_at END))
      INTO v_live, v_held, v_reserve, v_rated, v_until
      FROM fleetlimit.nodes AS o
     CROSS JOIN LATERAL (SELECT o.lease_expires_at > p_now AND NOT (o.evicted OR o.departed) AS member) AS m
     CROSS JOIN LATERAL (SELECT m.member,
                                NOT m.member AND o.hold_until > p_now
                                    AND greatest(o.unacked_high, o.share, o.inflight) > 0 AS slots,
                                NOT m.member AND o.lease_expires_at > p_now AND NOT o.departed
                                    AND greatest(o.rpm_high, o.rpm_share, o.tpm_high, o.tpm_share) > 0 AS rates) AS h
     WHERE o.key = p_key;
    IF coalesce(p_force, false) THEN
        NULL;
    ELSIF v_live > 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'FL007',
            MESSAGE = format('%s live %s on key %s', v_live, CASE WHEN v_live = 1 THEN 'node' ELSE 'nodes' END,
                             left(quote_literal(p_key), 42));
    ELSIF v_held > 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'FL008',
            MESSAGE = format('%s %s %s %s%s on key %s until %s', v_held,
                             CASE WHEN v_held = 1 THEN 'row holds' ELSE 'rows hold' END, v_reserve,
                             CASE WHEN v_reserve = 1 THEN 'slot' ELSE 'slots' END,
                             CASE WHEN v_rated > 0 THEN ' and a rate reserve' ELSE '' END, left(quote_literal(p_key), 42),
                             to_char(v_until AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'));
    END IF;
    DELETE FROM fleetlimit.keys AS kk WHERE kk.key = p_key;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION fleetlimit.schema_version()
RETURNS integer LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 10 $$;
-- +goose StatementEnd

-- +goose Down

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION fleetlimit.delete_key_at(p_key text, p_force boolean, p_now timestamptz)
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
CREATE OR REPLACE FUNCTION fleetlimit.schema_version()
RETURNS integer LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 9 $$;
-- +goose StatementEnd
