//! Tokens, membership, presence and agent state on PostgreSQL.

use super::*;
use crate::domain::presence::Switch;

// Who holds a room's membership: every token and every OAuth grant (an app
// signed in with a connect code is an agent like a token's), one rule for
// the member list and the mention index.
macro_rules! credentials {
    () => {
        "(SELECT agent, room, also_rooms, readonly, admin, all_rooms, lead, skills, revoked_ts, created_ts FROM tokens \
         UNION ALL SELECT agent, room, also_rooms, readonly, admin, all_rooms, lead, skills, revoked_ts, created_ts FROM oauth_grants)"
    };
}

#[async_trait]
impl TokenStore for PostgresStore {
    async fn insert_token(&self, t: &NewToken, now: i64) -> Result<i64> {
        let g = &t.grant;
        let args = (&t.hash,)
            .then(grant_args(g))
            .then((now, g.profile.as_str()));
        Ok(fetch_one(
            &self.pool,
            "INSERT INTO tokens (hash, agent, room, also_rooms, readonly, admin, all_rooms, lead, skills, created_ts, profile) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING id",
            args,
        )
        .await
        .map_err(text_error)?)
    }

    async fn token_by_hash(&self, hash: &str) -> Result<Option<TokenRecord>> {
        let sql = select!(token_columns, ", NULL::bigint FROM tokens WHERE hash = $1");
        let read = fetch_opt(&self.pool, sql, (hash,));
        Ok(self.cache.read_through(|c| &c.tokens, hash, read).await?)
    }

    async fn list_tokens(&self) -> Result<Vec<TokenRecord>> {
        let sql = select!(
            token_columns,
            ", (SELECT MAX(p.last_seen_ts) FROM presence p WHERE p.agent = tokens.agent) \
             FROM tokens ORDER BY id"
        );
        Ok(fetch_all(&self.pool, sql, ()).await?)
    }

    async fn revoke_agent(&self, agent: &str, now: i64) -> Result<u64> {
        let sql = "UPDATE tokens SET revoked_ts = $2 WHERE agent = $1 AND revoked_ts IS NULL";
        let done = exec(&self.pool, sql, (agent, now)).await;
        self.forget_everywhere("tokens", done).await
    }

    async fn revoke_token(&self, id: i64, now: i64) -> Result<bool> {
        let sql = "UPDATE tokens SET revoked_ts = $2 WHERE id = $1 AND revoked_ts IS NULL";
        let done = exec(&self.pool, sql, (id, now)).await;
        Ok(self.forget_everywhere("tokens", done).await? == 1)
    }

    async fn purge_tokens(&self, revoked_before: i64) -> Result<u64> {
        let sql = "DELETE FROM tokens WHERE revoked_ts IS NOT NULL AND revoked_ts <= $1";
        let done = exec(&self.pool, sql, (revoked_before,)).await;
        self.forget_everywhere("tokens", done).await
    }

    async fn members(&self, room: &str) -> Result<Vec<Member>> {
        // One line per agent; the skills are those of the agent's newest
        // token that reaches the room.
        let sql = concat!(
            "WITH m AS (SELECT t.* FROM ",
            credentials!(),
            " t WHERE t.revoked_ts IS NULL AND (t.room = $1 \
                OR $1 = ANY(t.also_rooms) \
                OR (t.all_rooms AND EXISTS (SELECT 1 FROM presence p WHERE p.room = $1 AND p.agent = t.agent)))) \
             SELECT m.agent, bool_or(m.lead) AS lead, bool_and(m.readonly) AS readonly, bool_or(m.admin) AS admin, \
             (SELECT m2.skills FROM m m2 WHERE m2.agent = m.agent ORDER BY m2.created_ts DESC LIMIT 1) AS skills, \
             (SELECT p.last_seen_ts FROM presence p WHERE p.room = $1 AND p.agent = m.agent) AS last_seen \
             FROM m GROUP BY m.agent ORDER BY m.agent COLLATE \"C\"",
        );
        Ok(fetch_all(&self.pool, sql, (room,)).await?)
    }

    async fn room_agents(&self, room: &str) -> Result<Vec<String>> {
        let sql = concat!(
            "SELECT DISTINCT lower(t.agent) FROM ",
            credentials!(),
            " t WHERE t.revoked_ts IS NULL AND (t.room = $1 OR t.all_rooms OR $1 = ANY(t.also_rooms))",
        );
        Ok(fetch_all(&self.pool, sql, (room,)).await?)
    }

    async fn save_presence(&self, seen: &[(String, String, i64)]) -> Result<()> {
        if seen.is_empty() {
            return Ok(());
        }
        // One statement, rows in key order: replicas flushing at the same
        // time lock the rows in the same order and never deadlock.
        let mut rows: Vec<&(String, String, i64)> = seen.iter().collect();
        rows.sort_by(|a, b| {
            (&a.0, &a.1, std::cmp::Reverse(a.2)).cmp(&(&b.0, &b.1, std::cmp::Reverse(b.2)))
        });
        rows.dedup_by(|a, b| a.0 == b.0 && a.1 == b.1);
        let rooms: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
        let agents: Vec<&str> = rows.iter().map(|r| r.1.as_str()).collect();
        let ts: Vec<i64> = rows.iter().map(|r| r.2).collect();
        let sql = "INSERT INTO presence (room, agent, last_seen_ts) \
             SELECT * FROM UNNEST($1::text[], $2::text[], $3::bigint[]) \
             ON CONFLICT (room, agent) DO UPDATE \
             SET last_seen_ts = GREATEST(presence.last_seen_ts, excluded.last_seen_ts)";
        exec(&self.pool, sql, (rooms, agents, ts)).await?;
        Ok(())
    }

    async fn save_token_use(&self, used: &[(i64, i64)]) -> Result<()> {
        if used.is_empty() {
            return Ok(());
        }
        // In id order, for the same reason as presence above. The cache
        // trigger ignores this column (migration 0007): replicas keep their
        // tokens.
        let mut rows = used.to_vec();
        rows.sort_by_key(|&(id, ts)| (id, std::cmp::Reverse(ts)));
        rows.dedup_by_key(|r| r.0);
        let (ids, ts): (Vec<i64>, Vec<i64>) = rows.into_iter().unzip();
        let sql = "UPDATE tokens t SET last_used_ts = GREATEST(t.last_used_ts, u.ts) \
             FROM UNNEST($1::bigint[], $2::bigint[]) AS u(id, ts) WHERE t.id = u.id";
        exec(&self.pool, sql, (ids, ts)).await?;
        Ok(())
    }

    async fn save_switch(&self, room: &str, agent: &str, switch: Switch, ts: i64) -> Result<()> {
        let sql = match switch {
            Switch::State(_) => {
                "INSERT INTO agent_status (room, agent, state, state_ts) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (room, agent) DO UPDATE SET state = excluded.state, state_ts = excluded.state_ts"
            }
            Switch::Attention(_) => {
                "INSERT INTO agent_status (room, agent, attention, attention_ts) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (room, agent) DO UPDATE SET attention = excluded.attention, attention_ts = excluded.attention_ts"
            }
        };
        exec(&self.pool, sql, (room, agent, switch.as_str(), ts)).await?;
        Ok(())
    }

    async fn save_reach_marks(&self, marks: &[ReachMark]) -> Result<()> {
        if marks.is_empty() {
            return Ok(());
        }
        // One row per agent (the batch's last push mark, its latest hook),
        // in key order, so replicas flushing at once never deadlock.
        let mut merged: std::collections::BTreeMap<(&str, &str), (Option<i64>, Option<i64>)> =
            std::collections::BTreeMap::new();
        for m in marks {
            let e = merged.entry((&m.room, &m.agent)).or_default();
            e.0 = e.0.max(m.hook_seen_ts);
            if m.push_seen_ts.is_some() {
                e.1 = m.push_seen_ts;
            }
        }
        let rooms: Vec<&str> = merged.keys().map(|k| k.0).collect();
        let agents: Vec<&str> = merged.keys().map(|k| k.1).collect();
        let hooks: Vec<Option<i64>> = merged.values().map(|v| v.0).collect();
        let pushes: Vec<Option<i64>> = merged.values().map(|v| v.1).collect();
        let sql = "INSERT INTO agent_status (room, agent, hook_seen_ts, push_seen_ts) \
             SELECT * FROM UNNEST($1::text[], $2::text[], $3::bigint[], $4::bigint[]) \
             ON CONFLICT (room, agent) DO UPDATE SET \
             hook_seen_ts = GREATEST(agent_status.hook_seen_ts, excluded.hook_seen_ts), \
             push_seen_ts = COALESCE(excluded.push_seen_ts, agent_status.push_seen_ts)";
        exec(&self.pool, sql, (rooms, agents, hooks, pushes)).await?;
        Ok(())
    }

    async fn agent_statuses(&self, room: &str) -> Result<Vec<AgentStatus>> {
        let sql = "SELECT agent, state, state_ts, attention, hook_seen_ts, push_seen_ts \
             FROM agent_status WHERE room = $1 ORDER BY agent";
        Ok(fetch_all(&self.pool, sql, (room,)).await?)
    }
}
