//! Webhooks, inbound URLs and stuck-task marks on PostgreSQL (see
//! `domain::store::webhooks` for what they mean). A webhook is leased by
//! one replica at a time: the claim takes due rows `FOR UPDATE SKIP
//! LOCKED` and stamps the lease, so two replicas never deliver the same
//! webhook at once, and a replica that vanished loses its lease when it
//! runs out.

use async_trait::async_trait;

use super::rows::{Args, exec, fetch_all, fetch_one, fetch_opt};
use super::{PostgresStore, store_record, text_error};
use crate::domain::model::{Event, Record, Written};
use crate::domain::store::webhooks::{
    Inbound, Lease, NewWebhook, Progress, StuckTask, Webhook, WebhookStore,
};
use crate::error::Result;

#[async_trait]
impl WebhookStore for PostgresStore {
    async fn insert_webhook(&self, h: &NewWebhook, now: i64) -> Result<Webhook> {
        let sql = concat!(
            "INSERT INTO webhooks (room, url, format, events, secret, created_ts, cursor) \
             VALUES ($1, $2, $3, $4, $5, $6, \
                (SELECT COALESCE(MAX(id), 0) FROM events WHERE room = $1)) RETURNING ",
            webhook_columns!()
        );
        // The kinds are JSON text, as on SQLite.
        let events = serde_json::to_string(&h.events).unwrap_or_else(|_| "[]".into());
        let args = (&h.room, &h.url, &h.format, events, &h.secret, now);
        let hook = fetch_one(&self.pool, sql, args).await;
        Ok(hook.map_err(text_error)?)
    }

    async fn list_webhooks(&self) -> Result<Vec<Webhook>> {
        let sql = select!(webhook_columns, " FROM webhooks ORDER BY id");
        Ok(fetch_all(&self.pool, sql, ()).await?)
    }

    async fn delete_webhook(&self, id: i64) -> Result<bool> {
        Ok(exec(&self.pool, "DELETE FROM webhooks WHERE id = $1", (id,)).await? > 0)
    }

    async fn resume_webhook(&self, id: i64) -> Result<bool> {
        let sql = "UPDATE webhooks SET paused = false, failures = 0, attempts = 0, next_ts = 0, \
             first_fail_ts = NULL WHERE id = $1";
        Ok(exec(&self.pool, sql, (id,)).await? > 0)
    }

    async fn claim_webhooks(&self, lease: Lease<'_>, limit: i64) -> Result<Vec<Webhook>> {
        // The worker asks after every event; most of the time no webhook
        // has work, and a plain read says so without taking row locks.
        let any = concat!(
            "SELECT EXISTS (SELECT 1 FROM webhooks w WHERE ",
            webhook_claimable!("$1"),
            ")"
        );
        if !fetch_one::<bool>(&self.pool, any, (lease.now,)).await? {
            return Ok(Vec::new());
        }
        let sql = concat!(
            "UPDATE webhooks SET lease_owner = $1, lease_until = $3 WHERE id IN \
             (SELECT w.id FROM webhooks w WHERE ",
            webhook_claimable!("$2"),
            " ORDER BY w.id LIMIT $4 FOR UPDATE SKIP LOCKED) RETURNING ",
            webhook_columns!()
        );
        let args = (lease.owner, lease.now, lease.until, limit);
        Ok(fetch_all(&self.pool, sql, args).await?)
    }

    async fn save_webhook(&self, id: i64, owner: &str, p: &Progress) -> Result<bool> {
        let sql = "UPDATE webhooks SET cursor = $3, attempts = $4, next_ts = $5, first_fail_ts = $6, \
                failures = $7, paused = $8, delivered = delivered + $9, \
                last_ts = COALESCE($10, last_ts), last_status = COALESCE($11, last_status), \
                lease_owner = NULL, lease_until = 0 \
             WHERE id = $1 AND lease_owner = $2";
        // `$3` to `$11`: the delivery state, in the order of `Progress`.
        let retry = (p.cursor, p.attempts, p.next_ts, p.first_fail_ts, p.failures);
        let outcome = (p.paused, p.delivered, p.last_ts, &p.last_status);
        let args = (id, owner).then(retry).then(outcome);
        Ok(exec(&self.pool, sql, args).await.map_err(text_error)? > 0)
    }

    async fn insert_inbound(&self, i: &Inbound) -> Result<i64> {
        let sql = "INSERT INTO inbound_hooks (key, room, agent, secret, secret_hash, created_ts) \
             VALUES ($1, $2, $3, $4, $5, $6) RETURNING id";
        let args = (
            &i.key,
            &i.room,
            &i.agent,
            &i.secret,
            &i.secret_hash,
            i.created_ts,
        );
        Ok(fetch_one(&self.pool, sql, args).await.map_err(text_error)?)
    }

    async fn inbound_by_key(&self, key: &str) -> Result<Option<Inbound>> {
        let sql = select!(inbound_columns, " FROM inbound_hooks WHERE key = $1");
        let found = fetch_opt(&self.pool, sql, (key,)).await;
        Ok(found.map_err(text_error)?)
    }

    async fn list_inbound(&self) -> Result<Vec<Inbound>> {
        let sql = select!(inbound_columns, " FROM inbound_hooks ORDER BY id");
        Ok(fetch_all(&self.pool, sql, ()).await?)
    }

    async fn delete_inbound(&self, key: &str) -> Result<bool> {
        let sql = "DELETE FROM inbound_hooks WHERE key = $1";
        Ok(exec(&self.pool, sql, (key,)).await.map_err(text_error)? > 0)
    }

    async fn touch_inbound(&self, id: i64, now: i64) -> Result<()> {
        let sql = "UPDATE inbound_hooks SET last_used_ts = $2 WHERE id = $1";
        exec(&self.pool, sql, (id, now)).await?;
        Ok(())
    }

    async fn stuck_tasks(&self, before: i64, limit: i64) -> Result<Vec<StuckTask>> {
        let sql = "SELECT room, id, title, assignee, act FROM \
                (SELECT t.room, t.id, t.title, t.assignee, \
                    GREATEST(t.updated_ts, \
                        (SELECT MAX(n.ts) FROM notes n WHERE n.task_id = t.id), \
                        t.lease_expires_ts - t.lease_seconds * 1000) AS act \
                 FROM tasks t WHERE t.status = 'in_progress' AND t.updated_ts < $1) x \
             WHERE act < $1 \
                AND NOT EXISTS (SELECT 1 FROM task_stuck s WHERE s.task_id = x.id AND s.activity_ts = x.act) \
             ORDER BY id LIMIT $2";
        Ok(fetch_all(&self.pool, sql, (before, limit)).await?)
    }

    async fn record_stuck(&self, task: &StuckTask, record: Record) -> Result<Option<Event>> {
        let mut tx = self.begin_room(&task.room).await?;
        let mark = "INSERT INTO task_stuck (task_id, activity_ts) VALUES ($1, $2) \
             ON CONFLICT (task_id) DO UPDATE SET activity_ts = excluded.activity_ts \
             WHERE task_stuck.activity_ts <> excluded.activity_ts";
        if exec(&mut *tx, mark, (task.task_id, task.activity_ts)).await? == 0 {
            return Ok(None);
        }
        let events = store_record(&mut tx, &task.room, record, &Written::default()).await?;
        tx.commit().await?;
        Ok(events.into_iter().next())
    }
}
