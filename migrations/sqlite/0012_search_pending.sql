-- The full-text index is written once per commit, not once per write. FTS5
-- flushes what it holds in memory to a new segment at every savepoint, and
-- the writer runs each write of a group commit in a savepoint of its own:
-- one segment per message, then merges. The triggers now put a new or
-- changed row's text in `search_pending`, a plain table that savepoints
-- cost nothing in; the writer moves it into `search_fts` just before the
-- commit (one segment for the whole batch), in the same transaction, so a
-- committed row is always searchable. Deletes reach both tables at once.
CREATE TABLE search_pending (
    id       INTEGER PRIMARY KEY,  -- the search_fts rowid (id * 4 + 1, 2, 3)
    body     TEXT NOT NULL,
    room_key TEXT NOT NULL,
    room     TEXT NOT NULL
);

DROP TRIGGER messages_fts_insert;
DROP TRIGGER messages_fts_delete;
DROP TRIGGER tasks_fts_insert;
DROP TRIGGER tasks_fts_update;
DROP TRIGGER tasks_fts_delete;
DROP TRIGGER notes_fts_insert;
DROP TRIGGER notes_fts_delete;

CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT OR REPLACE INTO search_pending (id, body, room_key, room)
        VALUES (new.id * 4 + 1, new.body, 'r' || hex(new.room), new.room);
END;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    DELETE FROM search_fts WHERE rowid = old.id * 4 + 1;
    DELETE FROM search_pending WHERE id = old.id * 4 + 1;
END;
CREATE TRIGGER tasks_fts_insert AFTER INSERT ON tasks BEGIN
    INSERT OR REPLACE INTO search_pending (id, body, room_key, room)
        VALUES (new.id * 4 + 2, new.title || char(10) || new.body, 'r' || hex(new.room), new.room);
END;
CREATE TRIGGER tasks_fts_update AFTER UPDATE OF body ON tasks WHEN old.body IS NOT new.body BEGIN
    DELETE FROM search_fts WHERE rowid = old.id * 4 + 2;
    INSERT OR REPLACE INTO search_pending (id, body, room_key, room)
        VALUES (new.id * 4 + 2, new.title || char(10) || new.body, 'r' || hex(new.room), new.room);
END;
CREATE TRIGGER tasks_fts_delete AFTER DELETE ON tasks BEGIN
    DELETE FROM search_fts WHERE rowid = old.id * 4 + 2;
    DELETE FROM search_pending WHERE id = old.id * 4 + 2;
END;
CREATE TRIGGER notes_fts_insert AFTER INSERT ON notes BEGIN
    INSERT OR REPLACE INTO search_pending (id, body, room_key, room)
        VALUES (new.id * 4 + 3, new.body, 'r' || hex(new.room), new.room);
END;
CREATE TRIGGER notes_fts_delete AFTER DELETE ON notes BEGIN
    DELETE FROM search_fts WHERE rowid = old.id * 4 + 3;
    DELETE FROM search_pending WHERE id = old.id * 4 + 3;
END;
