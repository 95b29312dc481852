//! The claim this worker holds, kept in a small file so that the next run,
//! after a crash, hands back exactly that claim — and never a task its
//! agent holds from another session (a person or an agent using the same
//! name). A task counts as this worker's while it is at the version the
//! claim gave it: any later change by anyone moves the version on.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// A claim as the board answered it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    pub task_id: i64,
    /// The task's version right after the claim.
    pub version: i64,
}

/// Where the claim is kept: one file per board and token, in the user's
/// state directory; `None` when there is none (then a crashed run's claim
/// is left to its lease).
pub struct ClaimFile(Option<PathBuf>);

impl ClaimFile {
    /// The file for the board at `mcp_url` and `token`, under
    /// `$XDG_STATE_HOME/chatroom`, else `~/.local/state/chatroom`.
    pub fn locate(mcp_url: &str, token: &str) -> ClaimFile {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let dir = env("XDG_STATE_HOME")
            .map(|d| PathBuf::from(d).join("chatroom"))
            .or_else(|| env("HOME").map(|h| PathBuf::from(h).join(".local/state/chatroom")));
        // Named by a digest, so the file tells nothing of the token.
        let key = hex::encode(Sha256::digest(format!("{mcp_url}\n{token}").as_bytes()));
        ClaimFile(dir.map(|d| d.join(format!("worker-{}.claim", &key[..16]))))
    }

    pub fn path(&self) -> Option<&PathBuf> {
        self.0.as_ref()
    }

    /// The claim an earlier run left, if any.
    pub fn read(&self) -> Option<Claim> {
        let text = std::fs::read_to_string(self.0.as_ref()?).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Keeps `claim` (written whole, then renamed into place).
    pub fn hold(&self, claim: Claim) -> std::io::Result<()> {
        let Some(path) = &self.0 else { return Ok(()) };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = path.with_extension("claim.tmp");
        std::fs::write(
            &tmp,
            serde_json::to_string(&claim).map_err(std::io::Error::other)?,
        )?;
        std::fs::rename(&tmp, path)
    }

    /// Forgets the claim: the task was submitted or handed back.
    pub fn clear(&self) {
        if let Some(path) = &self.0 {
            let _ = std::fs::remove_file(path);
        }
    }
}
