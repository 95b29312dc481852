//! The copy area of the storage port: moving an instance from one database
//! to another (`chatroom admin copy`), table by table.

use async_trait::async_trait;
use serde_json::Value;

use crate::error::Result;

/// Moving an instance (`chatroom admin copy`); `table` is one of `db::TABLES`.
#[async_trait]
pub trait CopyStore: Send + Sync {
    /// Up to `limit` rows of `table` in key order, as JSON objects of the
    /// `db::TABLES` columns (bytes in base64): those with an `id` above
    /// `after`, or for a table without ids, those after the first `after`.
    async fn dump_table(&self, table: &str, after: i64, limit: i64) -> Result<Vec<Value>>;
    /// Inserts rows as `dump_table` gives them, keeping their ids.
    async fn load_rows(&self, table: &str, rows: &[Value]) -> Result<()>;
    /// How many rows `table` holds.
    async fn count_rows(&self, table: &str) -> Result<i64>;
    /// The highest id ever handed out in `table` (pruned rows included).
    async fn id_high_water(&self, table: &str) -> Result<i64>;
    /// Makes the ids handed out next in `table` come after `high`.
    async fn set_id_floor(&self, table: &str, high: i64) -> Result<()>;
}
