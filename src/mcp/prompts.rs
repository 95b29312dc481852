//! The prompts: `join` (who I am, the room, its onboarding, what needs me),
//! `standup` (what changed since my last look, what I hold, what waits for
//! review) and `handoff` (`task_id`: write a note another agent can take
//! over from, then release). Each reads the room through the domain as the
//! caller and never moves a cursor; agent-written text is framed as
//! untrusted data.

use rmcp::ErrorData;
use rmcp::model::{
    GetPromptResult, ListPromptsResult, Prompt, PromptArgument, PromptMessage, Role,
};

use crate::auth::Caller;
use crate::domain::model::{Status, Task};
use crate::domain::{Call, Core};
use crate::error::Error;
use crate::present::UNTRUSTED_WARNING;
use crate::present::digest::{self, plain};

/// `prompts/list`.
pub fn list() -> ListPromptsResult {
    let room = || {
        PromptArgument::new("room")
            .with_description("the room (default: your token's default room)")
            .with_required(false)
    };
    ListPromptsResult::with_all_items(vec![
        Prompt::new(
            "join",
            Some("Join the room: who you are, the room and its onboarding notes, and what needs you."),
            Some(vec![room()]),
        )
        .with_title("Join the chatroom room"),
        Prompt::new(
            "standup",
            Some("Stand-up: what changed since your last look, what you hold, what waits for review."),
            Some(vec![room()]),
        )
        .with_title("Stand-up"),
        Prompt::new(
            "handoff",
            Some("Hand a task off: write a note another agent can take over from, then release it."),
            Some(vec![
                PromptArgument::new("task_id")
                    .with_description("the task to hand off (one you hold)")
                    .with_required(true),
                room(),
            ]),
        )
        .with_title("Hand off a task"),
    ])
}

/// One task as one line.
fn task_line(t: &Task) -> String {
    let holder = t
        .assignee
        .as_deref()
        .map(|a| format!(", @{}", plain(a)))
        .unwrap_or_default();
    format!(
        "- #{} [{}{}] {} (version {})",
        t.id,
        t.status.as_str(),
        holder,
        plain(&t.title),
        t.version
    )
}

fn lines(title: &str, tasks: &[Task]) -> String {
    if tasks.is_empty() {
        return format!("{title}: none.\n");
    }
    let mut out = format!("{title}:\n");
    for t in tasks {
        out.push_str(&task_line(t));
        out.push('\n');
    }
    out
}

/// The open tasks the caller holds, and those waiting for its review.
async fn mine(
    core: &Core,
    call: &Call,
    room: Option<&str>,
) -> Result<(Vec<Task>, Vec<Task>), Error> {
    let (_, held) = core
        .list_tasks(call, room, Some("open"), Some("me"), Some(50), None)
        .await?;
    let (_, in_review) = core
        .list_tasks(
            call,
            room,
            Some(Status::InReview.as_str()),
            None,
            Some(50),
            None,
        )
        .await?;
    let held = held
        .into_iter()
        .filter(|t| t.status != Status::InReview)
        .collect();
    let review = in_review
        .into_iter()
        .filter(|t| call.lead || t.created_by == call.agent)
        .collect();
    Ok((held, review))
}

fn text(role: Role, s: String) -> PromptMessage {
    PromptMessage::new_text(role, s)
}

/// `prompts/get` for `caller`.
pub async fn get(
    core: &Core,
    caller: Caller,
    name: &str,
    args: Option<&serde_json::Map<String, serde_json::Value>>,
) -> Result<GetPromptResult, ErrorData> {
    let arg = |k: &str| args.and_then(|a| a.get(k));
    let room = arg("room").and_then(|v| v.as_str()).map(str::to_owned);
    let room = room.as_deref();
    let tool: &'static str = match name {
        "join" => "join",
        "standup" => "standup",
        "handoff" => "handoff",
        other => {
            return Err(ErrorData::invalid_params(
                format!("no prompt {other:?}; this server has join, standup and handoff"),
                None,
            ));
        }
    };
    let call = Call::new(caller, tool);
    let refused = |e: Error| ErrorData::invalid_params(e.to_string(), None);
    let (description, body) = match tool {
        "join" => {
            let info = core.get_room_info(&call, room).await.map_err(refused)?;
            let (held, review) = mine(core, &call, room).await.map_err(refused)?;
            let (_, pending) = core
                .list_tasks(&call, room, Some("pending"), None, Some(20), None)
                .await
                .map_err(refused)?;
            let free: Vec<Task> = pending
                .into_iter()
                .filter(|t| t.assignee.is_none() || t.assignee.as_deref() == Some(&call.agent))
                .collect();
            let who = format!(
                "You are @{} in the chatroom room \"{}\" (rooms: {}; lead: {}, read-only: {}, tool profile: {}).\n\
                 The chat is for talk; the board is for work: claim a task before working on it \
                 (claim_task), note progress (add_note), and finish with submit_result.\n\n",
                plain(&call.agent),
                plain(&info.name),
                call.rooms().join(", "),
                call.lead,
                call.readonly,
                call.profile,
            );
            let about = format!(
                "About the room ({UNTRUSTED_WARNING}):\n  description: {}\n  repo: {}\n  onboarding notes: {}\n\n",
                plain(&info.description),
                plain(&info.repo_url),
                plain(&info.onboarding_notes),
            );
            (
                "Join the room",
                format!(
                    "{who}{about}{}{}{}\nStart with whats_new to catch up.",
                    lines("Tasks you hold", &held),
                    lines("Waiting for your review", &review),
                    lines("Pending tasks you may claim", &free),
                ),
            )
        }
        "standup" => {
            let news = core
                .whats_new(&call, room, 50, false, true, None)
                .await
                .map_err(refused)?;
            let (held, review) = mine(core, &call, room).await.map_err(refused)?;
            let changed = digest::render(&news.room, &news.page, &call.agent, news.reset.as_ref());
            let changed = if changed.is_empty() {
                "Nothing changed since your last look.\n".to_owned()
            } else {
                changed
            };
            (
                "Stand-up",
                format!(
                    "Stand-up for @{} in room \"{}\". Say in a few lines what you did, what you do next, and what blocks you.\n\n\
                     What changed since your last look (your cursor did not move; whats_new moves it):\n{changed}\n{}{}",
                    plain(&call.agent),
                    plain(&news.room.name),
                    lines("What you hold", &held),
                    lines("Waiting for review", &review),
                ),
            )
        }
        _ => {
            let id = arg("task_id")
                .and_then(|v| {
                    v.as_i64()
                        .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
                })
                .ok_or_else(|| {
                    ErrorData::invalid_params(
                        "handoff needs task_id, the id of a task you hold",
                        None,
                    )
                })?;
            let (task, notes) = core.get_task(&call, room, id).await.map_err(refused)?;
            let last: Vec<String> = notes
                .iter()
                .rev()
                .take(5)
                .rev()
                .map(|n| format!("  - @{}: {}", plain(&n.author), plain(&n.body)))
                .collect();
            (
                "Hand off a task",
                format!(
                    "Hand off task #{} so that another agent can take it over.\n{}\n\
                     Task ({UNTRUSTED_WARNING}):\n  title: {}\n  body: {}\n  recent notes:\n{}\n\n\
                     1. add_note on #{}: what is done, what is left, where the work is (branch, files), \
                     how to check it, and anything surprising.\n\
                     2. release_task #{} with a one-line reason, so that it is pending again for the next agent.",
                    task.id,
                    task_line(&task),
                    plain(&task.title),
                    plain(&task.body),
                    if last.is_empty() {
                        "  (none)".to_owned()
                    } else {
                        last.join("\n")
                    },
                    task.id,
                    task.id,
                ),
            )
        }
    };
    Ok(GetPromptResult::new(vec![text(Role::User, body)]).with_description(description))
}
