//! The OAuth tables on SQLite (see `domain::oauth` for what they mean).

use async_trait::async_trait;
use rusqlite::params;

use super::{SqliteStore, exec, insert, json_list, row};
use crate::domain::oauth::{AUTH_CODE_TTL_MS, UNUSED_CLIENT_TTL_MS};
use crate::domain::oauth::{
    CodeTake, GrantRecord, NewConnectCode, NewOAuthToken, OAuthClient, OAuthTokenRecord, Rotation,
};
use crate::domain::store::oauth::{ClientLimit, ConnectApproval, OAuthStore};
use crate::error::{Error, Result};

/// Rows one prune batch deletes: each batch is its own short write, so the
/// single writer is never held long, however much has expired.
const PRUNE_BATCH: i64 = 500;

#[async_trait]
impl OAuthStore for SqliteStore {
    async fn oauth_insert_client(&self, c: &OAuthClient, limit: ClientLimit) -> Result<bool> {
        self.write(|conn| {
            // By the partial index on unused registrations, oldest first.
            exec(
                conn,
                "DELETE FROM oauth_clients WHERE id IN (SELECT id FROM oauth_clients \
                 WHERE used_ts IS NULL AND created_ts <= ?1 ORDER BY created_ts LIMIT ?2)",
                params![limit.unused_before, PRUNE_BATCH],
            )?;
            let count: i64 =
                row(conn, "SELECT COUNT(*) FROM oauth_clients", [])?.unwrap_or(0);
            let over = limit.over(count);
            if over > 0 {
                let evicted = exec(
                    conn,
                    "DELETE FROM oauth_clients WHERE id IN (SELECT id FROM oauth_clients \
                     WHERE used_ts IS NULL ORDER BY created_ts LIMIT ?1)",
                    [over],
                )?;
                if (evicted as i64) < over {
                    return Ok(false);
                }
            }
            exec(
                conn,
                "INSERT INTO oauth_clients (client_id, secret_hash, client_name, redirect_uris, auth_method, created_ts) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    c.client_id,
                    c.secret_hash,
                    c.client_name,
                    json_list(&c.redirect_uris),
                    c.auth_method,
                    c.created_ts
                ],
            )?;
            Ok(true)
        })
        .await
    }

    async fn oauth_client(&self, client_id: &str) -> Result<Option<OAuthClient>> {
        self.read_row(
            select!(
                oauth_client_columns,
                " FROM oauth_clients WHERE client_id = ?1"
            ),
            [client_id],
        )
    }

    async fn oauth_insert_connect_code(&self, code: &NewConnectCode) -> Result<()> {
        let g = &code.grant;
        self.write(|c| {
            exec(
                c,
                "INSERT INTO oauth_connect_codes (hash, agent, room, also_rooms, readonly, admin, all_rooms, lead, skills, created_ts, expires_ts, profile) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                params![
                    code.hash,
                    g.agent,
                    g.room,
                    json_list(&g.also_rooms),
                    g.readonly,
                    g.admin,
                    g.all_rooms,
                    g.lead,
                    json_list(&g.skills),
                    code.created_ts,
                    code.expires_ts,
                    g.profile.as_str()
                ],
            )?;
            Ok(())
        })
        .await
    }

    async fn oauth_approve(&self, approval: ConnectApproval<'_>) -> Result<Option<i64>> {
        let (code, now) = (approval.code, approval.now);
        self.write(|c| {
            // The guarded update is the single use: of two approvals racing
            // with one code, one changes the row and the other finds none.
            let spent = exec(
                c,
                "UPDATE oauth_connect_codes SET used_ts = ?2 \
                 WHERE hash = ?1 AND used_ts IS NULL AND expires_ts > ?2",
                params![approval.connect_hash, now],
            )?;
            if spent == 0 {
                return Ok(None);
            }
            let grant_id: i64 = insert(
                c,
                "INSERT INTO oauth_grants (client_id, client_name, agent, room, also_rooms, readonly, admin, all_rooms, lead, skills, created_ts, profile) \
                 SELECT ?2, ?3, agent, room, also_rooms, readonly, admin, all_rooms, lead, skills, ?4, profile \
                 FROM oauth_connect_codes WHERE hash = ?1 RETURNING id",
                params![approval.connect_hash, approval.client_id, approval.client_name, now],
            )?;
            exec(
                c,
                "INSERT INTO oauth_auth_codes (hash, grant_id, client_id, redirect_uri, code_challenge, resource, created_ts, expires_ts, redirect_uri_given) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                params![
                    code.hash,
                    grant_id,
                    code.client_id,
                    code.redirect_uri,
                    code.code_challenge,
                    code.resource,
                    now,
                    code.expires_ts,
                    code.redirect_uri_given
                ],
            )?;
            exec(
                c,
                "UPDATE oauth_clients SET used_ts = ?2 WHERE client_id = ?1 AND used_ts IS NULL",
                params![approval.client_id, now],
            )?;
            Ok(Some(grant_id))
        })
        .await
    }

    async fn oauth_take_auth_code(&self, hash: &str, now: i64) -> Result<CodeTake> {
        self.write(|c| {
            let fresh = row(
                c,
                concat!(
                    "UPDATE oauth_auth_codes SET used_ts = ?2 WHERE hash = ?1 AND used_ts IS NULL RETURNING ",
                    auth_code_columns!()
                ),
                params![hash, now],
            )?;
            if let Some(code) = fresh {
                return Ok(CodeTake::Fresh(code));
            }
            let spent = row(
                c,
                "SELECT grant_id FROM oauth_auth_codes WHERE hash = ?1",
                [hash],
            )?;
            Ok(match spent {
                Some(grant_id) => CodeTake::Replayed { grant_id },
                None => CodeTake::Unknown,
            })
        })
        .await
    }

    async fn oauth_insert_tokens(&self, tokens: &[NewOAuthToken]) -> Result<()> {
        let now = crate::clock::now_ms();
        self.write(|c| {
            for t in tokens {
                exec(
                    c,
                    "INSERT INTO oauth_tokens (hash, grant_id, kind, created_ts, expires_ts) VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![t.hash, t.grant_id, t.kind, now, t.expires_ts],
                )?;
            }
            Ok(())
        })
        .await
    }

    async fn oauth_token(&self, hash: &str) -> Result<Option<(OAuthTokenRecord, GrantRecord)>> {
        self.read_row(
            concat!(
                "SELECT t.grant_id, t.kind, t.expires_ts, t.spent_ts, ",
                grant_columns!(),
                " FROM oauth_tokens t JOIN oauth_grants g ON g.id = t.grant_id WHERE t.hash = ?1"
            ),
            [hash],
        )
    }

    async fn oauth_grant_by_refresh(&self, hash: &str) -> Result<Option<GrantRecord>> {
        self.read_row(
            select!(
                grant_columns,
                " FROM oauth_grants g WHERE g.refresh_hash = ?1 \
                     UNION ALL SELECT ",
                grant_columns!(),
                " FROM oauth_grants g WHERE g.refresh_prev_hash = ?1 LIMIT 1"
            ),
            [hash],
        )
    }

    async fn oauth_grant(&self, id: i64) -> Result<Option<GrantRecord>> {
        self.read_row(
            select!(grant_columns, " FROM oauth_grants g WHERE g.id = ?1"),
            [id],
        )
    }

    async fn oauth_rotate_refresh(&self, rot: &Rotation) -> Result<bool> {
        self.write(|c| {
            // The compare-and-set is the single rotation: of two requests
            // with one token, the writer runs one after the other, and the
            // second finds the live token changed.
            let changed = exec(
                c,
                "UPDATE oauth_grants SET refresh_prev_hash = refresh_hash, refresh_hash = ?3, \
                 refresh_rotated_ts = ?4, refresh_expires_ts = ?5 \
                 WHERE id = ?1 AND revoked_ts IS NULL AND refresh_hash IS ?2",
                params![rot.grant_id, rot.old_hash, rot.new_hash, rot.now, rot.expires_ts],
            )?;
            if changed == 0 {
                return Ok(false);
            }
            let t = &rot.access;
            exec(
                c,
                "INSERT INTO oauth_tokens (hash, grant_id, kind, created_ts, expires_ts) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![t.hash, t.grant_id, t.kind, rot.now, t.expires_ts],
            )?;
            Ok(true)
        })
        .await
    }

    async fn oauth_revoke_grant(&self, grant_id: i64, now: i64) -> Result<bool> {
        let sql = "UPDATE oauth_grants SET revoked_ts = ?2 WHERE id = ?1 AND revoked_ts IS NULL";
        Ok(self.write_exec(sql, (grant_id, now)).await? == 1)
    }

    async fn oauth_revoke_agent(&self, agent: &str, now: i64) -> Result<u64> {
        let sql = "UPDATE oauth_grants SET revoked_ts = ?2 WHERE agent = ?1 AND revoked_ts IS NULL";
        self.write_exec(sql, (agent, now)).await
    }

    async fn oauth_list_grants(&self) -> Result<Vec<GrantRecord>> {
        self.read_rows(
            select!(grant_columns, " FROM oauth_grants g ORDER BY g.id"),
            [],
        )
    }

    async fn oauth_purge_grants(&self, revoked_before: i64) -> Result<u64> {
        let sql = "DELETE FROM oauth_grants WHERE revoked_ts IS NOT NULL AND revoked_ts <= ?1";
        self.write_exec(sql, [revoked_before]).await
    }

    async fn oauth_key(&self, name: &str, fresh: &str) -> Result<String> {
        if let Some(key) =
            self.read(|c| row(c, "SELECT value FROM oauth_keys WHERE name = ?1", [name]))?
        {
            return Ok(key);
        }
        let now = crate::clock::now_ms();
        self.write(|c| {
            exec(
                c,
                "INSERT INTO oauth_keys (name, value, created_ts) VALUES (?1, ?2, ?3) ON CONFLICT (name) DO NOTHING",
                params![name, fresh, now],
            )?;
            row(c, "SELECT value FROM oauth_keys WHERE name = ?1", [name])?
                .ok_or_else(|| Error::internal(anyhow::anyhow!("the key {name} was not stored")))
        })
        .await
    }

    async fn oauth_prune(&self, now: i64) -> Result<u64> {
        // Each statement deletes one batch by index; it runs again while a
        // batch came back full, each time as a write of its own.
        let batches: [(&str, i64); 5] = [
            (
                "DELETE FROM oauth_clients WHERE id IN (SELECT id FROM oauth_clients \
                 WHERE used_ts IS NULL AND created_ts <= ?1 ORDER BY created_ts LIMIT ?2)",
                now - UNUSED_CLIENT_TTL_MS,
            ),
            (
                "DELETE FROM oauth_connect_codes WHERE id IN (SELECT id FROM oauth_connect_codes \
                 WHERE expires_ts <= ?1 LIMIT ?2)",
                now,
            ),
            // Spent codes stay until well past their expiry, so a replay is
            // still recognised (and revokes the grant) while it matters.
            (
                "DELETE FROM oauth_auth_codes WHERE id IN (SELECT id FROM oauth_auth_codes \
                 WHERE expires_ts <= ?1 LIMIT ?2)",
                now - AUTH_CODE_TTL_MS,
            ),
            (
                "DELETE FROM oauth_tokens WHERE id IN (SELECT id FROM oauth_tokens \
                 WHERE expires_ts <= ?1 LIMIT ?2)",
                now,
            ),
            // A grant whose refresh token expired (or that never got one)
            // and has no live access token or pending code has run out.
            (
                "DELETE FROM oauth_grants WHERE id IN (SELECT g.id FROM oauth_grants g \
                 WHERE g.revoked_ts IS NULL AND g.created_ts <= ?1 \
                 AND (g.refresh_expires_ts IS NULL OR g.refresh_expires_ts <= ?1) \
                 AND NOT EXISTS (SELECT 1 FROM oauth_tokens t WHERE t.grant_id = g.id) \
                 AND NOT EXISTS (SELECT 1 FROM oauth_auth_codes a WHERE a.grant_id = g.id) LIMIT ?2)",
                now - AUTH_CODE_TTL_MS,
            ),
        ];
        let mut n = 0;
        for (sql, cutoff) in batches {
            loop {
                let done = self
                    .write(|c| exec(c, sql, params![cutoff, PRUNE_BATCH]))
                    .await?;
                n += done;
                if (done as i64) < PRUNE_BATCH {
                    break;
                }
            }
        }
        Ok(n)
    }
}
