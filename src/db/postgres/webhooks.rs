//! Webhooks, inbound URLs and stuck-task marks on PostgreSQL (see
//! `domain::store::webhooks` for what they mean). A webhook is leased by
//! one replica at a time: the claim takes due rows `FOR UPDATE SKIP
//! LOCKED` and stamps the lease, so two replicas never deliver the same
//! webhook at once, and a replica that vanished loses its lease when it
//! runs out.

use async_trait::async_trait;
use sqlx::Row;
use sqlx::postgres::PgRow;

use super::{PostgresStore, store_record, text_error};
use crate::domain::model::{Event, Record, Written};
use crate::domain::store::webhooks::{
    Inbound, NewWebhook, Progress, StuckTask, Webhook, WebhookStore,
};
use crate::error::Result;

macro_rules! webhook_columns {
    () => {
        "id, room, url, format, events, secret, created_ts, cursor, attempts, next_ts, \
         first_fail_ts, failures, paused, delivered, last_ts, last_status"
    };
}

macro_rules! inbound_columns {
    () => {
        "id, key, room, agent, secret, secret_hash, created_ts, last_used_ts"
    };
}

fn webhook_from_row(r: &PgRow) -> Webhook {
    Webhook {
        id: r.get(0),
        room: r.get(1),
        url: r.get(2),
        format: r.get(3),
        events: serde_json::from_str(r.get::<&str, _>(4)).unwrap_or_default(),
        secret: r.get(5),
        created_ts: r.get(6),
        cursor: r.get(7),
        attempts: r.get(8),
        next_ts: r.get(9),
        first_fail_ts: r.get(10),
        failures: r.get(11),
        paused: r.get(12),
        delivered: r.get(13),
        last_ts: r.get(14),
        last_status: r.get(15),
    }
}

fn inbound_from_row(r: &PgRow) -> Inbound {
    Inbound {
        id: r.get(0),
        key: r.get(1),
        room: r.get(2),
        agent: r.get(3),
        secret: r.get(4),
        secret_hash: r.get(5),
        created_ts: r.get(6),
        last_used_ts: r.get(7),
    }
}

#[async_trait]
impl WebhookStore for PostgresStore {
    async fn insert_webhook(&self, h: &NewWebhook, now: i64) -> Result<Webhook> {
        let r = sqlx::query(concat!(
            "INSERT INTO webhooks (room, url, format, events, secret, created_ts, cursor) \
             VALUES ($1, $2, $3, $4, $5, $6, \
                (SELECT COALESCE(MAX(id), 0) FROM events WHERE room = $1)) RETURNING ",
            webhook_columns!()
        ))
        .bind(&h.room)
        .bind(&h.url)
        .bind(&h.format)
        .bind(serde_json::to_string(&h.events).unwrap_or_else(|_| "[]".into()))
        .bind(&h.secret)
        .bind(now)
        .fetch_one(&self.pool)
        .await
        .map_err(text_error)?;
        Ok(webhook_from_row(&r))
    }

    async fn list_webhooks(&self) -> Result<Vec<Webhook>> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            webhook_columns!(),
            " FROM webhooks ORDER BY id"
        ))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(webhook_from_row).collect())
    }

    async fn delete_webhook(&self, id: i64) -> Result<bool> {
        let n = sqlx::query("DELETE FROM webhooks WHERE id = $1")
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(n.rows_affected() > 0)
    }

    async fn resume_webhook(&self, id: i64) -> Result<bool> {
        let n = sqlx::query(
            "UPDATE webhooks SET paused = false, failures = 0, attempts = 0, next_ts = 0, \
             first_fail_ts = NULL WHERE id = $1",
        )
        .bind(id)
        .execute(&self.pool)
        .await?;
        Ok(n.rows_affected() > 0)
    }

    async fn claim_webhooks(
        &self,
        owner: &str,
        now: i64,
        until: i64,
        limit: i64,
    ) -> Result<Vec<Webhook>> {
        let rows = sqlx::query(concat!(
            "UPDATE webhooks SET lease_owner = $1, lease_until = $3 WHERE id IN \
             (SELECT w.id FROM webhooks w WHERE NOT w.paused AND w.next_ts <= $2 \
                AND w.lease_until <= $2 \
                AND EXISTS (SELECT 1 FROM events e WHERE e.room = w.room AND e.id > w.cursor) \
              ORDER BY w.id LIMIT $4 FOR UPDATE SKIP LOCKED) RETURNING ",
            webhook_columns!()
        ))
        .bind(owner)
        .bind(now)
        .bind(until)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(webhook_from_row).collect())
    }

    async fn save_webhook(&self, id: i64, owner: &str, p: &Progress) -> Result<bool> {
        let n = sqlx::query(
            "UPDATE webhooks SET cursor = $3, attempts = $4, next_ts = $5, first_fail_ts = $6, \
                failures = $7, paused = $8, delivered = delivered + $9, \
                last_ts = COALESCE($10, last_ts), last_status = COALESCE($11, last_status), \
                lease_owner = NULL, lease_until = 0 \
             WHERE id = $1 AND lease_owner = $2",
        )
        .bind(id)
        .bind(owner)
        .bind(p.cursor)
        .bind(p.attempts)
        .bind(p.next_ts)
        .bind(p.first_fail_ts)
        .bind(p.failures)
        .bind(p.paused)
        .bind(p.delivered)
        .bind(p.last_ts)
        .bind(&p.last_status)
        .execute(&self.pool)
        .await
        .map_err(text_error)?;
        Ok(n.rows_affected() > 0)
    }

    async fn insert_inbound(&self, i: &Inbound) -> Result<i64> {
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO inbound_hooks (key, room, agent, secret, secret_hash, created_ts) \
             VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
        )
        .bind(&i.key)
        .bind(&i.room)
        .bind(&i.agent)
        .bind(&i.secret)
        .bind(&i.secret_hash)
        .bind(i.created_ts)
        .fetch_one(&self.pool)
        .await
        .map_err(text_error)?;
        Ok(id)
    }

    async fn inbound_by_key(&self, key: &str) -> Result<Option<Inbound>> {
        let r = sqlx::query(concat!(
            "SELECT ",
            inbound_columns!(),
            " FROM inbound_hooks WHERE key = $1"
        ))
        .bind(key)
        .fetch_optional(&self.pool)
        .await
        .map_err(text_error)?;
        Ok(r.as_ref().map(inbound_from_row))
    }

    async fn list_inbound(&self) -> Result<Vec<Inbound>> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            inbound_columns!(),
            " FROM inbound_hooks ORDER BY id"
        ))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(inbound_from_row).collect())
    }

    async fn delete_inbound(&self, key: &str) -> Result<bool> {
        let n = sqlx::query("DELETE FROM inbound_hooks WHERE key = $1")
            .bind(key)
            .execute(&self.pool)
            .await
            .map_err(text_error)?;
        Ok(n.rows_affected() > 0)
    }

    async fn touch_inbound(&self, id: i64, now: i64) -> Result<()> {
        sqlx::query("UPDATE inbound_hooks SET last_used_ts = $2 WHERE id = $1")
            .bind(id)
            .bind(now)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn stuck_tasks(&self, before: i64, limit: i64) -> Result<Vec<StuckTask>> {
        let rows = sqlx::query(
            "SELECT room, id, title, assignee, act FROM \
                (SELECT t.room, t.id, t.title, t.assignee, \
                    GREATEST(t.updated_ts, \
                        (SELECT MAX(n.ts) FROM notes n WHERE n.task_id = t.id), \
                        t.lease_expires_ts - t.lease_seconds * 1000) AS act \
                 FROM tasks t WHERE t.status = 'in_progress' AND t.updated_ts < $1) x \
             WHERE act < $1 \
                AND NOT EXISTS (SELECT 1 FROM task_stuck s WHERE s.task_id = x.id AND s.activity_ts = x.act) \
             ORDER BY id LIMIT $2",
        )
        .bind(before)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| StuckTask {
                room: r.get(0),
                task_id: r.get(1),
                title: r.get(2),
                holder: r.get(3),
                activity_ts: r.get(4),
            })
            .collect())
    }

    async fn record_stuck(
        &self,
        room: &str,
        task_id: i64,
        activity_ts: i64,
        record: Record,
    ) -> Result<Option<Event>> {
        let mut tx = self.begin_room(room).await?;
        let marked = sqlx::query(
            "INSERT INTO task_stuck (task_id, activity_ts) VALUES ($1, $2) \
             ON CONFLICT (task_id) DO UPDATE SET activity_ts = excluded.activity_ts \
             WHERE task_stuck.activity_ts <> excluded.activity_ts",
        )
        .bind(task_id)
        .bind(activity_ts)
        .execute(&mut *tx)
        .await?;
        if marked.rows_affected() == 0 {
            return Ok(None);
        }
        let events = store_record(&mut tx, room, record, &Written::default()).await?;
        tx.commit().await?;
        Ok(events.into_iter().next())
    }
}
