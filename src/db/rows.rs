//! Row mapping shared by both backends: how each model reads a row of its
//! column list (`db/columns.rs`) by position ([`FromCols`]), from either
//! backend's row type ([`Cols`]). A column added to a model is read in one
//! place, and the two backends cannot map it differently.

use crate::domain::model::*;
use crate::domain::profile::Profile;
use crate::domain::store::webhooks::{Inbound, Progress, StuckTask, Webhook};

/// A value both backends read from a column (integers, text, flags and
/// bytes, each also as `Option`).
pub(crate) trait ColValue:
    rusqlite::types::FromSql + for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>
{
}

impl<T> ColValue for T where
    T: rusqlite::types::FromSql
        + for<'r> sqlx::Decode<'r, sqlx::Postgres>
        + sqlx::Type<sqlx::Postgres>
{
}

/// A row of either backend, read by position; errors stay the backend's own.
pub(crate) trait Cols {
    type Error;
    fn col<T: ColValue>(&self, i: usize) -> Result<T, Self::Error>;
    /// A list of strings: JSON text on SQLite, `TEXT[]` on PostgreSQL.
    fn list(&self, i: usize) -> Result<Vec<String>, Self::Error>;
    /// The error for a value at `i` that the model does not allow.
    fn bad(&self, i: usize, why: String) -> Self::Error;
}

/// The columns of `R` from position `first` on, for a model read after
/// other columns (a latest id, a token's kind) in the same row.
pub(crate) struct At<'a, R: ?Sized>(pub &'a R, pub usize);

impl<R: Cols + ?Sized> Cols for At<'_, R> {
    type Error = R::Error;
    fn col<T: ColValue>(&self, i: usize) -> Result<T, Self::Error> {
        self.0.col(self.1 + i)
    }
    fn list(&self, i: usize) -> Result<Vec<String>, Self::Error> {
        self.0.list(self.1 + i)
    }
    fn bad(&self, i: usize, why: String) -> Self::Error {
        self.0.bad(self.1 + i, why)
    }
}

/// What a statement's row is read as: a model (from the columns of its
/// list, in order), one column's value, or several of these side by side.
pub(crate) trait FromCols: Sized {
    /// How many columns it takes.
    const WIDTH: usize;
    fn from_cols<R: Cols + ?Sized>(r: &R) -> Result<Self, R::Error>;
}

/// One column's value.
macro_rules! value_from_cols {
    ($($t:ty),+) => {
        $(impl FromCols for $t {
            const WIDTH: usize = 1;
            fn from_cols<R: Cols + ?Sized>(r: &R) -> Result<Self, R::Error> {
                r.col(0)
            }
        })+
    };
}

value_from_cols!(i64, bool, String, Vec<u8>, Option<i64>, Option<String>);

/// Side by side: `B`'s columns follow `A`'s.
impl<A: FromCols, B: FromCols> FromCols for (A, B) {
    const WIDTH: usize = A::WIDTH + B::WIDTH;
    fn from_cols<R: Cols + ?Sized>(r: &R) -> Result<Self, R::Error> {
        Ok((A::from_cols(r)?, B::from_cols(&At(r, A::WIDTH))?))
    }
}

impl<A: FromCols, B: FromCols, C: FromCols> FromCols for (A, B, C) {
    const WIDTH: usize = A::WIDTH + B::WIDTH + C::WIDTH;
    fn from_cols<R: Cols + ?Sized>(r: &R) -> Result<Self, R::Error> {
        let ((a, b), c) = <((A, B), C)>::from_cols(r)?;
        Ok((a, b, c))
    }
}

impl FromCols for Room {
    const WIDTH: usize = 5;
    fn from_cols<R: Cols + ?Sized>(r: &R) -> Result<Self, R::Error> {
        Ok(Room {
            name: r.col(0)?,
            description: r.col(1)?,
            repo_url: r.col(2)?,
            onboarding_notes: r.col(3)?,
            retention_days: r.col(4)?,
        })
    }
}

/// A row of `room_columns!()` followed by the room's open tasks, messages
/// and live files.
impl FromCols for RoomSummary {
    const WIDTH: usize = 8;
    fn from_cols<R: Cols + ?Sized>(r: &R) -> Result<Self, R::Error> {
        Ok(RoomSummary {
            room: Room::from_cols(r)?,
            open_tasks: r.col(5)?,
            messages: r.col(6)?,
            files: r.col(7)?,
        })
    }
}

/// The grant of a row whose columns `agent, room, also_rooms, readonly,
/// admin, all_rooms, lead, skills` start at `first`, with its profile at
/// `profile` (tokens, connect codes and OAuth grants alike).
pub(crate) fn grant_at<R: Cols + ?Sized>(
    r: &R,
    first: usize,
    profile: usize,
) -> Result<Grant, R::Error> {
    Ok(Grant {
        agent: r.col(first)?,
        room: r.col(first + 1)?,
        also_rooms: r.list(first + 2)?,
        readonly: r.col(first + 3)?,
        admin: r.col(first + 4)?,
        all_rooms: r.col(first + 5)?,
        lead: r.col(first + 6)?,
        skills: r.list(first + 7)?,
        profile: Profile::stored(r.col::<Option<String>>(profile)?.as_deref()),
    })
}

/// A row of `token_columns!()` followed by `last_seen`.
impl FromCols for TokenRecord {
    const WIDTH: usize = 14;
    fn from_cols<R: Cols + ?Sized>(r: &R) -> Result<Self, R::Error> {
        Ok(TokenRecord {
            id: r.col(0)?,
            grant: grant_at(r, 1, 12)?,
            created_ts: r.col(9)?,
            revoked_ts: r.col(10)?,
            last_used: r.col(11)?,
            last_seen: r.col(13)?,
        })
    }
}

impl FromCols for Message {
    const WIDTH: usize = 6;
    fn from_cols<R: Cols + ?Sized>(r: &R) -> Result<Self, R::Error> {
        Ok(Message {
            id: r.col(0)?,
            room: r.col(1)?,
            ts: r.col(2)?,
            author: r.col(3)?,
            body: r.col(4)?,
            reply_to: r.col(5)?,
        })
    }
}

impl FromCols for Event {
    const WIDTH: usize = 8;
    fn from_cols<R: Cols + ?Sized>(r: &R) -> Result<Self, R::Error> {
        Ok(Event {
            id: r.col(0)?,
            room: r.col(1)?,
            ts: r.col(2)?,
            kind: r.col(3)?,
            actor: r.col(4)?,
            task_id: r.col(5)?,
            message_id: r.col(6)?,
            detail: serde_json::from_str(&r.col::<String>(7)?).unwrap_or(serde_json::Value::Null),
        })
    }
}

impl FromCols for FileMeta {
    const WIDTH: usize = 9;
    fn from_cols<R: Cols + ?Sized>(r: &R) -> Result<Self, R::Error> {
        Ok(FileMeta {
            file_id: r.col(0)?,
            name: r.col(1)?,
            sha256: r.col(2)?,
            size: r.col(3)?,
            mime: r.col(4)?,
            author: r.col(5)?,
            ts: r.col(6)?,
            expires_at: r.col(7)?,
            task_id: r.col(8)?,
        })
    }
}

/// A task without its dependencies (see [`attach_deps`]).
impl FromCols for Task {
    const WIDTH: usize = 16;
    fn from_cols<R: Cols + ?Sized>(r: &R) -> Result<Self, R::Error> {
        Ok(Task {
            id: r.col(0)?,
            room: r.col(1)?,
            title: r.col(2)?,
            body: r.col(3)?,
            status: status_at(r, 4)?,
            assignee: r.col(5)?,
            depends_on: Vec::new(),
            blocked_by_unfinished: Vec::new(),
            version: r.col(6)?,
            created_by: r.col(7)?,
            created_ts: r.col(8)?,
            updated_ts: r.col(9)?,
            priority: r.col(10)?,
            required_skill: r.col(11)?,
            needs_review: r.col(12)?,
            result: r.col(13)?,
            lease_seconds: r.col(14)?,
            lease_expires_ts: r.col(15)?,
        })
    }
}

/// The task status at `i`; one the model does not know is an error.
fn status_at<R: Cols + ?Sized>(r: &R, i: usize) -> Result<Status, R::Error> {
    let status: String = r.col(i)?;
    Status::parse(&status).map_err(|_| r.bad(i, format!("task has unknown status {status:?}")))
}

/// Adds each `(task_id, depends_on, its status)` to its task: every
/// dependency, and as blocking those not done (or gone).
pub(crate) fn attach_deps(tasks: &mut [Task], deps: Vec<(i64, i64, Option<String>)>) {
    for (task_id, dep, status) in deps {
        if let Some(task) = tasks.iter_mut().find(|t| t.id == task_id) {
            task.depends_on.push(dep);
            if status.as_deref() != Some(Status::Done.as_str()) {
                task.blocked_by_unfinished.push(dep);
            }
        }
    }
}

impl FromCols for Note {
    const WIDTH: usize = 5;
    fn from_cols<R: Cols + ?Sized>(r: &R) -> Result<Self, R::Error> {
        Ok(Note {
            id: r.col(0)?,
            task_id: r.col(1)?,
            author: r.col(2)?,
            ts: r.col(3)?,
            body: r.col(4)?,
        })
    }
}

/// A row of `seq, message_id, note_id, task_id, author, ts, body`.
impl FromCols for Mention {
    const WIDTH: usize = 7;
    fn from_cols<R: Cols + ?Sized>(r: &R) -> Result<Self, R::Error> {
        Ok(Mention {
            seq: r.col(0)?,
            message_id: r.col(1)?,
            note_id: r.col(2)?,
            task_id: r.col(3)?,
            author: r.col(4)?,
            ts: r.col(5)?,
            body: r.col(6)?,
        })
    }
}

/// A row of `agent, lead, readonly, admin, skills, last_seen`.
impl FromCols for Member {
    const WIDTH: usize = 6;
    fn from_cols<R: Cols + ?Sized>(r: &R) -> Result<Self, R::Error> {
        Ok(Member {
            agent: r.col(0)?,
            lead: r.col(1)?,
            readonly: r.col(2)?,
            admin: r.col(3)?,
            skills: r.list(4)?,
            last_seen: r.col(5)?,
        })
    }
}

/// A row of `agent, state, state_ts, attention, hook_seen_ts, push_seen_ts`.
impl FromCols for AgentStatus {
    const WIDTH: usize = 6;
    fn from_cols<R: Cols + ?Sized>(r: &R) -> Result<Self, R::Error> {
        Ok(AgentStatus {
            agent: r.col(0)?,
            state: r.col(1)?,
            state_ts: r.col(2)?,
            attention: r.col(3)?,
            hook_seen_ts: r.col(4)?,
            push_seen_ts: r.col(5)?,
        })
    }
}

impl FromCols for AdminLogEntry {
    const WIDTH: usize = 7;
    fn from_cols<R: Cols + ?Sized>(r: &R) -> Result<Self, R::Error> {
        Ok(AdminLogEntry {
            id: r.col(0)?,
            ts: r.col(1)?,
            actor: r.col(2)?,
            address: r.col(3)?,
            action: r.col(4)?,
            target: r.col(5)?,
            flagged: r.col(6)?,
        })
    }
}

impl FromCols for OAuthClient {
    const WIDTH: usize = 7;
    fn from_cols<R: Cols + ?Sized>(r: &R) -> Result<Self, R::Error> {
        Ok(OAuthClient {
            client_id: r.col(0)?,
            secret_hash: r.col(1)?,
            client_name: r.col(2)?,
            redirect_uris: r.list(3)?,
            auth_method: r.col(4)?,
            created_ts: r.col(5)?,
            used_ts: r.col(6)?,
        })
    }
}

impl FromCols for AuthCode {
    const WIDTH: usize = 7;
    fn from_cols<R: Cols + ?Sized>(r: &R) -> Result<Self, R::Error> {
        Ok(AuthCode {
            grant_id: r.col(0)?,
            client_id: r.col(1)?,
            redirect_uri: r.col(2)?,
            code_challenge: r.col(3)?,
            resource: r.col(4)?,
            expires_ts: r.col(5)?,
            redirect_uri_given: r.col(6)?,
        })
    }
}

impl FromCols for GrantRecord {
    const WIDTH: usize = 18;
    fn from_cols<R: Cols + ?Sized>(r: &R) -> Result<Self, R::Error> {
        Ok(GrantRecord {
            id: r.col(0)?,
            client_id: r.col(1)?,
            client_name: r.col(2)?,
            grant: grant_at(r, 3, 17)?,
            created_ts: r.col(11)?,
            revoked_ts: r.col(12)?,
            refresh: RefreshChain {
                hash: r.col(13)?,
                prev_hash: r.col(14)?,
                rotated_ts: r.col(15)?,
                expires_ts: r.col(16)?,
            },
        })
    }
}

/// A row of `t.grant_id, t.kind, t.expires_ts, t.spent_ts`; read with
/// its grant after it (`grant_columns!()`), as the pair of the two.
impl FromCols for OAuthTokenRecord {
    const WIDTH: usize = 4;
    fn from_cols<R: Cols + ?Sized>(r: &R) -> Result<Self, R::Error> {
        Ok(OAuthTokenRecord {
            grant_id: r.col(0)?,
            kind: r.col(1)?,
            expires_ts: r.col(2)?,
            spent_ts: r.col(3)?,
        })
    }
}

impl FromCols for Webhook {
    const WIDTH: usize = 7 + Progress::WIDTH;
    fn from_cols<R: Cols + ?Sized>(r: &R) -> Result<Self, R::Error> {
        Ok(Webhook {
            id: r.col(0)?,
            room: r.col(1)?,
            url: r.col(2)?,
            format: r.col(3)?,
            // JSON text on both backends.
            events: serde_json::from_str(&r.col::<String>(4)?).unwrap_or_default(),
            secret: r.col(5)?,
            created_ts: r.col(6)?,
            delivery: Progress::from_cols(&At(r, 7))?,
        })
    }
}

/// The delivery state, in the order `save_webhook` writes it.
impl FromCols for Progress {
    const WIDTH: usize = 9;
    fn from_cols<R: Cols + ?Sized>(r: &R) -> Result<Self, R::Error> {
        Ok(Progress {
            cursor: r.col(0)?,
            attempts: r.col(1)?,
            next_ts: r.col(2)?,
            first_fail_ts: r.col(3)?,
            failures: r.col(4)?,
            paused: r.col(5)?,
            delivered: r.col(6)?,
            last_ts: r.col(7)?,
            last_status: r.col(8)?,
        })
    }
}

impl FromCols for Inbound {
    const WIDTH: usize = 8;
    fn from_cols<R: Cols + ?Sized>(r: &R) -> Result<Self, R::Error> {
        Ok(Inbound {
            id: r.col(0)?,
            key: r.col(1)?,
            room: r.col(2)?,
            agent: r.col(3)?,
            secret: r.col(4)?,
            secret_hash: r.col(5)?,
            created_ts: r.col(6)?,
            last_used_ts: r.col(7)?,
        })
    }
}

/// A row of `room, id, title, assignee, activity`.
impl FromCols for StuckTask {
    const WIDTH: usize = 5;
    fn from_cols<R: Cols + ?Sized>(r: &R) -> Result<Self, R::Error> {
        Ok(StuckTask {
            room: r.col(0)?,
            task_id: r.col(1)?,
            title: r.col(2)?,
            holder: r.col(3)?,
            activity_ts: r.col(4)?,
        })
    }
}
