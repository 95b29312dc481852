-- Each token's own last use (ms since the epoch; NULL: never used), so that
-- `chatroom admin list-tokens` tells a token in use from a forgotten or
-- leaked one even when its agent has several. Written in the presence
-- batch, at most once a minute per token, never on a request's own path.
ALTER TABLE tokens ADD COLUMN last_used_ts INTEGER;
