//! Chat: messages with reply threads and `@mentions`.

use std::collections::HashSet;

use serde_json::json;

use crate::domain::model::{EventKind, Message, Record};
use crate::domain::store::{NewMessage, Page};
use crate::domain::{Call, Core, limits};
use crate::error::{Error, Result};

/// The agents a text mentions: `@name`, case-insensitive, word-bounded (an
/// e-mail address is not a mention). Lower-cased, each once.
pub fn mentions(body: &str) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    let chars: Vec<char> = body.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '@' && (i == 0 || !is_name_char(chars[i - 1])) {
            let start = i + 1;
            let mut end = start;
            while end < chars.len() && is_name_char(chars[end]) {
                end += 1;
            }
            let name: String = chars[start..end].iter().collect();
            let name = name.trim_end_matches(['.', '-']).to_lowercase();
            if !name.is_empty()
                && name.chars().count() <= limits::AGENT_NAME
                && !found.contains(&name)
            {
                found.push(name);
            }
            i = end;
        } else {
            i += 1;
        }
    }
    found
}

fn is_name_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '-' | '_' | '.')
}

/// Whether `body` mentions `agent`.
pub fn mentions_agent(body: &str, agent: &str) -> bool {
    let agent = agent.to_lowercase();
    mentions(body).contains(&agent)
}

/// `record` completed for posting `body`: its `message` event (the store
/// gives it the message's id, `Record::stamp`), and as its mentions the
/// agents `body` mentions (all of them: see [`Core::indexed_mentions`]).
pub fn message_record(record: Record, body: &str, reply_to: Option<i64>) -> Record {
    let named = mentions(body);
    message_record_with(record, body, reply_to, named)
}

/// [`message_record`] with the mentions already chosen.
pub fn message_record_with(
    mut record: Record,
    body: &str,
    reply_to: Option<i64>,
    mentions: Vec<String>,
) -> Record {
    record.mentions = mentions;
    let detail = json!({"body": body, "reply_to": reply_to, "mentions": record.mentions});
    record.event(EventKind::Message, None, None, detail)
}

/// A posted message, and `reach` for each agent it mentions.
#[derive(Debug)]
pub struct Posted {
    pub message: Message,
    pub reach: Vec<(String, crate::domain::presence::Reach)>,
}

impl Core {
    /// The agents `body` mentions that are agents of `room`
    /// ([`TokenStore::room_agents`](crate::domain::store::TokenStore::room_agents)),
    /// in order of appearance, at most [`limits::MENTIONS`]: only these are indexed
    /// and flagged `mentions_you`; any other `@word` is text, so a body full
    /// of made-up names costs no more than its own bytes. The room's agents
    /// are read only when the body names someone at all.
    pub async fn indexed_mentions(&self, room: &str, body: &str) -> Result<Vec<String>> {
        let named = mentions(body);
        if named.is_empty() {
            return Ok(named);
        }
        let agents: HashSet<String> = self.store.room_agents(room).await?.into_iter().collect();
        Ok(named
            .into_iter()
            .filter(|n| agents.contains(n))
            .take(limits::MENTIONS)
            .collect())
    }

    /// Posts `body`; answers the message and, for each agent it mentions,
    /// whether it reaches them soon ([`Core::reach`]).
    pub async fn post_message(
        &self,
        call: &Call,
        room: Option<&str>,
        body: &str,
        reply_to: Option<i64>,
    ) -> Result<Posted> {
        let room = self.room(call, room).await?;
        self.writable(call)?;
        limits::non_empty("body", body)?;
        limits::check("body", body, limits::MESSAGE)?;
        let mut parent_author = None;
        if let Some(parent) = reply_to {
            match self.store.message_origin(parent).await? {
                Some((r, author)) if r == room.name => parent_author = Some(author),
                _ => {
                    return Err(Error::not_found(format!(
                        "reply_to {parent} is not a message of room {:?}",
                        room.name
                    )));
                }
            }
        }
        let named = self.indexed_mentions(&room.name, body).await?;
        let mut record =
            message_record_with(call.record(self.clock.now_ms()), body, reply_to, named);
        if let (Some(author), Some(e)) = (parent_author, record.events.last_mut()) {
            // Who is answered: a reply reaches them (`domain::push`).
            e.detail["reply_to_author"] = json!(author);
        }
        let me = call.agent.to_lowercase();
        let mentioned: Vec<String> = record
            .mentions
            .iter()
            .filter(|a| **a != me)
            .cloned()
            .collect();
        let (message, event) = self
            .store
            .post_message(&room.name, NewMessage { body, reply_to }, record)
            .await?;
        call.mark_audited();
        self.bus.publish([event]);
        let reach = self.reach(&room.name, &mentioned).await?;
        Ok(Posted { message, reach })
    }

    pub async fn read_messages(
        &self,
        call: &Call,
        room: Option<&str>,
        since_id: i64,
        limit: Option<i64>,
    ) -> Result<(String, Vec<Message>, i64)> {
        let room = self.room(call, room).await?;
        let limit = limits::clamp_limit(limit, 50, 200);
        let (messages, latest) = self
            .store
            .read_messages_latest(
                &room.name,
                Page {
                    since_id: since_id.max(0),
                    limit,
                },
            )
            .await?;
        Ok((room.name, messages, latest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_word_bounded_mentions() {
        assert_eq!(mentions("hi @Bob and @alice-2."), vec!["bob", "alice-2"]);
        assert_eq!(mentions("mail me at x@bob.com"), Vec::<String>::new());
        assert_eq!(mentions("@bob @BOB"), vec!["bob"]);
        assert!(mentions_agent("ping @Claude", "claude"));
        assert!(!mentions_agent("ping @claudette", "claude"));
    }
}
