-- The whole schema of a chatroom instance on SQLite.
-- Times are milliseconds since the Unix epoch. AUTOINCREMENT keeps ids from
-- ever being reused after pruning, so no cursor points at a recycled id.

CREATE TABLE rooms (
    name             TEXT PRIMARY KEY NOT NULL,
    description      TEXT NOT NULL DEFAULT '',
    repo_url         TEXT NOT NULL DEFAULT '',
    onboarding_notes TEXT NOT NULL DEFAULT '',
    retention_days   INTEGER NOT NULL DEFAULT 0,
    created_ts       INTEGER NOT NULL
);

CREATE TABLE tokens (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    hash       TEXT NOT NULL UNIQUE,
    agent      TEXT NOT NULL,
    room       TEXT NOT NULL,
    also_rooms TEXT NOT NULL DEFAULT '[]',
    readonly   INTEGER NOT NULL DEFAULT 0,
    admin      INTEGER NOT NULL DEFAULT 0,
    all_rooms  INTEGER NOT NULL DEFAULT 0,
    lead       INTEGER NOT NULL DEFAULT 0,
    skills     TEXT NOT NULL DEFAULT '[]',
    created_ts INTEGER NOT NULL,
    revoked_ts INTEGER
);
CREATE INDEX tokens_agent ON tokens (agent);

CREATE TABLE presence (
    room         TEXT NOT NULL,
    agent        TEXT NOT NULL,
    last_seen_ts INTEGER NOT NULL,
    PRIMARY KEY (room, agent)
) WITHOUT ROWID;

CREATE TABLE messages (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    room     TEXT NOT NULL,
    ts       INTEGER NOT NULL,
    author   TEXT NOT NULL,
    body     TEXT NOT NULL,
    reply_to INTEGER
);
CREATE INDEX messages_room ON messages (room, id);

CREATE TABLE events (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    room       TEXT NOT NULL,
    ts         INTEGER NOT NULL,
    kind       TEXT NOT NULL,
    actor      TEXT NOT NULL,
    task_id    INTEGER,
    message_id INTEGER,
    detail     TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX events_room ON events (room, id);
CREATE INDEX events_task ON events (task_id) WHERE task_id IS NOT NULL;

CREATE TABLE cursors (
    room     TEXT NOT NULL,
    agent    TEXT NOT NULL,
    event_id INTEGER NOT NULL,
    PRIMARY KEY (room, agent)
) WITHOUT ROWID;

CREATE TABLE audit (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    ts      INTEGER NOT NULL,
    agent   TEXT NOT NULL,
    room    TEXT,
    tool    TEXT NOT NULL,
    task_id INTEGER,
    outcome TEXT NOT NULL
);

CREATE TABLE admin_log (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    ts      INTEGER NOT NULL,
    actor   TEXT NOT NULL,
    address TEXT NOT NULL,
    action  TEXT NOT NULL,
    target  TEXT NOT NULL,
    flagged INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE tasks (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    room             TEXT NOT NULL,
    title            TEXT NOT NULL,
    body             TEXT NOT NULL DEFAULT '',
    status           TEXT NOT NULL,
    assignee         TEXT,
    version          INTEGER NOT NULL DEFAULT 1,
    created_by       TEXT NOT NULL,
    created_ts       INTEGER NOT NULL,
    updated_ts       INTEGER NOT NULL,
    priority         TEXT NOT NULL DEFAULT 'normal',
    required_skill   TEXT,
    needs_review     INTEGER NOT NULL DEFAULT 0,
    result           TEXT,
    lease_seconds    INTEGER,
    lease_expires_ts INTEGER
);
CREATE INDEX tasks_room ON tasks (room, id);
CREATE INDEX tasks_lease ON tasks (lease_expires_ts) WHERE lease_expires_ts IS NOT NULL;

CREATE TABLE task_deps (
    task_id    INTEGER NOT NULL,
    depends_on INTEGER NOT NULL,
    PRIMARY KEY (task_id, depends_on)
) WITHOUT ROWID;
CREATE INDEX task_deps_rev ON task_deps (depends_on);

CREATE TABLE notes (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id INTEGER NOT NULL,
    room    TEXT NOT NULL,
    ts      INTEGER NOT NULL,
    author  TEXT NOT NULL,
    body    TEXT NOT NULL
);
CREATE INDEX notes_task ON notes (task_id, id);

CREATE TABLE mentions (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    room       TEXT NOT NULL,
    agent      TEXT NOT NULL,
    message_id INTEGER,
    note_id    INTEGER,
    task_id    INTEGER,
    author     TEXT NOT NULL,
    ts         INTEGER NOT NULL,
    body       TEXT NOT NULL
);
CREATE INDEX mentions_agent ON mentions (room, agent, id);

CREATE TABLE files (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    room       TEXT NOT NULL,
    name       TEXT NOT NULL,
    mime       TEXT NOT NULL,
    size       INTEGER NOT NULL,
    sha256     TEXT NOT NULL,
    content    BLOB NOT NULL,
    author     TEXT NOT NULL,
    ts         INTEGER NOT NULL,
    expires_ts INTEGER,
    task_id    INTEGER
);
CREATE INDEX files_room ON files (room, id);

-- Full-text search over messages, task titles and bodies, and notes. The
-- rowid encodes what a row indexes (id * 4 + 1 message, + 2 task, + 3 note),
-- so keeping the index in step is a rowid lookup, never a scan.
CREATE VIRTUAL TABLE search_fts USING fts5 (
    body,
    room UNINDEXED,
    tokenize = 'unicode61 remove_diacritics 2'
);

CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO search_fts (rowid, body, room) VALUES (new.id * 4 + 1, new.body, new.room);
END;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    DELETE FROM search_fts WHERE rowid = old.id * 4 + 1;
END;
CREATE TRIGGER tasks_fts_insert AFTER INSERT ON tasks BEGIN
    INSERT INTO search_fts (rowid, body, room) VALUES (new.id * 4 + 2, new.title || char(10) || new.body, new.room);
END;
CREATE TRIGGER tasks_fts_update AFTER UPDATE OF body ON tasks WHEN old.body IS NOT new.body BEGIN
    DELETE FROM search_fts WHERE rowid = old.id * 4 + 2;
    INSERT INTO search_fts (rowid, body, room) VALUES (new.id * 4 + 2, new.title || char(10) || new.body, new.room);
END;
CREATE TRIGGER tasks_fts_delete AFTER DELETE ON tasks BEGIN
    DELETE FROM search_fts WHERE rowid = old.id * 4 + 2;
END;
CREATE TRIGGER notes_fts_insert AFTER INSERT ON notes BEGIN
    INSERT INTO search_fts (rowid, body, room) VALUES (new.id * 4 + 3, new.body, new.room);
END;
CREATE TRIGGER notes_fts_delete AFTER DELETE ON notes BEGIN
    DELETE FROM search_fts WHERE rowid = old.id * 4 + 3;
END;
