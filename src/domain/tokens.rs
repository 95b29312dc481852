//! Minting, verifying, listing and revoking tokens.

use crate::auth::Caller;
use crate::auth::token::{self, Secret};
use crate::clock::now_ms;
use crate::domain::model::{NewToken, TokenRecord};
use crate::domain::profile::Profile;
use crate::domain::store::Store;
use crate::domain::{limits, names};
use crate::error::{Error, Result};

/// What a new token grants.
#[derive(Debug, Clone, Default)]
pub struct Grant {
    pub agent: String,
    pub room: String,
    pub also_rooms: Vec<String>,
    pub readonly: bool,
    pub admin: bool,
    pub all_rooms: bool,
    pub lead: bool,
    pub skills: Vec<String>,
    /// Which tools the token sees and may call (`full` by default).
    pub profile: Profile,
}

/// Mints a token for `grant`. Every named room must exist. Returns the raw
/// token (to show once) and the stored record.
pub async fn mint(store: &dyn Store, grant: Grant) -> Result<(Secret, TokenRecord)> {
    names::check_agent(&grant.agent)?;
    let mut rooms = vec![grant.room.clone()];
    rooms.extend(grant.also_rooms.iter().cloned());
    for room in &rooms {
        names::check_room(room)?;
        if store.get_room(room).await?.is_none() {
            return Err(Error::not_found(format!(
                "room {room:?} does not exist; create it first (chatroom admin add-room {room})"
            )));
        }
    }
    names::check_newcomer(store, &grant.agent, &rooms).await?;
    for skill in &grant.skills {
        limits::non_empty("skill", skill)?;
        limits::check("skill", skill, limits::SKILL)?;
    }
    let mut also_rooms = grant.also_rooms.clone();
    also_rooms.retain(|r| *r != grant.room);
    also_rooms.dedup();
    let secret = token::mint();
    let new = NewToken {
        hash: token::hash(secret.expose()),
        agent: grant.agent,
        room: grant.room,
        also_rooms,
        readonly: grant.readonly,
        admin: grant.admin,
        all_rooms: grant.all_rooms,
        lead: grant.lead,
        skills: grant.skills,
        profile: grant.profile,
    };
    let now = now_ms();
    let id = store.insert_token(&new, now).await?;
    let record = TokenRecord {
        id,
        agent: new.agent,
        room: new.room,
        also_rooms: new.also_rooms,
        readonly: new.readonly,
        admin: new.admin,
        all_rooms: new.all_rooms,
        lead: new.lead,
        skills: new.skills,
        profile: new.profile,
        created_ts: now,
        revoked_ts: None,
        last_seen: None,
        last_used: None,
    };
    Ok((secret, record))
}

/// The caller a raw bearer token stands for, if it is valid and not revoked.
/// The lookup is by hash on a unique index: the raw value never reaches SQL
/// and no timing depends on how much of it matched.
pub async fn verify(store: &dyn Store, raw: &str) -> Result<Option<Caller>> {
    if raw.starts_with(crate::domain::oauth::ACCESS_PREFIX) {
        return crate::domain::oauth::verify_access(store, raw).await;
    }
    if !raw.starts_with(token::PREFIX) || raw.len() > 200 {
        return Ok(None);
    }
    let hash = token::TokenHash::of(raw);
    let record = store.token_by_hash(&hash.hex()).await?;
    Ok(record
        .filter(|t| t.revoked_ts.is_none())
        .map(|t| Caller::new(t, hash)))
}

/// Revokes every token of `agent`, its OAuth grants included; returns how many.
pub async fn revoke(store: &dyn Store, agent: &str) -> Result<u64> {
    Ok(store.revoke_agent(agent, now_ms()).await?
        + store.oauth_revoke_agent(agent, now_ms()).await?)
}

/// One token as `chatroom admin list-tokens` names it: `7` for a minted
/// token, `g7` for an OAuth app's grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenRef {
    Token(i64),
    Grant(i64),
}

impl std::str::FromStr for TokenRef {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<TokenRef, String> {
        let s = s.trim();
        let (make, digits): (fn(i64) -> TokenRef, &str) = match s.strip_prefix(['g', 'G']) {
            Some(rest) => (TokenRef::Grant, rest),
            None => (TokenRef::Token, s),
        };
        match digits.parse::<i64>() {
            Ok(id) if id > 0 && digits.bytes().all(|b| b.is_ascii_digit()) => Ok(make(id)),
            _ => Err(format!(
                "{s:?} is not a token id: use the ID column of `chatroom admin list-tokens` (7, or g7 for an OAuth app)"
            )),
        }
    }
}

impl std::fmt::Display for TokenRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenRef::Token(id) => write!(f, "{id}"),
            TokenRef::Grant(id) => write!(f, "g{id}"),
        }
    }
}

/// Revokes the one token `which`, leaving the agent's others alone; returns
/// the agent it belonged to. Unknown or already revoked: refused, saying which.
pub async fn revoke_one(store: &dyn Store, which: TokenRef) -> Result<String> {
    let now = now_ms();
    let (agent, revoked_ts) = match which {
        TokenRef::Token(id) => store
            .list_tokens()
            .await?
            .into_iter()
            .find(|t| t.id == id)
            .map(|t| (t.agent, t.revoked_ts)),
        TokenRef::Grant(id) => store
            .oauth_list_grants()
            .await?
            .into_iter()
            .find(|g| g.id == id)
            .map(|g| (g.agent, g.revoked_ts)),
    }
    .ok_or_else(|| {
        Error::not_found(format!(
            "there is no token {which} (chatroom admin list-tokens shows the ids)"
        ))
    })?;
    let done = match revoked_ts {
        Some(_) => false,
        None => match which {
            TokenRef::Token(id) => store.revoke_token(id, now).await?,
            TokenRef::Grant(id) => store.oauth_revoke_grant(id, now).await?,
        },
    };
    if !done {
        return Err(Error::conflict(format!(
            "token {which} of {agent} is revoked already"
        )));
    }
    Ok(agent)
}

/// Deletes tokens revoked more than `days` ago; returns how many.
pub async fn purge(store: &dyn Store, days: i64) -> Result<u64> {
    if !(0..=36_500).contains(&days) {
        return Err(Error::invalid("older_than_days must be from 0 to 36500"));
    }
    let cutoff = now_ms() - days * 86_400_000;
    Ok(store.purge_tokens(cutoff).await? + store.oauth_purge_grants(cutoff).await?)
}
