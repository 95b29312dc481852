//! Minting, verifying, listing and revoking tokens: methods of the
//! [`Core`], so every one decides at the core's clock.

pub use crate::domain::model::Grant;
use crate::domain::model::{ConnectCodeInfo, GrantRecord, NewToken, TokenRecord};
use crate::domain::{Caller, Core, Owner, names};
use crate::error::{Error, Result};
use crate::secret::{self, Secret};

impl Core {
    /// The grant checked once for every way one is given (a token, a
    /// connect code): its names and skills ([`Grant::check`]), every room
    /// known, the agent's name not passing for another member's, and its
    /// rooms normalized ([`Grant::normalized`]).
    pub async fn checked_grant(&self, grant: Grant) -> Result<Grant> {
        grant.check()?;
        let rooms: Vec<String> = std::iter::once(&grant.room)
            .chain(&grant.also_rooms)
            .cloned()
            .collect();
        for room in &rooms {
            if self.store.get_room(room).await?.is_none() {
                return Err(Error::not_found(format!(
                    "room {room:?} does not exist; create it first (chatroom admin add-room {room})"
                )));
            }
        }
        for room in &rooms {
            let members = self.store.members(room).await?;
            names::check_newcomer(&grant.agent, room, members.iter().map(|m| m.agent.as_str()))?;
        }
        Ok(grant.normalized())
    }

    /// Mints a token for `grant`. Every named room must exist. Returns the
    /// raw token (to show once) and the stored record.
    pub async fn mint_token(&self, grant: Grant) -> Result<(Secret, TokenRecord)> {
        let grant = self.checked_grant(grant).await?;
        let secret = secret::mint();
        let new = NewToken {
            hash: secret::hash(secret.expose()),
            grant,
        };
        let now = self.clock.now_ms();
        let id = self.store.insert_token(&new, now).await?;
        let record = TokenRecord {
            id,
            grant: new.grant,
            created_ts: now,
            revoked_ts: None,
            last_seen: None,
            last_used: None,
        };
        Ok((secret, record))
    }

    /// The caller a raw bearer token stands for, if it is valid and not
    /// revoked (an OAuth access token also unexpired). The lookup is by hash
    /// on a unique index: the raw value never reaches SQL and no timing
    /// depends on how much of it matched.
    pub async fn verify(&self, raw: &str) -> Result<Option<Caller>> {
        if raw.starts_with(crate::domain::oauth::ACCESS_PREFIX) {
            return self.verify_access(raw).await;
        }
        if !crate::domain::oauth::shaped_like(raw, secret::PREFIX) {
            return Ok(None);
        }
        let hash = secret::TokenHash::of(raw);
        let record = self.store.token_by_hash(&hash.hex()).await?;
        Ok(record
            .filter(|t| t.revoked_ts.is_none())
            .map(|t| Caller::new(t, hash)))
    }

    /// Whether `caller`'s token still stands (not revoked, not purged; an
    /// OAuth access token also unexpired): one lookup by hash, for a wait
    /// about to tell what it found.
    pub async fn still_valid(&self, caller: &Caller) -> Result<bool> {
        let hash = caller.token_hash.hex();
        if caller.token_id < 0 {
            return Ok(self.access_by_hash(&hash).await?.is_some());
        }
        Ok(self
            .store
            .token_by_hash(&hash)
            .await?
            .is_some_and(|t| t.revoked_ts.is_none()))
    }

    /// Every token and every OAuth grant, revoked ones included.
    pub async fn list_tokens(&self) -> Result<(Vec<TokenRecord>, Vec<GrantRecord>)> {
        Ok((
            self.store.list_tokens().await?,
            self.store.oauth_list_grants().await?,
        ))
    }

    /// Revokes every token of `agent`, its OAuth grants included; returns how many.
    pub async fn revoke_agent(&self, agent: &str) -> Result<u64> {
        let now = self.clock.now_ms();
        Ok(self.store.revoke_agent(agent, now).await?
            + self.store.oauth_revoke_agent(agent, now).await?)
    }
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

impl Core {
    /// Revokes the one token `which`, leaving the agent's others alone;
    /// returns the agent it belonged to. Unknown or already revoked:
    /// refused, saying which.
    pub async fn revoke_token(&self, which: TokenRef) -> Result<String> {
        let store = self.store.as_ref();
        let now = self.clock.now_ms();
        let (agent, revoked_ts) = match which {
            TokenRef::Token(id) => store
                .list_tokens()
                .await?
                .into_iter()
                .find(|t| t.id == id)
                .map(|t| (t.grant.agent, t.revoked_ts)),
            TokenRef::Grant(id) => store
                .oauth_grant(id)
                .await?
                .map(|g| (g.grant.agent, g.revoked_ts)),
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
    pub async fn purge_tokens(&self, days: i64) -> Result<u64> {
        let store = self.store.as_ref();
        if !(0..=36_500).contains(&days) {
            return Err(Error::invalid("older_than_days must be from 0 to 36500"));
        }
        let cutoff = self.clock.now_ms() - days * 86_400_000;
        Ok(store.purge_tokens(cutoff).await? + store.oauth_purge_grants(cutoff).await?)
    }
}

/// The owner's changes to tokens, each written to the admin log.
impl Core {
    /// The owner mints a token for `grant` ([`Core::mint_token`]).
    pub async fn owner_mint_token(
        &self,
        owner: &Owner<'_>,
        grant: Grant,
    ) -> Result<(Secret, TokenRecord)> {
        let (secret, t) = self.mint_token(grant).await?;
        let target = format!(
            "agent {} (token #{}; {})",
            t.grant.agent,
            t.id,
            t.grant.describe()
        );
        self.log_owner(owner.into(), "token.mint", target, t.grant.server_admin())
            .await;
        Ok((secret, t))
    }

    /// The owner mints a connect code for an app ([`Core::mint_connect_code`]).
    pub async fn owner_connect(
        &self,
        owner: &Owner<'_>,
        grant: Grant,
        ttl_minutes: i64,
    ) -> Result<(Secret, ConnectCodeInfo)> {
        let (code, info) = self.mint_connect_code(grant, ttl_minutes).await?;
        let target = format!(
            "agent {} (connect code, room {}, {ttl_minutes} min)",
            info.grant.agent, info.grant.room
        );
        self.log_owner(
            owner.into(),
            "oauth.connect",
            target,
            info.grant.server_admin(),
        )
        .await;
        Ok((code, info))
    }

    /// The owner revokes every token of `agent` ([`Core::revoke_agent`]);
    /// revoking none changes nothing and is not logged.
    pub async fn owner_revoke_agent(&self, owner: &Owner<'_>, agent: &str) -> Result<u64> {
        let n = self.revoke_agent(agent).await?;
        if n > 0 {
            let target = format!("agent {agent} ({n} token(s))");
            self.log_owner(owner.into(), "token.revoke", target, false)
                .await;
        }
        Ok(n)
    }

    /// The owner revokes one token ([`Core::revoke_token`]); returns its
    /// agent and how many active tokens the agent keeps.
    pub async fn owner_revoke_token(
        &self,
        owner: &Owner<'_>,
        which: TokenRef,
    ) -> Result<(String, usize)> {
        let agent = self.revoke_token(which).await?;
        self.log_owner(
            owner.into(),
            "token.revoke",
            format!("token {which} of {agent}"),
            false,
        )
        .await;
        let others = self
            .store
            .list_tokens()
            .await?
            .iter()
            .filter(|t| t.grant.agent == agent && t.revoked_ts.is_none())
            .count();
        Ok((agent, others))
    }

    /// The owner purges tokens revoked more than `days` ago ([`Core::purge_tokens`]).
    pub async fn owner_purge_tokens(&self, owner: &Owner<'_>, days: i64) -> Result<u64> {
        let n = self.purge_tokens(days).await?;
        let target = format!("{n} token(s) revoked more than {days} day(s) ago");
        self.log_owner(owner.into(), "token.purge", target, false)
            .await;
        Ok(n)
    }
}
