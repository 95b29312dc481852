-- Webhooks out, inbound URLs and stuck-task marks (SPEC §7a).
--
-- `webhooks`: one row per outbound target. Its delivery queue is the room's
-- events after `cursor` (the last event delivered or passed over), so the
-- queue is as durable as the events; the row holds the retry state of the
-- event at the head (`attempts`, `next_ts`, `first_fail_ts`), the failure
-- count that pauses it, and a lease (`lease_owner`, `lease_until`) so one
-- replica delivers at a time. `secret` signs (`standard`): it is needed
-- itself, and never logged.
CREATE TABLE webhooks (
    id            BIGSERIAL PRIMARY KEY,
    room          TEXT NOT NULL,
    url           TEXT NOT NULL,
    format        TEXT NOT NULL,
    events        TEXT NOT NULL,
    secret        TEXT,
    created_ts    BIGINT NOT NULL,
    cursor        BIGINT NOT NULL DEFAULT 0,
    attempts      BIGINT NOT NULL DEFAULT 0,
    next_ts       BIGINT NOT NULL DEFAULT 0,
    first_fail_ts BIGINT,
    failures      BIGINT NOT NULL DEFAULT 0,
    paused        BOOLEAN NOT NULL DEFAULT FALSE,
    delivered     BIGINT NOT NULL DEFAULT 0,
    last_ts       BIGINT,
    last_status   TEXT,
    lease_owner   TEXT,
    lease_until   BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX webhooks_room ON webhooks (room);

-- `inbound_hooks`: a URL `/v1/inbound/{key}` that posts as `agent` in
-- `room`. The secret is kept to check HMAC signatures (Standard Webhooks,
-- GitHub), which need it; a bearer secret is checked by its SHA-256.
CREATE TABLE inbound_hooks (
    id           BIGSERIAL PRIMARY KEY,
    key          TEXT NOT NULL UNIQUE,
    room         TEXT NOT NULL,
    agent        TEXT NOT NULL,
    secret       TEXT NOT NULL,
    secret_hash  TEXT NOT NULL,
    created_ts   BIGINT NOT NULL,
    last_used_ts BIGINT
);

-- `task_stuck`: the last activity time a task's `task_stuck` event was for,
-- so each stuck period gets one event.
CREATE TABLE task_stuck (
    task_id     BIGINT PRIMARY KEY,
    activity_ts BIGINT NOT NULL
);
