//! `chatroom admin import-chatroommcp PATH [--to URL]`: brings a ChatRoomMCP
//! instance over from its SQLite file (SPEC §11), so that its users switch
//! servers without touching an agent. Rooms with their info and retention,
//! every token (both servers store the SHA-256 hex of the same `cr_` token,
//! so each keeps working; revoked ones stay revoked), tasks with status,
//! version, holder, dependencies and notes, messages with their threads,
//! files with their bytes and expiry, events, and each agent's cursor (so
//! `whats_new` does not replay the history) all come along.
//!
//! The source is opened read-only and read whole, and every row is checked
//! and converted before the destination is even opened: a damaged or
//! foreign file changes nothing anywhere. The destination is then checked
//! (no room of the same name, none of the tokens) and written table by
//! table through the store's bulk loader; tokens go last, in one
//! transaction, and should any write fail, the rooms written so far are
//! deleted again, so the destination is left as it was.
//!
//! Ids are kept when the destination has handed out none yet (a new
//! server), so "task 12" still means task 12; otherwise they move past the
//! destination's, and the references between rows move with them.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, bail};
use rusqlite::types::Value as Cell;
use rusqlite::{Connection, OpenFlags};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use time::{OffsetDateTime, PrimitiveDateTime};

use crate::db;
use crate::domain::model::RoomInfo;
use crate::domain::store::prelude::*;
use crate::domain::{chat, limits, names, rooms as room_rules};

/// The task statuses a ChatRoomMCP database holds (all of them are ours too).
const STATUSES: &[&str] = &["pending", "in_progress", "blocked", "done", "cancelled"];

/// What the reader takes from one ChatRoomMCP table. Columns the original
/// added in later versions are optional: a file from before them reads NULL
/// there, as the original itself would.
struct Wanted {
    table: &'static str,
    required: &'static [&'static str],
    optional: &'static [&'static str],
    order: &'static str,
}

const WANTED: &[Wanted] = &[
    Wanted {
        table: "rooms",
        required: &["name", "created_ts"],
        optional: &[
            "description",
            "repo_url",
            "onboarding_notes",
            "retention_days",
        ],
        order: "name",
    },
    Wanted {
        table: "tokens",
        required: &[
            "token_hash",
            "agent_name",
            "default_room",
            "allowed_rooms",
            "created_ts",
            "revoked",
        ],
        optional: &["last_seen", "readonly", "admin", "all_rooms", "revoked_ts"],
        order: "created_ts, rowid",
    },
    Wanted {
        table: "tasks",
        required: &[
            "id",
            "room",
            "title",
            "body",
            "status",
            "assignee",
            "depends_on",
            "version",
            "created_by",
            "created_ts",
            "updated_ts",
        ],
        optional: &[],
        order: "id",
    },
    Wanted {
        table: "notes",
        required: &["id", "task_id", "room", "author", "ts", "body"],
        optional: &[],
        order: "id",
    },
    Wanted {
        table: "messages",
        required: &["id", "room", "ts", "author", "body", "reply_to"],
        optional: &[],
        order: "id",
    },
    Wanted {
        table: "events",
        required: &["id", "room", "ts", "kind", "task_id", "actor", "detail"],
        optional: &["message_id"],
        order: "id",
    },
    Wanted {
        table: "cursors",
        required: &["agent_name", "room", "last_event_id"],
        optional: &[],
        order: "agent_name, room",
    },
    Wanted {
        table: "files",
        required: &[
            "id", "room", "name", "sha256", "size", "mime", "author", "ts", "content",
        ],
        optional: &["expires_at"],
        order: "id",
    },
];

/// One source row: its cells by column, and where it came from (for errors).
struct Row {
    at: String,
    cells: HashMap<&'static str, Cell>,
}

impl Row {
    fn cell(&self, col: &str) -> &Cell {
        self.cells.get(col).unwrap_or(&Cell::Null)
    }

    fn bad(&self, col: &str, what: &str) -> anyhow::Error {
        anyhow::anyhow!("{}, column {col}: {what}", self.at)
    }

    fn opt_text(&self, col: &str) -> anyhow::Result<Option<String>> {
        Ok(match self.cell(col) {
            Cell::Null => None,
            Cell::Text(s) => Some(s.clone()),
            Cell::Integer(i) => Some(i.to_string()),
            Cell::Real(f) => Some(f.to_string()),
            Cell::Blob(b) => {
                Some(String::from_utf8(b.clone()).map_err(|_| self.bad(col, "not UTF-8 text"))?)
            }
        })
    }

    /// The text, empty for none (NULL).
    fn text_or_empty(&self, col: &str) -> anyhow::Result<String> {
        Ok(self.opt_text(col)?.unwrap_or_default())
    }

    fn text(&self, col: &str) -> anyhow::Result<String> {
        self.opt_text(col)?
            .ok_or_else(|| self.bad(col, "empty (NULL) where a value is required"))
    }

    fn opt_int(&self, col: &str) -> anyhow::Result<Option<i64>> {
        Ok(match self.cell(col) {
            Cell::Null => None,
            Cell::Integer(i) => Some(*i),
            Cell::Real(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Some(*f as i64),
            Cell::Text(s) => Some(
                s.trim()
                    .parse()
                    .map_err(|_| self.bad(col, &format!("{s:?} is not a whole number")))?,
            ),
            _ => return Err(self.bad(col, "not a whole number")),
        })
    }

    fn int(&self, col: &str) -> anyhow::Result<i64> {
        self.opt_int(col)?
            .ok_or_else(|| self.bad(col, "empty (NULL) where a number is required"))
    }

    fn flag(&self, col: &str) -> anyhow::Result<bool> {
        Ok(self.opt_int(col)?.unwrap_or(0) != 0)
    }

    fn opt_ts(&self, col: &str) -> anyhow::Result<Option<i64>> {
        match self.opt_text(col)? {
            None => Ok(None),
            Some(s) if s.trim().is_empty() => Ok(None),
            Some(s) => parse_ts(&s)
                .map(Some)
                .ok_or_else(|| self.bad(col, &format!("{s:?} is not an ISO 8601 time"))),
        }
    }

    fn ts(&self, col: &str) -> anyhow::Result<i64> {
        self.opt_ts(col)?
            .ok_or_else(|| self.bad(col, "empty where a time is required"))
    }

    fn bytes(&self, col: &str) -> anyhow::Result<Vec<u8>> {
        match self.cell(col) {
            Cell::Blob(b) => Ok(b.clone()),
            Cell::Text(s) => Ok(s.clone().into_bytes()),
            _ => Err(self.bad(col, "holds no content")),
        }
    }
}

/// The rows of a table read as `$ty`s, each field from the column of its
/// own name by the [`Row`] reader written beside it: `read_rows!(rows,
/// SrcNote { id: int, body: text })`. Tables whose fields need more than a
/// reader are read out by hand.
macro_rules! read_rows {
    ($rows:expr, $ty:ident { $($field:ident: $read:ident),+ $(,)? }) => {
        $rows
            .iter()
            .map(|r| {
                Ok($ty {
                    $($field: r.$read(stringify!($field))?),+
                })
            })
            .collect::<anyhow::Result<Vec<$ty>>>()?
    };
}

/// A time as ChatRoomMCP writes it (Python's `isoformat`, UTC offset
/// included), in milliseconds; one without an offset is taken as UTC.
fn parse_ts(s: &str) -> Option<i64> {
    use time::format_description::well_known::Rfc3339;
    let s = s.trim().replacen(' ', "T", 1);
    let t = OffsetDateTime::parse(&s, &Rfc3339).ok().or_else(|| {
        PrimitiveDateTime::parse(
            &s,
            time::macros::format_description!(
                "[year]-[month]-[day]T[hour]:[minute]:[second][optional [.[subsecond]]]"
            ),
        )
        .ok()
        .map(PrimitiveDateTime::assume_utc)
    })?;
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok()
}

struct SrcRoom {
    info: RoomInfo,
    retention_days: i64,
    created_ts: i64,
}

struct SrcToken {
    hash: String,
    agent: String,
    room: String,
    also_rooms: Vec<String>,
    readonly: bool,
    admin: bool,
    all_rooms: bool,
    created_ts: i64,
    revoked_ts: Option<i64>,
    last_seen: Option<i64>,
}

struct SrcTask {
    id: i64,
    room: String,
    title: String,
    body: String,
    status: String,
    assignee: Option<String>,
    depends_on: Vec<i64>,
    version: i64,
    created_by: String,
    created_ts: i64,
    updated_ts: i64,
}

struct SrcNote {
    id: i64,
    task_id: i64,
    room: String,
    author: String,
    ts: i64,
    body: String,
}

struct SrcMessage {
    id: i64,
    room: String,
    ts: i64,
    author: String,
    body: String,
    reply_to: Option<i64>,
}

struct SrcEvent {
    id: i64,
    room: String,
    ts: i64,
    kind: String,
    task_id: Option<i64>,
    message_id: Option<i64>,
    actor: String,
    detail: String,
}

struct SrcCursor {
    agent: String,
    room: String,
    event_id: i64,
}

struct SrcFile {
    id: i64,
    room: String,
    name: String,
    mime: String,
    sha256: String,
    content: Vec<u8>,
    author: String,
    ts: i64,
    expires_ts: Option<i64>,
}

/// A ChatRoomMCP database, read whole and checked.
struct Source {
    /// Rows per table of the source, as its own `COUNT(*)` says.
    counts: BTreeMap<&'static str, i64>,
    /// Every room: those of its `rooms` table and those only named by rows
    /// (the original creates a room row lazily, on a token or a first task).
    rooms: BTreeMap<String, SrcRoom>,
    tokens: Vec<SrcToken>,
    tasks: Vec<SrcTask>,
    notes: Vec<SrcNote>,
    messages: Vec<SrcMessage>,
    events: Vec<SrcEvent>,
    cursors: Vec<SrcCursor>,
    files: Vec<SrcFile>,
    /// Things worth telling the operator that change no meaning.
    notices: Vec<String>,
}

/// Opens `path` read-only and reads every table the import needs.
fn read_source(path: &Path) -> anyhow::Result<Source> {
    let shown = path.display();
    if !path.is_file() {
        bail!("there is no file at {shown}");
    }
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .with_context(|| format!("cannot open {shown}"))?;
    // A file that is no database, or a damaged one, fails here.
    let check: String = conn
        .query_row("PRAGMA quick_check", [], |r| r.get(0))
        .map_err(|e| anyhow::anyhow!("{shown} is not a readable SQLite database: {e}"))?;
    if check != "ok" {
        // The check lists every broken page; its first lines say enough.
        let said: String = check
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .chars()
            .take(160)
            .collect();
        bail!("{shown} is damaged (SQLite's check says: {said} …); nothing was imported");
    }
    let tables: HashSet<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")?
        .query_map([], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    let mut raw: HashMap<&'static str, Vec<Row>> = HashMap::new();
    let mut counts = BTreeMap::new();
    for want in WANTED {
        let foreign = |why: String| {
            let hint = if tables.contains("search_fts") {
                " (it looks like a chatroom database: use `chatroom admin copy` for those)"
            } else {
                ""
            };
            anyhow::anyhow!("{shown} is not a ChatRoomMCP database: {why}{hint}")
        };
        if !tables.contains(want.table) {
            return Err(foreign(format!("it has no table {}", want.table)));
        }
        let columns: HashSet<String> = conn
            .prepare(&format!(
                "SELECT name FROM pragma_table_info('{}')",
                want.table
            ))?
            .query_map([], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        let mut select = Vec::new();
        for col in want.required {
            if !columns.contains(*col) {
                return Err(foreign(format!("table {} has no column {col}", want.table)));
            }
            select.push((*col).to_owned());
        }
        for col in want.optional {
            select.push(if columns.contains(*col) {
                (*col).to_owned()
            } else {
                format!("NULL AS {col}")
            });
        }
        // Names come from the constants above, never from the file.
        let sql = format!(
            "SELECT {} FROM {} ORDER BY {}",
            select.join(", "),
            want.table,
            want.order
        );
        let all: Vec<&'static str> = want.required.iter().chain(want.optional).copied().collect();
        let mut stmt = conn.prepare(&sql)?;
        let mut found = stmt.query([])?;
        let mut rows = Vec::new();
        while let Some(r) = found.next()? {
            let mut cells = HashMap::new();
            for (i, col) in all.iter().enumerate() {
                cells.insert(*col, r.get::<_, Cell>(i)?);
            }
            let at = match cells.get("id") {
                Some(Cell::Integer(id)) => format!("table {}, row id {id}", want.table),
                _ => format!("table {}, row {}", want.table, rows.len() + 1),
            };
            rows.push(Row { at, cells });
        }
        counts.insert(want.table, rows.len() as i64);
        raw.insert(want.table, rows);
    }
    parse_source(raw, counts).with_context(|| format!("{shown} holds a row chatroom cannot take"))
}

/// Turns the raw rows into checked source records.
fn parse_source(
    mut raw: HashMap<&'static str, Vec<Row>>,
    counts: BTreeMap<&'static str, i64>,
) -> anyhow::Result<Source> {
    let mut take = |t: &str| raw.remove(t).unwrap_or_default();
    let mut notices = Vec::new();

    let mut rooms = BTreeMap::new();
    for r in take("rooms") {
        let name = r.text("name")?;
        let info = RoomInfo {
            description: Some(r.text_or_empty("description")?),
            repo_url: Some(r.text_or_empty("repo_url")?),
            onboarding_notes: Some(r.text_or_empty("onboarding_notes")?),
        };
        room_rules::check_info(&info).map_err(|e| anyhow::anyhow!("room {name:?}: {e}"))?;
        // The original keeps everything for NULL or 0 (and for any negative).
        let mut retention_days = r.opt_int("retention_days")?.unwrap_or(0).max(0);
        if retention_days > limits::RETENTION_DAYS_MAX {
            notices.push(format!(
                "room {name}: a retention of {retention_days} days is past the longest \
                 chatroom keeps ({} days); it now keeps everything",
                limits::RETENTION_DAYS_MAX
            ));
            retention_days = 0;
        }
        rooms.insert(
            name,
            SrcRoom {
                info,
                retention_days,
                created_ts: r.ts("created_ts")?,
            },
        );
    }

    let mut tokens = Vec::new();
    for r in take("tokens") {
        let hash = r.text("token_hash")?.trim().to_ascii_lowercase();
        if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(r.bad("token_hash", "not a SHA-256 hex digest"));
        }
        let agent = r.text("agent_name")?;
        names::check_agent(&agent).map_err(|e| anyhow::anyhow!("{}: {e}", r.at))?;
        let room = r.text("default_room")?;
        // The original reads a list it cannot parse as no extra rooms.
        let listed: Vec<String> =
            serde_json::from_str(&r.opt_text("allowed_rooms")?.unwrap_or_default())
                .unwrap_or_default();
        let also_rooms: Vec<String> = listed
            .into_iter()
            .filter(|x| *x != room)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let created_ts = r.ts("created_ts")?;
        let revoked_ts = if r.flag("revoked")? {
            // Revocations older than the column carry no time: the original
            // counts those from creation, and so does this import.
            Some(r.opt_ts("revoked_ts")?.unwrap_or(created_ts))
        } else {
            None
        };
        tokens.push(SrcToken {
            hash,
            agent,
            room,
            also_rooms,
            readonly: r.flag("readonly")?,
            admin: r.flag("admin")?,
            all_rooms: r.flag("all_rooms")?,
            created_ts,
            revoked_ts,
            // A time it cannot read only loses the "last seen" hint.
            last_seen: r.opt_ts("last_seen").unwrap_or(None),
        });
    }

    let mut tasks = Vec::new();
    for r in take("tasks") {
        let status = r.text("status")?;
        if !STATUSES.contains(&status.as_str()) {
            return Err(r.bad("status", &format!("{status:?} is not a task status")));
        }
        // As in the original, a list it cannot parse is no dependency.
        let depends_on = match r.cell("depends_on") {
            Cell::Text(s) => serde_json::from_str::<Vec<Value>>(s)
                .unwrap_or_default()
                .iter()
                .filter_map(|v| v.as_i64().or_else(|| v.as_str()?.parse().ok()))
                .collect(),
            _ => Vec::new(),
        };
        tasks.push(SrcTask {
            id: r.int("id")?,
            room: r.text("room")?,
            title: r.text("title")?,
            body: r.text_or_empty("body")?,
            status,
            assignee: r.opt_text("assignee")?.filter(|a| !a.is_empty()),
            depends_on,
            version: r.opt_int("version")?.unwrap_or(1).max(1),
            created_by: r.text("created_by")?,
            created_ts: r.ts("created_ts")?,
            updated_ts: r.ts("updated_ts")?,
        });
    }

    let notes = read_rows!(
        take("notes"),
        SrcNote {
            id: int,
            task_id: int,
            room: text,
            author: text,
            ts: ts,
            body: text,
        }
    );

    let messages = read_rows!(
        take("messages"),
        SrcMessage {
            id: int,
            room: text,
            ts: ts,
            author: text,
            body: text,
            reply_to: opt_int,
        }
    );

    let events = read_rows!(
        take("events"),
        SrcEvent {
            id: int,
            room: text,
            ts: ts,
            kind: text,
            task_id: opt_int,
            message_id: opt_int,
            actor: text,
            detail: text_or_empty,
        }
    );

    let mut cursors = Vec::new();
    for r in take("cursors") {
        cursors.push(SrcCursor {
            agent: r.text("agent_name")?,
            room: r.text("room")?,
            event_id: r.opt_int("last_event_id")?.unwrap_or(0).max(0),
        });
    }

    let mut files = Vec::new();
    for r in take("files") {
        let content = r.bytes("content")?;
        let sha256 = hex::encode(Sha256::digest(&content));
        let recorded = r.text("sha256")?;
        let size = r.int("size")?;
        if !recorded.eq_ignore_ascii_case(&sha256) || size != content.len() as i64 {
            return Err(anyhow::anyhow!(
                "{}: its content ({} bytes) does not match the size ({size}) and SHA-256 recorded for it",
                r.at,
                content.len()
            ));
        }
        files.push(SrcFile {
            id: r.int("id")?,
            room: r.text("room")?,
            name: r.text("name")?,
            mime: r
                .opt_text("mime")?
                .filter(|m| !m.trim().is_empty())
                .unwrap_or_else(|| "application/octet-stream".into()),
            sha256,
            content,
            author: r.text("author")?,
            ts: r.ts("ts")?,
            expires_ts: r.opt_ts("expires_at")?,
        });
    }

    let mut source = Source {
        counts,
        rooms,
        tokens,
        tasks,
        notes,
        messages,
        events,
        cursors,
        files,
        notices,
    };
    source.add_named_rooms()?;
    source.check_live_rules()?;
    Ok(source)
}

impl Source {
    /// Applies the rules a live server applies to what it takes in (agent
    /// and file names, text sizes, control and bidi characters), so that
    /// nothing enters through the import that no client could write. Every
    /// row that breaks one is listed, and the import is refused whole:
    /// dropping rows would break the threads, notes and counts that refer
    /// to them, so the owner fixes them in the source and imports again.
    fn check_live_rules(&self) -> anyhow::Result<()> {
        let mut refused: Vec<String> = Vec::new();
        let mut check = |row: String, result: crate::error::Result<()>| {
            if let Err(e) = result {
                refused.push(format!("{row}: {e}"));
            }
        };
        let name = |n: &str| names::check_agent(n);
        for t in &self.tasks {
            let row = format!("task {}", t.id);
            check(row.clone(), limits::check("title", &t.title, limits::TITLE));
            check(row.clone(), limits::check("body", &t.body, limits::BODY));
            check(row.clone(), name(&t.created_by));
            if let Some(a) = &t.assignee {
                check(row, name(a));
            }
        }
        for n in &self.notes {
            let row = format!("note {}", n.id);
            check(row.clone(), limits::check("note", &n.body, limits::NOTE));
            check(row, name(&n.author));
        }
        for m in &self.messages {
            let row = format!("message {}", m.id);
            check(
                row.clone(),
                limits::check("message", &m.body, limits::MESSAGE),
            );
            check(row, name(&m.author));
        }
        for e in &self.events {
            check(format!("event {}", e.id), name(&e.actor));
        }
        for c in &self.cursors {
            check(
                format!("cursor of {:?}", names::truncate_for_message(&c.agent)),
                name(&c.agent),
            );
        }
        for f in &self.files {
            let row = format!("file {}", f.id);
            check(row.clone(), crate::domain::files::check_name(&f.name));
            check(row.clone(), name(&f.author));
            let mime =
                if f.mime.chars().any(names::is_hidden) || f.mime.chars().count() > limits::MIME {
                    Err(crate::error::Error::invalid(
                        "its mime type holds control characters or is too long",
                    ))
                } else {
                    Ok(())
                };
            check(row, mime);
        }
        if refused.is_empty() {
            return Ok(());
        }
        let shown = 20;
        let mut text = format!(
            "{} rows break the rules a live server applies; nothing was imported:",
            refused.len()
        );
        for r in refused.iter().take(shown) {
            text.push_str(&format!("\n  {r}"));
        }
        if refused.len() > shown {
            text.push_str(&format!("\n  … and {} more", refused.len() - shown));
        }
        text.push_str(
            "\nfix these rows in the ChatRoomMCP database (or a copy of it) and import again",
        );
        bail!(text)
    }

    /// Adds a room for every name a row uses that the `rooms` table lacks,
    /// then checks every room name against chatroom's rule.
    fn add_named_rooms(&mut self) -> anyhow::Result<()> {
        let mut named: BTreeSet<String> = BTreeSet::new();
        for t in &self.tokens {
            named.insert(t.room.clone());
            named.extend(t.also_rooms.iter().cloned());
        }
        named.extend(self.tasks.iter().map(|x| x.room.clone()));
        named.extend(self.notes.iter().map(|x| x.room.clone()));
        named.extend(self.messages.iter().map(|x| x.room.clone()));
        named.extend(self.events.iter().map(|x| x.room.clone()));
        named.extend(self.cursors.iter().map(|x| x.room.clone()));
        named.extend(self.files.iter().map(|x| x.room.clone()));
        let earliest = self
            .tokens
            .iter()
            .map(|t| t.created_ts)
            .chain(self.events.iter().map(|e| e.ts))
            .min()
            .unwrap_or_else(crate::clock::now_ms);
        for name in named {
            if !self.rooms.contains_key(&name) {
                self.notices.push(format!(
                    "room {name} is named by rows but has no room row there: created it"
                ));
                self.rooms.insert(
                    name,
                    SrcRoom {
                        info: RoomInfo::default(),
                        retention_days: 0,
                        created_ts: earliest,
                    },
                );
            }
        }
        for name in self.rooms.keys() {
            names::check_room(name).map_err(|e| {
                anyhow::anyhow!("{e}; rename the room in ChatRoomMCP before importing it")
            })?;
        }
        Ok(())
    }
}

/// How far the source's ids move in each table of the destination.
#[derive(Default)]
struct Offsets(HashMap<&'static str, i64>);

impl Offsets {
    fn of(&self, table: &str) -> i64 {
        self.0.get(table).copied().unwrap_or(0)
    }
    fn id(&self, table: &str, id: i64) -> i64 {
        id + self.of(table)
    }
    fn opt(&self, table: &str, id: Option<i64>) -> Option<i64> {
        id.map(|id| self.id(table, id))
    }
}

/// The rows to write, per table of ours, in an order that loads cleanly
/// (tokens last, in one transaction), and what was left out and why.
struct Plan {
    tables: Vec<(&'static str, Vec<Value>)>,
    /// Rows left out, per table of ours, with the reason.
    skipped: BTreeMap<&'static str, (i64, &'static str)>,
}

/// Converts the source into rows of this server's tables, ids moved by `off`.
fn plan(src: &Source, off: &Offsets) -> Plan {
    let mut skipped: BTreeMap<&'static str, (i64, &'static str)> = BTreeMap::new();
    let mut skip = |table: &'static str, why: &'static str| {
        skipped.entry(table).or_insert((0, why)).0 += 1;
    };

    let rooms: Vec<Value> = src
        .rooms
        .iter()
        .map(|(name, r)| {
            json!({
                "name": name,
                "description": r.info.description.clone().unwrap_or_default(),
                "repo_url": r.info.repo_url.clone().unwrap_or_default(),
                "onboarding_notes": r.info.onboarding_notes.clone().unwrap_or_default(),
                "retention_days": r.retention_days,
                "created_ts": r.created_ts,
            })
        })
        .collect();

    // The original's only sign of life is a token's last use.
    let mut seen: BTreeMap<(String, String), i64> = BTreeMap::new();
    for t in &src.tokens {
        if let Some(ts) = t.last_seen {
            let e = seen.entry((t.room.clone(), t.agent.clone())).or_insert(ts);
            *e = (*e).max(ts);
        }
    }
    let presence: Vec<Value> = seen
        .into_iter()
        .map(|((room, agent), ts)| json!({"room": room, "agent": agent, "last_seen_ts": ts}))
        .collect();

    let task_room: HashMap<i64, &str> = src.tasks.iter().map(|t| (t.id, t.room.as_str())).collect();
    let tasks: Vec<Value> = src
        .tasks
        .iter()
        .map(|t| {
            json!({
                "id": off.id("tasks", t.id),
                "room": t.room,
                "title": t.title,
                "body": t.body,
                "status": t.status,
                "assignee": t.assignee,
                "version": t.version,
                "created_by": t.created_by,
                "created_ts": t.created_ts,
                "updated_ts": t.updated_ts,
                "priority": "normal",
                "required_skill": null,
                "needs_review": false,
                "result": null,
                "lease_seconds": null,
                "lease_expires_ts": null,
            })
        })
        .collect();
    let mut task_deps = Vec::new();
    for t in &src.tasks {
        let mut seen = BTreeSet::new();
        for &dep in &t.depends_on {
            // The original counts only a task of the same room as a blocker.
            if dep != t.id && task_room.get(&dep) == Some(&t.room.as_str()) {
                if seen.insert(dep) {
                    task_deps.push(json!({
                        "task_id": off.id("tasks", t.id),
                        "depends_on": off.id("tasks", dep),
                    }));
                }
            } else {
                skip("task_deps", "a dependency on no task of the same room");
            }
        }
    }

    // The mention index as the server keeps it: only agents of the room
    // (the agent of a live token that can read it), at most
    // `limits::MENTIONS` a body, each row pointing at its message or note
    // and placed by `seq` among the room's messages (a message's own id; for
    // a note, the room's newest message id when the note was written).
    let room_agents = |room: &str| -> std::collections::HashSet<String> {
        src.tokens
            .iter()
            .filter(|t| t.revoked_ts.is_none())
            .filter(|t| t.all_rooms || t.room == room || t.also_rooms.iter().any(|r| r == room))
            .map(|t| t.agent.to_lowercase())
            .collect()
    };
    let mut room_messages: HashMap<&str, Vec<(i64, i64)>> = HashMap::new();
    for m in &src.messages {
        room_messages
            .entry(m.room.as_str())
            .or_default()
            .push((m.ts, off.id("messages", m.id)));
    }
    let newest_message_at = |room: &str, ts: i64| -> i64 {
        room_messages
            .get(room)
            .and_then(|l| l.iter().filter(|(t, _)| *t <= ts).map(|(_, id)| *id).max())
            .unwrap_or(0)
    };
    let mut mentions = Vec::new();
    let mut mention_id = off.of("mentions");
    let mut mention =
        |room: &str, body: &str, ts: i64, refs: (Option<i64>, Option<i64>, Option<i64>)| {
            let agents = room_agents(room);
            let seq = refs.0.unwrap_or_else(|| newest_message_at(room, ts));
            for agent in chat::mentions(body)
                .into_iter()
                .filter(|a| agents.contains(a))
                .take(limits::MENTIONS)
            {
                mention_id += 1;
                mentions.push(json!({
                    "id": mention_id,
                    "room": room,
                    "agent": agent,
                    "message_id": refs.0,
                    "note_id": refs.1,
                    "task_id": refs.2,
                    "ts": ts,
                    "seq": seq,
                }));
            }
        };

    let mut notes = Vec::new();
    for n in &src.notes {
        if task_room.get(&n.task_id) != Some(&n.room.as_str()) {
            skip("notes", "a note on no task of its room");
            continue;
        }
        let (id, task_id) = (off.id("notes", n.id), off.id("tasks", n.task_id));
        notes.push(json!({
            "id": id,
            "task_id": task_id,
            "room": n.room,
            "ts": n.ts,
            "author": n.author,
            "body": n.body,
        }));
        mention(&n.room, &n.body, n.ts, (None, Some(id), Some(task_id)));
    }

    let message_room: HashMap<i64, &SrcMessage> = src.messages.iter().map(|m| (m.id, m)).collect();
    let mut messages = Vec::new();
    for m in &src.messages {
        let id = off.id("messages", m.id);
        // A thread points only at a message of the same room.
        let reply_to = m
            .reply_to
            .filter(|p| message_room.get(p).is_some_and(|p| p.room == m.room))
            .map(|p| off.id("messages", p));
        messages.push(json!({
            "id": id,
            "room": m.room,
            "ts": m.ts,
            "author": m.author,
            "body": m.body,
            "reply_to": reply_to,
        }));
        mention(&m.room, &m.body, m.ts, (Some(id), None, None));
    }

    let events: Vec<Value> = src
        .events
        .iter()
        .map(|e| {
            let mut detail = Map::new();
            if !e.detail.is_empty() {
                detail.insert("text".into(), json!(e.detail));
            }
            // An upgrade notice was a message posted to the room.
            let kind = if e.kind == "server_upgraded" {
                "message"
            } else {
                e.kind.as_str()
            };
            // What this server's events carry, where the source can tell.
            if kind == "message"
                && let Some(m) = e.message_id.and_then(|id| message_room.get(&id))
                && m.room == e.room
            {
                detail.insert("body".into(), json!(m.body));
                detail.insert(
                    "reply_to".into(),
                    json!(
                        m.reply_to
                            .filter(|p| message_room.get(p).is_some_and(|p| p.room == m.room))
                            .map(|p| off.id("messages", p))
                    ),
                );
                detail.insert("mentions".into(), json!(chat::mentions(&m.body)));
            }
            if kind == "task_created"
                && let Some(t) = e
                    .task_id
                    .and_then(|id| src.tasks.iter().find(|t| t.id == id))
            {
                detail.insert("title".into(), json!(t.title));
            }
            json!({
                "id": off.id("events", e.id),
                "room": e.room,
                "ts": e.ts,
                "kind": kind,
                "actor": e.actor,
                "task_id": off.opt("tasks", e.task_id),
                "message_id": off.opt("messages", e.message_id),
                "detail": Value::Object(detail),
            })
        })
        .collect();

    let cursors: Vec<Value> = src
        .cursors
        .iter()
        .map(|c| {
            let event_id = if c.event_id > 0 {
                off.id("events", c.event_id)
            } else {
                0
            };
            json!({"room": c.room, "agent": c.agent, "event_id": event_id})
        })
        .collect();

    let files: Vec<Value> = src
        .files
        .iter()
        .map(|f| {
            use base64::Engine;
            json!({
                "id": off.id("files", f.id),
                "room": f.room,
                "name": f.name,
                "mime": f.mime,
                "size": f.content.len(),
                "sha256": f.sha256,
                "content": base64::engine::general_purpose::STANDARD.encode(&f.content),
                "author": f.author,
                "ts": f.ts,
                "expires_ts": f.expires_ts,
                "task_id": null,
            })
        })
        .collect();

    let tokens: Vec<Value> = src
        .tokens
        .iter()
        .enumerate()
        .map(|(i, t)| {
            json!({
                "id": off.of("tokens") + i as i64 + 1,
                "hash": t.hash,
                "agent": t.agent,
                "room": t.room,
                "also_rooms": t.also_rooms,
                "readonly": t.readonly,
                "admin": t.admin,
                "all_rooms": t.all_rooms,
                "lead": false,
                "skills": Vec::<String>::new(),
                "created_ts": t.created_ts,
                "revoked_ts": t.revoked_ts,
                // ChatRoomMCP keeps last_seen per token: each token's own last use.
                "last_used_ts": t.last_seen,
            })
        })
        .collect();

    Plan {
        tables: vec![
            ("rooms", rooms),
            ("presence", presence),
            ("tasks", tasks),
            ("task_deps", task_deps),
            ("notes", notes),
            ("messages", messages),
            ("mentions", mentions),
            ("events", events),
            ("cursors", cursors),
            ("files", files),
            ("tokens", tokens),
        ],
        skipped,
    }
}

/// Rows per `load_rows` call; file rows carry their content, so fewer.
/// Rooms and tokens always go in one call: one transaction each.
fn batch(table: &str) -> usize {
    match table {
        "rooms" | "tokens" => usize::MAX,
        "files" => 16,
        _ => 1000,
    }
}

/// The tables whose ids the import moves, with the key column.
const KEYED: &[&str] = &[
    "tokens", "tasks", "notes", "messages", "mentions", "events", "files",
];

pub async fn run(path: &Path, to: &str) -> anyhow::Result<ExitCode> {
    // Everything about the source first: a bad file touches no database.
    if let Some(dest) = to.strip_prefix("sqlite://")
        && let (Ok(a), Ok(b)) = (std::fs::canonicalize(path), std::fs::canonicalize(dest))
        && a == b
    {
        bail!(
            "the destination is the ChatRoomMCP file itself: import into another database \
             (--to sqlite://NEW.db, or CHATROOM_DB pointing elsewhere)"
        );
    }
    let owned = path.to_owned();
    let src = tokio::task::spawn_blocking(move || read_source(&owned))
        .await
        .context("reading the source stopped")??;
    let dest = db::open(to)
        .await
        .map_err(|e| anyhow::anyhow!("the destination: {e:#}"))?;
    let dest = dest.as_ref();

    let mut taken = Vec::new();
    for name in src.rooms.keys() {
        if dest.get_room(name).await?.is_some() {
            taken.push(name.clone());
        }
    }
    if !taken.is_empty() {
        bail!(
            "the destination already holds room(s) {}: importing would mix two histories. \
             Nothing was imported; delete them there first (chatroom admin delete-room --room \
             NAME --yes) or import into another database (--to)",
            taken.join(", ")
        );
    }
    for t in &src.tokens {
        if dest.token_by_hash(&t.hash).await?.is_some() {
            bail!(
                "a token of agent {} is already in the destination (imported before?); \
                 nothing was imported",
                t.agent
            );
        }
    }

    let mut offsets = Offsets::default();
    for table in KEYED {
        offsets.0.insert(table, dest.id_high_water(table).await?);
    }
    let plan = plan(&src, &offsets);
    let mut before = HashMap::new();
    for (table, _) in &plan.tables {
        before.insert(*table, dest.count_rows(table).await?);
    }

    if let Err(e) = write(dest, &plan).await {
        let mut undo = Vec::new();
        if e.rooms_written {
            for name in src.rooms.keys() {
                if let Err(u) = dest.delete_room(name).await {
                    undo.push(format!("{name}: {u}"));
                }
            }
        }
        if undo.is_empty() {
            return Err(e
                .error
                .context("the import failed and was undone: the destination is as it was"));
        }
        return Err(e.error.context(format!(
            "the import failed, and undoing it failed for room(s) {}: delete them with \
             chatroom admin delete-room before trying again",
            undo.join("; ")
        )));
    }
    for table in KEYED {
        let high = plan
            .tables
            .iter()
            .find(|(t, _)| t == table)
            .and_then(|(_, rows)| rows.iter().filter_map(|r| r["id"].as_i64()).max());
        if let Some(high) = high {
            dest.set_id_floor(table, high).await?;
        }
    }

    report(dest, &src, &plan, &before, &offsets).await
}

/// Why a write failed, and whether rooms had been written by then.
struct WriteError {
    error: anyhow::Error,
    rooms_written: bool,
}

async fn write(dest: &dyn Store, plan: &Plan) -> Result<(), WriteError> {
    let mut rooms_written = false;
    for (table, rows) in &plan.tables {
        for chunk in rows.chunks(batch(table).min(rows.len().max(1))) {
            dest.load_rows(table, chunk).await.map_err(|e| WriteError {
                error: anyhow::Error::from(e).context(format!("writing {table}")),
                rooms_written,
            })?;
        }
        if *table == "rooms" {
            rooms_written = true;
        }
    }
    Ok(())
}

/// Prints the per-table counts and checks them against the source and the
/// destination; any difference fails the command.
async fn report(
    dest: &dyn Store,
    src: &Source,
    plan: &Plan,
    before: &HashMap<&'static str, i64>,
    offsets: &Offsets,
) -> anyhow::Result<ExitCode> {
    for n in &src.notices {
        eprintln!("note: {n}");
    }
    for (table, (n, why)) in &plan.skipped {
        eprintln!("note: left out {n} row(s) of {table}: {why}");
    }
    // Source table → our table, where they correspond one to one.
    let pairs: &[(&str, &str)] = &[
        ("rooms", "rooms"),
        ("tokens", "tokens"),
        ("tasks", "tasks"),
        ("notes", "notes"),
        ("messages", "messages"),
        ("events", "events"),
        ("cursors", "cursors"),
        ("files", "files"),
    ];
    let mut ok = true;
    println!(
        "{:<12} {:>10} {:>10} {:>10}",
        "TABLE", "SOURCE", "IMPORTED", "LEFT OUT"
    );
    for (table, rows) in &plan.tables {
        let grew = dest.count_rows(table).await? - before.get(table).copied().unwrap_or(0);
        let planned = rows.len() as i64;
        let source = pairs
            .iter()
            .find(|(_, ours)| ours == table)
            .and_then(|(theirs, _)| src.counts.get(theirs).copied());
        let left_out = plan.skipped.get(table).map_or(0, |(n, _)| *n);
        let mut mark = "";
        if grew != planned {
            mark = "  MISMATCH (destination)";
            ok = false;
        } else if let Some(s) = source
            && table != &"rooms"
            && s != planned + left_out
        {
            mark = "  MISMATCH (source)";
            ok = false;
        }
        println!(
            "{:<12} {:>10} {grew:>10} {left_out:>10}{mark}",
            table,
            source.map_or("-".to_owned(), |s| s.to_string()),
        );
    }
    if !ok {
        eprintln!(
            "the counts differ: was the destination written to during the import? \
             Stop its servers, delete the imported rooms and import again"
        );
        return Ok(ExitCode::FAILURE);
    }
    let moved = offsets.of("tasks") + offsets.of("messages") + offsets.of("events");
    println!(
        "imported {} room(s) and {} token(s): every token keeps working{}",
        src.rooms.len(),
        src.tokens.len(),
        if moved == 0 {
            "; ids are kept"
        } else {
            "; ids moved past the destination's own"
        }
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::parse_ts;

    #[test]
    fn reads_python_isoformat() {
        assert_eq!(parse_ts("1970-01-01T00:00:01+00:00"), Some(1_000));
        assert_eq!(parse_ts("1970-01-01T01:00:01+01:00"), Some(1_000));
        assert_eq!(parse_ts("1970-01-01T00:00:01.250000+00:00"), Some(1_250));
        assert_eq!(parse_ts("1970-01-01 00:00:02"), Some(2_000));
        assert_eq!(parse_ts("1970-01-01T00:00:02.5"), Some(2_500));
        assert_eq!(parse_ts("yesterday"), None);
        assert_eq!(parse_ts("1700000000"), None);
    }
}
