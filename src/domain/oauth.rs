//! OAuth 2.1 for apps that sign in (SPEC §2a): the server is its own
//! authorization server, and what grants an identity is a one-time
//! **connect code** the owner mints as a token is minted.
//!
//! The flow, in the order it happens:
//! 1. `chatroom admin connect` (or the console) mints a connect code holding
//!    an agent, rooms and flags ([`mint_connect_code`]).
//! 2. The app registers ([`register`], RFC 7591) or names a client ID
//!    metadata document; it sends its user to the consent page, where the
//!    code is typed; approving spends the code and creates a **grant** and a
//!    one-use authorization code bound to the client, redirect URI and PKCE
//!    challenge ([`approve`]).
//! 3. The app redeems the authorization code for an access and a refresh
//!    token ([`exchange_code`]); refresh tokens rotate on every use and a
//!    replayed one revokes the grant ([`refresh`]).
//! 4. An access token resolves to the same [`Caller`] as a `cr_` token with
//!    the grant's agent, rooms and flags ([`verify_access`]); revoking the
//!    agent revokes its grants with its tokens.
//!
//! Every secret here (connect code, authorization code, tokens, client
//! secret) is stored only as its SHA-256, like every token, and lives in a
//! [`Secret`] that never prints.

use base64::Engine;
use rand::TryRng;
use serde::Serialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::auth::Caller;
use crate::auth::token::{Secret, TokenHash, hash};
use crate::clock::now_ms;
use crate::domain::store::Store;
use crate::domain::tokens::Grant;
use crate::domain::{limits, names};
use crate::error::{Error, Result};

/// Prefix of access tokens (told apart from `cr_` tokens before any lookup).
pub const ACCESS_PREFIX: &str = "cra_";
/// Prefix of refresh tokens.
pub const REFRESH_PREFIX: &str = "crr_";
/// Prefix of authorization codes.
const AUTH_CODE_PREFIX: &str = "crac_";
/// Prefix of registered client ids.
const CLIENT_PREFIX: &str = "crcl_";
/// Prefix of client secrets.
const CLIENT_SECRET_PREFIX: &str = "crcs_";
/// Prefix of connect codes.
pub const CONNECT_PREFIX: &str = "crc-";
/// The one scope: everything the grant's flags allow.
pub const SCOPE: &str = "chatroom";
/// How long an authorization code may wait for its exchange.
pub const AUTH_CODE_TTL_MS: i64 = 10 * 60_000;
/// How long a registration that never completed an authorization is kept.
pub const UNUSED_CLIENT_TTL_MS: i64 = 86_400_000;
/// How many registered clients may exist at once.
pub const MAX_CLIENTS: i64 = 5_000;
/// Connect-code lifetimes allowed (minutes).
pub const CONNECT_TTL_MINUTES: std::ops::RangeInclusive<i64> = 1..=7 * 24 * 60;
/// The letters of connect codes: Crockford's base32, lower case (no i, l, o,
/// u), so a code read aloud or typed on a phone is hard to get wrong.
const CODE_ALPHABET: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";
/// Letters in a connect code after its prefix: 12 × 5 = 60 random bits.
const CODE_LETTERS: usize = 12;

/// A registered client (dynamic client registration).
#[derive(Debug, Clone)]
pub struct OAuthClient {
    pub client_id: String,
    /// SHA-256 of the client secret, for confidential clients.
    pub secret_hash: Option<String>,
    pub client_name: String,
    pub redirect_uris: Vec<String>,
    /// `none`, `client_secret_post` or `client_secret_basic`.
    pub auth_method: String,
    pub created_ts: i64,
    /// When an authorization for it was first approved.
    pub used_ts: Option<i64>,
}

/// A connect code to store.
#[derive(Debug, Clone)]
pub struct NewConnectCode {
    pub hash: String,
    pub grant: Grant,
    pub created_ts: i64,
    pub expires_ts: i64,
}

/// What a minted connect code grants and until when (never the code).
#[derive(Debug, Clone, Serialize)]
pub struct ConnectCodeInfo {
    pub agent: String,
    pub room: String,
    pub also_rooms: Vec<String>,
    pub readonly: bool,
    pub admin: bool,
    pub all_rooms: bool,
    pub lead: bool,
    pub skills: Vec<String>,
    #[serde(with = "crate::clock::ts")]
    pub expires_at: i64,
}

/// An app's standing permission, as stored.
#[derive(Debug, Clone, Serialize)]
pub struct GrantRecord {
    pub id: i64,
    pub client_id: String,
    pub client_name: String,
    pub agent: String,
    pub room: String,
    pub also_rooms: Vec<String>,
    pub readonly: bool,
    pub admin: bool,
    pub all_rooms: bool,
    pub lead: bool,
    pub skills: Vec<String>,
    #[serde(with = "crate::clock::ts")]
    pub created_ts: i64,
    #[serde(with = "crate::clock::ts_opt")]
    pub revoked_ts: Option<i64>,
}

impl GrantRecord {
    /// The caller of an access token of this grant, whose hash is
    /// `token_hash`. Its `token_id` is the grant's id negated, so per-token
    /// limits never mix a grant with a `cr_` token.
    pub fn caller(self, token_hash: TokenHash) -> Caller {
        Caller {
            token_id: -self.id,
            token_hash,
            agent: self.agent,
            room: self.room,
            also_rooms: self.also_rooms,
            readonly: self.readonly,
            admin: self.admin,
            all_rooms: self.all_rooms,
            lead: self.lead,
            skills: self.skills,
        }
    }
}

/// An authorization code to store with the grant it stands for.
#[derive(Debug, Clone)]
pub struct NewAuthCode {
    pub hash: String,
    pub client_id: String,
    pub redirect_uri: String,
    pub code_challenge: String,
    pub resource: Option<String>,
    pub expires_ts: i64,
}

/// A stored authorization code.
#[derive(Debug, Clone)]
pub struct AuthCode {
    pub grant_id: i64,
    pub client_id: String,
    pub redirect_uri: String,
    pub code_challenge: String,
    pub resource: Option<String>,
    pub expires_ts: i64,
}

/// What spending an authorization code found.
#[derive(Debug, Clone)]
pub enum CodeTake {
    /// Unused until now; it is spent.
    Fresh(AuthCode),
    /// Spent before: a replay.
    Replayed {
        grant_id: i64,
    },
    Unknown,
}

/// An access or refresh token to store.
#[derive(Debug, Clone)]
pub struct NewOAuthToken {
    pub hash: String,
    pub grant_id: i64,
    /// `access` or `refresh`.
    pub kind: &'static str,
    pub expires_ts: i64,
}

/// A stored access or refresh token.
#[derive(Debug, Clone)]
pub struct OAuthTokenRecord {
    pub grant_id: i64,
    pub kind: String,
    pub expires_ts: i64,
    pub spent_ts: Option<i64>,
}

/// Lifetimes of what the token endpoint issues.
#[derive(Debug, Clone, Copy)]
pub struct Lifetimes {
    pub access_ms: i64,
    pub refresh_ms: i64,
}

/// An OAuth error answer (RFC 6749 §5.2, RFC 7591 §3.2.2, RFC 7009): its
/// `error` code, a description that never holds a secret, and its status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthError {
    pub status: u16,
    pub error: &'static str,
    pub description: String,
}

impl OAuthError {
    pub fn new(status: u16, error: &'static str, description: impl Into<String>) -> OAuthError {
        OAuthError {
            status,
            error,
            description: description.into(),
        }
    }
    pub fn invalid_request(d: impl Into<String>) -> OAuthError {
        OAuthError::new(400, "invalid_request", d)
    }
    pub fn invalid_grant(d: impl Into<String>) -> OAuthError {
        OAuthError::new(400, "invalid_grant", d)
    }
    pub fn invalid_client(d: impl Into<String>) -> OAuthError {
        OAuthError::new(401, "invalid_client", d)
    }
    /// A failure of ours: logged, answered with a generic description.
    pub fn server(e: Error) -> OAuthError {
        e.log_if_internal();
        match e {
            Error::Internal(_) => OAuthError::new(
                503,
                "temporarily_unavailable",
                "the server could not do this now; try again",
            ),
            other => OAuthError::invalid_request(other.to_string()),
        }
    }
}

impl From<Error> for OAuthError {
    fn from(e: Error) -> OAuthError {
        OAuthError::server(e)
    }
}

/// `len` bytes from the OS CSPRNG.
fn random_bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    rand::rngs::SysRng
        .try_fill_bytes(&mut bytes)
        .expect("the operating system's random source is available");
    bytes
}

/// `prefix` + 32 random bytes, URL-safe base64.
fn mint_secret(prefix: &str) -> Secret {
    let body = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(random_bytes::<32>());
    Secret::new(format!("{prefix}{body}"))
}

/// A fresh random key for the server's own use (the CSRF key).
pub fn fresh_key() -> String {
    hex::encode(random_bytes::<32>())
}

// ---------------------------------------------------------------- connect codes

/// A new connect code: `crc-` and 12 letters of [`CODE_ALPHABET`] in three
/// groups, e.g. `crc-7k2m-q9xd-4hrw`.
fn new_connect_code() -> Secret {
    let bytes = random_bytes::<CODE_LETTERS>();
    let letters: String = bytes
        .iter()
        .map(|b| CODE_ALPHABET[(*b & 31) as usize] as char)
        .collect();
    Secret::new(format!(
        "{CONNECT_PREFIX}{}-{}-{}",
        &letters[0..4],
        &letters[4..8],
        &letters[8..12]
    ))
}

/// The canonical form of a connect code as typed: any case, spaces or
/// dashes anywhere, the prefix optional, and the look-alikes `i`/`l` (for
/// 1) and `o` (for 0) forgiven. `None` when it cannot be a connect code.
pub fn normalize_connect_code(typed: &str) -> Option<String> {
    if typed.len() > 100 {
        return None;
    }
    let mut s: String = typed
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '-')
        .map(|c| c.to_ascii_lowercase())
        .collect();
    if let Some(rest) = s.strip_prefix("crc") {
        s = rest.to_owned();
    }
    let letters: String = s
        .chars()
        .map(|c| match c {
            'i' | 'l' => '1',
            'o' => '0',
            c => c,
        })
        .collect();
    if letters.len() != CODE_LETTERS || !letters.bytes().all(|b| CODE_ALPHABET.contains(&b)) {
        return None;
    }
    Some(format!(
        "{CONNECT_PREFIX}{}-{}-{}",
        &letters[0..4],
        &letters[4..8],
        &letters[8..12]
    ))
}

/// Mints a connect code for `grant`, valid `ttl_minutes` and one approval.
/// Checks the grant as minting a token does. Returns the raw code (shown
/// once) and what it grants.
pub async fn mint_connect_code(
    store: &dyn Store,
    grant: Grant,
    ttl_minutes: i64,
) -> Result<(Secret, ConnectCodeInfo)> {
    if !CONNECT_TTL_MINUTES.contains(&ttl_minutes) {
        return Err(Error::invalid(format!(
            "the connect code's lifetime must be from {} to {} minutes",
            CONNECT_TTL_MINUTES.start(),
            CONNECT_TTL_MINUTES.end()
        )));
    }
    let grant = checked_grant(store, grant).await?;
    let code = new_connect_code();
    let now = now_ms();
    let new = NewConnectCode {
        hash: hash(code.expose()),
        grant: grant.clone(),
        created_ts: now,
        expires_ts: now + ttl_minutes * 60_000,
    };
    store.oauth_insert_connect_code(&new).await?;
    let _ = store.oauth_prune(now).await;
    Ok((
        code,
        ConnectCodeInfo {
            agent: grant.agent,
            room: grant.room,
            also_rooms: grant.also_rooms,
            readonly: grant.readonly,
            admin: grant.admin,
            all_rooms: grant.all_rooms,
            lead: grant.lead,
            skills: grant.skills,
            expires_at: new.expires_ts,
        },
    ))
}

/// The grant with its names checked and rooms known, as `tokens::mint` does.
async fn checked_grant(store: &dyn Store, mut grant: Grant) -> Result<Grant> {
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
    let default_room = grant.room.clone();
    grant.also_rooms.retain(|r| *r != default_room);
    grant.also_rooms.sort();
    grant.also_rooms.dedup();
    Ok(grant)
}

// ---------------------------------------------------------------- clients

/// A client as the authorization endpoints see it: registered here, or
/// described by its client ID metadata document.
#[derive(Debug, Clone)]
pub struct ClientInfo {
    pub client_id: String,
    pub client_name: String,
    pub redirect_uris: Vec<String>,
    pub secret_hash: Option<String>,
    /// Whether it was registered here (else a metadata document).
    pub registered: bool,
}

impl From<OAuthClient> for ClientInfo {
    fn from(c: OAuthClient) -> ClientInfo {
        ClientInfo {
            client_id: c.client_id,
            client_name: c.client_name,
            redirect_uris: c.redirect_uris,
            secret_hash: c.secret_hash,
            registered: true,
        }
    }
}

/// A registration request (RFC 7591 §2), the fields we read.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(default)]
pub struct RegistrationRequest {
    pub redirect_uris: Option<Vec<serde_json::Value>>,
    pub client_name: Option<serde_json::Value>,
    pub token_endpoint_auth_method: Option<serde_json::Value>,
    pub grant_types: Option<Vec<serde_json::Value>>,
    pub response_types: Option<Vec<serde_json::Value>>,
}

/// What a registration answers (`201`); `client_secret` only for a
/// confidential client, shown once.
#[derive(Debug, Clone, Serialize)]
pub struct Registered {
    pub client_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    pub client_id_issued_at: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_secret_expires_at: Option<i64>,
    pub client_name: String,
    pub redirect_uris: Vec<String>,
    pub grant_types: Vec<&'static str>,
    pub response_types: Vec<&'static str>,
    pub token_endpoint_auth_method: String,
    pub scope: &'static str,
}

/// The most redirect URIs one client may register, and their longest form.
const MAX_REDIRECT_URIS: usize = 10;
const MAX_URI_LEN: usize = 2_000;

/// Whether `host` (as a URL gives it) is a loopback host.
pub fn is_loopback_host(host: &url::Host<&str>) -> bool {
    match host {
        url::Host::Domain(d) => d.eq_ignore_ascii_case("localhost"),
        url::Host::Ipv4(ip) => ip.is_loopback(),
        url::Host::Ipv6(ip) => ip.is_loopback(),
    }
}

/// Checks one redirect URI: absolute, no fragment, `https`, or `http` on a
/// loopback host (RFC 8252 §7.3, OAuth 2.1 §2.3.1).
pub fn check_redirect_uri(uri: &str) -> std::result::Result<(), String> {
    if uri.len() > MAX_URI_LEN {
        return Err(format!(
            "a redirect URI is longer than {MAX_URI_LEN} characters"
        ));
    }
    let url =
        url::Url::parse(uri).map_err(|_| "a redirect URI is not an absolute URL".to_owned())?;
    if url.fragment().is_some() {
        return Err("a redirect URI must not have a fragment".into());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("a redirect URI must not hold credentials".into());
    }
    let Some(host) = url.host() else {
        return Err("a redirect URI needs a host".into());
    };
    match url.scheme() {
        "https" => Ok(()),
        "http" if is_loopback_host(&host) => Ok(()),
        _ => Err(
            "a redirect URI must use https, or http on a loopback host (localhost, 127.0.0.1, [::1])"
                .into(),
        ),
    }
}

/// Registers a client (RFC 7591). Bad metadata gets `invalid_redirect_uri`
/// or `invalid_client_metadata`; a full registry `temporarily_unavailable`.
pub async fn register(
    store: &dyn Store,
    req: RegistrationRequest,
) -> std::result::Result<Registered, OAuthError> {
    let bad_uri = |d: String| OAuthError::new(400, "invalid_redirect_uri", d);
    let bad_meta = |d: &str| OAuthError::new(400, "invalid_client_metadata", d);
    let uris = req
        .redirect_uris
        .ok_or_else(|| bad_uri("redirect_uris is required".into()))?;
    if uris.is_empty() || uris.len() > MAX_REDIRECT_URIS {
        return Err(bad_uri(format!(
            "redirect_uris must hold 1 to {MAX_REDIRECT_URIS} URIs"
        )));
    }
    let mut redirect_uris = Vec::with_capacity(uris.len());
    for uri in uris {
        let uri = uri
            .as_str()
            .ok_or_else(|| bad_uri("every redirect URI must be a string".into()))?;
        check_redirect_uri(uri).map_err(bad_uri)?;
        if !redirect_uris.iter().any(|u| u == uri) {
            redirect_uris.push(uri.to_owned());
        }
    }
    let client_name = match req.client_name {
        None | Some(serde_json::Value::Null) => "an unnamed app".to_owned(),
        Some(serde_json::Value::String(s)) => {
            let s = s.trim();
            if s.is_empty() || s.chars().count() > 200 || s.chars().any(names::is_hidden) {
                return Err(bad_meta(
                    "client_name must be 1 to 200 characters without control characters",
                ));
            }
            s.to_owned()
        }
        Some(_) => return Err(bad_meta("client_name must be a string")),
    };
    // RFC 7591 §2: the default method is client_secret_basic.
    let auth_method = match req.token_endpoint_auth_method {
        None | Some(serde_json::Value::Null) => "client_secret_basic".to_owned(),
        Some(serde_json::Value::String(m))
            if ["none", "client_secret_post", "client_secret_basic"].contains(&m.as_str()) =>
        {
            m
        }
        Some(_) => {
            return Err(bad_meta(
                "token_endpoint_auth_method must be none, client_secret_post or client_secret_basic",
            ));
        }
    };
    for grant_type in req.grant_types.unwrap_or_default() {
        if !matches!(
            grant_type.as_str(),
            Some("authorization_code" | "refresh_token")
        ) {
            return Err(bad_meta(
                "grant_types may hold only authorization_code and refresh_token",
            ));
        }
    }
    for response_type in req.response_types.unwrap_or_default() {
        if response_type.as_str() != Some("code") {
            return Err(bad_meta("response_types may hold only code"));
        }
    }
    let now = now_ms();
    store.oauth_prune(now).await?;
    if store.oauth_count_clients().await? >= MAX_CLIENTS {
        return Err(OAuthError::new(
            503,
            "temporarily_unavailable",
            "too many registered clients; unused ones are forgotten after a day",
        ));
    }
    let client_id = format!(
        "{CLIENT_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(random_bytes::<16>())
    );
    let secret = (auth_method != "none").then(|| mint_secret(CLIENT_SECRET_PREFIX));
    let client = OAuthClient {
        client_id: client_id.clone(),
        secret_hash: secret.as_ref().map(|s| hash(s.expose())),
        client_name: client_name.clone(),
        redirect_uris: redirect_uris.clone(),
        auth_method: auth_method.clone(),
        created_ts: now,
        used_ts: None,
    };
    store.oauth_insert_client(&client).await?;
    Ok(Registered {
        client_id,
        client_secret_expires_at: secret.as_ref().map(|_| 0),
        client_secret: secret.map(|s| s.expose().to_owned()),
        client_id_issued_at: now / 1000,
        client_name,
        redirect_uris,
        grant_types: vec!["authorization_code", "refresh_token"],
        response_types: vec!["code"],
        token_endpoint_auth_method: auth_method,
        scope: SCOPE,
    })
}

/// Authenticates a client at the token or revocation endpoint: a client
/// with a secret must present it (compared by hash in constant time).
pub fn authenticate_client(
    client: &ClientInfo,
    secret: Option<&str>,
) -> std::result::Result<(), OAuthError> {
    match (&client.secret_hash, secret) {
        (None, _) => Ok(()),
        (Some(expected), Some(given)) if given.len() <= 200 => {
            if bool::from(hash(given).as_bytes().ct_eq(expected.as_bytes())) {
                Ok(())
            } else {
                Err(OAuthError::invalid_client("the client secret is wrong"))
            }
        }
        (Some(_), _) => Err(OAuthError::invalid_client(
            "this client must authenticate with its client_secret",
        )),
    }
}

// ---------------------------------------------------------------- PKCE

/// Whether a PKCE challenge has the S256 form: 43 characters of URL-safe
/// base64 (a SHA-256).
pub fn valid_challenge(challenge: &str) -> bool {
    challenge.len() == 43
        && challenge
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Whether `verifier` (RFC 7636 §4.1) hashes to `challenge` (S256).
pub fn pkce_matches(verifier: &str, challenge: &str) -> bool {
    let well_formed = (43..=128).contains(&verifier.len())
        && verifier
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b));
    if !well_formed {
        return false;
    }
    let computed = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(Sha256::digest(verifier.as_bytes()));
    bool::from(computed.as_bytes().ct_eq(challenge.as_bytes()))
}

// ---------------------------------------------------------------- approval

/// Approves an authorization with a connect code: spends the code, creates
/// the grant and an authorization code in one transaction. `Ok(None)` for a
/// code that is wrong, used or expired (the caller counts the failure).
pub async fn approve(
    store: &dyn Store,
    client: &ClientInfo,
    typed_code: &str,
    redirect_uri: &str,
    code_challenge: &str,
    resource: Option<&str>,
) -> Result<Option<Secret>> {
    let Some(code) = normalize_connect_code(typed_code) else {
        return Ok(None);
    };
    let auth_code = mint_secret(AUTH_CODE_PREFIX);
    let now = now_ms();
    let new = NewAuthCode {
        hash: hash(auth_code.expose()),
        client_id: client.client_id.clone(),
        redirect_uri: redirect_uri.to_owned(),
        code_challenge: code_challenge.to_owned(),
        resource: resource.map(str::to_owned),
        expires_ts: now + AUTH_CODE_TTL_MS,
    };
    let grant = store
        .oauth_approve(
            &hash(&code),
            &client.client_id,
            &client.client_name,
            &new,
            now,
        )
        .await?;
    Ok(grant.map(|_| auth_code))
}

// ---------------------------------------------------------------- token endpoint

/// What the token endpoint answers.
#[derive(Debug, Serialize)]
pub struct TokenResponse {
    pub access_token: String,
    pub token_type: &'static str,
    pub expires_in: i64,
    pub refresh_token: String,
    pub scope: &'static str,
}

/// Issues a fresh access and refresh token for `grant_id`.
async fn issue(
    store: &dyn Store,
    grant_id: i64,
    life: Lifetimes,
    now: i64,
) -> Result<TokenResponse> {
    let access = mint_secret(ACCESS_PREFIX);
    let refresh = mint_secret(REFRESH_PREFIX);
    store
        .oauth_insert_tokens(&[
            NewOAuthToken {
                hash: hash(access.expose()),
                grant_id,
                kind: "access",
                expires_ts: now + life.access_ms,
            },
            NewOAuthToken {
                hash: hash(refresh.expose()),
                grant_id,
                kind: "refresh",
                expires_ts: now + life.refresh_ms,
            },
        ])
        .await?;
    Ok(TokenResponse {
        access_token: access.expose().to_owned(),
        token_type: "Bearer",
        expires_in: life.access_ms / 1000,
        refresh_token: refresh.expose().to_owned(),
        scope: SCOPE,
    })
}

/// What an `authorization_code` token request presents.
#[derive(Debug, Clone, Copy)]
pub struct CodeExchange<'a> {
    pub code: &'a str,
    pub redirect_uri: Option<&'a str>,
    pub verifier: Option<&'a str>,
    pub resource: Option<&'a str>,
}

/// The `authorization_code` grant: one use, unexpired, the same client and
/// redirect URI, the PKCE verifier, and the same resource when one is named.
/// A replayed code revokes the grant it created (RFC 6749 §4.1.2).
pub async fn exchange_code(
    store: &dyn Store,
    client: &ClientInfo,
    asked: CodeExchange<'_>,
    our_resource: &str,
    life: Lifetimes,
) -> std::result::Result<TokenResponse, OAuthError> {
    let CodeExchange {
        code,
        redirect_uri,
        verifier,
        resource,
    } = asked;
    let verifier = verifier
        .ok_or_else(|| OAuthError::invalid_request("code_verifier is required (PKCE S256)"))?;
    if let Some(r) = resource
        && !same_resource(r, our_resource)
    {
        return Err(OAuthError::new(
            400,
            "invalid_target",
            "resource must be this server's /mcp URL",
        ));
    }
    if !code.starts_with(AUTH_CODE_PREFIX) || code.len() > 200 {
        return Err(OAuthError::invalid_grant(
            "the authorization code is not valid",
        ));
    }
    let now = now_ms();
    let found = match store.oauth_take_auth_code(&hash(code), now).await? {
        CodeTake::Fresh(found) => found,
        CodeTake::Replayed { grant_id } => {
            store.oauth_revoke_grant(grant_id, now).await?;
            tracing::warn!(
                grant = grant_id,
                "an authorization code was used twice; its grant is revoked"
            );
            return Err(OAuthError::invalid_grant(
                "the authorization code was already used",
            ));
        }
        CodeTake::Unknown => {
            return Err(OAuthError::invalid_grant(
                "the authorization code is not valid",
            ));
        }
    };
    if found.expires_ts <= now {
        return Err(OAuthError::invalid_grant(
            "the authorization code has expired",
        ));
    }
    if found.client_id != client.client_id {
        return Err(OAuthError::invalid_grant(
            "the authorization code was issued to another client",
        ));
    }
    if redirect_uri.is_some_and(|r| r != found.redirect_uri)
        || (redirect_uri.is_none() && client.redirect_uris.len() > 1)
    {
        return Err(OAuthError::invalid_grant(
            "redirect_uri differs from the one of the authorization request",
        ));
    }
    if let (Some(asked), Some(r)) = (&found.resource, resource)
        && !same_resource(asked, r)
    {
        return Err(OAuthError::new(
            400,
            "invalid_target",
            "resource differs from the one of the authorization request",
        ));
    }
    if !pkce_matches(verifier, &found.code_challenge) {
        return Err(OAuthError::invalid_grant(
            "code_verifier does not match the code challenge",
        ));
    }
    Ok(issue(store, found.grant_id, life, now).await?)
}

/// The `refresh_token` grant. Every use spends the token and returns a new
/// pair; presenting a spent one revokes the whole grant (the token leaked,
/// or was replayed).
pub async fn refresh(
    store: &dyn Store,
    client: &ClientInfo,
    raw: &str,
    resource: Option<&str>,
    our_resource: &str,
    life: Lifetimes,
) -> std::result::Result<TokenResponse, OAuthError> {
    if let Some(r) = resource
        && !same_resource(r, our_resource)
    {
        return Err(OAuthError::new(
            400,
            "invalid_target",
            "resource must be this server's /mcp URL",
        ));
    }
    let invalid = || OAuthError::invalid_grant("the refresh token is not valid");
    if !raw.starts_with(REFRESH_PREFIX) || raw.len() > 200 {
        return Err(invalid());
    }
    let token_hash = hash(raw);
    let Some((token, grant)) = store.oauth_token(&token_hash).await? else {
        return Err(invalid());
    };
    if token.kind != "refresh" || grant.client_id != client.client_id {
        return Err(invalid());
    }
    if grant.revoked_ts.is_some() {
        return Err(OAuthError::invalid_grant(
            "this grant was revoked; sign in again",
        ));
    }
    let now = now_ms();
    if token.spent_ts.is_some() || !store.oauth_spend_token(&token_hash, now).await? {
        store.oauth_revoke_grant(grant.id, now).await?;
        tracing::warn!(grant = grant.id, agent = %grant.agent, "a spent refresh token was presented; the grant is revoked");
        return Err(OAuthError::invalid_grant(
            "the refresh token was already used; the grant is revoked, sign in again",
        ));
    }
    if token.expires_ts <= now {
        return Err(OAuthError::invalid_grant(
            "the refresh token has expired; sign in again",
        ));
    }
    Ok(issue(store, grant.id, life, now).await?)
}

/// Revokes the grant of an access or refresh token presented by `client`
/// (RFC 7009). Unknown tokens and tokens of other clients are ignored, as
/// the RFC asks; either way the answer is the same.
pub async fn revoke_token(store: &dyn Store, client: &ClientInfo, raw: &str) -> Result<()> {
    if raw.len() > 200 || !(raw.starts_with(ACCESS_PREFIX) || raw.starts_with(REFRESH_PREFIX)) {
        return Ok(());
    }
    if let Some((_, grant)) = store.oauth_token(&hash(raw)).await?
        && grant.client_id == client.client_id
    {
        store.oauth_revoke_grant(grant.id, now_ms()).await?;
    }
    Ok(())
}

/// The caller an OAuth access token stands for: unexpired, of a grant that
/// is not revoked. Called from token verification for `cra_` tokens.
pub async fn verify_access(store: &dyn Store, raw: &str) -> Result<Option<Caller>> {
    if raw.len() > 200 {
        return Ok(None);
    }
    let token_hash = TokenHash::of(raw);
    Ok(access_by_hash(store, &token_hash.hex())
        .await?
        .map(|g| g.caller(token_hash)))
}

/// The grant of the live access token whose hash is `token_hash` (open
/// streams re-check by hash).
pub async fn access_by_hash(store: &dyn Store, token_hash: &str) -> Result<Option<GrantRecord>> {
    let now = now_ms();
    Ok(store
        .oauth_token(token_hash)
        .await?
        .filter(|(t, g)| t.kind == "access" && t.expires_ts > now && g.revoked_ts.is_none())
        .map(|(_, g)| g))
}

/// Forgets expired OAuth state (unused registrations, spent codes, expired
/// tokens) after the retention sweep, passing the sweep's result on: the
/// background prune calls it so nothing depends on a registration coming.
pub async fn prune_then<T>(store: &dyn Store, sweep: Result<T>) -> Result<T> {
    if let Err(e) = store.oauth_prune(now_ms()).await {
        e.log_if_internal();
    }
    sweep
}

/// `members` of `room` with the agents of active OAuth grants named for it
/// added (an app signed in with a connect code is a member like a token's
/// agent; a grant for every room counts where its agent was seen, as the
/// store does for tokens, through `last_seen` filled in by the caller).
pub async fn with_app_members(
    store: &dyn Store,
    room: &str,
    mut members: Vec<crate::domain::model::Member>,
) -> Result<Vec<crate::domain::model::Member>> {
    let grants = store.oauth_list_grants().await?;
    let mut added = false;
    for g in grants.into_iter().filter(|g| g.revoked_ts.is_none()) {
        if !(g.room == room || g.also_rooms.iter().any(|r| r == room)) {
            continue;
        }
        match members.iter_mut().find(|m| m.agent == g.agent) {
            Some(m) => {
                m.lead |= g.lead;
                m.admin |= g.admin;
                m.readonly &= g.readonly;
            }
            None => {
                added = true;
                members.push(crate::domain::model::Member {
                    agent: g.agent,
                    lead: g.lead,
                    readonly: g.readonly,
                    admin: g.admin,
                    skills: g.skills,
                    last_seen: None,
                });
            }
        }
    }
    if added {
        members.sort_by(|a, b| a.agent.cmp(&b.agent));
    }
    Ok(members)
}

/// Whether two resource URLs name the same resource (a trailing slash aside).
pub fn same_resource(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_codes_are_typeable_and_forgiving() {
        let code = new_connect_code();
        let raw = code.expose();
        assert!(raw.starts_with("crc-"));
        assert_eq!(raw.len(), 4 + 14);
        assert_eq!(normalize_connect_code(raw).as_deref(), Some(raw));
        let shouted = raw.to_ascii_uppercase().replace('-', " ");
        assert_eq!(normalize_connect_code(&shouted).as_deref(), Some(raw));
        assert_eq!(
            normalize_connect_code("crc-ilo0-abcd-efgh").as_deref(),
            Some("crc-1100-abcd-efgh")
        );
        assert_eq!(normalize_connect_code("crc-abc"), None);
        assert_eq!(normalize_connect_code("crc-uuuu-uuuu-uuuu"), None);
        assert_ne!(new_connect_code(), new_connect_code());
    }

    #[test]
    fn pkce_s256_is_checked() {
        // RFC 7636 appendix B.
        let verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
        let challenge = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";
        assert!(valid_challenge(challenge));
        assert!(pkce_matches(verifier, challenge));
        assert!(!pkce_matches(challenge, challenge));
        assert!(!pkce_matches("short", challenge));
    }

    #[test]
    fn redirect_uris_must_be_https_or_loopback_http() {
        assert!(check_redirect_uri("https://claude.ai/api/mcp/auth_callback").is_ok());
        assert!(check_redirect_uri("http://127.0.0.1:33418/callback").is_ok());
        assert!(check_redirect_uri("http://localhost:1/cb").is_ok());
        assert!(check_redirect_uri("http://[::1]:8/cb").is_ok());
        assert!(check_redirect_uri("http://example.com/cb").is_err());
        assert!(check_redirect_uri("http://192.168.1.2/cb").is_err());
        assert!(check_redirect_uri("javascript:alert(1)").is_err());
        assert!(check_redirect_uri("https://a.example/cb#frag").is_err());
        assert!(check_redirect_uri("/relative").is_err());
        assert!(check_redirect_uri("https://user:pw@a.example/").is_err());
    }
}
