//! The server's background work, started and stopped in one place: the
//! ticking loops (presence flush, lease sweep, revocation watch, pruning), the batch writer of
//! audit rows and the MQTT bridge. Every task is tracked, so the drain at
//! shutdown waits for each one instead of leaving it to the runtime.

use std::future::Future;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;

use crate::domain::model::AuditRow;
use crate::state::AppState;

/// How long the drain waits for each part of the background work.
const DRAIN: Duration = Duration::from_secs(3);

/// The running background work of one server.
pub struct Background {
    /// The ticking loops; each ends when the shutdown token fires.
    loops: JoinSet<()>,
    /// Ends once every [`AppState`] is gone and the audit queue is written.
    audit: JoinHandle<()>,
    /// Says `offline` to the broker before it ends.
    bridge: Option<JoinHandle<()>>,
}

impl Background {
    /// Starts the MQTT bridge (if configured), the loops and the audit
    /// writer; `listen` is where the server listens (no webhook may call it).
    pub fn start(
        state: &AppState,
        audit_rx: mpsc::UnboundedReceiver<AuditRow>,
        listen: std::net::SocketAddr,
    ) -> anyhow::Result<Background> {
        let bridge = match &state.config.mqtt {
            Some(mqtt) => Some(crate::mqtt::spawn(
                mqtt.clone(),
                state.core.clone(),
                state.mqtt.clone(),
            )?),
            None => None,
        };
        let core = &state.core;
        let shutdown = &core.shutdown;
        let mut loops = JoinSet::new();
        // Presence: written in batches.
        let c = core.clone();
        every(&mut loops, shutdown, Duration::from_secs(5), move || {
            let core = c.clone();
            async move { core.presence.flush(core.store.as_ref()).await }
        });
        // Leases: a lapsed one is applied within about a second.
        let c = core.clone();
        every(&mut loops, shutdown, Duration::from_secs(1), move || {
            let core = c.clone();
            async move {
                if let Err(e) = core.sweep_leases().await {
                    e.log_if_internal();
                }
            }
        });
        // Webhooks out: delivered from the queue in the database.
        loops.spawn(crate::webhooks::run(core.clone(), listen));
        // Stuck tasks: looked for a few times per stuck period.
        let (c, after) = (core.clone(), state.config.stuck_after);
        if !after.is_zero() {
            let period = (after / 120).clamp(Duration::from_secs(1), Duration::from_secs(60));
            every(&mut loops, shutdown, period, move || {
                let core = c.clone();
                async move {
                    if let Err(e) = core.sweep_stuck(after).await {
                        e.log_if_internal();
                    }
                }
            });
        }
        // Revoked tokens: their open streams and parked waits end.
        let (c, streams) = (core.clone(), state.streams.clone());
        every(
            &mut loops,
            shutdown,
            crate::auth::streams::REVOCATION_CHECK,
            move || {
                let (core, streams) = (c.clone(), streams.clone());
                async move {
                    crate::auth::streams::check_revocations(&streams, core.store.as_ref()).await
                }
            },
        );
        // Retention and file expiry.
        if state.config.prune {
            let c = core.clone();
            every(
                &mut loops,
                shutdown,
                state.config.prune_interval,
                move || {
                    let core = c.clone();
                    async move {
                        let swept = core.store.prune(crate::clock::now_ms()).await;
                        // Expired OAuth state goes with the same sweep.
                        match core.prune_oauth_then(swept).await {
                            Ok(n) if n != Default::default() => tracing::info!(
                                messages = n.messages,
                                events = n.events,
                                files = n.files,
                                "pruned"
                            ),
                            Ok(_) => {}
                            Err(e) => e.log_if_internal(),
                        }
                    }
                },
            );
        }
        let audit = tokio::spawn(write_audit(core.clone(), audit_rx));
        Ok(Background {
            loops,
            audit,
            bridge,
        })
    }

    /// After the last request: waits for the loops to stop (the shutdown
    /// token has fired), flushes presence, lets go of `state` so the audit
    /// queue closes, and waits for its last rows and for the bridge.
    pub async fn drain(self, state: AppState) {
        let Background {
            mut loops,
            audit,
            bridge,
        } = self;
        let _ =
            tokio::time::timeout(DRAIN, async { while loops.join_next().await.is_some() {} }).await;
        // Requests are done: flush what is kept in memory.
        state.core.presence.flush(state.core.store.as_ref()).await;
        drop(state);
        let _ = tokio::time::timeout(DRAIN, audit).await;
        if let Some(bridge) = bridge {
            // The bridge says `offline` to the broker before the process goes.
            let _ = tokio::time::timeout(DRAIN, bridge).await;
        }
    }
}

/// Runs `work` every `period` until `shutdown` fires, in `set`.
fn every<F, Fut>(set: &mut JoinSet<()>, shutdown: &CancellationToken, period: Duration, mut work: F)
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let shutdown = shutdown.clone();
    set.spawn(async move {
        let mut tick = tokio::time::interval(period);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tick.tick() => work().await,
            }
        }
    });
}

/// Audit rows of calls that wrote none themselves, in batches. A batch
/// waits a moment for the rest of its burst (a thousand waiters woken by one
/// post all answer at once), so the burst's rows take one transaction
/// written after its answers, not many written among them. Ends when every
/// sender is gone and the queue is empty.
async fn write_audit(core: crate::domain::Core, mut audit_rx: mpsc::UnboundedReceiver<AuditRow>) {
    const BATCH: usize = 1024;
    let mut batch = Vec::with_capacity(BATCH);
    while audit_rx.recv_many(&mut batch, BATCH).await > 0 {
        let linger = tokio::time::sleep(Duration::from_millis(50));
        tokio::pin!(linger);
        while batch.len() < BATCH {
            let room = BATCH - batch.len();
            tokio::select! {
                _ = &mut linger => break,
                n = audit_rx.recv_many(&mut batch, room) => if n == 0 { break },
            }
        }
        let mut attempts = 0;
        while let Err(e) = core.store.insert_audit(&batch).await {
            attempts += 1;
            e.log_if_internal();
            if attempts >= 5 {
                tracing::error!(rows = batch.len(), "giving up on a batch of audit rows");
                break;
            }
            tokio::time::sleep(Duration::from_millis(200 * attempts)).await;
        }
        batch.clear();
    }
}
