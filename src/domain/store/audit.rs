//! The audit area of the storage port: the audit rows of calls and the
//! owner's admin log.

use async_trait::async_trait;

use crate::domain::model::*;
use crate::error::Result;

/// The audit rows and the admin log.
#[async_trait]
pub trait AuditStore: Send + Sync {
    async fn insert_audit(&self, rows: &[AuditRow]) -> Result<()>;
    async fn audit_count(&self) -> Result<i64>;
    async fn insert_admin_log(&self, entry: &AdminLogEntry) -> Result<()>;
    async fn admin_log(&self, limit: i64) -> Result<Vec<AdminLogEntry>>;
}
