//! Names: rooms (SPEC §2), agents, and the rules every name shown to
//! someone else follows (file names, an OAuth app's `client_name`): no
//! control characters and nothing invisible that reorders or hides the
//! text around it (bidi controls, zero-width characters), and, for agents,
//! no name that passes for another: no mix of look-alike scripts
//! (UTS #39 "moderately restrictive"), and none whose confusable skeleton
//! matches another member's of a room it joins.

use unicode_security::{RestrictionLevel, RestrictionLevelDetection};

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
    s.match_indices(crate::secret::PREFIX).any(|(at, p)| {
        s[at + p.len()..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
            .count()
            >= 20
    })
}

/// An agent name: 1–64 chars of letters, digits, `- _ .`, so that `@name`
/// mentions and log lines stay unambiguous; letters of one script, or of
/// scripts that do not pass for each other (Latin with Han or Arabic, not
/// Latin with Cyrillic or Greek).
pub fn check_agent(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.chars().count() <= super::limits::AGENT_NAME
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !ok {
        return Err(Error::invalid(format!(
            "agent name {:?} is not valid: use 1-64 letters, digits, - _ .",
            truncate_for_message(name)
        )));
    }
    if name.detect_restriction_level() > RestrictionLevel::ModeratelyRestrictive {
        return Err(Error::invalid(format!(
            "agent name {:?} mixes scripts that look alike (such as Latin and Cyrillic); \
             write it in one script",
            truncate_for_message(name)
        )));
    }
    Ok(())
}

/// Refuses `agent` joining `room` when one of its `members` has a
/// different name that looks the same (the same UTS #39 confusable
/// skeleton: `alice` and a Cyrillic `аlісе`, `bob1` and `bobl`), so no one
/// can pass for a member of a room they share.
pub fn check_newcomer<'a>(
    agent: &str,
    room: &str,
    members: impl IntoIterator<Item = &'a str>,
) -> Result<()> {
    let mine = skeleton(agent);
    for member in members {
        if member != agent && skeleton(member) == mine {
            return Err(Error::conflict(format!(
                "agent name {:?} looks like {member:?}, already a member of room {room:?}; \
                 pick a name that does not",
                truncate_for_message(agent),
            )));
        }
    }
    Ok(())
}

/// The UTS #39 skeleton of `name`: two names look alike when theirs match.
fn skeleton(name: &str) -> String {
    unicode_security::skeleton(name).collect()
}

/// Whether `c` must never be in a name shown to others: a control
/// character (C0, C1, DEL), or an invisible format character that reorders
/// or hides the text around it: the bidi embeddings, overrides and
/// isolates (U+202A–U+202E, U+2066–U+2069), the marks U+200E, U+200F and
/// U+061C, zero-width characters (U+200B–U+200D, U+2060–U+2064, U+FEFF),
/// the soft hyphen, and tag characters.
pub fn is_hidden(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{00AD}'
            | '\u{061C}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206F}'
            | '\u{FEFF}'
            | '\u{FFF9}'..='\u{FFFB}'
            | '\u{E0000}'..='\u{E007F}')
}

/// A short, printable form of user input for an error message.
pub fn truncate_for_message(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(80).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::testing::accepts_only;

    #[test]
    fn room_names() {
        accepts_only(
            check_room,
            &[
                "a",
                "A",
                "projA",
                "team-1",
                "x.y_z",
                "Dev.Ops_2",
                "a".repeat(64).as_str(),
                // A short `cr_` run is an ordinary name.
                "cr_team",
            ],
            &[
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
            ],
        );
    }

    #[test]
    fn agent_names() {
        accepts_only(
            check_agent,
            // One script, or scripts that do not pass for each other.
            &["claude-1", "алиса", "ünal", "田中-bot", "agent_7"],
            &[
                "",
                "a b",
                "a@b",
                // Bidi controls and zero-width characters are not letters.
                "ali\u{202E}ce",
                "bob\u{2066}",
                "\u{200F}carol",
                "da\u{200B}ve",
                // A Cyrillic `а` among Latin letters passes for `alice`.
                "\u{0430}lice",
            ],
        );
        assert_eq!(
            skeleton("\u{0430}\u{04CF}\u{0456}\u{0441}\u{0435}"),
            skeleton("alice")
        );
        assert_ne!(skeleton("alice"), skeleton("alicia"));
    }

    #[test]
    fn hidden_characters() {
        for c in [
            '\u{1b}', '\u{7}', '\r', '\u{202A}', '\u{202E}', '\u{2066}', '\u{2069}', '\u{200E}',
            '\u{200F}', '\u{FEFF}',
        ] {
            assert!(is_hidden(c), "{c:?}");
        }
        for c in ['a', 'é', '田', ' ', '-'] {
            assert!(!is_hidden(c), "{c:?}");
        }
    }
}
