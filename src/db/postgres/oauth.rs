//! The OAuth tables on PostgreSQL (see `domain::oauth` for what they mean).
//! Every single-use rule (connect codes, authorization codes, refresh tokens) is a
//! guarded `UPDATE … RETURNING`, so it holds across replicas.

use async_trait::async_trait;

use super::PostgresStore;
use super::cache::{Access, Lookup};
use super::rows::{Args, exec, fetch_all, fetch_one, fetch_opt, grant_args};
use crate::domain::oauth::{AUTH_CODE_TTL_MS, UNUSED_CLIENT_TTL_MS};
use crate::domain::oauth::{
    CodeTake, GrantRecord, NewConnectCode, NewOAuthToken, OAuthClient, OAuthTokenRecord, Rotation,
};
use crate::domain::store::oauth::{ClientLimit, ConnectApproval, OAuthStore};
use crate::error::Result;

/// Rows one prune batch deletes (a short statement each, however much has
/// expired).
const PRUNE_BATCH: i64 = 500;

/// Stores an OAuth token issued at `now`.
const INSERT_TOKEN: &str = "INSERT INTO oauth_tokens (hash, grant_id, kind, created_ts, expires_ts) \
     VALUES ($1, $2, $3, $4, $5)";

#[async_trait]
impl OAuthStore for PostgresStore {
    async fn oauth_insert_client(&self, c: &OAuthClient, limit: ClientLimit) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        // Registrations on any replica count and evict one at a time.
        sqlx::query("SELECT pg_advisory_xact_lock(hashtext('chatroom.oauth_clients'))")
            .execute(&mut *tx)
            .await?;
        let forget = "DELETE FROM oauth_clients WHERE id IN (SELECT id FROM oauth_clients \
             WHERE used_ts IS NULL AND created_ts <= $1 ORDER BY created_ts LIMIT $2)";
        exec(&mut *tx, forget, (limit.unused_before, PRUNE_BATCH)).await?;
        let count: i64 = fetch_one(&mut *tx, "SELECT COUNT(*) FROM oauth_clients", ()).await?;
        let over = limit.over(count);
        if over > 0 {
            let evict = "DELETE FROM oauth_clients WHERE id IN (SELECT id FROM oauth_clients \
                 WHERE used_ts IS NULL ORDER BY created_ts LIMIT $1)";
            if (exec(&mut *tx, evict, (over,)).await? as i64) < over {
                return Ok(false);
            }
        }
        let insert = "INSERT INTO oauth_clients (client_id, secret_hash, client_name, redirect_uris, auth_method, created_ts) \
             VALUES ($1, $2, $3, $4, $5, $6)";
        let args = (
            &c.client_id,
            &c.secret_hash,
            &c.client_name,
            &c.redirect_uris,
            &c.auth_method,
            c.created_ts,
        );
        exec(&mut *tx, insert, args).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn oauth_client(&self, client_id: &str) -> Result<Option<OAuthClient>> {
        let sql = select!(
            oauth_client_columns,
            " FROM oauth_clients WHERE client_id = $1"
        );
        Ok(fetch_opt(&self.pool, sql, (client_id,)).await?)
    }

    async fn oauth_insert_connect_code(&self, code: &NewConnectCode) -> Result<()> {
        let g = &code.grant;
        let sql = "INSERT INTO oauth_connect_codes (hash, agent, room, also_rooms, readonly, admin, all_rooms, lead, skills, created_ts, expires_ts, profile) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)";
        let times = (code.created_ts, code.expires_ts, g.profile.as_str());
        let args = (&code.hash,).then(grant_args(g)).then(times);
        exec(&self.pool, sql, args).await?;
        Ok(())
    }

    async fn oauth_approve(&self, approval: ConnectApproval<'_>) -> Result<Option<i64>> {
        let (code, now) = (approval.code, approval.now);
        let mut tx = self.pool.begin().await?;
        // One statement spends the code and creates the grant: of two
        // approvals racing with one code (on any replicas), one finds it.
        let spend = "WITH spent AS (UPDATE oauth_connect_codes SET used_ts = $2 \
                 WHERE hash = $1 AND used_ts IS NULL AND expires_ts > $2 \
                 RETURNING agent, room, also_rooms, readonly, admin, all_rooms, lead, skills, profile) \
             INSERT INTO oauth_grants (client_id, client_name, agent, room, also_rooms, readonly, admin, all_rooms, lead, skills, created_ts, profile) \
             SELECT $3, $4, agent, room, also_rooms, readonly, admin, all_rooms, lead, skills, $2, profile FROM spent \
             RETURNING id";
        let args = (
            approval.connect_hash,
            now,
            approval.client_id,
            approval.client_name,
        );
        let Some(grant_id) = fetch_opt(&mut *tx, spend, args).await? else {
            return Ok(None);
        };
        let store_code = "INSERT INTO oauth_auth_codes (hash, grant_id, client_id, redirect_uri, code_challenge, resource, created_ts, expires_ts, redirect_uri_given) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)";
        let c = code;
        let args = (
            &c.hash,
            grant_id,
            &c.client_id,
            &c.redirect_uri,
            &c.code_challenge,
            &c.resource,
            now,
            c.expires_ts,
            c.redirect_uri_given,
        );
        exec(&mut *tx, store_code, args).await?;
        let used = "UPDATE oauth_clients SET used_ts = $2 WHERE client_id = $1 AND used_ts IS NULL";
        exec(&mut *tx, used, (approval.client_id, now)).await?;
        tx.commit().await?;
        Ok(Some(grant_id))
    }

    async fn oauth_take_auth_code(&self, hash: &str, now: i64) -> Result<CodeTake> {
        let take = concat!(
            "UPDATE oauth_auth_codes SET used_ts = $2 WHERE hash = $1 AND used_ts IS NULL RETURNING ",
            auth_code_columns!()
        );
        let fresh = fetch_opt(&self.pool, take, (hash, now)).await?;
        if let Some(code) = fresh {
            return Ok(CodeTake::Fresh(code));
        }
        let spent = "SELECT grant_id FROM oauth_auth_codes WHERE hash = $1";
        let spent = fetch_opt(&self.pool, spent, (hash,)).await?;
        Ok(match spent {
            Some(grant_id) => CodeTake::Replayed { grant_id },
            None => CodeTake::Unknown,
        })
    }

    async fn oauth_insert_tokens(&self, tokens: &[NewOAuthToken]) -> Result<()> {
        let now = crate::clock::now_ms();
        let mut tx = self.pool.begin().await?;
        for t in tokens {
            let args = (&t.hash, t.grant_id, t.kind, now, t.expires_ts);
            exec(&mut *tx, INSERT_TOKEN, args).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn oauth_token(&self, hash: &str) -> Result<Option<(OAuthTokenRecord, GrantRecord)>> {
        let at = match self.cache.access(hash) {
            Lookup::Hit(access) => return Ok(Some(access)),
            Lookup::Miss(at) => at,
        };
        let sql = concat!(
            "SELECT t.grant_id, t.kind, t.expires_ts, t.spent_ts, ",
            grant_columns!(),
            " FROM oauth_tokens t JOIN oauth_grants g ON g.id = t.grant_id WHERE t.hash = $1"
        );
        let found: Option<Access> = fetch_opt(&self.pool, sql, (hash,)).await?;
        // Access tokens only: a refresh token is spent once, and its row
        // is read where that is decided.
        if let Some(access) = found.as_ref().filter(|(t, _)| t.kind == "access") {
            self.cache.keep_access(hash, access, at);
        }
        Ok(found)
    }

    async fn oauth_grant_by_refresh(&self, hash: &str) -> Result<Option<GrantRecord>> {
        let sql = concat!(
            "(SELECT ",
            grant_columns!(),
            " FROM oauth_grants g WHERE g.refresh_hash = $1) UNION ALL (SELECT ",
            grant_columns!(),
            " FROM oauth_grants g WHERE g.refresh_prev_hash = $1) LIMIT 1"
        );
        Ok(fetch_opt(&self.pool, sql, (hash,)).await?)
    }

    async fn oauth_grant(&self, id: i64) -> Result<Option<GrantRecord>> {
        let sql = select!(grant_columns, " FROM oauth_grants g WHERE g.id = $1");
        Ok(fetch_opt(&self.pool, sql, (id,)).await?)
    }

    async fn oauth_rotate_refresh(&self, rot: &Rotation) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        // The compare-and-set is the single rotation, on any replica: a
        // second request with the same token waits on the row's lock, then
        // finds the live token changed and updates nothing.
        let rotate = "UPDATE oauth_grants SET refresh_prev_hash = refresh_hash, refresh_hash = $3, \
             refresh_rotated_ts = $4, refresh_expires_ts = $5 \
             WHERE id = $1 AND revoked_ts IS NULL AND refresh_hash IS NOT DISTINCT FROM $2";
        let args = (
            rot.grant_id,
            &rot.old_hash,
            &rot.new_hash,
            rot.now,
            rot.expires_ts,
        );
        if exec(&mut *tx, rotate, args).await? == 0 {
            return Ok(false);
        }
        let t = &rot.access;
        let args = (&t.hash, t.grant_id, t.kind, rot.now, t.expires_ts);
        exec(&mut *tx, INSERT_TOKEN, args).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn oauth_revoke_grant(&self, grant_id: i64, now: i64) -> Result<bool> {
        let sql = "UPDATE oauth_grants SET revoked_ts = $2 WHERE id = $1 AND revoked_ts IS NULL";
        let done = exec(&self.pool, sql, (grant_id, now)).await;
        Ok(self.forget_everywhere("oauth_grants", done).await? == 1)
    }

    async fn oauth_revoke_agent(&self, agent: &str, now: i64) -> Result<u64> {
        let sql = "UPDATE oauth_grants SET revoked_ts = $2 WHERE agent = $1 AND revoked_ts IS NULL";
        let done = exec(&self.pool, sql, (agent, now)).await;
        self.forget_everywhere("oauth_grants", done).await
    }

    async fn oauth_list_grants(&self) -> Result<Vec<GrantRecord>> {
        let sql = select!(grant_columns, " FROM oauth_grants g ORDER BY g.id");
        Ok(fetch_all(&self.pool, sql, ()).await?)
    }

    async fn oauth_purge_grants(&self, revoked_before: i64) -> Result<u64> {
        let sql = "DELETE FROM oauth_grants WHERE revoked_ts IS NOT NULL AND revoked_ts <= $1";
        Ok(exec(&self.pool, sql, (revoked_before,)).await?)
    }

    async fn oauth_key(&self, name: &str, fresh: &str) -> Result<String> {
        let store = "INSERT INTO oauth_keys (name, value, created_ts) VALUES ($1, $2, $3) \
             ON CONFLICT (name) DO NOTHING";
        exec(&self.pool, store, (name, fresh, crate::clock::now_ms())).await?;
        let sql = "SELECT value FROM oauth_keys WHERE name = $1";
        Ok(fetch_one(&self.pool, sql, (name,)).await?)
    }

    async fn oauth_prune(&self, now: i64) -> Result<u64> {
        let mut n = 0;
        for (sql, cutoff) in [
            (
                "DELETE FROM oauth_clients WHERE id IN (SELECT id FROM oauth_clients \
                 WHERE used_ts IS NULL AND created_ts <= $1 ORDER BY created_ts LIMIT $2)",
                now - UNUSED_CLIENT_TTL_MS,
            ),
            (
                "DELETE FROM oauth_connect_codes WHERE id IN (SELECT id FROM oauth_connect_codes \
                 WHERE expires_ts <= $1 LIMIT $2)",
                now,
            ),
            (
                "DELETE FROM oauth_auth_codes WHERE id IN (SELECT id FROM oauth_auth_codes \
                 WHERE expires_ts <= $1 LIMIT $2)",
                now - AUTH_CODE_TTL_MS,
            ),
            (
                "DELETE FROM oauth_tokens WHERE id IN (SELECT id FROM oauth_tokens \
                 WHERE expires_ts <= $1 LIMIT $2)",
                now,
            ),
            (
                "DELETE FROM oauth_grants WHERE id IN (SELECT g.id FROM oauth_grants g \
                 WHERE g.revoked_ts IS NULL AND g.created_ts <= $1 \
                 AND (g.refresh_expires_ts IS NULL OR g.refresh_expires_ts <= $1) \
                 AND NOT EXISTS (SELECT 1 FROM oauth_tokens t WHERE t.grant_id = g.id) \
                 AND NOT EXISTS (SELECT 1 FROM oauth_auth_codes a WHERE a.grant_id = g.id) LIMIT $2)",
                now - AUTH_CODE_TTL_MS,
            ),
        ] {
            loop {
                let done = exec(&self.pool, sql, (cutoff, PRUNE_BATCH)).await?;
                n += done;
                if (done as i64) < PRUNE_BATCH {
                    break;
                }
            }
        }
        Ok(n)
    }
}
