-- OAuth sign-in under load: one refresh-token chain per grant, the
-- redirect_uri rule of the token endpoint, and indexes for the prune.

-- A grant's refresh token lives on the grant itself: the current one, the
-- one it replaced (a retry within the grace period gets the same answer),
-- when it was replaced and when the current one expires. Spent tokens are
-- not kept row by row: a spent token still names its grant and carries a
-- tag only the server can make, so its reuse is recognised however old it
-- is, and storage stays one row per grant however often it refreshes.
ALTER TABLE oauth_grants ADD COLUMN refresh_hash TEXT;
ALTER TABLE oauth_grants ADD COLUMN refresh_prev_hash TEXT;
ALTER TABLE oauth_grants ADD COLUMN refresh_rotated_ts BIGINT;
ALTER TABLE oauth_grants ADD COLUMN refresh_expires_ts BIGINT;
CREATE INDEX oauth_grants_refresh ON oauth_grants (refresh_hash);
CREATE INDEX oauth_grants_refresh_prev ON oauth_grants (refresh_prev_hash);

-- Each grant's live refresh token moves onto it; the rows of spent ones go.
UPDATE oauth_grants SET
    refresh_hash = (SELECT t.hash FROM oauth_tokens t WHERE t.grant_id = oauth_grants.id
        AND t.kind = 'refresh' AND t.spent_ts IS NULL ORDER BY t.id DESC LIMIT 1),
    refresh_expires_ts = (SELECT t.expires_ts FROM oauth_tokens t WHERE t.grant_id = oauth_grants.id
        AND t.kind = 'refresh' AND t.spent_ts IS NULL ORDER BY t.id DESC LIMIT 1);
DELETE FROM oauth_tokens WHERE kind = 'refresh';

-- Whether the authorization request named its redirect_uri (then the
-- token request must name it again, RFC 6749 §4.1.3).
ALTER TABLE oauth_auth_codes ADD COLUMN redirect_uri_given BOOLEAN NOT NULL DEFAULT false;

-- The prune finds expired rows by index and deletes them in small batches.
CREATE INDEX oauth_tokens_expires ON oauth_tokens (expires_ts);
CREATE INDEX oauth_auth_codes_expires ON oauth_auth_codes (expires_ts);
CREATE INDEX oauth_connect_codes_expires ON oauth_connect_codes (expires_ts);
