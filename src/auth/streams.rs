//! The open SSE streams and parked `wait_for_change` calls of each token:
//! the cap on how many one token holds (`CHATROOM_MAX_STREAMS_PER_TOKEN`),
//! and the one signal that ends all of them when the token is revoked.
//!
//! The revocation watcher ([`check_revocations`], run by the background
//! loops) reads the token list once
//! a second while anything is open (one query, however many streams), so a
//! revocation is noticed whoever wrote it: this server's console, the admin
//! CLI in another process on the same SQLite file, or another replica on
//! the same PostgreSQL database. A stream about to deliver what it was
//! woken for first waits for a look that began after the wake-up
//! ([`Slot::confirm`]; one look serves every stream waiting at that time),
//! so nothing written after a revocation reaches a revoked token's stream.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Caller;
use crate::domain::store::prelude::*;
use crate::error::Error;

/// How often the watcher looks for revoked tokens: a revoked token's
/// streams and waits end within this time.
pub const REVOCATION_CHECK: Duration = Duration::from_secs(1);

/// The open streams and waits, per token id.
pub struct Streams {
    /// `0`: no cap.
    max_per_token: usize,
    open: Mutex<HashMap<i64, Entry>>,
    /// How many looks for revoked tokens have begun.
    begun: AtomicU64,
    /// The number of the last look completed; held while one runs, so
    /// the streams that ask meanwhile share the next one.
    completed: tokio::sync::Mutex<u64>,
}

struct Entry {
    count: usize,
    /// Cancelled when the token is found revoked.
    revoked: CancellationToken,
}

/// One open stream or parked wait; gives its place back when dropped.
pub struct Slot {
    streams: Arc<Streams>,
    token_id: i64,
    revoked: CancellationToken,
}

impl Slot {
    /// Resolves once the token of this slot is revoked.
    pub async fn revoked(&self) {
        self.revoked.cancelled().await
    }

    /// A token cancelled with the revocation, for a `select!` that must
    /// not borrow the slot.
    pub fn revoked_token(&self) -> CancellationToken {
        self.revoked.clone()
    }

    /// The error a stream or wait ends with when its token is revoked.
    pub fn revoked_error() -> Error {
        Error::Unauthorized("this token was revoked; the stream or wait ends".into())
    }

    /// The error a stream ends with when its OAuth access token expires.
    pub fn expired_error() -> Error {
        Error::Unauthorized(
            "this access token has expired; the stream ends (refresh it and reconnect)".into(),
        )
    }

    /// Whether this slot's token still stands, as of a look for revoked
    /// tokens that began after this call: what was committed before the
    /// call may then be delivered. Streams that ask while a look runs
    /// share the next one, so a burst costs one query, not one per stream.
    pub async fn confirm(&self, store: &dyn Store) -> Result<bool, Error> {
        let need = self.streams.begun.load(Ordering::SeqCst) + 1;
        let mut completed = self.streams.completed.lock().await;
        if *completed < need {
            let n = self.streams.begun.fetch_add(1, Ordering::SeqCst) + 1;
            look(&self.streams, store).await?;
            *completed = n;
        }
        Ok(!self.revoked.is_cancelled())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        super::release(&self.streams.open, &self.token_id, |entry| {
            entry.count -= 1;
            entry.count == 0
        });
    }
}

impl Streams {
    pub fn new(max_per_token: usize) -> Streams {
        Streams {
            max_per_token,
            open: Mutex::new(HashMap::new()),
            begun: AtomicU64::new(0),
            completed: tokio::sync::Mutex::new(0),
        }
    }

    /// Takes a place for one more stream or wait of `caller`'s token;
    /// `rate_limited` (429) when the token holds its cap already.
    pub fn open(self: &Arc<Self>, caller: &Caller) -> Result<Slot, Error> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = open.entry(caller.token_id).or_insert_with(|| Entry {
            count: 0,
            revoked: CancellationToken::new(),
        });
        if self.max_per_token > 0 && entry.count >= self.max_per_token {
            return Err(Error::RateLimited {
                message: format!(
                    "this token holds {} open streams and waits already \
                     (CHATROOM_MAX_STREAMS_PER_TOKEN); close one first",
                    entry.count
                ),
                retry_after_s: 1,
            });
        }
        entry.count += 1;
        Ok(Slot {
            streams: self.clone(),
            token_id: caller.token_id,
            revoked: entry.revoked.clone(),
        })
    }

    /// The tokens with something open.
    fn token_ids(&self) -> Vec<i64> {
        self.open
            .lock()
            .expect("streams lock")
            .keys()
            .copied()
            .collect()
    }

    /// Ends every stream and wait of the tokens in `ids`.
    fn revoke(&self, ids: &[i64]) {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        for id in ids {
            if let Some(entry) = open.get(id) {
                entry.revoked.cancel();
            }
        }
    }
}

/// One look for revoked tokens, as the background watcher runs it once a
/// second: a failure is logged and the next look tries again.
pub async fn check_revocations(streams: &Streams, store: &dyn Store) {
    if let Err(e) = look(streams, store).await {
        e.log_if_internal();
    }
}

/// Every token with something open that the store no longer lists as
/// valid (revoked, or purged; for an OAuth app, its grant revoked) is
/// signalled.
async fn look(streams: &Streams, store: &dyn Store) -> Result<(), Error> {
    let open = streams.token_ids();
    if open.is_empty() {
        return Ok(());
    }
    let mut valid: HashSet<i64> = store
        .list_tokens()
        .await?
        .into_iter()
        .filter(|t| t.revoked_ts.is_none())
        .map(|t| t.id)
        .collect();
    // An OAuth app's caller carries its grant's id negated.
    if open.iter().any(|id| *id < 0) {
        valid.extend(
            store
                .oauth_list_grants()
                .await?
                .into_iter()
                .filter(|g| g.revoked_ts.is_none())
                .map(|g| -g.id),
        );
    }
    let gone: Vec<i64> = open.into_iter().filter(|id| !valid.contains(id)).collect();
    if !gone.is_empty() {
        tracing::info!(
            tokens = gone.len(),
            "ending the streams and waits of revoked tokens"
        );
        streams.revoke(&gone);
    }
    Ok(())
}

/// When `caller`'s token stops being valid by itself: an OAuth access
/// token's expiry (milliseconds since the epoch); `None` for a token that
/// lives until it is revoked.
pub async fn expires_at(store: &dyn Store, caller: &Caller) -> Result<Option<i64>, Error> {
    if caller.token_id >= 0 {
        return Ok(None);
    }
    Ok(Some(
        store
            .oauth_token(&caller.token_hash.hex())
            .await?
            .map_or(0, |(t, _)| t.expires_ts),
    ))
}
