-- whats_new's window (the ids after a cursor, each with whether its actor is
-- the caller) is read from this index alone, however far behind the cursor
-- is: the actor sits in the index, so no table row is fetched for it.
CREATE INDEX events_room_actor ON events (room, id, actor);
DROP INDEX events_room;
