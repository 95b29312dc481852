-- Each replica keeps the tokens, rooms and OAuth access tokens (with their
-- grants) it has read in memory, so that a call does not pay two round
-- trips before its own statement. Every change of these tables, by any
-- replica, by `chatroom admin` or by hand, is announced on `chatroom_cache`
-- when it commits; each replica's listener then forgets what it kept of
-- that table. A new row needs no
-- announcement: rows not found are never kept.
CREATE FUNCTION chatroom_cache_changed() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('chatroom_cache', TG_TABLE_NAME);
    RETURN NULL;
END
$$;

CREATE TRIGGER tokens_cache_changed AFTER UPDATE OR DELETE OR TRUNCATE ON tokens
    FOR EACH STATEMENT EXECUTE FUNCTION chatroom_cache_changed();
CREATE TRIGGER rooms_cache_changed AFTER UPDATE OR DELETE OR TRUNCATE ON rooms
    FOR EACH STATEMENT EXECUTE FUNCTION chatroom_cache_changed();
CREATE TRIGGER oauth_tokens_cache_changed AFTER UPDATE OR DELETE OR TRUNCATE ON oauth_tokens
    FOR EACH STATEMENT EXECUTE FUNCTION chatroom_cache_changed();
CREATE TRIGGER oauth_grants_cache_changed AFTER UPDATE OR DELETE OR TRUNCATE ON oauth_grants
    FOR EACH STATEMENT EXECUTE FUNCTION chatroom_cache_changed();
