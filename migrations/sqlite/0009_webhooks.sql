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
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    room          TEXT NOT NULL,
    url           TEXT NOT NULL,
    format        TEXT NOT NULL,
    events        TEXT NOT NULL,
    secret        TEXT,
    created_ts    INTEGER NOT NULL,
    cursor        INTEGER NOT NULL DEFAULT 0,
    attempts      INTEGER NOT NULL DEFAULT 0,
    next_ts       INTEGER NOT NULL DEFAULT 0,
    first_fail_ts INTEGER,
    failures      INTEGER NOT NULL DEFAULT 0,
    paused        INTEGER NOT NULL DEFAULT 0,
    delivered     INTEGER NOT NULL DEFAULT 0,
    last_ts       INTEGER,
    last_status   TEXT,
    lease_owner   TEXT,
    lease_until   INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX webhooks_room ON webhooks (room);

-- `inbound_hooks`: a URL `/v1/inbound/{key}` that posts as `agent` in
-- `room`. The secret is kept to check HMAC signatures (Standard Webhooks,
-- GitHub), which need it; a bearer secret is checked by its SHA-256.
CREATE TABLE inbound_hooks (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    key          TEXT NOT NULL UNIQUE,
    room         TEXT NOT NULL,
    agent        TEXT NOT NULL,
    secret       TEXT NOT NULL,
    secret_hash  TEXT NOT NULL,
    created_ts   INTEGER NOT NULL,
    last_used_ts INTEGER
);

-- `task_stuck`: the last activity time a task's `task_stuck` event was for,
-- so each stuck period gets one event.
CREATE TABLE task_stuck (
    task_id     INTEGER PRIMARY KEY,
    activity_ts INTEGER NOT NULL
);
