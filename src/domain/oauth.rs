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
//!    token ([`exchange_code`]); refresh tokens rotate on every use, the one
//!    just replaced gets the same answer for 30 s, and any other spent one
//!    revokes the grant ([`refresh`]). A grant's refresh token lives on the
//!    grant's own row, so storage does not grow with refreshes.
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

use crate::domain::model::Grant;
pub use crate::domain::model::{
    AuthCode, CodeTake, ConnectCodeInfo, GrantRecord, Lifetimes, NewAuthCode, NewConnectCode,
    NewOAuthToken, OAuthClient, OAuthTokenRecord, RefreshChain, Rotation,
};
use crate::domain::names;
use crate::domain::store::oauth::{ClientLimit, ConnectApproval};
use crate::domain::store::prelude::*;
use crate::domain::{Caller, Core};
use crate::error::{Error, Result};
use crate::secret::{Secret, TokenHash, hash};

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
/// The longest presented token or code that is looked up: anything longer
/// is none of ours, refused before it is hashed.
pub const MAX_CREDENTIAL_LEN: usize = 200;

/// Whether `raw` can be a credential of the kind `prefix` starts (its
/// prefix, at most [`MAX_CREDENTIAL_LEN`]), before any lookup.
pub fn shaped_like(raw: &str, prefix: &str) -> bool {
    raw.starts_with(prefix) && raw.len() <= MAX_CREDENTIAL_LEN
}

/// The one scope: everything the grant's flags allow.
pub const SCOPE: &str = "chatroom";
/// How long an authorization code may wait for its exchange.
pub const AUTH_CODE_TTL_MS: i64 = 10 * 60_000;
/// How long a registration that never completed an authorization is kept:
/// long enough to find the connect code and type it, short enough that a
/// flood of registrations drains by itself.
pub const UNUSED_CLIENT_TTL_MS: i64 = 3_600_000;
/// How many registered clients may exist at once. When the store is full,
/// the oldest unused registration makes room for a new one.
pub const MAX_CLIENTS: i64 = 5_000;
/// How long after its rotation a refresh token presented again gets the
/// same answer (a retry after a lost answer, two tabs at once) instead of
/// ending the grant.
pub const REFRESH_GRACE_MS: i64 = 30_000;
/// Connect-code lifetimes allowed (minutes).
pub const CONNECT_TTL_MINUTES: std::ops::RangeInclusive<i64> = 1..=7 * 24 * 60;
/// The letters of connect codes: Crockford's base32, lower case (no i, l, o,
/// u), so a code read aloud or typed on a phone is hard to get wrong.
const CODE_ALPHABET: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";
/// Letters in a connect code after its prefix: 12 × 5 = 60 random bits.
const CODE_LETTERS: usize = 12;

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

impl Core {
    /// Mints a connect code for `grant`, valid `ttl_minutes` and one approval.
    /// Checks the grant as minting a token does. Returns the raw code (shown
    /// once) and what it grants.
    pub async fn mint_connect_code(
        &self,
        grant: Grant,
        ttl_minutes: i64,
    ) -> Result<(Secret, ConnectCodeInfo)> {
        let store = self.store.as_ref();
        if !CONNECT_TTL_MINUTES.contains(&ttl_minutes) {
            return Err(Error::invalid(format!(
                "the connect code's lifetime must be from {} to {} minutes",
                CONNECT_TTL_MINUTES.start(),
                CONNECT_TTL_MINUTES.end()
            )));
        }
        let grant = self.checked_grant(grant).await?;
        let code = new_connect_code();
        let now = self.clock.now_ms();
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
                grant,
                expires_at: new.expires_ts,
            },
        ))
    }
}

// ---------------------------------------------------------------- clients

/// A client as the authorization endpoints see it: registered here, or
/// described by its client ID metadata document.
#[derive(Debug, Clone)]
pub struct ClientInfo {
    pub client_id: String,
    pub client_name: String,
    pub redirect_uris: Vec<String>,
    pub source: ClientSource,
    /// Whether the owner approved a sign-in of it before (with a connect
    /// code): only then are errors sent back to its redirect URI without
    /// anyone's action (RFC 9700 §4.11.2); anyone can register a client.
    pub approved_before: bool,
}

/// Where a client is known from; only a client registered here can have a
/// secret (a metadata document names none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientSource {
    /// Registered here (RFC 7591); the hash of its secret, if it has one.
    Registered { secret_hash: Option<String> },
    /// Described by its client ID metadata document, fetched from its URL.
    Metadata,
}

impl ClientInfo {
    /// Whether it was registered here (else a metadata document).
    pub fn registered(&self) -> bool {
        matches!(self.source, ClientSource::Registered { .. })
    }

    /// The hash of its secret; only a registered client can have one.
    pub fn secret_hash(&self) -> Option<&str> {
        match &self.source {
            ClientSource::Registered { secret_hash } => secret_hash.as_deref(),
            ClientSource::Metadata => None,
        }
    }
}

impl From<OAuthClient> for ClientInfo {
    fn from(c: OAuthClient) -> ClientInfo {
        ClientInfo {
            client_id: c.client_id,
            client_name: c.client_name,
            redirect_uris: c.redirect_uris,
            source: ClientSource::Registered {
                secret_hash: c.secret_hash,
            },
            approved_before: c.used_ts.is_some(),
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

/// Schemes never accepted as a redirect URI: they run code, read local
/// files or stay inside the browser (`http` is allowed on loopback only).
const REFUSED_SCHEMES: &[&str] = &[
    "javascript",
    "data",
    "file",
    "vbscript",
    "about",
    "blob",
    "filesystem",
    "view-source",
    "ws",
    "wss",
    "ftp",
];

/// What kind of address a redirect URI is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedirectKind {
    /// `https` anywhere.
    Https,
    /// `http` on `localhost`, `127.0.0.1` or `[::1]` (RFC 8252 §7.3).
    Loopback,
    /// A native app's own scheme (`cursor://…`, `com.example.app:/cb`,
    /// RFC 8252 §7.1), opened by the app that claims it on the device.
    PrivateUse,
}

/// Checks one redirect URI: absolute, no fragment or credentials, and
/// `https`, `http` on a loopback host, or a native app's private-use scheme;
/// never `javascript:`, `data:`, `file:` and the like, nor `http` elsewhere.
pub fn check_redirect_uri(uri: &str) -> std::result::Result<RedirectKind, String> {
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
    let scheme = url.scheme();
    if REFUSED_SCHEMES.contains(&scheme) {
        return Err(format!("a redirect URI may not use the {scheme}: scheme"));
    }
    match (scheme, url.host()) {
        ("https", Some(_)) => Ok(RedirectKind::Https),
        ("http", Some(host)) if is_loopback_host(&host) => Ok(RedirectKind::Loopback),
        ("https" | "http", _) => Err(
            "a redirect URI must use https, http on a loopback host (localhost, 127.0.0.1, [::1]), \
             or a native app's own scheme"
                .into(),
        ),
        _ => Ok(RedirectKind::PrivateUse),
    }
}

/// Whether the redirect URI an app asked for matches one it registered:
/// the same string, or, for loopback `http`, the same but for the port
/// (RFC 8252 §7.3: a native app listens on whatever port it could open).
pub fn redirect_matches(registered: &str, asked: &str) -> bool {
    if registered == asked {
        return true;
    }
    let (Ok(r), Ok(a)) = (url::Url::parse(registered), url::Url::parse(asked)) else {
        return false;
    };
    let loopback =
        |u: &url::Url| u.scheme() == "http" && u.host().is_some_and(|h| is_loopback_host(&h));
    loopback(&r)
        && loopback(&a)
        && r.host_str() == a.host_str()
        && r.path() == a.path()
        && r.query() == a.query()
}

/// Where a redirect URI sends the person, as the consent page says it: the
/// host (and port) of a web or loopback address, or the scheme of a native
/// app's (`cursor:`).
pub fn return_address(uri: &str) -> String {
    let Ok(u) = url::Url::parse(uri) else {
        return String::new();
    };
    match (u.scheme(), u.host_str()) {
        ("http" | "https", Some(h)) => match u.port() {
            Some(p) => format!("{h}:{p}"),
            None => h.to_owned(),
        },
        (scheme, _) => format!("{scheme}:"),
    }
}

impl Core {
    /// Registers a client (RFC 7591). Bad metadata gets `invalid_redirect_uri`
    /// or `invalid_client_metadata`; a store full of clients that all signed
    /// in `temporarily_unavailable`. A client with a private-use redirect URI
    /// is a native app and so a public client (RFC 8252 §8.4): it is
    /// registered without a secret, PKCE being what protects its codes.
    pub async fn register(
        &self,
        req: RegistrationRequest,
    ) -> std::result::Result<Registered, OAuthError> {
        let store = self.store.as_ref();
        let now = self.clock.now_ms();
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
        let mut native = false;
        for uri in uris {
            let uri = uri
                .as_str()
                .ok_or_else(|| bad_uri("every redirect URI must be a string".into()))?;
            native |= check_redirect_uri(uri).map_err(bad_uri)? == RedirectKind::PrivateUse;
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
        let asked_method = match req.token_endpoint_auth_method {
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
        // RFC 7591 §3.2.1: the server may replace a requested value.
        let auth_method = if native {
            "none".to_owned()
        } else {
            asked_method
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
        if !store
            .oauth_insert_client(
                &client,
                ClientLimit {
                    max: MAX_CLIENTS,
                    unused_before: now - UNUSED_CLIENT_TTL_MS,
                },
            )
            .await?
        {
            return Err(OAuthError::new(
                503,
                "temporarily_unavailable",
                "the server holds as many signed-in apps as it can; the owner can revoke unused ones",
            ));
        }
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
}

/// Authenticates a client at the token or revocation endpoint: a client
/// with a secret must present it (compared by hash in constant time).
pub fn authenticate_client(
    client: &ClientInfo,
    secret: Option<&str>,
) -> std::result::Result<(), OAuthError> {
    match (client.secret_hash(), secret) {
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

/// What an approval binds the authorization code to.
#[derive(Debug, Clone, Copy)]
pub struct Approval<'a> {
    pub redirect_uri: &'a str,
    /// Whether the request named `redirect_uri` (else it is the one the
    /// client registered).
    pub redirect_uri_given: bool,
    pub code_challenge: &'a str,
    pub resource: Option<&'a str>,
}

impl Core {
    /// Approves an authorization with a connect code: spends the code, creates
    /// the grant and an authorization code in one transaction. `Ok(None)` for a
    /// code that is wrong, used or expired (the caller counts the failure).
    pub async fn approve(
        &self,
        client: &ClientInfo,
        typed_code: &str,
        asked: Approval<'_>,
    ) -> Result<Option<Secret>> {
        let store = self.store.as_ref();
        let now = self.clock.now_ms();
        let Some(code) = normalize_connect_code(typed_code) else {
            return Ok(None);
        };
        let auth_code = mint_secret(AUTH_CODE_PREFIX);
        let new = NewAuthCode {
            hash: hash(auth_code.expose()),
            client_id: client.client_id.clone(),
            redirect_uri: asked.redirect_uri.to_owned(),
            redirect_uri_given: asked.redirect_uri_given,
            code_challenge: asked.code_challenge.to_owned(),
            resource: asked.resource.map(str::to_owned),
            expires_ts: now + AUTH_CODE_TTL_MS,
        };
        let grant = store
            .oauth_approve(ConnectApproval {
                connect_hash: &hash(&code),
                client_id: &client.client_id,
                client_name: &client.client_name,
                code: &new,
                now,
            })
            .await?;
        Ok(grant.map(|_| auth_code))
    }
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

impl Core {
    /// The server's key that tags refresh tokens and derives their successors
    /// (stored in the database, so every replica has it).
    pub async fn refresh_key(&self) -> Result<Vec<u8>> {
        let store = self.store.as_ref();
        let hex_key = store.oauth_key("refresh_tag", &fresh_key()).await?;
        hex::decode(hex_key).map_err(Error::internal)
    }
}

/// Bytes of a refresh token after its prefix: the grant id, a nonce, a tag.
const REFRESH_BODY: usize = 8 + 32 + 16;

fn mac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut m =
        <hmac::Hmac<Sha256> as hmac::KeyInit>::new_from_slice(key).expect("HMAC takes any key");
    for p in parts {
        hmac::Mac::update(&mut m, &(p.len() as u64).to_be_bytes());
        hmac::Mac::update(&mut m, p);
    }
    hmac::Mac::finalize(m).into_bytes().into()
}

/// A refresh token of grant `grant_id`: `crr_` and, in URL-safe base64, the
/// grant id, a nonce and a tag only this server can make. The tag lets a
/// spent token be recognised as one of the grant's, however old, without a
/// row kept for it.
fn refresh_token(key: &[u8], grant_id: i64, nonce: &[u8; 32]) -> Secret {
    let id = grant_id.to_be_bytes();
    let tag = mac(key, &[b"refresh", &id, nonce]);
    let mut body = Vec::with_capacity(REFRESH_BODY);
    body.extend_from_slice(&id);
    body.extend_from_slice(nonce);
    body.extend_from_slice(&tag[..16]);
    Secret::new(format!(
        "{REFRESH_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(body)
    ))
}

/// The grant a refresh token was made for, if its tag is this server's.
/// (Tokens issued before tags existed have none: `None`.)
fn tagged_grant(key: &[u8], raw: &str) -> Option<i64> {
    let body = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(raw.strip_prefix(REFRESH_PREFIX)?)
        .ok()?;
    if body.len() != REFRESH_BODY {
        return None;
    }
    let id: [u8; 8] = body[..8].try_into().ok()?;
    let tag = mac(key, &[b"refresh", &id, &body[8..40]]);
    bool::from(tag[..16].ct_eq(&body[40..])).then(|| i64::from_be_bytes(id))
}

/// The token that replaces `raw` in grant `grant_id`'s chain. Derived from
/// `raw` under the server's key, so a retry with the same token gets the
/// same successor without the successor ever being stored.
fn successor(key: &[u8], grant_id: i64, raw: &str) -> Secret {
    refresh_token(key, grant_id, &mac(key, &[b"successor", raw.as_bytes()]))
}

/// A fresh access token of `grant_id` and its answer with `refresh`.
fn access_for(
    grant_id: i64,
    refresh: &Secret,
    life: Lifetimes,
    now: i64,
) -> (NewOAuthToken, TokenResponse) {
    let access = mint_secret(ACCESS_PREFIX);
    let row = NewOAuthToken {
        hash: hash(access.expose()),
        grant_id,
        kind: "access",
        expires_ts: now + life.access_ms,
    };
    let answer = TokenResponse {
        access_token: access.expose().to_owned(),
        token_type: "Bearer",
        expires_in: life.access_ms / 1000,
        refresh_token: refresh.expose().to_owned(),
        scope: SCOPE,
    };
    (row, answer)
}

/// Makes `refresh` the live refresh token of `grant_id` in place of
/// `old_hash` (`None`: the grant has none yet), issued with a fresh access
/// token: whether this rotation won ([`Rotation`]), and the answer to send.
async fn rotate_to(
    store: &dyn Store,
    at: TokenEndpoint<'_>,
    grant_id: i64,
    old_hash: Option<String>,
    refresh: &Secret,
    now: i64,
) -> Result<(bool, TokenResponse)> {
    let (access, answer) = access_for(grant_id, refresh, at.life, now);
    let rotation = Rotation {
        grant_id,
        old_hash,
        new_hash: hash(refresh.expose()),
        expires_ts: now + at.life.refresh_ms,
        access,
        now,
    };
    Ok((store.oauth_rotate_refresh(&rotation).await?, answer))
}

/// What every token-endpoint decision needs besides the request: the
/// store, the server's refresh key, the resources this server answers to,
/// the lifetimes and the time.
#[derive(Clone, Copy)]
pub struct TokenEndpoint<'a> {
    pub key: &'a [u8],
    pub resources: &'a [String],
    pub life: Lifetimes,
}

/// What an `authorization_code` token request presents.
#[derive(Debug, Clone, Copy)]
pub struct CodeExchange<'a> {
    pub code: &'a str,
    pub redirect_uri: Option<&'a str>,
    pub verifier: Option<&'a str>,
    pub resource: Option<&'a str>,
}

impl Core {
    /// The `authorization_code` grant: one use, unexpired, the same client and
    /// redirect URI (required again when the authorization request named one,
    /// RFC 6749 §4.1.3), the PKCE verifier, and the same resource when one is
    /// named. A replayed code revokes the grant it created (RFC 6749 §4.1.2).
    pub async fn exchange_code(
        &self,
        at: TokenEndpoint<'_>,
        client: &ClientInfo,
        asked: CodeExchange<'_>,
    ) -> std::result::Result<TokenResponse, OAuthError> {
        let store = self.store.as_ref();
        let now = self.clock.now_ms();
        let CodeExchange {
            code,
            redirect_uri,
            verifier,
            resource,
        } = asked;
        let verifier = verifier
            .ok_or_else(|| OAuthError::invalid_request("code_verifier is required (PKCE S256)"))?;
        check_resource(resource, at.resources)?;
        if !shaped_like(code, AUTH_CODE_PREFIX) {
            return Err(OAuthError::invalid_grant(
                "the authorization code is not valid",
            ));
        }
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
        match redirect_uri {
            Some(r) if !redirect_matches(&found.redirect_uri, r) => {
                return Err(OAuthError::invalid_grant(
                    "redirect_uri differs from the one of the authorization request",
                ));
            }
            None if found.redirect_uri_given => {
                return Err(OAuthError::invalid_request(
                    "redirect_uri is required: the authorization request named one (RFC 6749 §4.1.3)",
                ));
            }
            _ => {}
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
        let refresh = refresh_token(at.key, found.grant_id, &random_bytes::<32>());
        let (started, answer) = rotate_to(store, at, found.grant_id, None, &refresh, now).await?;
        if !started {
            return Err(OAuthError::invalid_grant(
                "this grant was revoked; sign in again",
            ));
        }
        Ok(answer)
    }
}

/// `resource` (RFC 8707), when given, must name this server.
fn check_resource(resource: Option<&str>, ours: &[String]) -> std::result::Result<(), OAuthError> {
    match resource {
        Some(r) if !ours.iter().any(|o| same_resource(r, o)) => Err(OAuthError::new(
            400,
            "invalid_target",
            "resource must be this server's /mcp URL",
        )),
        _ => Ok(()),
    }
}

/// The grant id a refresh token names, for per-grant limits before any
/// lookup (a token without a tag: none).
pub fn refresh_grant_hint(raw: &str) -> Option<i64> {
    let body = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(raw.strip_prefix(REFRESH_PREFIX)?)
        .ok()?;
    (body.len() == REFRESH_BODY)
        .then(|| i64::from_be_bytes(body[..8].try_into().unwrap_or_default()))
}

impl Core {
    /// The `refresh_token` grant. Every use rotates: the grant's live refresh
    /// token is replaced by its successor and a fresh access token comes with
    /// it. The token just replaced, presented again within
    /// [`REFRESH_GRACE_MS`], gets the same successor and another access token
    /// (the first answer was lost, or two tabs refreshed at once). Any other
    /// token of the grant — older than that, or two rotations old — is a
    /// stolen or replayed one: the whole grant ends.
    ///
    /// Correct across replicas: the rotation is a compare-and-set in the
    /// database, and the successor is derived from the token, so every one of
    /// several simultaneous requests with one token gets the same successor.
    pub async fn refresh(
        &self,
        at: TokenEndpoint<'_>,
        client: &ClientInfo,
        raw: &str,
        resource: Option<&str>,
    ) -> std::result::Result<TokenResponse, OAuthError> {
        let store = self.store.as_ref();
        let now = self.clock.now_ms();
        check_resource(resource, at.resources)?;
        let invalid = || OAuthError::invalid_grant("the refresh token is not valid");
        if !shaped_like(raw, REFRESH_PREFIX) {
            return Err(invalid());
        }
        let token_hash = hash(raw);
        let Some(grant) = store.oauth_grant_by_refresh(&token_hash).await? else {
            // Not the live token of any grant nor the one it replaced: a spent
            // token of a grant if its tag is ours, else nothing of ours.
            return match tagged_grant(at.key, raw) {
                Some(grant_id) => Err(reuse(store, Some(grant_id), None, now).await?),
                None => Err(invalid()),
            };
        };
        if grant.client_id != client.client_id {
            return Err(invalid());
        }
        if grant.revoked_ts.is_some() {
            return Err(OAuthError::invalid_grant(
                "this grant was revoked; sign in again",
            ));
        }
        let next = successor(at.key, grant.id, raw);
        let next_hash = hash(next.expose());
        let mut grant = Some(grant);
        if let Some(g) = grant
            .as_ref()
            .filter(|g| g.refresh.hash.as_deref() == Some(token_hash.as_str()))
        {
            let grant_id = g.id;
            if g.refresh.expires_ts.is_some_and(|e| e <= now) {
                return Err(OAuthError::invalid_grant(
                    "the refresh token has expired; sign in again",
                ));
            }
            let old = Some(token_hash.clone());
            let (rotated, answer) = rotate_to(store, at, grant_id, old, &next, now).await?;
            if rotated {
                return Ok(answer);
            }
            // Replaced meanwhile, by this very request's twin: read the grant
            // as it is now.
            grant = store
                .oauth_grant_by_refresh(&token_hash)
                .await?
                .filter(|g| g.revoked_ts.is_none());
        }
        let Some(grant) = grant else {
            return Err(reuse(store, tagged_grant(at.key, raw), None, now).await?);
        };
        let fresh_retry = grant.refresh.prev_hash.as_deref() == Some(token_hash.as_str())
            && grant.refresh.hash.as_deref() == Some(next_hash.as_str())
            && grant
                .refresh
                .rotated_ts
                .is_some_and(|t| now - t <= REFRESH_GRACE_MS);
        if !fresh_retry {
            return Err(reuse(store, Some(grant.id), Some(&grant.grant.agent), now).await?);
        }
        let (access, answer) = access_for(grant.id, &next, at.life, now);
        store.oauth_insert_tokens(&[access]).await?;
        tracing::info!(grant = grant.id, agent = %grant.grant.agent, "a refresh token was presented again within the grace period; the same successor was sent");
        Ok(answer)
    }
}

/// A spent refresh token came back: the grant `grant_id` ends (when known).
/// Returns the refusal to send.
async fn reuse(
    store: &dyn Store,
    grant_id: Option<i64>,
    agent: Option<&str>,
    now: i64,
) -> Result<OAuthError> {
    let Some(grant_id) = grant_id else {
        return Ok(OAuthError::invalid_grant("the refresh token is not valid"));
    };
    if store.oauth_revoke_grant(grant_id, now).await? {
        tracing::warn!(
            grant = grant_id,
            agent = agent.unwrap_or(""),
            "a spent refresh token was presented; the grant is revoked"
        );
    }
    Ok(OAuthError::invalid_grant(
        "the refresh token was already used; the grant is revoked, sign in again",
    ))
}

impl Core {
    /// Revokes the grant of an access or refresh token presented by `client`
    /// (RFC 7009). Unknown tokens and tokens of other clients are ignored, as
    /// the RFC asks; either way the answer is the same.
    pub async fn revoke_oauth_token(
        &self,
        key: &[u8],
        client: &ClientInfo,
        raw: &str,
    ) -> Result<()> {
        let store = self.store.as_ref();
        let now = self.clock.now_ms();
        if raw.len() > MAX_CREDENTIAL_LEN {
            return Ok(());
        }
        let grant = if raw.starts_with(ACCESS_PREFIX) {
            store.oauth_token(&hash(raw)).await?.map(|(_, g)| g)
        } else if raw.starts_with(REFRESH_PREFIX) {
            match store.oauth_grant_by_refresh(&hash(raw)).await? {
                Some(g) => Some(g),
                None => match tagged_grant(key, raw) {
                    Some(id) => store.oauth_grant(id).await?,
                    None => None,
                },
            }
        } else {
            None
        };
        if let Some(grant) = grant
            && grant.client_id == client.client_id
        {
            store.oauth_revoke_grant(grant.id, now).await?;
        }
        Ok(())
    }
}

/// The caller an OAuth access token stands for: unexpired, of a grant that
/// is not revoked. Called from token verification for `cra_` tokens.
impl Core {
    pub async fn verify_access(&self, raw: &str) -> Result<Option<Caller>> {
        if raw.len() > MAX_CREDENTIAL_LEN {
            return Ok(None);
        }
        let token_hash = TokenHash::of(raw);
        Ok(self
            .access_by_hash(&token_hash.hex())
            .await?
            .map(|g| g.caller(token_hash)))
    }

    /// The grant of the live access token whose hash is `token_hash` (open
    /// streams re-check by hash).
    pub async fn access_by_hash(&self, token_hash: &str) -> Result<Option<GrantRecord>> {
        let now = self.clock.now_ms();
        Ok(self
            .store
            .oauth_token(token_hash)
            .await?
            .filter(|(t, g)| t.kind == "access" && t.expires_ts > now && g.revoked_ts.is_none())
            .map(|(_, g)| g))
    }
}

impl Core {
    /// Forgets expired OAuth state (unused registrations, spent codes, expired
    /// tokens) after the retention sweep, passing the sweep's result on: the
    /// background prune calls it so nothing depends on a registration coming.
    pub async fn prune_oauth_then<T>(&self, sweep: Result<T>) -> Result<T> {
        let store = self.store.as_ref();
        let now = self.clock.now_ms();
        if let Err(e) = store.oauth_prune(now).await {
            e.log_if_internal();
        }
        sweep
    }
}

/// Whether two resource URLs name the same resource (a trailing slash aside).
pub fn same_resource(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::testing::accepts_only;

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
    fn loopback_redirects_match_on_any_port() {
        let r = "http://localhost/callback";
        assert!(redirect_matches(r, "http://localhost:51763/callback"));
        assert!(redirect_matches(
            "http://127.0.0.1:1/cb?x=1",
            "http://127.0.0.1:2/cb?x=1"
        ));
        assert!(redirect_matches("http://[::1]/cb", "http://[::1]:9/cb"));
        assert!(!redirect_matches(r, "http://localhost:5/other"));
        assert!(!redirect_matches(r, "http://127.0.0.1:5/callback"));
        assert!(!redirect_matches(
            "http://127.0.0.1/cb?x=1",
            "http://127.0.0.1:2/cb?x=2"
        ));
        assert!(!redirect_matches(
            "https://a.example/cb",
            "https://a.example:444/cb"
        ));
        assert!(!redirect_matches(
            "https://localhost/cb",
            "https://localhost:8/cb"
        ));
    }

    #[test]
    fn refresh_tokens_carry_their_grant_and_a_tag() {
        let key = b"k".repeat(32);
        let t = refresh_token(&key, 42, &[7; 32]);
        assert_eq!(tagged_grant(&key, t.expose()), Some(42));
        assert_eq!(refresh_grant_hint(t.expose()), Some(42));
        assert_eq!(tagged_grant(b"other key", t.expose()), None);
        let mut forged = t.expose().to_owned();
        forged.pop();
        forged.push('A');
        assert_eq!(tagged_grant(&key, &forged), None);
        let s1 = successor(&key, 42, t.expose());
        assert_eq!(s1, successor(&key, 42, t.expose()), "the same successor");
        assert_ne!(s1, t);
        assert_eq!(tagged_grant(&key, s1.expose()), Some(42));
    }

    #[test]
    fn redirect_uris_must_be_https_or_loopback_http() {
        accepts_only(
            check_redirect_uri,
            &[
                "https://claude.ai/api/mcp/auth_callback",
                "http://127.0.0.1:33418/callback",
                "http://localhost:1/cb",
                "http://[::1]:8/cb",
            ],
            &[
                "http://example.com/cb",
                "http://192.168.1.2/cb",
                "javascript:alert(1)",
                "data:text/html,x",
                "file:///etc/passwd",
                "vbscript:x",
                "about:blank",
                "blob:https://a.example/x",
                "http://[::2]/cb",
                "https://a.example/cb#frag",
                "/relative",
                "https://user:pw@a.example/",
            ],
        );
        assert_eq!(
            check_redirect_uri("cursor://anysphere.cursor-retrieval/oauth/callback"),
            Ok(RedirectKind::PrivateUse)
        );
        assert_eq!(
            check_redirect_uri("com.example.app:/cb"),
            Ok(RedirectKind::PrivateUse)
        );
        assert_eq!(
            return_address("vscode://vscode.github-authentication/did-authenticate"),
            "vscode:"
        );
        assert_eq!(return_address("http://127.0.0.1:5/cb"), "127.0.0.1:5");
    }
}
