//! Webhooks, inbound URLs and stuck-task marks on SQLite (see
//! `domain::store::webhooks` for what they mean).

use async_trait::async_trait;
use rusqlite::params;

use super::{SqliteStore, exec, insert, json_list, rows, store_record};
use crate::domain::model::{Event, Record, Written};
use crate::domain::store::webhooks::{
    Inbound, Lease, NewWebhook, Progress, StuckTask, Webhook, WebhookStore,
};
use crate::error::Result;

#[async_trait]
impl WebhookStore for SqliteStore {
    async fn insert_webhook(&self, h: &NewWebhook, now: i64) -> Result<Webhook> {
        self.write(|c| {
            insert(
                c,
                concat!(
                    "INSERT INTO webhooks (room, url, format, events, secret, created_ts, cursor) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, \
                        (SELECT COALESCE(MAX(id), 0) FROM events WHERE room = ?1)) RETURNING ",
                    webhook_columns!()
                ),
                params![h.room, h.url, h.format, json_list(&h.events), h.secret, now],
            )
        })
        .await
    }

    async fn list_webhooks(&self) -> Result<Vec<Webhook>> {
        self.read_rows(select!(webhook_columns, " FROM webhooks ORDER BY id"), [])
    }

    async fn delete_webhook(&self, id: i64) -> Result<bool> {
        self.write(|c| Ok(exec(c, "DELETE FROM webhooks WHERE id = ?1", [id])? > 0))
            .await
    }

    async fn resume_webhook(&self, id: i64) -> Result<bool> {
        let sql = "UPDATE webhooks SET paused = 0, failures = 0, attempts = 0, next_ts = 0, \
                 first_fail_ts = NULL WHERE id = ?1";
        Ok(self.write_exec(sql, [id]).await? > 0)
    }

    async fn claim_webhooks(&self, lease: Lease<'_>, limit: i64) -> Result<Vec<Webhook>> {
        let Lease { owner, now, until } = lease;
        // The worker asks after every event; most of the time no webhook
        // has work, and a read says so without taking the writer.
        let any = concat!(
            "SELECT EXISTS (SELECT 1 FROM webhooks w WHERE ",
            webhook_claimable!("?1"),
            ")"
        );
        if self.read_row::<bool>(any, [now])? != Some(true) {
            return Ok(Vec::new());
        }
        self.write(|c| {
            rows(
                c,
                concat!(
                    "UPDATE webhooks SET lease_owner = ?1, lease_until = ?3 WHERE id IN \
                     (SELECT w.id FROM webhooks w WHERE ",
                    webhook_claimable!("?2"),
                    " ORDER BY w.id LIMIT ?4) RETURNING ",
                    webhook_columns!()
                ),
                params![owner, now, until, limit],
            )
        })
        .await
    }

    async fn save_webhook(&self, id: i64, owner: &str, p: &Progress) -> Result<bool> {
        self.write(|c| {
            Ok(exec(
                c,
                "UPDATE webhooks SET cursor = ?3, attempts = ?4, next_ts = ?5, first_fail_ts = ?6, \
                    failures = ?7, paused = ?8, delivered = delivered + ?9, \
                    last_ts = COALESCE(?10, last_ts), last_status = COALESCE(?11, last_status), \
                    lease_owner = NULL, lease_until = 0 \
                 WHERE id = ?1 AND lease_owner = ?2",
                params![
                    id,
                    owner,
                    p.cursor,
                    p.attempts,
                    p.next_ts,
                    p.first_fail_ts,
                    p.failures,
                    p.paused,
                    p.delivered,
                    p.last_ts,
                    p.last_status
                ],
            )? > 0)
        })
        .await
    }

    async fn insert_inbound(&self, i: &Inbound) -> Result<i64> {
        self.write(|c| {
            insert(
                c,
                "INSERT INTO inbound_hooks (key, room, agent, secret, secret_hash, created_ts) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) RETURNING id",
                params![
                    i.key,
                    i.room,
                    i.agent,
                    i.secret,
                    i.secret_hash,
                    i.created_ts
                ],
            )
        })
        .await
    }

    async fn inbound_by_key(&self, key: &str) -> Result<Option<Inbound>> {
        let sql = select!(inbound_columns, " FROM inbound_hooks WHERE key = ?1");
        self.read_row(sql, [key])
    }

    async fn list_inbound(&self) -> Result<Vec<Inbound>> {
        let sql = select!(inbound_columns, " FROM inbound_hooks ORDER BY id");
        self.read_rows(sql, [])
    }

    async fn delete_inbound(&self, key: &str) -> Result<bool> {
        self.write(|c| Ok(exec(c, "DELETE FROM inbound_hooks WHERE key = ?1", [key])? > 0))
            .await
    }

    async fn touch_inbound(&self, id: i64, now: i64) -> Result<()> {
        let sql = "UPDATE inbound_hooks SET last_used_ts = ?2 WHERE id = ?1";
        self.write_exec(sql, (id, now)).await?;
        Ok(())
    }

    async fn stuck_tasks(&self, before: i64, limit: i64) -> Result<Vec<StuckTask>> {
        self.read_rows(
                "SELECT room, id, title, assignee, act FROM \
                    (SELECT t.room, t.id, t.title, t.assignee, \
                        MAX(t.updated_ts, \
                            COALESCE((SELECT MAX(n.ts) FROM notes n WHERE n.task_id = t.id), 0), \
                            COALESCE(t.lease_expires_ts - t.lease_seconds * 1000, 0)) AS act \
                     FROM tasks t WHERE t.status = 'in_progress' AND t.updated_ts < ?1) x \
                 WHERE act < ?1 \
                    AND NOT EXISTS (SELECT 1 FROM task_stuck s WHERE s.task_id = x.id AND s.activity_ts = x.act) \
                 ORDER BY id LIMIT ?2",
                params![before, limit],
        )
    }

    async fn record_stuck(&self, task: &StuckTask, record: Record) -> Result<Option<Event>> {
        self.write(|c| {
            let marked = exec(
                c,
                "INSERT INTO task_stuck (task_id, activity_ts) VALUES (?1, ?2) \
                 ON CONFLICT (task_id) DO UPDATE SET activity_ts = excluded.activity_ts \
                 WHERE task_stuck.activity_ts <> excluded.activity_ts",
                params![task.task_id, task.activity_ts],
            )?;
            if marked == 0 {
                return Ok(None);
            }
            Ok(store_record(c, &task.room, record, &Written::default())?
                .into_iter()
                .next())
        })
        .await
    }
}
