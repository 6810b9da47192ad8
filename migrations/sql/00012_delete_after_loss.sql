-- A key is not deleted while the database may have lost its state
-- (docs/design.md §9, §10).
--
-- delete_key's refusals read the key's rows. After a failover to a
-- replica that missed the last heartbeats, a restore or a crash that lost
-- commits, those rows can show nodes that still run and hold grants as
-- expired and holding nothing, and the delete went through: the nodes'
-- next heartbeats re-created the key without its min, max and rates.
-- Now delete_key also refuses, with FL009, unless p_force, while the rows
-- cannot be trusted: while the key last saw another incarnation of the
-- database (no heartbeat has checked it since the change; the next one
-- puts it in learning mode) and while it is in learning mode. When
-- learning mode ends, every node that may still hold a grant has
-- heartbeat since, and its row is a member or holds its reserve.

-- +goose Up

-- +goose StatementBegin
-- delete_key deletes a key and everything on it: nodes, drains, evictions
-- (ON DELETE CASCADE). Unless p_force: FL009 while the key's rows may not
-- show what its nodes hold (the key last saw another incarnation of the
-- database, or it is in learning mode), FL007 while it has live members,
-- FL008 while a row that is no member still holds back capacity: a
-- reserve above 0 until its hold ends, a rate reserve while its lease
-- runs (evicted, not departed). FL003 for an unknown key.
CREATE OR REPLACE FUNCTION fleetlimit.delete_key_at(p_key text, p_force boolean, p_now timestamptz)
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    k fleetlimit.keys%ROWTYPE;
    v_live bigint;
    v_held bigint;
    v_reserve bigint;
    v_rated bigint;
    v_until timestamptz;
BEGIN
    k := fleetlimit.lock_key(p_key);
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
    ELSIF k.incarnation IS NOT NULL AND k.incarnation <> fleetlimit.incarnation() THEN
        RAISE EXCEPTION USING ERRCODE = 'FL009',
            MESSAGE = format('key %s last heard from its nodes under another incarnation of the database',
                             left(quote_literal(p_key), 42));
    ELSIF k.learning_until > p_now THEN
        RAISE EXCEPTION USING ERRCODE = 'FL009',
            MESSAGE = format('key %s is in learning mode until %s', left(quote_literal(p_key), 42),
                             to_char(k.learning_until AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'));
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
RETURNS integer LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 12 $$;
-- +goose StatementEnd

-- +goose Down

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
RETURNS integer LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 11 $$;
-- +goose StatementEnd
