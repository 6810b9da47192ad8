-- The database's incarnation is read afresh at every call
-- (docs/design.md §10).
--
-- fleetlimit.incarnation() read the cluster's system identifier, the
-- database's oid and the server's start time once per session and kept
-- them in the setting fleetlimit.cluster. Any session may set a
-- custom setting, so a node's session (or its connection string's
-- options) could carry a value from before a server restart or a
-- restore, and its heartbeats would then not see the loss: its key would
-- grant capacity the forgotten grants still use, outside learning mode.
-- The three values are cheap to read (the control file, a catalog row,
-- shared memory), so incarnation() now reads them every time and no
-- setting is consulted.

-- +goose Up

-- +goose StatementBegin
-- incarnation names the database history this session writes to: the
-- cluster's system identifier, the database's oid (a restored dump gets a
-- new one), the server's start time (a restore from a file-system
-- snapshot or a base backup, or a crash with fsync off, can only show
-- itself by a restart, so every server start counts as a possible loss),
-- the keys table's oid and the timeline of the current WAL (a promoted
-- replica or a point-in-time restore starts a new one), all read at the
-- call: no session state can stand in for them.
CREATE OR REPLACE FUNCTION fleetlimit.incarnation()
RETURNS text LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN concat_ws('/',
        (SELECT system_identifier FROM pg_control_system()),
        (SELECT oid FROM pg_database WHERE datname = current_database()),
        (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint,
        'fleetlimit.keys'::regclass::oid,
        substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8));
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION fleetlimit.schema_version()
RETURNS integer LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 15 $$;
-- +goose StatementEnd

-- +goose Down

-- +goose StatementBegin
-- incarnation as in 00003, with the search_path 00004 fixed.
CREATE OR REPLACE FUNCTION fleetlimit.incarnation()
RETURNS text LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_cluster text := current_setting('fleetlimit.cluster', true);
BEGIN
    IF v_cluster IS NULL OR v_cluster = '' THEN
        v_cluster := concat_ws('/',
            (SELECT system_identifier FROM pg_control_system()),
            (SELECT oid FROM pg_database WHERE datname = current_database()),
            (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint);
        PERFORM set_config('fleetlimit.cluster', v_cluster, false);
    END IF;
    RETURN concat_ws('/', v_cluster, 'fleetlimit.keys'::regclass::oid,
                     substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8));
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION fleetlimit.schema_version()
RETURNS integer LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT 14 $$;
-- +goose StatementEnd
