//! The audit rows and the admin log on SQLite.

use super::*;

#[async_trait]
impl AuditStore for SqliteStore {
    async fn insert_audit(&self, audit_rows: &[AuditRow]) -> Result<()> {
        if audit_rows.is_empty() {
            return Ok(());
        }
        self.write(|c| {
            for r in audit_rows {
                exec(
                    c,
                    "INSERT INTO audit (ts, agent, room, tool, task_id, outcome) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    params![r.ts, r.agent, r.room, r.tool, r.task_id, r.outcome],
                )?;
            }
            Ok(())
        })
        .await
    }

    async fn audit_count(&self) -> Result<i64> {
        self.read_blocking(|c| Ok(c.query_row("SELECT COUNT(*) FROM audit", [], |r| r.get(0))?))
            .await
    }

    async fn insert_admin_log(&self, e: &AdminLogEntry) -> Result<()> {
        let sql = "INSERT INTO admin_log (ts, actor, address, action, target, flagged) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
        let args = (e.ts, &e.actor, &e.address, &e.action, &e.target, e.flagged);
        self.write_exec(sql, args).await?;
        Ok(())
    }

    async fn admin_log(&self, limit: i64) -> Result<Vec<AdminLogEntry>> {
        self.read_rows(
            select!(
                admin_log_columns,
                " FROM admin_log ORDER BY id DESC LIMIT ?1"
            ),
            [limit],
        )
    }
}
