//! The OAuth tables on PostgreSQL (see `domain::oauth` for what they mean).
//! Every single-use rule (connect codes, authorization codes, refresh tokens) is a
//! guarded `UPDATE … RETURNING`, so it holds across replicas.

use async_trait::async_trait;
use sqlx::Row;
use sqlx::postgres::PgRow;

use super::PostgresStore;
use crate::domain::oauth::{AUTH_CODE_TTL_MS, AuthCode, UNUSED_CLIENT_TTL_MS};
use crate::domain::oauth::{
    CodeTake, GrantRecord, NewAuthCode, NewConnectCode, NewOAuthToken, OAuthClient,
    OAuthTokenRecord, RefreshChain, Rotation,
};
use crate::domain::store::OAuthStore;
use crate::error::Result;

/// Rows one prune batch deletes (a short statement each, however much has
/// expired).
const PRUNE_BATCH: i64 = 500;

fn grant_record_from_row(r: &PgRow) -> GrantRecord {
    GrantRecord {
        id: r.get("id"),
        client_id: r.get("client_id"),
        client_name: r.get("client_name"),
        grant: super::rows::grant_from_row(r),
        created_ts: r.get("created_ts"),
        revoked_ts: r.get("revoked_ts"),
        refresh: RefreshChain {
            hash: r.get("refresh_hash"),
            prev_hash: r.get("refresh_prev_hash"),
            rotated_ts: r.get("refresh_rotated_ts"),
            expires_ts: r.get("refresh_expires_ts"),
        },
    }
}

#[async_trait]
impl OAuthStore for PostgresStore {
    async fn oauth_insert_client(
        &self,
        c: &OAuthClient,
        max: i64,
        unused_before: i64,
    ) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        // Registrations on any replica count and evict one at a time.
        sqlx::query("SELECT pg_advisory_xact_lock(hashtext('chatroom.oauth_clients'))")
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "DELETE FROM oauth_clients WHERE id IN (SELECT id FROM oauth_clients \
             WHERE used_ts IS NULL AND created_ts <= $1 ORDER BY created_ts LIMIT $2)",
        )
        .bind(unused_before)
        .bind(PRUNE_BATCH)
        .execute(&mut *tx)
        .await?;
        let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM oauth_clients")
            .fetch_one(&mut *tx)
            .await?;
        if count >= max {
            let evicted = sqlx::query(
                "DELETE FROM oauth_clients WHERE id IN (SELECT id FROM oauth_clients \
                 WHERE used_ts IS NULL ORDER BY created_ts LIMIT $1)",
            )
            .bind(count - max + 1)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if (evicted as i64) < count - max + 1 {
                return Ok(false);
            }
        }
        sqlx::query(
            "INSERT INTO oauth_clients (client_id, secret_hash, client_name, redirect_uris, auth_method, created_ts) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&c.client_id)
        .bind(&c.secret_hash)
        .bind(&c.client_name)
        .bind(&c.redirect_uris)
        .bind(&c.auth_method)
        .bind(c.created_ts)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn oauth_client(&self, client_id: &str) -> Result<Option<OAuthClient>> {
        let row = sqlx::query("SELECT * FROM oauth_clients WHERE client_id = $1")
            .bind(client_id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|r| OAuthClient {
            client_id: r.get("client_id"),
            secret_hash: r.get("secret_hash"),
            client_name: r.get("client_name"),
            redirect_uris: r.get("redirect_uris"),
            auth_method: r.get("auth_method"),
            created_ts: r.get("created_ts"),
            used_ts: r.get("used_ts"),
        }))
    }

    async fn oauth_insert_connect_code(&self, code: &NewConnectCode) -> Result<()> {
        let g = &code.grant;
        sqlx::query(
            "INSERT INTO oauth_connect_codes (hash, agent, room, also_rooms, readonly, admin, all_rooms, lead, skills, created_ts, expires_ts, profile) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        )
        .bind(&code.hash)
        .bind(&g.agent)
        .bind(&g.room)
        .bind(&g.also_rooms)
        .bind(g.readonly)
        .bind(g.admin)
        .bind(g.all_rooms)
        .bind(g.lead)
        .bind(&g.skills)
        .bind(code.created_ts)
        .bind(code.expires_ts)
        .bind(g.profile.as_str())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn oauth_approve(
        &self,
        connect_hash: &str,
        client_id: &str,
        client_name: &str,
        code: &NewAuthCode,
        now: i64,
    ) -> Result<Option<i64>> {
        let mut tx = self.pool.begin().await?;
        // One statement spends the code and creates the grant: of two
        // approvals racing with one code (on any replicas), one finds it.
        let grant_id: Option<i64> = sqlx::query_scalar(
            "WITH spent AS (UPDATE oauth_connect_codes SET used_ts = $2 \
                 WHERE hash = $1 AND used_ts IS NULL AND expires_ts > $2 \
                 RETURNING agent, room, also_rooms, readonly, admin, all_rooms, lead, skills, profile) \
             INSERT INTO oauth_grants (client_id, client_name, agent, room, also_rooms, readonly, admin, all_rooms, lead, skills, created_ts, profile) \
             SELECT $3, $4, agent, room, also_rooms, readonly, admin, all_rooms, lead, skills, $2, profile FROM spent \
             RETURNING id",
        )
        .bind(connect_hash)
        .bind(now)
        .bind(client_id)
        .bind(client_name)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(grant_id) = grant_id else {
            return Ok(None);
        };
        sqlx::query(
            "INSERT INTO oauth_auth_codes (hash, grant_id, client_id, redirect_uri, code_challenge, resource, created_ts, expires_ts, redirect_uri_given) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(&code.hash)
        .bind(grant_id)
        .bind(&code.client_id)
        .bind(&code.redirect_uri)
        .bind(&code.code_challenge)
        .bind(&code.resource)
        .bind(now)
        .bind(code.expires_ts)
        .bind(code.redirect_uri_given)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "UPDATE oauth_clients SET used_ts = $2 WHERE client_id = $1 AND used_ts IS NULL",
        )
        .bind(client_id)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Some(grant_id))
    }

    async fn oauth_take_auth_code(&self, hash: &str, now: i64) -> Result<CodeTake> {
        let fresh = sqlx::query(
            "UPDATE oauth_auth_codes SET used_ts = $2 WHERE hash = $1 AND used_ts IS NULL \
             RETURNING grant_id, client_id, redirect_uri, code_challenge, resource, expires_ts, redirect_uri_given",
        )
        .bind(hash)
        .bind(now)
        .fetch_optional(&self.pool)
        .await?;
        if let Some(r) = fresh {
            return Ok(CodeTake::Fresh(AuthCode {
                grant_id: r.get("grant_id"),
                client_id: r.get("client_id"),
                redirect_uri: r.get("redirect_uri"),
                code_challenge: r.get("code_challenge"),
                resource: r.get("resource"),
                expires_ts: r.get("expires_ts"),
                redirect_uri_given: r.get("redirect_uri_given"),
            }));
        }
        let spent: Option<i64> =
            sqlx::query_scalar("SELECT grant_id FROM oauth_auth_codes WHERE hash = $1")
                .bind(hash)
                .fetch_optional(&self.pool)
                .await?;
        Ok(match spent {
            Some(grant_id) => CodeTake::Replayed { grant_id },
            None => CodeTake::Unknown,
        })
    }

    async fn oauth_insert_tokens(&self, tokens: &[NewOAuthToken]) -> Result<()> {
        let now = crate::clock::now_ms();
        let mut tx = self.pool.begin().await?;
        for t in tokens {
            sqlx::query(
                "INSERT INTO oauth_tokens (hash, grant_id, kind, created_ts, expires_ts) VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(&t.hash)
            .bind(t.grant_id)
            .bind(t.kind)
            .bind(now)
            .bind(t.expires_ts)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn oauth_token(&self, hash: &str) -> Result<Option<(OAuthTokenRecord, GrantRecord)>> {
        let at = match self.cache.access(hash) {
            super::Lookup::Hit(access) => return Ok(Some(access)),
            super::Lookup::Miss(at) => at,
        };
        let row = sqlx::query(
            "SELECT t.kind, t.expires_ts AS token_expires_ts, t.spent_ts, g.* \
             FROM oauth_tokens t JOIN oauth_grants g ON g.id = t.grant_id WHERE t.hash = $1",
        )
        .bind(hash)
        .fetch_optional(&self.pool)
        .await?;
        let found = row.map(|r| {
            let grant = grant_record_from_row(&r);
            (
                OAuthTokenRecord {
                    grant_id: grant.id,
                    kind: r.get("kind"),
                    expires_ts: r.get("token_expires_ts"),
                    spent_ts: r.get("spent_ts"),
                },
                grant,
            )
        });
        // Access tokens only: a refresh token is spent once, and its row
        // is read where that is decided.
        if let Some(access) = found.as_ref().filter(|(t, _)| t.kind == "access") {
            self.cache.keep_access(hash, access, at);
        }
        Ok(found)
    }

    async fn oauth_grant_by_refresh(&self, hash: &str) -> Result<Option<GrantRecord>> {
        let row = sqlx::query(
            "(SELECT * FROM oauth_grants WHERE refresh_hash = $1) \
             UNION ALL (SELECT * FROM oauth_grants WHERE refresh_prev_hash = $1) LIMIT 1",
        )
        .bind(hash)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.as_ref().map(grant_record_from_row))
    }

    async fn oauth_grant(&self, id: i64) -> Result<Option<GrantRecord>> {
        let row = sqlx::query("SELECT * FROM oauth_grants WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.as_ref().map(grant_record_from_row))
    }

    async fn oauth_rotate_refresh(&self, rot: &Rotation) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        // The compare-and-set is the single rotation, on any replica: a
        // second request with the same token waits on the row's lock, then
        // finds the live token changed and updates nothing.
        let changed = sqlx::query(
            "UPDATE oauth_grants SET refresh_prev_hash = refresh_hash, refresh_hash = $3, \
             refresh_rotated_ts = $4, refresh_expires_ts = $5 \
             WHERE id = $1 AND revoked_ts IS NULL AND refresh_hash IS NOT DISTINCT FROM $2",
        )
        .bind(rot.grant_id)
        .bind(&rot.old_hash)
        .bind(&rot.new_hash)
        .bind(rot.now)
        .bind(rot.expires_ts)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if changed == 0 {
            return Ok(false);
        }
        let t = &rot.access;
        sqlx::query(
            "INSERT INTO oauth_tokens (hash, grant_id, kind, created_ts, expires_ts) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(&t.hash)
        .bind(t.grant_id)
        .bind(t.kind)
        .bind(rot.now)
        .bind(t.expires_ts)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn oauth_revoke_grant(&self, grant_id: i64, now: i64) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE oauth_grants SET revoked_ts = $2 WHERE id = $1 AND revoked_ts IS NULL",
        )
        .bind(grant_id)
        .bind(now)
        .execute(&self.pool)
        .await;
        // Every replica forgets on the announcement; this one before it answers.
        self.cache.changed("oauth_grants");
        let revoked = done?.rows_affected() == 1;
        if revoked {
            self.heard_everywhere().await;
        }
        Ok(revoked)
    }

    async fn oauth_revoke_agent(&self, agent: &str, now: i64) -> Result<u64> {
        let done = sqlx::query(
            "UPDATE oauth_grants SET revoked_ts = $2 WHERE agent = $1 AND revoked_ts IS NULL",
        )
        .bind(agent)
        .bind(now)
        .execute(&self.pool)
        .await;
        self.cache.changed("oauth_grants");
        let n = done?.rows_affected();
        if n > 0 {
            self.heard_everywhere().await;
        }
        Ok(n)
    }

    async fn oauth_list_grants(&self) -> Result<Vec<GrantRecord>> {
        let rows = sqlx::query("SELECT * FROM oauth_grants ORDER BY id")
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.iter().map(grant_record_from_row).collect())
    }

    async fn oauth_purge_grants(&self, revoked_before: i64) -> Result<u64> {
        Ok(sqlx::query(
            "DELETE FROM oauth_grants WHERE revoked_ts IS NOT NULL AND revoked_ts <= $1",
        )
        .bind(revoked_before)
        .execute(&self.pool)
        .await?
        .rows_affected())
    }

    async fn oauth_key(&self, name: &str, fresh: &str) -> Result<String> {
        sqlx::query(
            "INSERT INTO oauth_keys (name, value, created_ts) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING",
        )
        .bind(name)
        .bind(fresh)
        .bind(crate::clock::now_ms())
        .execute(&self.pool)
        .await?;
        Ok(
            sqlx::query_scalar("SELECT value FROM oauth_keys WHERE name = $1")
                .bind(name)
                .fetch_one(&self.pool)
                .await?,
        )
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
                let done = sqlx::query(sql)
                    .bind(cutoff)
                    .bind(PRUNE_BATCH)
                    .execute(&self.pool)
                    .await?
                    .rows_affected();
                n += done;
                if (done as i64) < PRUNE_BATCH {
                    break;
                }
            }
        }
        Ok(n)
    }
}
