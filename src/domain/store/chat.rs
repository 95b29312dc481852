//! The chat area of the storage port: a room's messages.

use async_trait::async_trait;

use super::Page;
use crate::domain::model::*;
use crate::error::Result;

/// A message to post: its text, and the message it answers.
#[derive(Debug, Clone, Copy)]
pub struct NewMessage<'a> {
    pub body: &'a str,
    pub reply_to: Option<i64>,
}

/// A room's messages.
#[async_trait]
pub trait ChatStore: Send + Sync {
    /// Posts `message` by the record's actor; the record's mentions are the
    /// message's.
    async fn post_message(
        &self,
        room: &str,
        message: NewMessage<'_>,
        record: Record,
    ) -> Result<(Message, Event)>;
    async fn read_messages(&self, room: &str, since_id: i64, limit: i64) -> Result<Vec<Message>>;
    /// The room and author of message `id`.
    async fn message_origin(&self, id: i64) -> Result<Option<(String, String)>>;
    async fn latest_message_id(&self, room: &str) -> Result<i64>;
    /// The `page` of [`ChatStore::read_messages`] and
    /// [`ChatStore::latest_message_id`] together, in one round trip where
    /// the backend has them.
    async fn read_messages_latest(&self, room: &str, page: Page) -> Result<(Vec<Message>, i64)> {
        let messages = self.read_messages(room, page.since_id, page.limit).await?;
        Ok((messages, self.latest_message_id(room).await?))
    }
}
