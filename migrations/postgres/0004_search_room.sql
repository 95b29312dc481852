-- Search is scoped to the caller's room inside the index, with no
-- extension: each indexed text also holds one lexeme naming its room ('r'
-- and the md5 of the name, so no name reads as words or syntax), and a
-- query ANDs that lexeme with the words. GIN then intersects with the
-- room's entries, so a search costs what its own room holds, whatever other
-- rooms hold (and its time tells nothing about them). The room filter on
-- the row stays, which also settles the (theoretical) lexeme collision.
CREATE FUNCTION room_search_words(room TEXT, t TEXT) RETURNS tsvector
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN search_words(t) || array_to_tsvector(ARRAY['r' || md5(room)]);

-- The query side of the room lexeme.
CREATE FUNCTION room_search_query(room TEXT) RETURNS tsquery
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN ('r' || md5(room))::tsquery;

DROP INDEX messages_search;
DROP INDEX tasks_search;
DROP INDEX notes_search;
CREATE INDEX messages_search ON messages USING GIN (room_search_words(room, body));
CREATE INDEX tasks_search ON tasks USING GIN (room_search_words(room, title || E'\n' || body));
CREATE INDEX notes_search ON notes USING GIN (room_search_words(room, body));
