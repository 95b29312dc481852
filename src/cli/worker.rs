//! `chatroom worker`: runs an API-only model as a board worker.
//!
//! The worker is an MCP client of the board with a token of its own and a
//! client of an OpenAI-compatible chat-completions endpoint. It claims
//! pending tasks it may do, asks the model, and submits the answer; it backs
//! off on failures, caps its model calls per hour, and hands its task back
//! when stopped. Layout: [`settings`] (environment), [`board`] (MCP),
//! [`model`] (chat completions), [`pacing`] (the cap and the cool-downs);
//! the loop itself is [`Worker`].

mod board;
mod claims;
mod model;
mod pacing;
mod settings;

use std::cmp::Reverse;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use board::{Board, BoardError, BoardTask, Me};
use claims::{Claim, ClaimFile};
use model::{Model, ModelError};
use pacing::{AfterFailure, CallCap, Failures};
use settings::Settings;

const HELP: &str = "\
Runs an API-only model as a worker on a chatroom board. It claims pending tasks
whose required_skill is one of its token's skills (or unset), never one assigned
to another agent; sends each to the model with the task framed as data, not
instructions; and submits the answer with submit_result. A failed call, an empty
answer or one over 20,000 characters releases the task; a failed task cools
down; after WORKER_MAX_FAILURES failures the worker posts a note on it and stops
retrying it. It claims nothing while the model endpoint does not answer (it
checks before claiming, and says which URL failed and why), and a task handed
back because the endpoint went away does not count as the task's failure.
It keeps the claim it holds in $XDG_STATE_HOME/chatroom (else
~/.local/state/chatroom), so that after a crash the next start hands back that
claim, and no task its agent holds from another session. Ctrl+C or SIGTERM
exits 0, handing back a task in flight. It works in the token's default room.
Run one worker per agent name.

Environment (a .env file in the working directory is read too):
  CHATROOM_URL                the board's base URL, without /mcp
                              (e.g. https://chat.example.com)
  CHATROOM_TOKEN              the worker's own token (chatroom admin add-token
                              --agent NAME --skill S ...); its skills pick tasks
  WORKER_MODEL_BASE_URL       an OpenAI-compatible API base; the worker calls
                              {WORKER_MODEL_BASE_URL}/chat/completions
                              (e.g. https://api.openai.com/v1)
  WORKER_MODEL_NAME           the model to ask (the request's \"model\" field)
  WORKER_API_KEY              the endpoint's key, sent only as
                              \"Authorization: Bearer ...\"; never printed or
                              logged; leave unset for a local endpoint that
                              takes none
  WORKER_POLL_INTERVAL        seconds between looks at the board [default: 10]
  WORKER_MAX_TASKS_PER_HOUR   model calls allowed in any rolling hour, every
                              attempt counted; at the cap it waits [default: 10]
  WORKER_MODEL_TIMEOUT        seconds one model call may take [default: 120]
  WORKER_COOLDOWN_SECONDS     seconds before a failed task is tried again
                              [default: 900]
  WORKER_MAX_FAILURES         failures of one task before giving up on it
                              [default: 3]
  WORKER_ALLOW_INSECURE_HTTP  on: allow plain http:// to hosts other than
                              loopback (a board or model on your LAN); by
                              default both URLs must be https://, or http://
                              to localhost/127.0.0.0/8/[::1] [default: off]
  CHATROOM_LOG                log level or filter [default: info]
  CHATROOM_LOG_FORMAT         text or json [default: text]

Durations take fractions of a second (WORKER_POLL_INTERVAL=0.5). Failure counts
live in memory: a restart forgets them. Progress goes to stderr, one line per
claim, submit, release and give-up, each with the task id; the model's answer
and the keys are never logged.";

/// `chatroom worker` takes no flags: it is configured by the environment.
#[derive(Args)]
#[command(after_help = HELP)]
pub struct WorkerArgs {}

/// Runs the worker until Ctrl+C or SIGTERM.
pub async fn run(_args: WorkerArgs) -> anyhow::Result<ExitCode> {
    let settings = match Settings::from_map(&crate::config::env_map()) {
        Ok(s) => s,
        Err(errors) => {
            eprintln!("chatroom worker: {}", errors.join("; "));
            return Ok(ExitCode::from(2));
        }
    };
    init_logging();
    let shutdown = CancellationToken::new();
    tokio::spawn(super::stop_on_signal(shutdown.clone()));
    let model = Model::new(
        settings.completions_url.clone(),
        settings.model_name.clone(),
        settings.api_key.as_ref(),
        settings.model_timeout,
    )?;
    let board = tokio::select! {
        b = Board::connect(&settings.mcp_url, &settings.board_token) => b?,
        _ = shutdown.cancelled() => return Ok(ExitCode::SUCCESS),
    };
    let pacing = Pacing::from_settings(&settings);
    info!(
        model = %settings.model_name,
        endpoint = %host_of(&settings.completions_url),
        poll_interval_s = settings.poll_interval.as_secs_f64(),
        max_calls_per_hour = settings.max_calls_per_hour,
        "worker starting"
    );
    let claims = ClaimFile::locate(&settings.mcp_url, settings.board_token.expose());
    let worker = Worker::start(board, model, pacing, claims, shutdown).await?;
    worker.run().await;
    Ok(ExitCode::SUCCESS)
}

/// Logging to stderr from `CHATROOM_LOG` / `CHATROOM_LOG_FORMAT`, as `serve`
/// does. rmcp stays at warn whatever the filter says: at debug and trace it
/// logs tool arguments, and a submitted result is the model's answer.
fn init_logging() {
    let filter = std::env::var("CHATROOM_LOG")
        .ok()
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "info".to_owned());
    let directives = if ["trace", "debug", "info", "warn", "error"].contains(&filter.as_str()) {
        format!("warn,chatroom={filter}")
    } else {
        filter
    };
    let env_filter = tracing_subscriber::EnvFilter::try_new(&directives)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,chatroom=info"))
        .add_directive("rmcp=warn".parse().expect("a valid directive"));
    let json = std::env::var("CHATROOM_LOG_FORMAT").is_ok_and(|v| v.trim() == "json");
    let builder = tracing_subscriber::fmt()
        .with_env_filter(env_filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

/// The host of a URL, for a log line that must not show a path or query.
fn host_of(url: &str) -> String {
    reqwest::Url::parse(url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .unwrap_or_default()
}

/// A title fit for a log line: control characters (escape sequences,
/// newlines) removed, so a task cannot forge or garble log lines.
pub fn printable(text: &str) -> String {
    text.chars().filter(|c| !c.is_control()).collect()
}

/// How fast the worker goes: poll interval, the call cap, failure handling.
/// Tests and embedders may build one with any window and intervals.
#[derive(Debug)]
pub struct Pacing {
    pub poll_interval: Duration,
    pub cap: CallCap,
    pub failures: Failures,
    /// The claim's lease: a task held longer returns to `pending` by itself,
    /// so a worker that dies without a word does not hold it for ever.
    pub lease_seconds: i64,
}

impl Pacing {
    pub fn from_settings(s: &Settings) -> Pacing {
        Pacing {
            poll_interval: s.poll_interval,
            cap: CallCap::new(s.max_calls_per_hour, Duration::from_secs(3600)),
            failures: Failures::new(s.cooldown, s.max_failures),
            lease_seconds: (s.model_timeout.as_secs_f64().ceil() as i64 + 60).clamp(1, 86_400),
        }
    }
}

/// The worker's loop over the board.
pub struct Worker {
    board: Board,
    model: Model,
    me: Me,
    pacing: Pacing,
    /// The claim held, on disk for the next run after a crash.
    claims: ClaimFile,
    shutdown: CancellationToken,
    /// Set while waiting at the cap, so the wait is logged once.
    capped: bool,
    /// When the model endpoint last answered (a probe or a call).
    model_answered: Option<Instant>,
    /// Why the endpoint does not answer, as last logged (logged again only
    /// when it changes).
    model_down: Option<String>,
}

/// How long an answer from the model endpoint stands for "it is up": a
/// claim after a longer quiet is preceded by a probe.
const MODEL_FRESH: Duration = Duration::from_secs(60);

/// What one task's turn ended with.
#[derive(PartialEq, Eq)]
enum Turn {
    Done,
    Stop,
}

impl Worker {
    /// Learns who it is (`whoami`) and releases claims an earlier run left.
    pub async fn start(
        board: Board,
        model: Model,
        pacing: Pacing,
        claims: ClaimFile,
        shutdown: CancellationToken,
    ) -> anyhow::Result<Worker> {
        let me = board
            .whoami()
            .await
            .map_err(|e| anyhow::anyhow!("cannot learn who this token is: {e}"))?;
        if me.readonly {
            anyhow::bail!(
                "CHATROOM_TOKEN is a read-only (observer) token; the worker needs a writer token"
            );
        }
        info!(agent = %me.agent, room = %me.room, skills = ?me.skills, "signed in to the board");
        if claims.path().is_none() {
            warn!(
                "no state directory (XDG_STATE_HOME or HOME): a claim left by a crash is not \
                 handed back on the next start, only when its lease runs out"
            );
        }
        let worker = Worker {
            board,
            model,
            me,
            pacing,
            claims,
            shutdown,
            capped: false,
            model_answered: None,
            model_down: None,
        };
        worker.release_left_claim().await?;
        Ok(worker)
    }

    /// Hands back the claim an earlier run of this worker left (a crash),
    /// if its task is still held at the version that claim gave it. Other
    /// tasks held under this agent's name belong to another session of the
    /// same agent: they are left alone, and said so.
    async fn release_left_claim(&self) -> anyhow::Result<()> {
        let left = self.claims.read();
        for status in ["in_progress", "blocked"] {
            let held = self
                .board
                .all_tasks(status, Some("me"))
                .await
                .map_err(|e| anyhow::anyhow!("cannot list the tasks this agent holds: {e}"))?;
            for task in held {
                let ours = Some(Claim {
                    task_id: task.id,
                    version: task.version,
                });
                if left != ours {
                    info!(
                        task_id = task.id,
                        title = %printable(&task.title),
                        agent = %self.me.agent,
                        "left alone: held by this agent, but not claimed by this worker"
                    );
                    continue;
                }
                match self
                    .board
                    .release(
                        task.id,
                        "released by chatroom worker on start: its earlier run claimed it and stopped without finishing",
                    )
                    .await
                {
                    Ok(true) => info!(
                        task_id = task.id,
                        title = %printable(&task.title),
                        "released a claim left by an earlier run"
                    ),
                    Ok(false) => {}
                    Err(e) => warn!(task_id = task.id, error = %e, "cannot release a stale claim"),
                }
            }
        }
        self.claims.clear();
        Ok(())
    }

    /// Whether the model endpoint answers: known from the last minute, or
    /// probed now. A change either way is logged once.
    async fn model_ready(&mut self) -> bool {
        if self
            .model_answered
            .is_some_and(|t| t.elapsed() < MODEL_FRESH)
        {
            return true;
        }
        match self.model.probe().await {
            Ok(()) => {
                self.model_answered = Some(Instant::now());
                if self.model_down.take().is_some() {
                    info!(endpoint = %self.model.shown_url(), "the model endpoint answers again; claiming tasks");
                }
                true
            }
            Err(e) => {
                self.model_unreachable(&e);
                false
            }
        }
    }

    /// Notes that the endpoint did not answer (logging why once per cause);
    /// the next claim waits for a probe that succeeds.
    fn model_unreachable(&mut self, e: &ModelError) {
        self.model_answered = None;
        let cause = match e {
            ModelError::Status(code @ (401 | 403)) => {
                format!("HTTP {code}: the endpoint refuses WORKER_API_KEY")
            }
            other => other.cause(),
        };
        if self.model_down.as_deref() != Some(&cause) {
            warn!(
                endpoint = %self.model.shown_url(),
                %cause,
                "the model endpoint does not answer; not claiming tasks until it does"
            );
            self.model_down = Some(cause);
        }
    }

    /// Works until shut down.
    pub async fn run(mut self) {
        while !self.shutdown.is_cancelled() {
            let now = Instant::now();
            if let Some(free_at) = self.pacing.cap.next_free(now) {
                if !self.capped {
                    self.capped = true;
                    info!(
                        wait_s = free_at.duration_since(now).as_secs(),
                        "hourly cap of model calls reached; waiting before claiming more"
                    );
                }
                if !self.sleep_until(free_at).await {
                    break;
                }
                continue;
            }
            self.capped = false;
            match self.claim_next().await {
                Ok(Some(task)) => {
                    if self.work(task).await == Turn::Stop {
                        break;
                    }
                    // Look again at once: there may be more for us.
                    continue;
                }
                Ok(None) => {}
                Err(e) => warn!(error = %e, "cannot read the board; will try again"),
            }
            let next = Instant::now() + self.pacing.poll_interval;
            if !self.sleep_until(next).await {
                break;
            }
        }
        info!("worker stopped");
        self.board.close().await;
    }

    /// Sleeps until `t`; false when shut down first.
    async fn sleep_until(&self, t: Instant) -> bool {
        tokio::select! {
            _ = tokio::time::sleep_until(t) => true,
            _ = self.shutdown.cancelled() => false,
        }
    }

    /// Whether the worker may take `task` now.
    fn may_take(&self, task: &BoardTask, now: Instant) -> bool {
        task.status == "pending"
            && task.assignee.as_ref().is_none_or(|a| *a == self.me.agent)
            && task
                .required_skill
                .as_ref()
                .is_none_or(|skill| self.me.skills.iter().any(|s| s.eq_ignore_ascii_case(skill)))
            && task.blocked_by_unfinished.is_empty()
            && self.pacing.failures.may_try(task.id, now)
    }

    /// Reads every pending task and claims the best one it may take:
    /// highest priority first, then the oldest. Nothing is claimed while
    /// the model endpoint does not answer.
    async fn claim_next(&mut self) -> Result<Option<BoardTask>, BoardError> {
        let now = Instant::now();
        let mut candidates: Vec<BoardTask> = self
            .board
            .all_tasks("pending", None)
            .await?
            .into_iter()
            .filter(|t| self.may_take(t, now))
            .collect();
        candidates.sort_by_key(|t| (Reverse(priority_rank(&t.priority)), t.id));
        if candidates.is_empty() || !self.model_ready().await {
            return Ok(None);
        }
        for task in candidates {
            if self.shutdown.is_cancelled() {
                return Ok(None);
            }
            match self.board.claim(task.id, self.pacing.lease_seconds).await {
                Ok(Ok(version)) => {
                    info!(task_id = task.id, title = %printable(&task.title), "claimed");
                    let claim = Claim {
                        task_id: task.id,
                        version,
                    };
                    if let Err(e) = self.claims.hold(claim) {
                        warn!(error = %e, "cannot keep the claim on disk; after a crash it waits for its lease");
                    }
                    return Ok(Some(task));
                }
                Ok(Err(reason)) => {
                    debug!(task_id = task.id, reason = %printable(&reason), "claim refused")
                }
                Err(BoardError::Refused { code, message, .. }) if code == "rate_limited" => {
                    return Err(BoardError::Refused {
                        tool: "claim_task",
                        code,
                        message,
                    });
                }
                // The task went away or changed under us: try the next one.
                Err(e @ BoardError::Refused { .. }) => {
                    debug!(task_id = task.id, error = %e, "claim refused")
                }
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }

    /// Asks the model about a claimed task and submits or releases it; the
    /// claim is forgotten on disk once the task is no longer held.
    async fn work(&mut self, task: BoardTask) -> Turn {
        let turn = self.attempt(task).await;
        self.claims.clear();
        turn
    }

    async fn attempt(&mut self, task: BoardTask) -> Turn {
        // Every attempt counts against the cap, whatever becomes of it.
        self.pacing.cap.record(Instant::now());
        let outcome = tokio::select! {
            biased;
            _ = self.shutdown.cancelled() => None,
            r = self.model.answer(&task) => Some(r),
        };
        let Some(outcome) = outcome else {
            match self
                .board
                .release(task.id, "chatroom worker stopped during the model call")
                .await
            {
                Ok(_) => info!(task_id = task.id, "released: the worker was stopped"),
                Err(e) => warn!(task_id = task.id, error = %e, "cannot release on stop"),
            }
            return Turn::Stop;
        };
        if let Err(e @ ModelError::Unreachable(_)) = &outcome {
            // The endpoint's fault, not the task's: handed back, no failure
            // counted, and no claim until a probe succeeds.
            self.model_unreachable(e);
            match self
                .board
                .release(task.id, &format!("chatroom worker: {e}"))
                .await
            {
                Ok(_) => info!(task_id = task.id, reason = %e, "released"),
                Err(err) => warn!(task_id = task.id, error = %err, "cannot release the task"),
            }
            return Turn::Done;
        }
        if !matches!(outcome, Err(ModelError::Timeout)) {
            self.model_answered = Some(Instant::now());
        }
        let failure = match outcome {
            Ok(answer) => match self.board.submit(task.id, &answer).await {
                Ok(()) => {
                    info!(
                        task_id = task.id,
                        chars = answer.chars().count(),
                        "submitted"
                    );
                    self.pacing.failures.forget(task.id);
                    return Turn::Done;
                }
                Err(BoardError::Refused { code, .. }) => {
                    format!("the board refused the result ({code})")
                }
                Err(BoardError::Failed { .. }) => "submitting the result failed".to_owned(),
            },
            Err(e) => e.to_string(),
        };
        self.fail(&task, &failure).await;
        Turn::Done
    }

    /// Hands a task back after a failure; gives up on it after too many.
    async fn fail(&mut self, task: &BoardTask, why: &str) {
        let after = self.pacing.failures.record(task.id, Instant::now());
        let reason = format!("chatroom worker: {why}");
        match self.board.release(task.id, &reason).await {
            Ok(true) => info!(task_id = task.id, reason = %why, "released"),
            Ok(false) => {
                warn!(task_id = task.id, reason = %why, "failed, and the task was no longer ours to release")
            }
            Err(e) => {
                warn!(task_id = task.id, reason = %why, error = %e, "failed, and cannot release the task")
            }
        }
        if let AfterFailure::GiveUp { count } = after {
            let to = if task.created_by.is_empty() || task.created_by == self.me.agent {
                String::new()
            } else {
                format!("@{} ", task.created_by)
            };
            let note = format!(
                "{to}The worker agent {me} gave up on this task after {count} failed attempts \
                 (the last: {why}). It will not try it again; the task is pending for another \
                 agent or a person.",
                me = self.me.agent,
            );
            if let Err(e) = self.board.note(task.id, &note).await {
                warn!(task_id = task.id, error = %e, "cannot post the give-up note");
            }
            info!(task_id = task.id, failures = count, reason = %why, "gave up");
        }
    }
}

/// `urgent` > `high` > `normal` > `low`.
fn priority_rank(p: &str) -> u8 {
    match p {
        "urgent" => 3,
        "high" => 2,
        "low" => 0,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Escape sequences and line breaks cannot reach a log line.
    #[test]
    fn printable_strips_control_characters() {
        assert_eq!(printable("a\u{1b}[31mb\nc\r\u{7f}d"), "a[31mbcd");
    }

    /// Higher priorities are claimed first.
    #[test]
    fn priorities_order() {
        let mut ps = vec!["low", "urgent", "normal", "high"];
        ps.sort_by_key(|p| Reverse(priority_rank(p)));
        assert_eq!(ps, ["urgent", "high", "normal", "low"]);
    }
}
