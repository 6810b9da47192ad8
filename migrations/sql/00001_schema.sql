-- +goose Up
CREATE SCHEMA fleetlimit;

-- keys: one row per shared quota. Every write to a key's rows (heartbeats,
-- operator actions) first locks this row FOR UPDATE, so they serialize per
-- key and never deadlock.
CREATE TABLE fleetlimit.keys (
    key        text        PRIMARY KEY CHECK (octet_length(key) BETWEEN 1 AND 200),
    min_limit  integer     CHECK (min_limit BETWEEN 1 AND 1000000),
    max_limit  integer     CHECK (max_limit BETWEEN 1 AND 1000000),
    aggregate  text        NOT NULL DEFAULT 'lower_median' CHECK (aggregate IN ('lower_median', 'min')),
    generation bigint      NOT NULL DEFAULT 0 CHECK (generation >= 0),
    l_global   integer     NOT NULL DEFAULT 0 CHECK (l_global BETWEEN 0 AND 1000000),
    created_at timestamptz NOT NULL DEFAULT now(),
    CHECK (min_limit IS NULL OR max_limit IS NULL OR min_limit <= max_limit)
);

-- nodes: one row per process on a key. A heartbeat rewrites its row in
-- place; no indexed column changes, so with free space on the page the
-- update is HOT and the table does not bloat.
CREATE TABLE fleetlimit.nodes (
    key              text        NOT NULL REFERENCES fleetlimit.keys (key) ON DELETE CASCADE,
    node_id          text        NOT NULL CHECK (octet_length(node_id) BETWEEN 1 AND 200),
    instance         text        NOT NULL CHECK (octet_length(instance) BETWEEN 1 AND 200),
    seq              bigint      NOT NULL CHECK (seq >= 0),
    l_local          integer     NOT NULL CHECK (l_local BETWEEN 1 AND 1000000),
    inflight         integer     NOT NULL CHECK (inflight BETWEEN 0 AND 1000000),
    demand           integer     NOT NULL CHECK (demand BETWEEN 0 AND 1000000),
    share            integer     NOT NULL DEFAULT 0 CHECK (share BETWEEN 0 AND 1000000),
    granted_gen      bigint      NOT NULL DEFAULT 0 CHECK (granted_gen >= 0),
    applied_gen      bigint      NOT NULL DEFAULT 0 CHECK (applied_gen >= 0),
    unacked_high     integer     NOT NULL DEFAULT 0 CHECK (unacked_high BETWEEN 0 AND 1000000),
    lease_expires_at timestamptz NOT NULL,
    draining         boolean     NOT NULL DEFAULT false,
    evicted          boolean     NOT NULL DEFAULT false,
    joined_at        timestamptz NOT NULL DEFAULT now(),
    heartbeat_at     timestamptz NOT NULL DEFAULT now(),
    labels           jsonb       NOT NULL DEFAULT '{}'::jsonb
                                 CHECK (jsonb_typeof(labels) = 'object' AND pg_column_size(labels) <= 16384),
    PRIMARY KEY (key, node_id),
    CHECK (unacked_high >= share),
    CHECK (NOT (draining OR evicted) OR share = 0)
) WITH (fillfactor = 50);

-- +goose Down
DROP SCHEMA fleetlimit CASCADE;
