-- The database remembers its incarnation beside its keys, and a key is
-- not deleted while the database may have lost its state (docs/design.md
-- §9, §10).
--
-- Learning mode belonged to a key: it started when the key saw the
-- database's incarnation change, or when a report proved a loss. A key
-- all of whose heartbeats were lost had nothing to compare: a failover
-- back to before the key existed (or before its first heartbeat) let the
-- first heartbeat after it, from a node that applied no grant, be granted
-- capacity beside the forgotten grants of the nodes that still ran. Now
-- table database_state, which no key owns, records the incarnation and
-- the longest lease and request bound any key recorded; when the
-- incarnation changes, the database enters learning mode for them, and a
-- key whose incarnation was never recorded (created, or never checked,
-- since) takes that learning mode with a new epoch.
--
-- delete_key's refusals read the key's rows. After a failover to a
-- replica that missed the last heartbeats, a restore or a crash that lost
-- commits, those rows can show nodes that still run and hold grants as
-- expired and holding nothing, and the delete went through: the nodes'
-- next heartbeats re-created the key without its min, max and rates.
-- Now delete_key also refuses, with FL009, unless p_force, while the rows
-- cannot be trusted: while the key last saw another incarnation of the
-- database (a refusal rolls back, so it stays refused until a heartbeat,
-- a drain or an eviction records the new one and starts learning mode)
-- and while it is in learning mode. When learning mode ends, every node
-- that may still hold a grant has heartbeat since, and its row is a
-- member or holds its reserve.

-- +goose Up

-- database_state is what the database remembers beside its keys
-- (coord.Database): the incarnation it last saw, the learning mode it
-- entered when that changed, and the longest lease and request bound any
-- key recorded (they never shrink; a key's delete keeps them).
CREATE TABLE fleetlimit.database_state (
    one              boolean     PRIMARY KEY DEFAULT true CHECK (one),
    incarnation      text        NOT NULL,
    learning_until   timestamptz,
    max_lease_ttl_us bigint      NOT NULL DEFAULT 0 CHECK (max_lease_ttl_us >= 0),
    max_request_us   bigint      NOT NULL DEFAULT 0 CHECK (max_request_us >= 0)
);
INSERT INTO fleetlimit.database_state (incarnation, max_lease_ttl_us, max_request_us)
SELECT fleetlimit.incarnation(), coalesce(max(k.max_lease_ttl_us), 0), coalesce(max(k.max_request_us), 0)
  FROM fleetlimit.keys AS k;

-- +goose StatementBegin
-- record_bounds keeps database_state's maxima at least every key's.
CREATE FUNCTION fleetlimit.record_bounds()
RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    UPDATE fleetlimit.database_state AS d
       SET max_lease_ttl_us = greatest(d.max_lease_ttl_us, NEW.max_lease_ttl_us),
           max_request_us = greatest(d.max_request_us, NEW.max_request_us)
     WHERE d.max_lease_ttl_us < NEW.max_lease_ttl_us OR d.max_request_us < NEW.max_request_us;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION fleetlimit.record_bounds() FROM PUBLIC;
CREATE TRIGGER record_bounds_insert AFTER INSERT ON fleetlimit.keys
    FOR EACH ROW WHEN (NEW.max_lease_ttl_us > 0 OR NEW.max_request_us > 0)
    EXECUTE FUNCTION fleetlimit.record_bounds();
CREATE TRIGGER record_bounds_update AFTER UPDATE OF max_lease_ttl_us, max_request_us ON fleetlimit.keys
    FOR EACH ROW WHEN (NEW.max_lease_ttl_us > OLD.max_lease_ttl_us OR NEW.max_request_us > OLD.max_request_us)
    EXECUTE FUNCTION fleetlimit.record_bounds();

-- +goose StatementBegin
-- incarnate checks the database's incarnation for a locked key
-- (coord.Database.Check, then coord.State.Incarnate). First the
-- database's own record: when its incarnation is not the database's, the
-- database may have lost state; it records the new one and enters
-- learning mode for the longest lease plus request bound any key
-- recorded, from now (none: a history without a heartbeat has no grant to
-- forget). Then the key's: its first check records the incarnation and
-- takes the database's learning mode, with a new epoch (a key created, or
-- never checked, since a loss may be one whose grants were lost with it);
-- a key that recorded another incarnation enters learning mode.
CREATE OR REPLACE FUNCTION fleetlimit.incarnate(k fleetlimit.keys, p_now timestamptz)
RETURNS fleetlimit.keys LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_inc text := fleetlimit.incarnation();
    d fleetlimit.database_state%ROWTYPE;
BEGIN
    SELECT * INTO d FROM fleetlimit.database_state;
    IF NOT FOUND OR d.incarnation <> v_inc THEN
        -- A row deleted by hand comes back with the keys' bounds, as the
        -- migration made it.
        INSERT INTO fleetlimit.database_state (incarnation, max_lease_ttl_us, max_request_us)
        SELECT v_inc, coalesce(max(kk.max_lease_ttl_us), 0), coalesce(max(kk.max_request_us), 0)
          FROM fleetlimit.keys AS kk
            ON CONFLICT (one) DO NOTHING;
        SELECT * INTO d FROM fleetlimit.database_state FOR UPDATE;
        IF d.incarnation <> v_inc THEN
            d.learning_until := greatest(d.learning_until,
                                         p_now + (d.max_lease_ttl_us + d.max_request_us) * interval '1 microsecond');
            d.incarnation := v_inc;
            UPDATE fleetlimit.database_state AS dd SET incarnation = d.incarnation, learning_until = d.learning_until;
        END IF;
    END IF;
    IF k.incarnation IS NULL THEN
        k.incarnation := v_inc;
        IF d.learning_until > p_now THEN
            k.epoch := greatest((extract(epoch FROM p_now) * 1000000)::bigint, k.epoch + 1);
            k.learning_until := greatest(k.learning_until, d.learning_until);
        END IF;
    ELSIF k.incarnation <> v_inc THEN
        k := fleetlimit.learn(k, p_now, 0, 0);
        k.incarnation := v_inc;
    END IF;
    RETURN k;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- delete_key deletes a key and everything on it: nodes, drains, evictions
-- (ON DELETE CASCADE). It checks the incarnation first (incarnate). Unless
-- p_force: FL009 while the key's rows may not show what its nodes hold
-- (the key last saw another incarnation of the database, or it is in
-- learning mode; a refusal rolls the check back), FL007 while it has live members,
-- FL008 while a row that is no member still holds back capacity: a
-- reserve above 0 until its hold ends, a rate reserve while its lease
-- runs (evicted, not departed). FL003 for an unknown key.
CREATE OR REPLACE FUNCTION fleetlimit.delete_key_at(p_key text, p_force boolean, p_now timestamptz)
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    k0 fleetlimit.keys%ROWTYPE;
    k fleetlimit.keys%ROWTYPE;
    v_live bigint;
    v_held bigint;
    v_reserve bigint;
    v_rated bigint;
    v_until timestamptz;
BEGIN
    k0 := fleetlimit.lock_key(p_key);
    k := fleetlimit.incarnate(k0, p_now);
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
    ELSIF k0.incarnation IS DISTINCT FROM k.incarnation AND (k0.incarnation IS NOT NULL OR k.learning_until > p_now) THEN
        RAISE EXCEPTION USING ERRCODE = 'FL009',
            MESSAGE = format('key %s has not been checked since the database''s incarnation changed',
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
-- incarnate checks the database's incarnation against a locked key's
-- (coord.State.Incarnate): the first check records it; a change puts the
-- key in learning mode.
CREATE OR REPLACE FUNCTION fleetlimit.incarnate(k fleetlimit.keys, p_now timestamptz)
RETURNS fleetlimit.keys LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_inc text := fleetlimit.incarnation();
BEGIN
    IF k.incarnation IS NULL THEN
        k.incarnation := v_inc;
    ELSIF k.incarnation <> v_inc THEN
        k := fleetlimit.learn(k, p_now, 0, 0);
        k.incarnation := v_inc;
    END IF;
    RETURN k;
END
$$;
-- +goose StatementEnd

DROP TRIGGER record_bounds_update ON fleetlimit.keys;
DROP TRIGGER record_bounds_insert ON fleetlimit.keys;
DROP FUNCTION fleetlimit.record_bounds();
DROP TABLE fleetlimit.database_state;

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
