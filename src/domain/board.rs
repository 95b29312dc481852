//! The board: tasks with atomic ownership, versions, dependencies, leases and
//! an optional review gate.
//!
//! Every change is decided here on a task as read, then written by the store
//! guarded by the version it was decided on (compare-and-swap). When another
//! writer got there first, the store writes nothing and the decision is made
//! again on the task as it now is: so of any number of concurrent claimants
//! exactly one wins, and the losers are told who holds the task.

use serde::Serialize;
use serde_json::{Value, json};

use crate::domain::Caller;
use crate::domain::model::{
    EventKind, Mention, NewTask, Note, Record, SERVER_ACTOR, SearchHit, Status, Task, TaskChange,
    TaskQuery,
};
use crate::domain::store::Page;
use crate::domain::{Call, Core, limits};
use crate::error::{Error, Result};

/// How often a contended write is decided again before giving up.
const CAS_ATTEMPTS: usize = 64;

impl TaskChange {
    /// A change that starts from `task` as it is, written with `record`.
    fn from(task: &Task, mut record: Record) -> TaskChange {
        record.task_id = Some(task.id);
        TaskChange {
            task_id: task.id,
            expected_version: task.version,
            status: task.status,
            assignee: task.assignee.clone(),
            body: task.body.clone(),
            result: task.result.clone(),
            lease_seconds: task.lease_seconds,
            lease_expires_ts: task.lease_expires_ts,
            note: None,
            record,
        }
    }

    /// Moves to `status`, clearing the lease when leaving a leased status.
    fn to(mut self, status: Status) -> TaskChange {
        self.status = status;
        if !status.leased() {
            self.lease_seconds = None;
            self.lease_expires_ts = None;
        }
        self
    }

    /// Appends an event; the detail gets the task's new status, assignee
    /// (and the previous one when it changes) and version, and a
    /// `note_added` one the note (its id comes from the store,
    /// [`Record::stamp`]).
    fn event(mut self, kind: EventKind, task: &Task, mut detail: Value) -> TaskChange {
        let mut base = json!({
            "title": task.title,
            "status": self.status,
            "assignee": self.assignee,
            "version": self.expected_version + 1,
        });
        // Who held it before, when that changes: the one it was taken
        // from is told (`domain::push`).
        if task.assignee.is_some() && task.assignee != self.assignee {
            base["previous_assignee"] = json!(task.assignee);
        }
        if let (Value::Object(d), Value::Object(b)) = (&mut detail, base) {
            for (k, v) in b {
                d.entry(k).or_insert(v);
            }
            if kind == EventKind::NoteAdded
                && let Some(body) = &self.note
            {
                d.insert("body".into(), json!(body));
                d.insert("mentions".into(), json!(self.record.mentions));
            }
        }
        self.record = self.record.event(kind, Some(task.id), None, detail);
        self
    }

    /// Renews the lease when the writer holds the task and it stays leased.
    fn renew_lease(mut self, task: &Task, writer: &str) -> TaskChange {
        if task.holder() == Some(writer)
            && self.status.leased()
            && let Some(secs) = self.lease_seconds
        {
            self.lease_expires_ts = Some(self.record.now + secs * 1000);
        }
        self
    }

    /// Adds a note by the record's actor, mentioning `mentions` (see
    /// [`Core::indexed_mentions`]).
    fn note(mut self, body: &str, mentions: &[String]) -> TaskChange {
        self.note = Some(body.to_owned());
        self.record.mentions = mentions.to_vec();
        self
    }
}

/// What a task action is, for the transition table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Claim,
    /// `update_task` with a status.
    SetStatus(Status),
    Release,
    Submit,
    Review {
        approve: bool,
    },
    Cancel,
}

/// How the caller stands to a task.
#[derive(Debug, Clone, Copy, Default)]
pub struct Roles {
    pub holder: bool,
    pub creator: bool,
    pub lead: bool,
    pub admin: bool,
}

impl Roles {
    pub fn of(caller: &Caller, task: &Task) -> Roles {
        Roles {
            holder: task.holder() == Some(caller.agent.as_str()),
            creator: task.created_by == caller.agent,
            lead: caller.lead,
            admin: caller.admin,
        }
    }

    /// Whether the caller may edit the task at all (its status or body).
    fn editor(self) -> bool {
        self.holder || self.creator || self.lead || self.admin
    }
}

/// Why a transition was refused: a wrong state is `conflict`, a wrong
/// caller `forbidden`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    State(String),
    Role(String),
}

impl From<Refusal> for Error {
    fn from(r: Refusal) -> Error {
        match r {
            Refusal::State(m) => Error::Conflict(m),
            Refusal::Role(m) => Error::Forbidden(m),
        }
    }
}

impl Refusal {
    pub fn message(&self) -> &str {
        match self {
            Refusal::State(m) | Refusal::Role(m) => m,
        }
    }
}

/// THE transition table: which action may move a task from which status, by
/// whom, and to where. Every other move is refused. (`needs_review` sends a
/// `done` to `in_review`.) Claim's extra conditions (assignment, skill,
/// dependencies) are checked in `claim_task`.
pub fn transition(
    action: Action,
    from: Status,
    roles: Roles,
    needs_review: bool,
) -> Result<Status, Refusal> {
    use Status::*;
    let done = if needs_review { InReview } else { Done };
    let (from_ok, who_ok, to, who) = match action {
        Action::Claim => (
            matches!(from, Pending | Blocked),
            true,
            InProgress,
            "any writer",
        ),
        Action::SetStatus(to) => {
            let to = if to == Done { done } else { to };
            let who_ok = if to == Cancelled {
                roles.creator || roles.lead || roles.admin
            } else {
                roles.editor()
            };
            if to == InReview && !needs_review {
                return Err(Refusal::State(
                    "in_review is reached by submitting a task that needs review, not set directly"
                        .into(),
                ));
            }
            let who = if to == Cancelled {
                "its creator, a lead or an admin"
            } else {
                "its holder, its creator, a lead or an admin"
            };
            (
                matches!(from, Pending | InProgress | Blocked),
                who_ok,
                to,
                who,
            )
        }
        Action::Release => (
            matches!(from, InProgress | Blocked),
            roles.holder,
            Pending,
            "its holder",
        ),
        Action::Submit => (
            matches!(from, InProgress | Blocked),
            roles.holder,
            done,
            "its holder",
        ),
        Action::Review { approve } => (
            from == InReview,
            roles.lead || roles.creator,
            if approve { Done } else { Pending },
            "a lead or its creator",
        ),
        Action::Cancel => (
            !from.is_final(),
            roles.creator || roles.lead || roles.admin,
            Cancelled,
            "its creator, a lead or an admin",
        ),
    };
    if !from_ok {
        return Err(Refusal::State(format!(
            "the task is {}; {} is not possible from there",
            from.as_str(),
            action_name(action)
        )));
    }
    if !who_ok {
        return Err(Refusal::Role(format!(
            "only {who} may {} this task",
            action_name(action)
        )));
    }
    Ok(to)
}

fn action_name(action: Action) -> &'static str {
    match action {
        Action::Claim => "claim",
        Action::SetStatus(_) => "change the status of",
        Action::Release => "release",
        Action::Submit => "submit a result for",
        Action::Review { .. } => "review",
        Action::Cancel => "cancel",
    }
}

/// [`transition`] of `task` as it is, by `caller` in the roles it holds on it.
fn transition_of(action: Action, caller: &Caller, task: &Task) -> Result<Status, Refusal> {
    transition(
        action,
        task.status,
        Roles::of(caller, task),
        task.needs_review,
    )
}

/// Why `caller` may not claim `task` as it is, or `None` when the claim
/// goes through: the transition table, then the holder, the assignment,
/// the required skill and the dependencies.
fn claim_refusal(caller: &Caller, task: &Task) -> Option<String> {
    if task.holder() == Some(caller.agent.as_str()) {
        return Some(format!(
            "already held by {} (you): you already hold this task",
            caller.agent
        ));
    }
    if let Some(holder) = task.holder() {
        return Some(format!("already held by {holder}"));
    }
    if let Err(r) = transition_of(Action::Claim, caller, task) {
        return Some(r.message().to_owned());
    }
    if let Some(a) = &task.assignee
        && *a != caller.agent
    {
        return Some(format!("assigned to {a}"));
    }
    if let Some(skill) = &task.required_skill
        && !has_skill(caller, skill)
    {
        return Some(format!("requires skill {skill:?}, which this token lacks"));
    }
    if !task.blocked_by_unfinished.is_empty() {
        return Some(format!(
            "blocked by unfinished dependencies {:?}",
            task.blocked_by_unfinished
        ));
    }
    None
}

/// Whether a task's body may change: by its holder, creator, a lead or an
/// admin, while it is not final.
fn body_edit(roles: Roles, status: Status) -> Result<()> {
    if !roles.editor() {
        return Err(Error::forbidden(
            "only its holder, its creator, a lead or an admin may edit a task's body",
        ));
    }
    if status.is_final() {
        return Err(Error::conflict(format!(
            "the task is {}; its body can no longer change",
            status.as_str()
        )));
    }
    Ok(())
}

named_enum! {
    /// An action on a task as `can` names it, with the tool that takes it.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
    #[serde(rename_all = "snake_case")]
    pub enum Can {
        /// `claim_task`.
        Claim => "claim",
        /// `release_task`.
        Release => "release",
        /// `add_note` (and `update_task` with only a `note`).
        Note => "note",
        /// `update_task` with a `status` or a `body` (at least the body: a
        /// task in review takes body edits but no status change).
        Update => "update",
        /// `submit_result`.
        Submit => "submit",
        /// `review_task`, to approve or to reject.
        Review => "review",
        /// `cancel_task` (and `update_task` to `cancelled`).
        Cancel => "cancel",
    }
}

/// The actions `caller` may take on `task` as it is: each one listed, the
/// tool accepts; each one left out, it refuses. Decided by the checks the
/// tools run ([`transition`], the claim's and the body edit's own), so the
/// pages that offer buttons keep no rules of their own. A read-only token
/// may take none.
pub fn allowed(caller: &Caller, task: &Task) -> Vec<Can> {
    if caller.readonly {
        return Vec::new();
    }
    let roles = Roles::of(caller, task);
    let moves = |action| transition(action, task.status, roles, task.needs_review).is_ok();
    Can::ALL
        .into_iter()
        .filter(|can| match can {
            Can::Claim => claim_refusal(caller, task).is_none(),
            Can::Release => moves(Action::Release),
            Can::Note => true,
            Can::Update => body_edit(roles, task.status).is_ok(),
            Can::Submit => moves(Action::Submit),
            Can::Review => moves(Action::Review { approve: true }),
            Can::Cancel => moves(Action::Cancel),
        })
        .collect()
}

/// Parses a priority; `normal` when absent.
pub fn parse_priority(p: Option<&str>) -> Result<String> {
    match p.unwrap_or("normal") {
        p @ ("low" | "normal" | "high" | "urgent") => Ok(p.to_owned()),
        other => Err(Error::invalid(format!(
            "unknown priority {other:?}; use low, normal, high or urgent"
        ))),
    }
}

/// What `create_task` was asked.
#[derive(Debug, Clone, Default)]
pub struct CreateTask {
    pub title: String,
    pub body: Option<String>,
    pub depends_on: Vec<i64>,
    pub claim: bool,
    pub assignee: Option<String>,
    pub required_skill: Option<String>,
    pub priority: Option<String>,
    pub needs_review: bool,
}

/// What `update_task` was asked.
#[derive(Debug, Clone, Default)]
pub struct UpdateTask {
    pub status: Option<Status>,
    pub body: Option<String>,
    pub note: Option<String>,
    pub expected_version: Option<i64>,
}

/// The outcome of a change that may be refused softly (claim, release,
/// a stale update): the task as written, or the reason and the task as it is.
#[derive(Debug, Clone)]
pub enum Outcome {
    Done(Task),
    Refused { reason: String, task: Task },
}

/// What a decision on a task as read says to do.
// Not boxed: a decision lives on the stack for one write, and a box would
// cost an allocation on every claim.
#[allow(clippy::large_enum_variant)]
enum Decision {
    Write(TaskChange),
    Refuse(String),
}

fn has_skill(caller: &Caller, skill: &str) -> bool {
    caller.skills.iter().any(|s| s.eq_ignore_ascii_case(skill))
}

impl Core {
    /// Reads a task of `room`, applying a lapsed lease first.
    async fn load_task(&self, room: &str, id: i64) -> Result<Task> {
        let task = self
            .store
            .get_task(room, id)
            .await?
            .ok_or_else(|| Error::not_found(format!("task {id} not found in room {room:?}")))?;
        if task.lease_lapsed(self.clock.now_ms()) {
            return self.expire_lease(room, id).await;
        }
        Ok(task)
    }

    /// Returns a task whose lease lapsed to `pending` (idempotent under races).
    pub async fn expire_lease(&self, room: &str, id: i64) -> Result<Task> {
        for _ in 0..CAS_ATTEMPTS {
            let now = self.clock.now_ms();
            let task = self
                .store
                .get_task(room, id)
                .await?
                .ok_or_else(|| Error::not_found(format!("task {id} not found")))?;
            if !task.lease_lapsed(now) {
                return Ok(task);
            }
            let record = Record::new(SERVER_ACTOR, None, now);
            let mut change = TaskChange::from(&task, record).to(Status::Pending);
            change.assignee = None;
            let change = change.event(
                EventKind::TaskLeaseExpired,
                &task,
                json!({"previous_assignee": task.assignee}),
            );
            if let Some((task, events)) = self.store.apply_task_change(room, change).await? {
                tracing::info!(room, task_id = id, "lease lapsed; task back to pending");
                self.bus.publish(events);
                return Ok(task);
            }
        }
        Err(Error::conflict("the task is changing too fast; try again"))
    }

    /// Decides on the task as read and writes, again and again while other
    /// writers get in between.
    async fn change_task(
        &self,
        call: &Call,
        room: &str,
        id: i64,
        audited: bool,
        decide: impl Fn(&Task, Record) -> Result<Decision>,
    ) -> Result<(Outcome, Option<i64>)> {
        for _ in 0..CAS_ATTEMPTS {
            let task = self.load_task(room, id).await?;
            let record = Record::new(
                call.agent.as_str(),
                audited.then_some(call.tool),
                self.clock.now_ms(),
            );
            match decide(&task, record)? {
                Decision::Refuse(reason) => return Ok((Outcome::Refused { reason, task }, None)),
                Decision::Write(change) => {
                    if let Some((task, events)) = self.store.apply_task_change(room, change).await?
                    {
                        if audited {
                            call.mark_audited();
                        }
                        let note_id = events
                            .iter()
                            .find(|e| e.kind == EventKind::NoteAdded.as_str())
                            .and_then(|e| e.detail["note_id"].as_i64());
                        self.bus.publish(events);
                        return Ok((Outcome::Done(task), note_id));
                    }
                }
            }
        }
        Err(Error::conflict("the task is changing too fast; try again"))
    }

    pub async fn list_tasks(
        &self,
        call: &Call,
        room: Option<&str>,
        status: Option<&str>,
        assignee: Option<&str>,
        limit: Option<i64>,
        before_id: Option<i64>,
    ) -> Result<(String, Vec<Task>)> {
        let room = self.room(call, room).await?.name;
        let statuses = match status {
            None => Vec::new(),
            Some("open") => Status::OPEN.to_vec(),
            Some(s) => vec![Status::parse(s)?],
        };
        let assignee = assignee.map(|a| {
            if a == "me" {
                call.agent.clone()
            } else {
                a.to_owned()
            }
        });
        let query = TaskQuery {
            statuses,
            assignee,
            limit: limits::clamp_limit(limit, 50, 200),
            before_id,
        };
        let now = self.clock.now_ms();
        let mut tasks = self.store.list_tasks(&room, &query).await?;
        for task in &mut tasks {
            if task.lease_lapsed(now) {
                *task = self.expire_lease(&room, task.id).await?;
            }
        }
        Ok((room, tasks))
    }

    pub async fn get_task(
        &self,
        call: &Call,
        room: Option<&str>,
        id: i64,
    ) -> Result<(Task, Vec<Note>)> {
        let room = self.room(call, room).await?.name;
        let task = self.load_task(&room, id).await?;
        let notes = self.store.notes(id).await?;
        Ok((task, notes))
    }

    pub async fn create_task(
        &self,
        call: &Call,
        room: Option<&str>,
        req: CreateTask,
    ) -> Result<Task> {
        let room = self.writable_room(call, room).await?;
        limits::non_empty("title", &req.title)?;
        limits::check("title", &req.title, limits::TITLE)?;
        let body = req.body.unwrap_or_default();
        limits::check("body", &body, limits::BODY)?;
        if let Some(skill) = &req.required_skill {
            limits::non_empty("required_skill", skill)?;
            limits::check("required_skill", skill, limits::SKILL)?;
        }
        let priority = parse_priority(req.priority.as_deref())?;
        let mut depends_on = req.depends_on.clone();
        depends_on.sort_unstable();
        depends_on.dedup();
        if depends_on.len() > 100 {
            return Err(Error::invalid("a task may depend on at most 100 tasks"));
        }
        let mut unfinished = Vec::new();
        for dep in &depends_on {
            match self.store.get_task(&room, *dep).await? {
                Some(t) if t.status != Status::Done => unfinished.push(*dep),
                Some(_) => {}
                None => {
                    return Err(Error::not_found(format!(
                        "dependency {dep} is not a task of room {room:?}"
                    )));
                }
            }
        }
        let assignee = match req.assignee.as_deref().map(str::trim) {
            None | Some("") => None,
            Some("me") => Some(call.agent.clone()),
            Some(a) => {
                crate::domain::names::check_agent(a)?;
                Some(a.to_owned())
            }
        };
        if let Some(a) = &assignee
            && *a != call.agent
            && !call.lead
        {
            return Err(Error::forbidden(
                "only a lead may create a task assigned to someone else",
            ));
        }
        if req.claim {
            if assignee.as_ref().is_some_and(|a| *a != call.agent) {
                return Err(Error::invalid(
                    "claim: true cannot go with an assignee other than you",
                ));
            }
            if !unfinished.is_empty() {
                return Err(Error::conflict(format!(
                    "cannot claim at creation: dependencies {unfinished:?} are not done; create it without claim"
                )));
            }
            if let Some(skill) = &req.required_skill
                && !has_skill(call, skill)
            {
                return Err(Error::forbidden(format!(
                    "cannot claim at creation: you lack the required skill {skill:?}"
                )));
            }
        }
        let status = if req.claim {
            Status::InProgress
        } else {
            Status::Pending
        };
        let assignee = if req.claim {
            Some(call.agent.clone())
        } else {
            assignee
        };
        // The new task's id is the store's to assign: `Record::stamp` puts it in.
        let base = json!({
            "title": req.title,
            "status": status,
            "assignee": assignee,
            "version": 1,
        });
        let mut created = base.clone();
        created["priority"] = json!(priority);
        created["depends_on"] = json!(depends_on);
        let mut record =
            call.record(self.clock.now_ms())
                .event(EventKind::TaskCreated, None, None, created);
        if req.claim {
            record = record.event(EventKind::TaskClaimed, None, None, base);
        }
        let new = NewTask {
            title: req.title,
            body,
            depends_on,
            status,
            assignee,
            created_by: call.agent.clone(),
            priority,
            required_skill: req.required_skill,
            needs_review: req.needs_review,
            record,
        };
        let (task, events) = self.store.create_task(&room, new).await?;
        call.mark_audited();
        self.bus.publish(events);
        Ok(task)
    }

    pub async fn claim_task(
        &self,
        call: &Call,
        room: Option<&str>,
        id: i64,
        lease_seconds: Option<i64>,
    ) -> Result<Outcome> {
        let room = self.writable_room(call, room).await?;
        if let Some(s) = lease_seconds
            && !(1..=limits::LEASE_SECONDS_MAX).contains(&s)
        {
            return Err(Error::invalid(format!(
                "lease_seconds must be from 1 to {}",
                limits::LEASE_SECONDS_MAX
            )));
        }
        self.change_task(call, &room, id, true, |task, record| {
            let now = record.now;
            if let Some(reason) = claim_refusal(call, task) {
                return Ok(Decision::Refuse(reason));
            }
            let mut change = TaskChange::from(task, record).to(Status::InProgress);
            change.assignee = Some(call.agent.clone());
            change.lease_seconds = lease_seconds;
            change.lease_expires_ts = lease_seconds.map(|s| now + s * 1000);
            let detail = json!({"lease_seconds": lease_seconds});
            Ok(Decision::Write(change.event(
                EventKind::TaskClaimed,
                task,
                detail,
            )))
        })
        .await
        .map(|(o, _)| o)
    }

    pub async fn update_task(
        &self,
        call: &Call,
        room: Option<&str>,
        id: i64,
        req: UpdateTask,
    ) -> Result<(Outcome, bool)> {
        let room = self.writable_room(call, room).await?;
        if req.status.is_none() && req.body.is_none() && req.note.is_none() {
            return Err(Error::invalid("give at least one of status, body, note"));
        }
        limits::check_given("body", req.body.as_deref(), limits::BODY)?;
        if let Some(note) = &req.note {
            limits::non_empty("note", note)?;
            limits::check("note", note, limits::NOTE)?;
        }
        let noted = match &req.note {
            Some(note) => self.indexed_mentions(&room, note).await?,
            None => Vec::new(),
        };
        let outcome = self
            .change_task(call, &room, id, true, |task, record| {
                if let Some(expected) = req.expected_version
                    && expected != task.version
                {
                    return Ok(Decision::Refuse(format!(
                        "stale version: you expected {expected}, the task is at {}; re-read it and decide again",
                        task.version
                    )));
                }
                let roles = Roles::of(call, task);
                let mut change = TaskChange::from(task, record);
                let mut detail = json!({});
                if let Some(to) = req.status {
                    let to = transition(Action::SetStatus(to), task.status, roles, task.needs_review)?;
                    change = change.to(to);
                    if to == Status::InProgress && change.assignee.is_none() {
                        change.assignee = Some(call.agent.clone());
                    }
                    detail["from"] = json!(task.status);
                }
                if let Some(body) = &req.body {
                    body_edit(roles, task.status)?;
                    change.body = body.clone();
                    detail["body_changed"] = json!(true);
                }
                if let Some(note) = &req.note {
                    change = change.note(note, &noted);
                }
                let change = change.renew_lease(task, &call.agent);
                let kind = if req.status.is_none() && req.body.is_none() {
                    EventKind::NoteAdded
                } else {
                    EventKind::TaskUpdated
                };
                let mut change = change.event(kind, task, detail);
                if kind == EventKind::TaskUpdated && change.note.is_some() {
                    change = change.event(EventKind::NoteAdded, task, json!({}));
                }
                Ok(Decision::Write(change))
            })
            .await?
            .0;
        Ok((outcome, req.expected_version.is_none()))
    }

    pub async fn release_task(
        &self,
        call: &Call,
        room: Option<&str>,
        id: i64,
        reason: Option<&str>,
    ) -> Result<Outcome> {
        let room = self.writable_room(call, room).await?;
        limits::check_given("reason", reason, limits::REASON)?;
        self.change_task(call, &room, id, true, |task, record| {
            match transition_of(Action::Release, call, task) {
                Err(r) => Ok(Decision::Refuse(r.message().to_owned())),
                Ok(to) => {
                    let mut change = TaskChange::from(task, record).to(to);
                    change.assignee = None;
                    Ok(Decision::Write(change.event(
                        EventKind::TaskReleased,
                        task,
                        json!({"reason": reason}),
                    )))
                }
            }
        })
        .await
        .map(|(o, _)| o)
    }

    pub async fn add_note(
        &self,
        call: &Call,
        room: Option<&str>,
        id: i64,
        body: &str,
    ) -> Result<(Task, i64)> {
        let room = self.writable_room(call, room).await?;
        limits::non_empty("body", body)?;
        limits::check("body", body, limits::NOTE)?;
        let noted = self.indexed_mentions(&room, body).await?;
        let (outcome, note_id) = self
            .change_task(call, &room, id, true, |task, record| {
                let change = TaskChange::from(task, record)
                    .note(body, &noted)
                    .renew_lease(task, &call.agent);
                Ok(Decision::Write(change.event(
                    EventKind::NoteAdded,
                    task,
                    json!({}),
                )))
            })
            .await?;
        Ok((done_or_conflict(outcome)?, note_id.unwrap_or_default()))
    }

    pub async fn submit_result(
        &self,
        call: &Call,
        room: Option<&str>,
        id: i64,
        result: &str,
    ) -> Result<Task> {
        let room = self.writable_room(call, room).await?;
        limits::non_empty("result", result)?;
        limits::check("result", result, limits::RESULT)?;
        let outcome = self
            .change_task(call, &room, id, true, |task, record| {
                let to = transition_of(Action::Submit, call, task)?;
                let mut change = TaskChange::from(task, record).to(to);
                change.result = Some(result.to_owned());
                Ok(Decision::Write(change.event(
                    EventKind::TaskSubmitted,
                    task,
                    json!({}),
                )))
            })
            .await?
            .0;
        done_or_conflict(outcome)
    }

    pub async fn review_task(
        &self,
        call: &Call,
        room: Option<&str>,
        id: i64,
        approve: bool,
        note: Option<&str>,
    ) -> Result<Task> {
        let room = self.writable_room(call, room).await?;
        let note = note.map(str::trim).filter(|n| !n.is_empty());
        limits::check_given("note", note, limits::REASON)?;
        if !approve && note.is_none() {
            return Err(Error::invalid(
                "a rejection needs a note saying what to change",
            ));
        }
        let noted = match note {
            Some(n) => self.indexed_mentions(&room, n).await?,
            None => Vec::new(),
        };
        let outcome = self
            .change_task(call, &room, id, true, |task, record| {
                let to = transition_of(Action::Review { approve }, call, task)?;
                let mut change = TaskChange::from(task, record).to(to);
                if !approve {
                    change.assignee = None;
                }
                if let Some(n) = note {
                    change = change.note(n, &noted);
                }
                let mut change =
                    change.event(EventKind::TaskReviewed, task, json!({"approve": approve}));
                if change.note.is_some() {
                    change = change.event(EventKind::NoteAdded, task, json!({}));
                }
                Ok(Decision::Write(change))
            })
            .await?
            .0;
        done_or_conflict(outcome)
    }

    pub async fn cancel_task(
        &self,
        call: &Call,
        room: Option<&str>,
        id: i64,
        reason: Option<&str>,
    ) -> Result<Task> {
        let room = self.writable_room(call, room).await?;
        limits::check_given("reason", reason, limits::REASON)?;
        let outcome = self
            .change_task(call, &room, id, true, |task, record| {
                let to = transition_of(Action::Cancel, call, task)?;
                let change = TaskChange::from(task, record).to(to);
                Ok(Decision::Write(change.event(
                    EventKind::TaskCancelled,
                    task,
                    json!({"reason": reason}),
                )))
            })
            .await?
            .0;
        done_or_conflict(outcome)
    }

    pub async fn my_mentions(
        &self,
        call: &Call,
        room: Option<&str>,
        since_id: i64,
        limit: Option<i64>,
    ) -> Result<(String, Vec<Mention>)> {
        let room = self.room(call, room).await?.name;
        let limit = limits::clamp_limit(limit, 50, 200);
        let mut mentions = self
            .store
            .my_mentions(
                &room,
                &call.agent.to_lowercase(),
                Page {
                    since_id: since_id.max(0),
                    limit: limit + 1,
                },
            )
            .await?;
        // A note sits at the room's newest message when it was written, so
        // a message and the notes after it share a place: a page that would
        // end inside such a group ends before it instead, and the next page
        // (after the place before) starts with it. Only a group larger than
        // a page is cut.
        if mentions.len() as i64 > limit {
            let next = mentions.pop().map(|m| m.seq);
            if let Some(last) = mentions.last().map(|m| m.seq)
                && next == Some(last)
                && mentions.iter().any(|m| m.seq != last)
            {
                mentions.retain(|m| m.seq != last);
            }
        }
        Ok((room, mentions))
    }

    pub async fn search(
        &self,
        call: &Call,
        room: Option<&str>,
        query: &str,
        limit: Option<i64>,
    ) -> Result<(String, Vec<SearchHit>)> {
        let room = self.room(call, room).await?.name;
        limits::check("query", query, limits::SEARCH_QUERY)?;
        let words = search_words(query);
        if words.is_empty() {
            return Err(Error::invalid(
                "query needs at least one word of letters or digits",
            ));
        }
        let limit = limits::clamp_limit(limit, 20, 100);
        Ok((room.clone(), self.store.search(&room, &words, limit).await?))
    }

    /// Returns lapsed leases to `pending`; the background sweeper calls this.
    pub async fn sweep_leases(&self) -> Result<usize> {
        let lapsed = self.store.lapsed_leases(self.clock.now_ms()).await?;
        for (room, id) in &lapsed {
            self.expire_lease(room, *id).await?;
        }
        Ok(lapsed.len())
    }
}

/// The plain words of a search query: letters and digits only, so a query
/// is never parsed as search syntax by either backend.
pub fn search_words(query: &str) -> Vec<String> {
    query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .take(16)
        .map(str::to_lowercase)
        .collect()
}

fn done_or_conflict(outcome: Outcome) -> Result<Task> {
    match outcome {
        Outcome::Done(task) => Ok(task),
        Outcome::Refused { reason, .. } => Err(Error::conflict(reason)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Status::*;

    fn roles(holder: bool, creator: bool, lead: bool, admin: bool) -> Roles {
        Roles {
            holder,
            creator,
            lead,
            admin,
        }
    }

    #[test]
    fn table_matches_the_spec() {
        let nobody = roles(false, false, false, false);
        let holder = roles(true, false, false, false);
        let creator = roles(false, true, false, false);
        assert_eq!(
            transition(Action::Claim, Pending, nobody, false),
            Ok(InProgress)
        );
        assert!(transition(Action::Claim, InReview, nobody, false).is_err());
        assert_eq!(
            transition(Action::Submit, InProgress, holder, true),
            Ok(InReview)
        );
        assert_eq!(transition(Action::Submit, Blocked, holder, false), Ok(Done));
        assert!(matches!(
            transition(Action::Submit, Done, holder, false),
            Err(Refusal::State(_))
        ));
        assert!(matches!(
            transition(Action::Submit, InProgress, creator, false),
            Err(Refusal::Role(_))
        ));
        assert!(matches!(
            transition(Action::SetStatus(Cancelled), InProgress, holder, false),
            Err(Refusal::Role(_))
        ));
        assert_eq!(
            transition(Action::SetStatus(Done), InProgress, holder, true),
            Ok(InReview)
        );
        assert_eq!(
            transition(Action::Review { approve: false }, InReview, creator, false),
            Ok(Pending)
        );
        assert!(matches!(
            transition(Action::Cancel, Done, creator, false),
            Err(Refusal::State(_))
        ));
    }

    #[test]
    fn search_words_are_plain() {
        assert_eq!(
            search_words("foo* OR \"bar\" -baz"),
            vec!["foo", "or", "bar", "baz"]
        );
        assert!(search_words("*** ()").is_empty());
    }
}
