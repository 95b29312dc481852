//! The files area of the storage port: files shared in a room.

use async_trait::async_trait;

use crate::domain::model::*;
use crate::error::Result;

/// Files shared in a room.
#[async_trait]
pub trait FileStore: Send + Sync {
    async fn put_file(
        &self,
        room: &str,
        file: &NewFile,
        record: Record,
    ) -> Result<(FileMeta, Event)>;
    async fn get_file(&self, room: &str, id: i64, now: i64) -> Result<Option<(FileMeta, Vec<u8>)>>;
    async fn file_meta(&self, room: &str, id: i64, now: i64) -> Result<Option<FileMeta>>;
    /// The room that holds file `id`, unless it expired by `now`.
    async fn file_room(&self, id: i64, now: i64) -> Result<Option<String>>;
    async fn list_files(&self, room: &str, limit: i64, now: i64) -> Result<Vec<FileMeta>>;
    async fn delete_file(&self, room: &str, id: i64, record: Record) -> Result<Option<Event>>;
}
