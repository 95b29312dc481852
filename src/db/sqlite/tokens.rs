//! Tokens, membership, presence and agent state on SQLite.

use super::*;
use crate::domain::presence::Switch;

// Who holds a room's membership: every token and every OAuth grant (an app
// signed in with a connect code is an agent like a token's), one rule for
// the member list and the mention index.
macro_rules! credentials {
    () => {
        "(SELECT agent, room, also_rooms, readonly, admin, all_rooms, lead, skills, revoked_ts FROM tokens \
         UNION ALL SELECT agent, room, also_rooms, readonly, admin, all_rooms, lead, skills, revoked_ts FROM oauth_grants)"
    };
}

#[async_trait]
impl TokenStore for SqliteStore {
    async fn insert_token(&self, t: &NewToken, now: i64) -> Result<i64> {
        self.write(|c| {
            insert(
                c,
                "INSERT INTO tokens (hash, agent, room, also_rooms, readonly, admin, all_rooms, lead, skills, created_ts, profile) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) RETURNING id",
                params![
                    t.hash,
                    t.grant.agent,
                    t.grant.room,
                    json_list(&t.grant.also_rooms),
                    t.grant.readonly,
                    t.grant.admin,
                    t.grant.all_rooms,
                    t.grant.lead,
                    json_list(&t.grant.skills),
                    now,
                    t.grant.profile.as_str()
                ],
            )
        })
        .await
    }

    async fn token_by_hash(&self, hash: &str) -> Result<Option<TokenRecord>> {
        let sql = select!(token_columns, ", NULL FROM tokens WHERE hash = ?1");
        self.read_row(sql, [hash])
    }

    async fn list_tokens(&self) -> Result<Vec<TokenRecord>> {
        self.read_rows(
            select!(
                token_columns,
                ", \
                 (SELECT MAX(p.last_seen_ts) FROM presence p WHERE p.agent = tokens.agent) \
                 FROM tokens ORDER BY id"
            ),
            [],
        )
    }

    async fn revoke_agent(&self, agent: &str, now: i64) -> Result<u64> {
        let sql = "UPDATE tokens SET revoked_ts = ?2 WHERE agent = ?1 AND revoked_ts IS NULL";
        self.write_exec(sql, (agent, now)).await
    }

    async fn revoke_token(&self, id: i64, now: i64) -> Result<bool> {
        let sql = "UPDATE tokens SET revoked_ts = ?2 WHERE id = ?1 AND revoked_ts IS NULL";
        self.write_exec(sql, (id, now)).await.map(|n| n == 1)
    }

    async fn purge_tokens(&self, revoked_before: i64) -> Result<u64> {
        let sql = "DELETE FROM tokens WHERE revoked_ts IS NOT NULL AND revoked_ts <= ?1";
        self.write_exec(sql, [revoked_before]).await
    }

    async fn members(&self, room: &str) -> Result<Vec<Member>> {
        self.read_rows(
                concat!(
                "SELECT t.agent, MAX(t.lead) AS lead, MIN(t.readonly) AS readonly, MAX(t.admin) AS admin, \
                 t.skills, (SELECT p.last_seen_ts FROM presence p WHERE p.room = ?1 AND p.agent = t.agent) AS last_seen \
                 FROM ", credentials!(), " t \
                 WHERE t.revoked_ts IS NULL AND (t.room = ?1 \
                    OR EXISTS (SELECT 1 FROM json_each(t.also_rooms) j WHERE j.value = ?1) \
                    OR (t.all_rooms = 1 AND EXISTS (SELECT 1 FROM presence p WHERE p.room = ?1 AND p.agent = t.agent))) \
                 GROUP BY t.agent ORDER BY t.agent"),
                [room],
        )
    }

    async fn room_agents(&self, room: &str) -> Result<Vec<String>> {
        self.read_rows(
            concat!(
                "SELECT DISTINCT lower(t.agent) FROM ",
                credentials!(),
                " t WHERE t.revoked_ts IS NULL AND (t.room = ?1 OR t.all_rooms = 1 \
                    OR EXISTS (SELECT 1 FROM json_each(t.also_rooms) j WHERE j.value = ?1))"
            ),
            [room],
        )
    }

    async fn save_presence(&self, seen: &[(String, String, i64)]) -> Result<()> {
        self.write(|c| {
            for (room, agent, ts) in seen {
                exec(
                    c,
                    "INSERT INTO presence (room, agent, last_seen_ts) VALUES (?1, ?2, ?3) \
                     ON CONFLICT (room, agent) DO UPDATE SET last_seen_ts = MAX(last_seen_ts, excluded.last_seen_ts)",
                    params![room, agent, ts],
                )?;
            }
            Ok(())
        })
        .await
    }

    async fn save_token_use(&self, used: &[(i64, i64)]) -> Result<()> {
        self.write(|c| {
            for (id, ts) in used {
                exec(
                    c,
                    "UPDATE tokens SET last_used_ts = MAX(coalesce(last_used_ts, 0), ?2) WHERE id = ?1",
                    params![id, ts],
                )?;
            }
            Ok(())
        })
        .await
    }

    async fn save_switch(&self, room: &str, agent: &str, switch: Switch, ts: i64) -> Result<()> {
        let sql = match switch {
            Switch::State(_) => {
                "INSERT INTO agent_status (room, agent, state, state_ts) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (room, agent) DO UPDATE SET state = excluded.state, state_ts = excluded.state_ts"
            }
            Switch::Attention(_) => {
                "INSERT INTO agent_status (room, agent, attention, attention_ts) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (room, agent) DO UPDATE SET attention = excluded.attention, attention_ts = excluded.attention_ts"
            }
        };
        self.write_exec(sql, (room, agent, switch.as_str(), ts))
            .await?;
        Ok(())
    }

    async fn save_reach_marks(&self, marks: &[ReachMark]) -> Result<()> {
        self.write(|c| {
            for m in marks {
                exec(
                    c,
                    "INSERT INTO agent_status (room, agent, hook_seen_ts, push_seen_ts) VALUES (?1, ?2, ?3, ?4) \
                     ON CONFLICT (room, agent) DO UPDATE SET \
                     hook_seen_ts = MAX(COALESCE(hook_seen_ts, 0), COALESCE(excluded.hook_seen_ts, 0)), \
                     push_seen_ts = COALESCE(excluded.push_seen_ts, push_seen_ts)",
                    params![m.room, m.agent, m.hook_seen_ts, m.push_seen_ts],
                )?;
            }
            Ok(())
        })
        .await
    }

    async fn agent_statuses(&self, room: &str) -> Result<Vec<AgentStatus>> {
        self.read_rows(
            "SELECT agent, state, state_ts, attention, NULLIF(hook_seen_ts, 0), push_seen_ts \
                 FROM agent_status WHERE room = ?1 ORDER BY agent",
            [room],
        )
    }
}
