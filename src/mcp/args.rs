//! Tool arguments: one typed, documented struct per tool. The doc comments
//! become the input schema's descriptions. Unknown fields are ignored, so an
//! argument naming some agent as the caller is never obeyed.

use rmcp::schemars::{self, JsonSchema};
use serde::Deserialize;

use crate::domain::model::RoomInfo;

#[derive(Debug, Deserialize, JsonSchema, Default)]
pub struct RoomOnly {
    /// Room to act on (default: your token's default room).
    pub room: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct SetRoomInfo {
    #[serde(flatten)]
    pub info: RoomInfo,
    /// Room to act on (default: your token's default room).
    pub room: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct PostMessage {
    /// The message text (max 8,000 chars). `@name` mentions an agent.
    pub body: String,
    /// Id of a message of the same room this replies to.
    pub reply_to: Option<i64>,
    /// Room to act on (default: your token's default room).
    pub room: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct SetAttention {
    /// `open` (everything your push clients ask for), `dnd` (only mentions
    /// and assignments push) or `focus` (nothing pushes).
    pub attention: String,
    /// Room to act on (default: your token's default room).
    pub room: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ReadMessages {
    /// Return messages with an id above this (default 0: from the start).
    pub since_id: Option<i64>,
    /// How many (default 50, max 200).
    pub limit: Option<i64>,
    /// Room to act on (default: your token's default room).
    pub room: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ReadEvents {
    /// Return events with an id above this (default 0).
    pub since_id: Option<i64>,
    /// How many (default 100, max 500).
    pub limit: Option<i64>,
    /// Only events of this kind (e.g. message, task_claimed).
    pub kind: Option<String>,
    /// Only events of this task.
    pub task_id: Option<i64>,
    /// Room to act on (default: your token's default room).
    pub room: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct WhatsNew {
    /// How many events (default 50, max 200).
    pub limit: Option<i64>,
    /// Room to act on (default: your token's default room).
    pub room: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct WaitForChange {
    /// Seconds to wait at most (default 45, max the server's CHATROOM_MAX_WAIT_S).
    pub timeout_s: Option<f64>,
    /// Room to act on (default: your token's default room).
    pub room: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct SetRetention {
    /// Keep chat, events and files this many days (0 = keep everything, max 3,650).
    pub days: i64,
    /// Room to act on (default: your token's default room).
    pub room: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct DeleteRoom {
    /// The room to delete, named in full as confirmation.
    pub room: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ListTasks {
    /// A status (pending, in_progress, blocked, in_review, done, cancelled) or `open`.
    pub status: Option<String>,
    /// Only tasks of this agent; `me` for yourself.
    pub assignee: Option<String>,
    /// How many (default 50, max 200).
    pub limit: Option<i64>,
    /// Page back: only tasks with an id below this.
    pub before_id: Option<i64>,
    /// Room to act on (default: your token's default room).
    pub room: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct TaskId {
    /// The task's id.
    pub task_id: i64,
    /// Room to act on (default: your token's default room).
    pub room: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct CreateTask {
    /// Short title (max 200 chars).
    pub title: String,
    /// What is to be done (max 8,000 chars).
    pub body: Option<String>,
    /// Ids of tasks of this room that must be `done` before this one can be claimed.
    pub depends_on: Option<Vec<i64>>,
    /// Claim it for yourself at once.
    pub claim: Option<bool>,
    /// Reserve it for an agent (`me` for yourself; only a lead may name someone else).
    pub assignee: Option<String>,
    /// Only agents with this skill may claim it.
    pub required_skill: Option<String>,
    /// low, normal (default), high or urgent.
    pub priority: Option<String>,
    /// Submitting goes to `in_review` for a lead or the creator to approve.
    pub needs_review: Option<bool>,
    /// Room to act on (default: your token's default room).
    pub room: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ClaimTask {
    /// The task's id.
    pub task_id: i64,
    /// Lease: the task returns to `pending` unless you touch it within this many seconds (1-86,400).
    pub lease_seconds: Option<i64>,
    /// Room to act on (default: your token's default room).
    pub room: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct UpdateTask {
    /// The task's id.
    pub task_id: i64,
    /// New status: pending, in_progress, blocked, done (in_review when it needs review) or cancelled.
    pub status: Option<String>,
    /// New body (max 8,000 chars).
    pub body: Option<String>,
    /// A note to add to the task's thread (max 4,000 chars).
    pub note: Option<String>,
    /// The version you read; a stale one is refused with the current task.
    pub expected_version: Option<i64>,
    /// Room to act on (default: your token's default room).
    pub room: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ReleaseTask {
    /// The task's id.
    pub task_id: i64,
    /// Why (max 4,000 chars).
    pub reason: Option<String>,
    /// Room to act on (default: your token's default room).
    pub room: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct AddNote {
    /// The task's id.
    pub task_id: i64,
    /// The note (max 4,000 chars). `@name` mentions an agent.
    pub body: String,
    /// Room to act on (default: your token's default room).
    pub room: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct SubmitResult {
    /// The task's id.
    pub task_id: i64,
    /// The result (max 20,000 chars).
    pub result: String,
    /// Room to act on (default: your token's default room).
    pub room: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ReviewTask {
    /// The task's id.
    pub task_id: i64,
    /// true: done. false: back to pending, holder cleared (needs a note).
    pub approve: bool,
    /// Review note (max 4,000 chars); required to reject.
    pub note: Option<String>,
    /// Room to act on (default: your token's default room).
    pub room: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct CancelTask {
    /// The task's id.
    pub task_id: i64,
    /// Why (max 4,000 chars).
    pub reason: Option<String>,
    /// Room to act on (default: your token's default room).
    pub room: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct MyMentions {
    /// Return mentions after this index id (default 0).
    pub since_id: Option<i64>,
    /// How many (default 50, max 200).
    pub limit: Option<i64>,
    /// Room to act on (default: your token's default room).
    pub room: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct Search {
    /// Plain words; every word must appear.
    pub query: String,
    /// How many (default 20, max 100).
    pub limit: Option<i64>,
    /// Room to act on (default: your token's default room).
    pub room: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct PutFile {
    /// A plain file name (no slashes).
    pub name: String,
    /// The bytes, standard base64 with padding.
    pub content_base64: String,
    /// Media type (default application/octet-stream).
    pub mime: Option<String>,
    /// Hide and delete the file after this many hours (fractions allowed).
    pub expires_in_hours: Option<f64>,
    /// Link the file to a task of this room.
    pub task_id: Option<i64>,
    /// Room to act on (default: your token's default room).
    pub room: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct FileId {
    /// The file's id.
    pub file_id: i64,
    /// Room to act on (default: your token's default room).
    pub room: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct ListFiles {
    /// How many (default 50, max 200).
    pub limit: Option<i64>,
    /// Room to act on (default: your token's default room).
    pub room: Option<String>,
}
