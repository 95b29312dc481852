//! [`AppState`]: what every request handler, tool and background loop shares,
//! and [`state`], which opens the database and builds it.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::auth::budget::BodyBudget;
use crate::auth::ratelimit::RateLimiter;
use crate::auth::streams::Streams;
use crate::auth::throttle::Throttle;
use crate::clock::Clock;
use crate::config::Config;
use crate::db;
use crate::domain::model::AuditRow;
use crate::domain::{Core, Settings};

/// Everything a request handler may need: one pointer to [`Shared`], so a
/// clone (several per request, by the router's layers and extractors) is
/// one reference count, not one per part.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// What [`AppState`] points to.
pub struct Shared {
    pub core: Core,
    pub config: Arc<Config>,
    pub throttle: Arc<Throttle>,
    pub rate: Arc<RateLimiter>,
    /// What the MQTT bridge reports (all zero while it is off).
    pub mqtt: Arc<crate::mqtt::Stats>,
    /// The request body bytes all requests may hold at once.
    pub bodies: Arc<BodyBudget>,
    /// Open SSE streams and parked waits per token.
    pub streams: Arc<Streams>,
    audit_tx: mpsc::UnboundedSender<AuditRow>,
}

impl Shared {
    /// Queues an audit row for the batch writer (calls that wrote their own
    /// row in their transaction do not come here).
    pub fn audit(&self, row: AuditRow) {
        if self.audit_tx.send(row).is_err() {
            tracing::error!("audit writer is gone; an audit row was not written");
        }
    }

    /// The request body limit of `/mcp` and `POST /v1/files` (see [`body_limit`]).
    pub fn body_limit(&self) -> usize {
        body_limit(self.config.max_file_bytes)
    }
}

/// The request body limit of `/mcp` and `POST /v1/files`: a file of twice
/// `max_file_bytes` in base64 plus room for the rest. A file somewhat over
/// the cap so reaches `put_file`, which refuses it saying what the cap is
/// (an agent reads a tool's refusal; a `413` its client may show as a
/// broken connection); a larger body gets the `413`.
fn body_limit(max_file_bytes: usize) -> usize {
    (2 * max_file_bytes).div_ceil(3) * 4 + 64 * 1024
}

/// Opens the database named by `config` and builds the shared state, the
/// domain deciding at `clock`'s time, with the receiving end of the audit
/// queue for the batch writer.
pub async fn state(
    config: Config,
    shutdown: CancellationToken,
    clock: Clock,
) -> anyhow::Result<(AppState, mpsc::UnboundedReceiver<AuditRow>)> {
    let store = db::open(&config.database()).await?;
    let core = Core::new(
        store,
        Settings {
            max_wait: config.max_wait,
            max_file_bytes: config.max_file_bytes,
        },
        shutdown,
    )
    .with_clock(clock)
    .note_start()
    .await?;
    let (audit_tx, audit_rx) = mpsc::unbounded_channel();
    let bodies = Arc::new(BodyBudget::new(
        body_limit(config.max_file_bytes),
        config.max_in_flight,
    ));
    Ok((
        AppState(Arc::new(Shared {
            bodies,
            streams: Arc::new(Streams::new(config.max_streams_per_token)),
            core,
            throttle: Arc::new(Throttle::new(
                config.auth_fail_limit,
                config.auth_fail_window,
            )),
            rate: Arc::new(RateLimiter::new(config.rate_limit_per_minute)),
            mqtt: Arc::new(crate::mqtt::Stats::default()),
            config: Arc::new(config),
            audit_tx,
        })),
        audit_rx,
    ))
}
