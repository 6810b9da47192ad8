-- +goose Up
CREATE SCHEMA fleetlimit;

-- keys: one row per shared quota.
CREATE TABLE fleetlimit.keys (
    key            text        PRIMARY KEY CHECK (length(key) BETWEEN 1 AND 200),
    min_limit      integer     CHECK (min_limit IS NULL OR min_limit >= 1),
    max_limit      integer     CHECK (max_limit IS NULL OR max_limit >= 1),
    aggregate      text        NOT NULL DEFAULT 'lower_median' CHECK (aggregate IN ('lower_median', 'min')),
    generation     bigint      NOT NULL DEFAULT 0 CHECK (generation >= 0),
    l_global       integer     NOT NULL DEFAULT 0 CHECK (l_global >= 0),
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    CHECK (min_limit IS NULL OR max_limit IS NULL OR min_limit <= max_limit)
);

-- nodes: one row per live process on a key.
CREATE TABLE fleetlimit.nodes (
    key              text        NOT NULL REFERENCES fleetlimit.keys (key) ON DELETE CASCADE,
    node_id          text        NOT NULL CHECK (length(node_id) BETWEEN 1 AND 200),
    instance         text        NOT NULL CHECK (length(instance) BETWEEN 1 AND 200),
    seq              bigint      NOT NULL CHECK (seq >= 0),
    l_local          integer     NOT NULL CHECK (l_local >= 1),
    inflight         integer     NOT NULL CHECK (inflight >= 0),
    demand           integer     NOT NULL CHECK (demand >= 0),
    share            integer     NOT NULL DEFAULT 0 CHECK (share >= 0),
    granted_gen      bigint      NOT NULL DEFAULT 0 CHECK (granted_gen >= 0),
    applied_gen      bigint      NOT NULL DEFAULT 0 CHECK (applied_gen >= 0),
    unacked_high     integer     NOT NULL DEFAULT 0 CHECK (unacked_high >= 0),
    lease_expires_at timestamptz NOT NULL,
    draining         boolean     NOT NULL DEFAULT false,
    evicted          boolean     NOT NULL DEFAULT false,
    joined_at        timestamptz NOT NULL DEFAULT now(),
    heartbeat_at     timestamptz NOT NULL DEFAULT now(),
    labels           jsonb       NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(labels) = 'object'),
    PRIMARY KEY (key, node_id)
);

-- +goose Down
DROP SCHEMA fleetlimit CASCADE;
