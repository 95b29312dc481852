//! The board area of the storage port: tasks, their notes and leases, the
//! mentions index and search.

use async_trait::async_trait;

use super::Page;
use crate::domain::model::*;
use crate::error::Result;

/// Tasks, notes, mentions and search.
#[async_trait]
pub trait BoardStore: Send + Sync {
    async fn create_task(&self, room: &str, task: NewTask) -> Result<(Task, Vec<Event>)>;
    async fn get_task(&self, room: &str, id: i64) -> Result<Option<Task>>;
    async fn list_tasks(&self, room: &str, query: &TaskQuery) -> Result<Vec<Task>>;
    /// How many of the room's tasks are in each status.
    async fn task_counts(&self, room: &str) -> Result<TaskCounts>;
    /// Writes a change decided on `change.expected_version`; `None` when the
    /// task moved on since (the caller re-reads and decides again).
    async fn apply_task_change(
        &self,
        room: &str,
        change: TaskChange,
    ) -> Result<Option<(Task, Vec<Event>)>>;
    /// Tasks whose lease lapsed before `now`, across rooms: `(room, id)`.
    async fn lapsed_leases(&self, now: i64) -> Result<Vec<(String, i64)>>;
    async fn notes(&self, task_id: i64) -> Result<Vec<Note>>;
    /// `agent`'s mentions in `room` after the place `page.since_id`.
    async fn my_mentions(&self, room: &str, agent: &str, page: Page) -> Result<Vec<Mention>>;
    async fn search(&self, room: &str, words: &[String], limit: i64) -> Result<Vec<SearchHit>>;
}
