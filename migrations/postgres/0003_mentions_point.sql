-- Mentions point at their message or note instead of copying its body, and
-- only agents of the room are indexed, at most 20 a body (the domain
-- decides which: src/domain/chat.rs). `seq` places a mention among the
-- room's messages for `my_mentions`' `since_id`, a message id: the message's
-- own id, or for a note the id of the room's newest message when the note
-- was written. `ts` stays for retention, which prunes message mentions with
-- their messages.
ALTER TABLE mentions ADD COLUMN seq BIGINT;
UPDATE mentions x SET seq = COALESCE(x.message_id,
    (SELECT MAX(m.id) FROM messages m WHERE m.room = x.room AND m.ts <= x.ts), 0);
ALTER TABLE mentions ALTER COLUMN seq SET NOT NULL;

-- Existing rows keep working; those naming no agent at all (the `@words`
-- the old index took) go.
DELETE FROM mentions WHERE agent NOT IN (SELECT lower(agent) FROM tokens);

ALTER TABLE mentions DROP COLUMN author, DROP COLUMN body;
DROP INDEX mentions_agent;
CREATE INDEX mentions_agent ON mentions (room, agent, seq);
