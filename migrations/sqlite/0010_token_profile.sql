-- Tool profiles (SPEC §3): which MCP tools a token sees and may call.
-- NULL is `full` (every tool): every token, connect code and grant made before;
-- a connect code's profile passes to the OAuth grant it approves.
ALTER TABLE tokens ADD COLUMN profile TEXT;
ALTER TABLE oauth_connect_codes ADD COLUMN profile TEXT;
ALTER TABLE oauth_grants ADD COLUMN profile TEXT;
