//! The rooms area of the storage port: rooms, their settings, and pruning
//! what outlived a room's retention.

use async_trait::async_trait;

use crate::domain::model::*;
use crate::error::Result;

/// Rooms: creating, reading, changing and deleting them, and pruning.
#[async_trait]
pub trait RoomStore: Send + Sync {
    async fn create_room(&self, room: &Room, now: i64) -> Result<bool>;
    async fn get_room(&self, name: &str) -> Result<Option<Room>>;
    /// Every room with its counts; files that expired by `now` do not count.
    async fn list_rooms(&self, now: i64) -> Result<Vec<RoomSummary>>;
    async fn update_room_info(
        &self,
        room: &str,
        info: &RoomInfo,
        record: Record,
    ) -> Result<Option<(Room, Event)>>;
    async fn set_retention(
        &self,
        room: &str,
        days: i64,
        record: Record,
    ) -> Result<Option<(Event, PruneCount)>>;
    async fn delete_room(&self, room: &str) -> Result<bool>;
    /// Prunes every room past its retention, and expired files, as of `now`.
    async fn prune(&self, now: i64) -> Result<PruneCount>;
}
