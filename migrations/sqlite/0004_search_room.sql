-- Search is scoped to the caller's room inside the index: every row also
-- carries its room as one token (`room_key`, 'r' and the room name in hex,
-- so no name reads as query syntax or splits into words), and a query
-- matches that column and the words together. FTS5 then walks the room's
-- rows only, so a search costs what its own room holds, whatever other
-- rooms hold (and its time tells nothing about them). The rowid encoding
-- stays (id * 4 + 1 message, + 2 task, + 3 note).
DROP TRIGGER messages_fts_insert;
DROP TRIGGER messages_fts_delete;
DROP TRIGGER tasks_fts_insert;
DROP TRIGGER tasks_fts_update;
DROP TRIGGER tasks_fts_delete;
DROP TRIGGER notes_fts_insert;
DROP TRIGGER notes_fts_delete;
DROP TABLE search_fts;

CREATE VIRTUAL TABLE search_fts USING fts5 (
    body,
    room_key,
    room UNINDEXED,
    tokenize = 'unicode61 remove_diacritics 2'
);

INSERT INTO search_fts (rowid, body, room_key, room)
    SELECT id * 4 + 1, body, 'r' || hex(room), room FROM messages;
INSERT INTO search_fts (rowid, body, room_key, room)
    SELECT id * 4 + 2, title || char(10) || body, 'r' || hex(room), room FROM tasks;
INSERT INTO search_fts (rowid, body, room_key, room)
    SELECT id * 4 + 3, body, 'r' || hex(room), room FROM notes;

CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO search_fts (rowid, body, room_key, room)
        VALUES (new.id * 4 + 1, new.body, 'r' || hex(new.room), new.room);
END;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    DELETE FROM search_fts WHERE rowid = old.id * 4 + 1;
END;
CREATE TRIGGER tasks_fts_insert AFTER INSERT ON tasks BEGIN
    INSERT INTO search_fts (rowid, body, room_key, room)
        VALUES (new.id * 4 + 2, new.title || char(10) || new.body, 'r' || hex(new.room), new.room);
END;
CREATE TRIGGER tasks_fts_update AFTER UPDATE OF body ON tasks WHEN old.body IS NOT new.body BEGIN
    DELETE FROM search_fts WHERE rowid = old.id * 4 + 2;
    INSERT INTO search_fts (rowid, body, room_key, room)
        VALUES (new.id * 4 + 2, new.title || char(10) || new.body, 'r' || hex(new.room), new.room);
END;
CREATE TRIGGER tasks_fts_delete AFTER DELETE ON tasks BEGIN
    DELETE FROM search_fts WHERE rowid = old.id * 4 + 2;
END;
CREATE TRIGGER notes_fts_insert AFTER INSERT ON notes BEGIN
    INSERT INTO search_fts (rowid, body, room_key, room)
        VALUES (new.id * 4 + 3, new.body, 'r' || hex(new.room), new.room);
END;
CREATE TRIGGER notes_fts_delete AFTER DELETE ON notes BEGIN
    DELETE FROM search_fts WHERE rowid = old.id * 4 + 3;
END;
