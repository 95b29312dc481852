//! The audit rows and the admin log on PostgreSQL.

use super::*;

#[async_trait]
impl AuditStore for PostgresStore {
    async fn insert_audit(&self, rows: &[AuditRow]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        // One statement for the whole batch.
        let ts: Vec<i64> = rows.iter().map(|r| r.ts).collect();
        let agents: Vec<&str> = rows.iter().map(|r| r.agent.as_str()).collect();
        let rooms: Vec<Option<&str>> = rows.iter().map(|r| r.room.as_deref()).collect();
        let tools: Vec<&str> = rows.iter().map(|r| r.tool.as_str()).collect();
        let task_ids: Vec<Option<i64>> = rows.iter().map(|r| r.task_id).collect();
        let outcomes: Vec<&str> = rows.iter().map(|r| r.outcome.as_str()).collect();
        let sql = "INSERT INTO audit (ts, agent, room, tool, task_id, outcome) \
             SELECT * FROM UNNEST($1::bigint[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[])";
        let args = (ts, agents, rooms, tools, task_ids, outcomes);
        exec(&self.pool, sql, args).await.map_err(text_error)?;
        Ok(())
    }

    async fn audit_count(&self) -> Result<i64> {
        Ok(fetch_one(&self.pool, "SELECT COUNT(*) FROM audit", ()).await?)
    }

    async fn insert_admin_log(&self, e: &AdminLogEntry) -> Result<()> {
        let sql = "INSERT INTO admin_log (ts, actor, address, action, target, flagged) \
             VALUES ($1, $2, $3, $4, $5, $6)";
        let args = (e.ts, &e.actor, &e.address, &e.action, &e.target, e.flagged);
        exec(&self.pool, sql, args).await.map_err(text_error)?;
        Ok(())
    }

    async fn admin_log(&self, limit: i64) -> Result<Vec<AdminLogEntry>> {
        let sql = select!(
            admin_log_columns,
            " FROM admin_log ORDER BY id DESC LIMIT $1"
        );
        Ok(fetch_all(&self.pool, sql, (limit,)).await?)
    }
}
