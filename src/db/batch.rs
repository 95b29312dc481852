//! What both group-commit writers (SQLite's and PostgreSQL's) share: how a
//! write that rode on a batch learns whether the batch committed.

use tokio::sync::watch;

use crate::error::{Error, Result};

/// A batch's end as its writes see it: `None` while it is open, then
/// whether it committed (the reason when it did not).
pub(crate) type Outcome = Option<std::result::Result<(), String>>;

/// A write's result once the batch that carries it has ended.
pub(crate) async fn settle<T>(
    out: Result<T>,
    pending: Option<watch::Receiver<Outcome>>,
) -> Result<T> {
    let Some(mut rx) = pending else { return out };
    let outcome = rx
        .wait_for(Option::is_some)
        .await
        .map(|o| o.clone())
        .map_err(|_| Error::internal(anyhow::anyhow!("the writer went away before commit")))?;
    match outcome {
        Some(Err(e)) => Err(Error::internal(anyhow::anyhow!("commit failed: {e}"))),
        _ => out,
    }
}
