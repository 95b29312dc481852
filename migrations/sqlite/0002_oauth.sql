-- OAuth 2.1 for apps that sign in (SPEC §2a). Every secret (connect code,
-- authorization code, access and refresh token, client secret) is stored
-- only as the hex SHA-256 of its raw value.

-- Clients registered through dynamic client registration (RFC 7591). A
-- client that never completes an authorization (`used_ts` NULL) is
-- forgotten after a day.
CREATE TABLE oauth_clients (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    client_id     TEXT NOT NULL UNIQUE,
    secret_hash   TEXT,
    client_name   TEXT NOT NULL,
    redirect_uris TEXT NOT NULL DEFAULT '[]',
    auth_method   TEXT NOT NULL,
    created_ts    INTEGER NOT NULL,
    used_ts       INTEGER
);
CREATE INDEX oauth_clients_unused ON oauth_clients (created_ts) WHERE used_ts IS NULL;

-- One-time connect codes minted by `chatroom admin connect`: what the grant
-- approved with the code will hold.
CREATE TABLE oauth_connect_codes (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    hash       TEXT NOT NULL UNIQUE,
    agent      TEXT NOT NULL,
    room       TEXT NOT NULL,
    also_rooms TEXT NOT NULL DEFAULT '[]',
    readonly   INTEGER NOT NULL DEFAULT 0,
    admin      INTEGER NOT NULL DEFAULT 0,
    all_rooms  INTEGER NOT NULL DEFAULT 0,
    lead       INTEGER NOT NULL DEFAULT 0,
    skills     TEXT NOT NULL DEFAULT '[]',
    created_ts INTEGER NOT NULL,
    expires_ts INTEGER NOT NULL,
    used_ts    INTEGER
);

-- An app's standing permission: the identity and rooms of the connect code
-- that approved it. Revoking it ends every token issued under it.
CREATE TABLE oauth_grants (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    client_id   TEXT NOT NULL,
    client_name TEXT NOT NULL,
    agent       TEXT NOT NULL,
    room        TEXT NOT NULL,
    also_rooms  TEXT NOT NULL DEFAULT '[]',
    readonly    INTEGER NOT NULL DEFAULT 0,
    admin       INTEGER NOT NULL DEFAULT 0,
    all_rooms   INTEGER NOT NULL DEFAULT 0,
    lead        INTEGER NOT NULL DEFAULT 0,
    skills      TEXT NOT NULL DEFAULT '[]',
    created_ts  INTEGER NOT NULL,
    revoked_ts  INTEGER
);
CREATE INDEX oauth_grants_agent ON oauth_grants (agent);

-- Authorization codes (one use, ten minutes), bound to their client,
-- redirect URI and PKCE challenge.
CREATE TABLE oauth_auth_codes (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    hash           TEXT NOT NULL UNIQUE,
    grant_id       INTEGER NOT NULL REFERENCES oauth_grants (id) ON DELETE CASCADE,
    client_id      TEXT NOT NULL,
    redirect_uri   TEXT NOT NULL,
    code_challenge TEXT NOT NULL,
    resource       TEXT,
    created_ts     INTEGER NOT NULL,
    expires_ts     INTEGER NOT NULL,
    used_ts        INTEGER
);

-- Access and refresh tokens of a grant. A refresh token is spent by its one
-- use (`spent_ts`); presenting a spent one revokes the grant.
CREATE TABLE oauth_tokens (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    hash       TEXT NOT NULL UNIQUE,
    grant_id   INTEGER NOT NULL REFERENCES oauth_grants (id) ON DELETE CASCADE,
    kind       TEXT NOT NULL,
    created_ts INTEGER NOT NULL,
    expires_ts INTEGER NOT NULL,
    spent_ts   INTEGER
);
CREATE INDEX oauth_tokens_grant ON oauth_tokens (grant_id);

-- Keys of the server itself (the consent form's CSRF key), shared by every
-- replica.
CREATE TABLE oauth_keys (
    name       TEXT PRIMARY KEY,
    value      TEXT NOT NULL,
    created_ts INTEGER NOT NULL
);
