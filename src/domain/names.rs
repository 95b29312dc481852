//! Names: rooms (SPEC §2) and agents.

use crate::error::{Error, Result};

/// A room name: 1–64 chars of `A-Z a-z 0-9 - _ .`, not path-like (`.`/`..`).
/// Names are kept as written and compared exactly: `projA` and `proja` are
/// two rooms, as in ChatRoomMCP, whose users bring their room names along.
pub fn check_room(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && name.bytes().any(|b| b != b'.');
    if !ok {
        return Err(Error::invalid(format!(
            "room name {:?} is not valid: use 1-64 characters of A-Z a-z 0-9 - _ . (not only dots)",
            truncate_for_message(name)
        )));
    }
    // With capitals allowed, a pasted token is a well-formed name; as a
    // room it would be listed to every member. Not echoed back, either.
    if looks_like_token(name) {
        return Err(Error::invalid(
            "room name looks like a chatroom token; tokens are secrets and are never names",
        ));
    }
    Ok(())
}

/// Whether `s` holds `cr_` followed by a run of token characters long
/// enough to be a token (real ones have 43; the console redacts from 20).
fn looks_like_token(s: &str) -> bool {
    s.match_indices(crate::auth::token::PREFIX).any(|(at, p)| {
        s[at + p.len()..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
            .count()
            >= 20
    })
}

/// An agent name: 1–64 chars of letters, digits, `- _ .`, so that `@name`
/// mentions and log lines stay unambiguous.
pub fn check_agent(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.chars().count() <= super::limits::AGENT_NAME
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "agent name {:?} is not valid: use 1-64 letters, digits, - _ .",
            truncate_for_message(name)
        )))
    }
}

/// A short, printable form of user input for an error message.
pub fn truncate_for_message(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(80).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_names() {
        for good in [
            "a",
            "A",
            "projA",
            "team-1",
            "x.y_z",
            "Dev.Ops_2",
            "a".repeat(64).as_str(),
        ] {
            assert!(check_room(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            " ",
            "..",
            ".",
            "...",
            "a/b",
            "A\\b",
            "\t",
            " projA",
            "a b",
            "ä",
            &"a".repeat(65),
            "../etc",
            "cr_WSJo5pjiN20qtUXm8oHWjkqUY-jnIyOzMKcdAav6ZEA",
            "my.cr_WSJo5pjiN20qtUXm8oHWjkqUY",
        ] {
            assert!(check_room(bad).is_err(), "{bad}");
        }
        // A short `cr_` run is an ordinary name.
        assert!(check_room("cr_team").is_ok());
    }

    #[test]
    fn agent_names() {
        assert!(check_agent("claude-1").is_ok());
        assert!(check_agent("").is_err());
        assert!(check_agent("a b").is_err());
        assert!(check_agent("a@b").is_err());
    }
}
