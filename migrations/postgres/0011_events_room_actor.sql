-- whats_new's window (the ids after a cursor, each with whether its actor is
-- the caller) is an index-only scan of this index, however far behind the
-- cursor is: the actor rides in the index, so no heap row is fetched for it
-- (where the visibility map is current).
CREATE INDEX events_room_actor ON events (room, id) INCLUDE (actor);
DROP INDEX events_room;
-- Fresh statistics for the new index (autovacuum may not have run yet).
ANALYZE events;
