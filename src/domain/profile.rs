//! Tool profiles: which MCP tools a token sees and may call. A profile is
//! stored with the token (and with a connect code, then its OAuth grant);
//! `full` lists every tool. A smaller list costs a model less context on
//! every request; a tool outside the profile is neither listed nor callable.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

named_enum! {
    /// The tool profile of a token.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
    #[serde(rename_all = "lowercase")]
    pub enum Profile {
        /// Every tool.
        #[default]
        Full => "full",
        /// What a worker needs: catch up, wait, talk, and work its tasks.
        Worker => "worker",
        /// A worker's tools and the lead's: create, assign, review, cancel.
        Lead => "lead",
        /// The read tools.
        Observer => "observer",
        /// The board app: `show_board` and the app-only tools its buttons call.
        App => "app",
    }
}

/// A worker's tools (`reply_to` is `post_message`'s argument).
const WORKER: &[&str] = &[
    "whats_new",
    "wait_for_change",
    "post_message",
    "list_tasks",
    "get_task",
    "claim_task",
    "update_task",
    "submit_result",
    "release_task",
    "add_note",
];

/// What a lead has on top of a worker's (assigning is `create_task`'s
/// `assignee`).
const LEAD_EXTRA: &[&str] = &["create_task", "review_task", "cancel_task"];

/// The tools that change nothing (`whats_new` moves only the caller's own
/// cursor).
const OBSERVER: &[&str] = &[
    "whoami",
    "list_agents",
    "get_room_info",
    "read_messages",
    "read_events",
    "whats_new",
    "wait_for_change",
    "my_mentions",
    "list_tasks",
    "get_task",
    "search",
    "list_files",
    "get_file",
    "show_board",
];

/// The prefix of the app-only tools (`_meta.ui.visibility: ["app"]`).
pub const APP_TOOL_PREFIX: &str = "board_";

impl Profile {
    /// The profile named `s`; `invalid_argument` naming the choices otherwise.
    pub fn parse(s: &str) -> Result<Profile> {
        Profile::named(s.trim()).ok_or_else(|| {
            Error::invalid(format!(
                "unknown profile {s:?}; use full, worker, lead, observer or app"
            ))
        })
    }

    /// The profile stored as `s`: none is `full` (rows from before
    /// profiles); an unknown value (written by a newer server) lists the
    /// least, the read tools.
    pub fn stored(s: Option<&str>) -> Profile {
        s.map_or(Profile::Full, |s| {
            Profile::parse(s).unwrap_or(Profile::Observer)
        })
    }

    /// Whether a token of this profile sees and may call `tool`.
    pub fn allows(self, tool: &str) -> bool {
        match self {
            Profile::Full => true,
            Profile::Worker => WORKER.contains(&tool),
            Profile::Lead => WORKER.contains(&tool) || LEAD_EXTRA.contains(&tool),
            Profile::Observer => OBSERVER.contains(&tool),
            Profile::App => tool == "show_board" || tool.starts_with(APP_TOOL_PREFIX),
        }
    }

    /// The refusal of a call to `tool` outside this profile.
    pub fn refusal(self, tool: &str) -> Error {
        Error::forbidden(format!(
            "{tool} is not in this token's tool profile ({}); ask the server owner for a token with the profile you need (chatroom admin add-token --profile …)",
            self.as_str()
        ))
    }
}

impl std::str::FromStr for Profile {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Profile, String> {
        Profile::parse(s).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stored name this server does not know (written by a newer one)
    /// falls back to the least, none (rows from before profiles) to `full`.
    #[test]
    fn stored_names_fall_back() {
        assert_eq!(Profile::stored(Some("later")), Profile::Observer);
        assert_eq!(Profile::stored(None), Profile::Full);
    }

    #[test]
    fn a_lead_has_what_a_worker_has() {
        for t in WORKER {
            assert!(Profile::Lead.allows(t));
        }
        assert!(!Profile::Worker.allows("review_task"));
        assert!(!Profile::Observer.allows("post_message"));
        assert!(Profile::App.allows("board_claim"));
        assert!(!Profile::App.allows("claim_task"));
    }
}
