//! Stuck tasks (SPEC §7a): a task `in_progress` with no update, note or
//! lease renewal for `CHATROOM_STUCK_AFTER` gets one `task_stuck` event per
//! stuck period, naming its holder and the room's leads in its mentions (so
//! it pushes to them, and reaches the dashboard, MQTT and webhooks as every
//! event does). A new activity ends the period; going quiet again starts
//! the next one.

use std::time::Duration;

use serde_json::json;

use crate::clock::fmt_ts;
use crate::domain::Core;
use crate::domain::model::{EventKind, Record};
use crate::error::Result;

/// The actor of the server's own events.
pub const SERVER_ACTOR: &str = "chatroom";

/// Tasks looked at per sweep, at most (the rest wait for the next sweep).
const PER_SWEEP: i64 = 200;

impl Core {
    /// Writes a `task_stuck` event for each task that went quiet for
    /// `after` (`0` turns it off); returns how many were written.
    pub async fn sweep_stuck(&self, after: Duration) -> Result<usize> {
        if after.is_zero() {
            return Ok(0);
        }
        let now = self.clock.now_ms();
        let before = now - after.as_millis() as i64;
        let mut written = 0;
        for t in self.store.stuck_tasks(before, PER_SWEEP).await? {
            let mut mentions: Vec<String> = t.holder.iter().map(|h| h.to_lowercase()).collect();
            for m in self.store.members(&t.room).await? {
                let name = m.agent.to_lowercase();
                if m.lead && !mentions.contains(&name) {
                    mentions.push(name);
                }
            }
            let detail = json!({
                "title": t.title,
                "status": "in_progress",
                "assignee": t.holder,
                "stuck_since": fmt_ts(t.activity_ts),
                "idle_seconds": (now - t.activity_ts) / 1000,
                "mentions": mentions,
            });
            let mut record = Record::new(SERVER_ACTOR, None, now).event(
                EventKind::TaskStuck,
                Some(t.task_id),
                None,
                detail,
            );
            record.task_id = Some(t.task_id);
            if let Some(event) = self.store.record_stuck(&t, record).await? {
                written += 1;
                self.bus.publish([event]);
            }
        }
        Ok(written)
    }
}
