-- Each token's own last use (ms since the epoch; NULL: never used), so that
-- `chatroom admin list-tokens` tells a token in use from a forgotten or
-- leaked one even when its agent has several. Written in the presence
-- batch, at most once a minute per token, never on a request's own path.
ALTER TABLE tokens ADD COLUMN last_used_ts BIGINT;

-- Replicas keep the tokens they read (0005). Recording a use changes no
-- grant, so it must not make every replica forget its tokens: the trigger
-- now fires for updates of every column but last_used_ts.
DROP TRIGGER tokens_cache_changed ON tokens;
CREATE TRIGGER tokens_cache_changed
    AFTER UPDATE OF hash, agent, room, also_rooms, readonly, admin, all_rooms, lead, skills, created_ts, revoked_ts
    OR DELETE OR TRUNCATE ON tokens
    FOR EACH STATEMENT EXECUTE FUNCTION chatroom_cache_changed();
