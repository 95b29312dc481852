-- Mentions point at their message or note instead of copying its body, and
-- only agents of the room are indexed, at most 20 a body (the domain
-- decides which: src/domain/chat.rs). `seq` places a mention among the
-- room's messages for `my_mentions`' `since_id`, a message id: the message's
-- own id, or for a note the id of the room's newest message when the note
-- was written. `ts` stays for retention, which prunes message mentions with
-- their messages.
CREATE TABLE mentions_new (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    room       TEXT NOT NULL,
    agent      TEXT NOT NULL,
    message_id INTEGER,
    note_id    INTEGER,
    task_id    INTEGER,
    ts         INTEGER NOT NULL,
    seq        INTEGER NOT NULL
);

-- Existing rows keep working; those naming no agent at all (the `@words`
-- the old index took) go.
INSERT INTO mentions_new (id, room, agent, message_id, note_id, task_id, ts, seq)
SELECT x.id, x.room, x.agent, x.message_id, x.note_id, x.task_id, x.ts,
    COALESCE(x.message_id,
        (SELECT MAX(m.id) FROM messages m WHERE m.room = x.room AND m.ts <= x.ts), 0)
FROM mentions x
WHERE x.agent IN (SELECT lower(agent) FROM tokens);

DROP TABLE mentions;
ALTER TABLE mentions_new RENAME TO mentions;
CREATE INDEX mentions_agent ON mentions (room, agent, seq);
