//! The OAuth 2.1 endpoints (SPEC §2a): discovery metadata (RFC 9728, RFC
//! 8414), dynamic client registration (RFC 7591), the consent page that
//! takes a connect code, the token endpoint (authorization code with PKCE,
//! rotating refresh tokens) and revocation (RFC 7009); and the
//! `WWW-Authenticate` hint on every `401` of `/mcp` and `/v1` that sends an
//! app to the metadata.
//!
//! They serve the public side too: the console's LAN-only rule does not hide
//! them, because the connect code, not the network, is the gate. With
//! `CHATROOM_OAUTH=off` none of this exists. Handlers parse, call
//! `domain::oauth`, and answer; every refusal is the RFC's error JSON or the
//! error page, never a `500`, and no code or token is ever logged.
//!
//! Anonymous callers are bounded here: registrations, token requests and
//! wrong connect codes per address (IPv6 by /64, in [`limits`]), refreshes
//! per grant, and client-metadata fetches (in `cimd`). `/oauth/register`,
//! `/oauth/token` and `/oauth/revoke` answer CORS preflights for
//! browser-run clients.

mod cimd;
mod limits;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use askama::Template;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::json;
use sha2::Sha256;

use crate::auth::throttle::Windows;
use crate::config::Config;
use crate::domain::oauth::{
    self, ClientInfo, Lifetimes, OAuthError, RedirectKind, RegistrationRequest, SCOPE,
    redirect_matches, same_resource,
};
use crate::state::AppState;
use limits::network_of;

use crate::assets::SIGNIN_CSS as CONSENT_CSS;
/// The policy of the consent and error pages: our own stylesheet, nothing
/// else; never framed (clickjacking a consent button is the classic attack).
const PAGE_CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self' data:; base-uri 'none'; \
frame-ancestors 'none'";
/// Registrations one address (IPv6: one /64) may make per hour.
pub const REGISTRATIONS_PER_HOUR: u32 = 30;
/// Token-endpoint requests one address (IPv6: one /64) may make per minute.
pub const TOKEN_REQUESTS_PER_MINUTE: u32 = 60;
/// Refreshes one grant may make per minute: an app refreshes about once an
/// access token's life; a retry or two tabs add a few.
pub const REFRESHES_PER_MINUTE: u32 = 12;
/// How long a consent form stays valid.
const CSRF_TTL_MS: i64 = 60 * 60_000;
/// The longest parameter value read.
const MAX_PARAM: usize = 4_000;

/// What the OAuth routes keep besides the database.
struct OAuth {
    /// Registrations per address.
    registrations: Windows<IpAddr>,
    /// Wrong connect codes per address: a throttle of its own, so bad bearer
    /// tokens from a shared address never lock the owner's code out.
    connect_failures: Windows<IpAddr>,
    /// Token-endpoint requests per address, and refreshes per grant.
    token_addresses: Windows<IpAddr>,
    refreshes: Windows<i64>,
    cimd: cimd::Fetcher,
    /// The consent forms' HMAC key, from the database (shared by replicas).
    csrf_key: tokio::sync::OnceCell<Vec<u8>>,
    /// The key that tags refresh tokens (see `Core::refresh` in `domain::oauth`).
    refresh_key: tokio::sync::OnceCell<Vec<u8>>,
}

/// The OAuth routes; none while `CHATROOM_OAUTH` is off.
pub fn routes(state: AppState) -> Router<AppState> {
    if !state.config.oauth {
        return Router::new();
    }
    let oauth = Arc::new(OAuth {
        registrations: Windows::new(REGISTRATIONS_PER_HOUR, Duration::from_secs(3600)),
        connect_failures: Windows::new(state.config.auth_fail_limit, state.config.auth_fail_window),
        token_addresses: Windows::new(TOKEN_REQUESTS_PER_MINUTE, Duration::from_secs(60)),
        refreshes: Windows::new(REFRESHES_PER_MINUTE, Duration::from_secs(60)),
        cimd: cimd::Fetcher::new(state.config.oauth_cimd),
        csrf_key: tokio::sync::OnceCell::new(),
        refresh_key: tokio::sync::OnceCell::new(),
    });
    // Browser-run clients (the MCP Inspector, web hosts) call these from
    // their own origin; no cookie is involved, so any origin may.
    let cors = tower_http::cors::CorsLayer::new()
        .allow_origin(tower_http::cors::Any)
        .allow_methods([axum::http::Method::POST])
        .allow_headers([header::CONTENT_TYPE, header::AUTHORIZATION, header::ACCEPT])
        .max_age(Duration::from_secs(600));
    Router::new()
        .route(
            "/.well-known/oauth-protected-resource",
            get(root_resource_metadata),
        )
        .route(
            "/.well-known/oauth-protected-resource/mcp",
            get(resource_metadata),
        )
        .route(
            "/.well-known/oauth-authorization-server",
            get(server_metadata),
        )
        .route("/oauth/register", post(register).layer(cors.clone()))
        .route(
            "/oauth/authorize",
            get(authorize_page).post(authorize_submit),
        )
        .route("/oauth/token", post(token).layer(cors.clone()))
        .route("/oauth/revoke", post(revoke).layer(cors))
        .route("/oauth/consent.css", get(consent_css))
        // Public by design (no bearer to check first): bodies get the small
        // limit, the deadline and the shared budget.
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::auth::body::body_guard,
        ))
        .layer(Extension(oauth))
}

// ---------------------------------------------------------------- URLs

/// This server's base URL as an app should see it: `CHATROOM_PUBLIC_URL`
/// for requests through the public side; else a configured URL
/// (`CHATROOM_PUBLIC_URL`, `CHATROOM_LAN_URL`) whose host is the request's
/// `Host`; else the `Host` itself, `https` unless it is loopback.
pub fn base_url(config: &Config, host: Option<&str>, public_side: bool) -> String {
    let trim = |u: &str| u.trim_end_matches('/').to_owned();
    if public_side && let Some(url) = &config.public_url {
        return trim(url);
    }
    let host = host
        .map(str::trim)
        .filter(|h| !h.is_empty() && h.len() <= 255)
        .filter(|h| {
            h.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".-:[]_".contains(&b))
        });
    if let Some(h) = host {
        for url in [&config.public_url, &config.lan_url].into_iter().flatten() {
            if url::Url::parse(url).is_ok_and(|u| {
                let authority = match (u.host_str(), u.port()) {
                    (Some(name), Some(port)) => format!("{name}:{port}"),
                    (Some(name), None) => name.to_owned(),
                    _ => String::new(),
                };
                authority.eq_ignore_ascii_case(h)
            }) {
                return trim(url);
            }
        }
    }
    let h = host
        .map(str::to_owned)
        .unwrap_or_else(|| config.listen.to_string());
    let loopback = url::Url::parse(&format!("http://{h}"))
        .ok()
        .and_then(|u| u.host().map(|host| oauth::is_loopback_host(&host)))
        .unwrap_or(false);
    format!("{}://{h}", if loopback { "http" } else { "https" })
}

fn request_base(state: &AppState, headers: &HeaderMap) -> String {
    base_url(
        &state.config,
        headers.get(header::HOST).and_then(|h| h.to_str().ok()),
        super::from_public_side(&state.config, headers),
    )
}

/// Adds the OAuth hint to every `401` of `/mcp` and `/v1`:
/// `WWW-Authenticate: Bearer resource_metadata="…"`, with
/// `error="invalid_token"` when a token was sent (RFC 9728 §5.1, RFC 6750).
pub async fn hint_unauthorized(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    let path = req.uri().path();
    let guarded =
        path == "/mcp" || path.starts_with("/mcp/") || path == "/v1" || path.starts_with("/v1/");
    if !state.config.oauth || !guarded {
        return next.run(req).await;
    }
    let sent = req.headers().contains_key(header::AUTHORIZATION);
    let host = req.headers().get(header::HOST).cloned();
    let public = super::from_public_side(&state.config, req.headers());
    let mut response = next.run(req).await;
    if response.status() == StatusCode::UNAUTHORIZED {
        let base = base_url(
            &state.config,
            host.as_ref().and_then(|h| h.to_str().ok()),
            public,
        );
        let mut value = format!(
            "Bearer resource_metadata=\"{base}/.well-known/oauth-protected-resource/mcp\", scope=\"{SCOPE}\""
        );
        if sent {
            value.push_str(", error=\"invalid_token\"");
        }
        if let Ok(v) = HeaderValue::from_str(&value) {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, v);
        }
    }
    response
}

// ---------------------------------------------------------------- metadata

/// The resources this server's tokens are for, as `resource` may name them:
/// the `/mcp` URL, and the server itself (the root metadata's resource).
fn our_resources(base: &str) -> [String; 2] {
    [format!("{base}/mcp"), base.to_owned()]
}

/// `/.well-known/oauth-protected-resource/mcp`: the metadata of `/mcp`.
async fn resource_metadata(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let base = request_base(&state, &headers);
    protected_resource(&base, format!("{base}/mcp"))
}

/// `/.well-known/oauth-protected-resource`: the metadata of the resource
/// at the server's root, whose identifier is then the root URL itself
/// (RFC 9728 §3.3: `resource` is the URL the metadata URL was made from).
async fn root_resource_metadata(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let base = request_base(&state, &headers);
    protected_resource(&base, base.clone())
}

fn protected_resource(base: &str, resource: String) -> Response {
    metadata(json!({
        "resource": resource,
        "authorization_servers": [base],
        "scopes_supported": [SCOPE],
        "bearer_methods_supported": ["header"],
        "resource_name": "chatroom",
    }))
}

async fn server_metadata(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let base = request_base(&state, &headers);
    metadata(json!({
        "issuer": base,
        "authorization_endpoint": format!("{base}/oauth/authorize"),
        "token_endpoint": format!("{base}/oauth/token"),
        "registration_endpoint": format!("{base}/oauth/register"),
        "revocation_endpoint": format!("{base}/oauth/revoke"),
        "scopes_supported": [SCOPE],
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["none", "client_secret_post", "client_secret_basic"],
        "revocation_endpoint_auth_methods_supported": ["none", "client_secret_post", "client_secret_basic"],
        "client_id_metadata_document_supported": state.config.oauth_cimd,
        "authorization_response_iss_parameter_supported": true,
    }))
}

fn metadata(body: serde_json::Value) -> Response {
    (
        [
            (header::CACHE_CONTROL, "max-age=300"),
            (header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"),
        ],
        Json(body),
    )
        .into_response()
}

async fn consent_css() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        CONSENT_CSS,
    )
        .into_response()
}

// ---------------------------------------------------------------- errors

/// An OAuth error as JSON, never cached.
fn oauth_error(e: OAuthError) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::BAD_REQUEST);
    let mut response = (
        status,
        no_store(),
        Json(json!({"error": e.error, "error_description": e.description})),
    )
        .into_response();
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"chatroom\""),
        );
    }
    response
}

fn no_store() -> [(header::HeaderName, &'static str); 2] {
    [
        (header::CACHE_CONTROL, "no-store"),
        (header::PRAGMA, "no-cache"),
    ]
}

/// The consent and error pages' headers.
fn page(status: StatusCode, html: Result<String, askama::Error>) -> Response {
    let Ok(html) = html else {
        tracing::error!("the sign-in page failed to render");
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "the page could not be shown",
        )
            .into_response();
    };
    super::shared::page_response(status, PAGE_CSP, "no-store", html)
}

#[derive(Template)]
#[template(path = "oauth/error.html")]
struct ErrorPage<'a> {
    message: &'a str,
}

fn error_page(status: StatusCode, message: &str) -> Response {
    page(status, ErrorPage { message }.render())
}

// ---------------------------------------------------------------- parameters

/// Form or query parameters; a parameter given twice is refused (RFC 6749
/// §3.1), as is an oversized one.
struct FormParams(HashMap<String, String>);

impl FormParams {
    fn parse(raw: &[u8]) -> Result<FormParams, String> {
        let mut map = HashMap::new();
        for (k, v) in url::form_urlencoded::parse(raw) {
            if v.len() > MAX_PARAM || k.len() > 100 {
                return Err("a parameter is too long".into());
            }
            if map.insert(k.to_string(), v.to_string()).is_some() {
                return Err(format!("the parameter {k} is given more than once"));
            }
        }
        Ok(FormParams(map))
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }
}

/// The body of a form POST, or why it is not one.
async fn form(req: Request) -> Result<(HeaderMap, Option<SocketAddr>, FormParams), OAuthError> {
    let (parts, body) = req.into_parts();
    let form_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';').next().is_some_and(|m| {
                m.trim()
                    .eq_ignore_ascii_case("application/x-www-form-urlencoded")
            })
        });
    if !form_type {
        return Err(OAuthError::invalid_request(
            "send the parameters as application/x-www-form-urlencoded",
        ));
    }
    let bytes = axum::body::to_bytes(body, 64 * 1024)
        .await
        .map_err(|_| OAuthError::invalid_request("the request body could not be read"))?;
    let params = FormParams::parse(&bytes).map_err(OAuthError::invalid_request)?;
    let peer = parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0);
    Ok((parts.headers, peer, params))
}

fn peer_of(req: &Request) -> Option<SocketAddr> {
    req.extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0)
}

// ---------------------------------------------------------------- clients

impl OAuth {
    /// The client named by `client_id`: registered here, or an `https`
    /// URL naming its metadata document. `Err` says why not.
    async fn client(
        &self,
        state: &AppState,
        client_id: &str,
        addr: IpAddr,
    ) -> Result<ClientInfo, ClientError> {
        if client_id.len() > 2_000 {
            return Err(ClientError::Unknown);
        }
        if client_id.starts_with("https://") {
            return self
                .cimd
                .client(client_id, network_of(addr))
                .await
                .map_err(ClientError::Document);
        }
        match state.core.store.oauth_client(client_id).await {
            Ok(Some(c)) => Ok(c.into()),
            Ok(None) => Err(ClientError::Unknown),
            Err(e) => Err(ClientError::Server(e)),
        }
    }

    async fn csrf_key(&self, state: &AppState) -> crate::error::Result<&[u8]> {
        let key = self
            .csrf_key
            .get_or_try_init(|| async {
                let hex_key = state
                    .core
                    .store
                    .oauth_key("consent_csrf", &oauth::fresh_key())
                    .await?;
                hex::decode(hex_key).map_err(crate::error::Error::internal)
            })
            .await?;
        Ok(key.as_slice())
    }

    async fn refresh_key(&self, state: &AppState) -> crate::error::Result<&[u8]> {
        let key = self
            .refresh_key
            .get_or_try_init(|| state.core.refresh_key())
            .await?;
        Ok(key.as_slice())
    }
}

enum ClientError {
    Unknown,
    Document(cimd::Refused),
    Server(crate::error::Error),
}

impl ClientError {
    fn page(self) -> Response {
        match self {
            ClientError::Unknown => error_page(
                StatusCode::BAD_REQUEST,
                "This app is not known to the server: a registration that never signed in is \
                 forgotten after an hour. Remove the connector in the app and add it again.",
            ),
            ClientError::Document(why) => {
                let status = if why == cimd::Refused::Busy {
                    StatusCode::SERVICE_UNAVAILABLE
                } else {
                    StatusCode::BAD_REQUEST
                };
                error_page(status, &why.message())
            }
            ClientError::Server(e) => {
                e.log_if_internal();
                error_page(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "The server could not look this app up just now; try again.",
                )
            }
        }
    }

    fn oauth(self) -> OAuthError {
        match self {
            ClientError::Unknown => OAuthError::invalid_client(
                "unknown client; register again (unused registrations are forgotten after an hour)",
            ),
            ClientError::Document(why) => OAuthError::invalid_client(why.message()),
            ClientError::Server(e) => OAuthError::server(e),
        }
    }
}

// ---------------------------------------------------------------- registration

async fn register(
    State(state): State<AppState>,
    Extension(oauth): Extension<Arc<OAuth>>,
    req: Request,
) -> Response {
    let addr = crate::auth::client_addr(&state.config, req.headers(), peer_of(&req));
    if let Err(retry) = oauth.registrations.take(network_of(addr)) {
        tracing::info!(%addr, "a registration was refused: too many from this address");
        return too_many(
            retry,
            format!(
                "too many registrations from this address ({REGISTRATIONS_PER_HOUR} an hour); retry in {retry} s"
            ),
        );
    }
    let bytes = match axum::body::to_bytes(req.into_body(), 64 * 1024).await {
        Ok(b) => b,
        Err(_) => {
            return oauth_error(OAuthError::new(
                400,
                "invalid_client_metadata",
                "the registration body could not be read (at most 64 KiB of JSON)",
            ));
        }
    };
    let request: RegistrationRequest = match serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .filter(serde_json::Value::is_object)
        .and_then(|v| serde_json::from_value(v).ok())
    {
        Some(r) => r,
        None => {
            return oauth_error(OAuthError::new(
                400,
                "invalid_client_metadata",
                "the registration must be a JSON object of client metadata (RFC 7591)",
            ));
        }
    };
    match state.core.register(request).await {
        Ok(registered) => {
            tracing::info!(%addr, client = %registered.client_name, "an OAuth client registered");
            (StatusCode::CREATED, no_store(), Json(registered)).into_response()
        }
        Err(e) => oauth_error(e),
    }
}

/// A `429` of the sign-in endpoints, with `Retry-After`.
fn too_many(retry: u64, description: String) -> Response {
    let mut response = oauth_error(OAuthError::new(429, "temporarily_unavailable", description));
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, retry.into());
    response
}

// ---------------------------------------------------------------- authorization

/// A checked authorization request.
struct AuthRequest {
    client: ClientInfo,
    redirect_uri: String,
    /// Whether the request named `redirect_uri` (else the registered one).
    redirect_uri_given: bool,
    state: String,
    code_challenge: String,
    resource: String,
    scope: String,
}

/// Why an authorization request cannot go on: a page (the client or its
/// redirect URI is not to be trusted), or an error sent back to a checked
/// redirect URI.
enum Refusal {
    Page(Response),
    Redirect(Response),
}

impl Refusal {
    fn into_response(self) -> Response {
        match self {
            Refusal::Page(r) | Refusal::Redirect(r) => r,
        }
    }
}

/// `redirect_uri` with `extra` added to its query (keeping its own).
fn redirect_to(redirect_uri: &str, extra: &[(&str, &str)]) -> Response {
    let Ok(mut url) = url::Url::parse(redirect_uri) else {
        return error_page(
            StatusCode::BAD_REQUEST,
            "The app's redirect URI is not valid.",
        );
    };
    {
        let mut query = url.query_pairs_mut();
        for (k, v) in extra {
            if !v.is_empty() {
                query.append_pair(k, v);
            }
        }
    }
    let Ok(location) = HeaderValue::from_str(url.as_str()) else {
        return error_page(
            StatusCode::BAD_REQUEST,
            "The app's redirect URI is not valid.",
        );
    };
    (
        StatusCode::SEE_OTHER,
        [
            (header::LOCATION, location),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
            (
                header::REFERRER_POLICY,
                HeaderValue::from_static("no-referrer"),
            ),
        ],
    )
        .into_response()
}

async fn check_request(
    state: &AppState,
    oauth: &OAuth,
    params: &FormParams,
    base: &str,
    addr: IpAddr,
) -> Result<AuthRequest, Refusal> {
    let page = |m: &str| Refusal::Page(error_page(StatusCode::BAD_REQUEST, m));
    let Some(client_id) = params.get("client_id") else {
        return Err(page("The app did not say who it is (no client_id)."));
    };
    let client = oauth
        .client(state, client_id, addr)
        .await
        .map_err(|e| Refusal::Page(e.page()))?;
    let given = params.get("redirect_uri");
    let redirect_uri = match given {
        Some(uri)
            if client
                .redirect_uris
                .iter()
                .any(|r| redirect_matches(r, uri)) =>
        {
            uri.to_owned()
        }
        Some(_) => {
            return Err(page(
                "The app asked to return to an address it did not register; nothing was sent to it.",
            ));
        }
        None if client.redirect_uris.len() == 1 => client.redirect_uris[0].clone(),
        None => {
            return Err(page(
                "The app did not say where to return (no redirect_uri).",
            ));
        }
    };
    let st = params.get("state").unwrap_or("").to_owned();
    let iss = base.to_owned();
    // Before the consent nobody has acted, so an error goes back to the
    // app only if the owner approved this client before; anyone can
    // register a client with any redirect URI (RFC 9700 §4.11.2).
    let trusted = client.approved_before;
    let back = |error: &str, description: &str| {
        if !trusted {
            return Refusal::Page(error_page(
                StatusCode::BAD_REQUEST,
                &format!(
                    "The app's sign-in request cannot be used ({error}: {description}); nothing was sent to it."
                ),
            ));
        }
        Refusal::Redirect(redirect_to(
            &redirect_uri,
            &[
                ("error", error),
                ("error_description", description),
                ("state", &st),
                ("iss", &iss),
            ],
        ))
    };
    if params.get("response_type") != Some("code") {
        return Err(back(
            "unsupported_response_type",
            "only response_type=code is supported",
        ));
    }
    let Some(challenge) = params.get("code_challenge") else {
        return Err(back(
            "invalid_request",
            "PKCE is required: send a code_challenge (S256)",
        ));
    };
    if params.get("code_challenge_method") != Some("S256") {
        return Err(back(
            "invalid_request",
            "code_challenge_method must be S256 (plain is not accepted)",
        ));
    }
    if !oauth::valid_challenge(challenge) {
        return Err(back(
            "invalid_request",
            "code_challenge must be the base64url SHA-256 of the verifier (43 characters)",
        ));
    }
    let resource = match params.get("resource") {
        Some(r) if our_resources(base).iter().any(|o| same_resource(r, o)) => r.to_owned(),
        Some(_) => {
            return Err(back(
                "invalid_target",
                "resource must be this server's /mcp URL",
            ));
        }
        None => String::new(),
    };
    Ok(AuthRequest {
        redirect_uri: redirect_uri.clone(),
        redirect_uri_given: given.is_some(),
        client,
        state: st.clone(),
        code_challenge: challenge.to_owned(),
        resource,
        scope: params.get("scope").unwrap_or(SCOPE).to_owned(),
    })
}

/// The consent form's CSRF token: an HMAC, under a key in the database, of
/// the request it approves and the time, so a form from any replica is
/// good on every replica, and no other site can make one.
fn csrf_token(key: &[u8], r: &AuthRequest, ts: i64) -> String {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes any key");
    let ts = ts.to_string();
    for part in [
        ts.as_str(),
        &r.client.client_id,
        &r.redirect_uri,
        if r.redirect_uri_given {
            "given"
        } else {
            "registered"
        },
        &r.state,
        &r.code_challenge,
        &r.resource,
        &r.scope,
    ] {
        mac.update(&(part.len() as u64).to_be_bytes());
        mac.update(part.as_bytes());
    }
    let tag = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
    let ts = ts.parse::<i64>().unwrap_or_default();
    format!("{ts}.{tag}")
}

fn csrf_valid(key: &[u8], r: &AuthRequest, token: &str) -> bool {
    let Some((ts, _)) = token.split_once('.') else {
        return false;
    };
    let Ok(ts) = ts.parse::<i64>() else {
        return false;
    };
    let now = crate::clock::now_ms();
    if ts > now + 60_000 || now - ts > CSRF_TTL_MS {
        return false;
    }
    let expected = csrf_token(key, r, ts);
    subtle::ConstantTimeEq::ct_eq(expected.as_bytes(), token.as_bytes()).into()
}

#[derive(Template)]
#[template(path = "oauth/consent.html")]
struct ConsentPage<'a> {
    client_name: &'a str,
    client_id: &'a str,
    registered: bool,
    return_host: String,
    /// The return address is a native app's own scheme (`cursor:`).
    native: bool,
    /// The `redirect_uri` field: as the app sent it (empty when it named
    /// none, so the answer keeps that).
    redirect_uri: &'a str,
    state: &'a str,
    code_challenge: &'a str,
    resource: &'a str,
    scope: &'a str,
    csrf: String,
    error: Option<&'a str>,
}

async fn consent(
    state: &AppState,
    oauth: &OAuth,
    r: &AuthRequest,
    status: StatusCode,
    error: Option<&str>,
) -> Response {
    let key = match oauth.csrf_key(state).await {
        Ok(k) => k,
        Err(e) => {
            e.log_if_internal();
            return error_page(
                StatusCode::SERVICE_UNAVAILABLE,
                "The server could not prepare this page just now; try again.",
            );
        }
    };
    let html = ConsentPage {
        client_name: &r.client.client_name,
        client_id: &r.client.client_id,
        registered: r.client.registered(),
        return_host: oauth::return_address(&r.redirect_uri),
        native: oauth::check_redirect_uri(&r.redirect_uri) == Ok(RedirectKind::PrivateUse),
        redirect_uri: if r.redirect_uri_given {
            &r.redirect_uri
        } else {
            ""
        },
        state: &r.state,
        code_challenge: &r.code_challenge,
        resource: &r.resource,
        scope: &r.scope,
        csrf: csrf_token(key, r, crate::clock::now_ms()),
        error,
    }
    .render();
    page(status, html)
}

async fn authorize_page(
    State(state): State<AppState>,
    Extension(oauth): Extension<Arc<OAuth>>,
    req: Request,
) -> Response {
    let params = match FormParams::parse(req.uri().query().unwrap_or("").as_bytes()) {
        Ok(p) => p,
        Err(why) => return error_page(StatusCode::BAD_REQUEST, &why),
    };
    let base = request_base(&state, req.headers());
    let addr = crate::auth::client_addr(&state.config, req.headers(), peer_of(&req));
    match check_request(&state, &oauth, &params, &base, addr).await {
        Ok(r) => consent(&state, &oauth, &r, StatusCode::OK, None).await,
        Err(refusal) => refusal.into_response(),
    }
}

async fn authorize_submit(
    State(state): State<AppState>,
    Extension(oauth): Extension<Arc<OAuth>>,
    req: Request,
) -> Response {
    let (headers, peer, params) = match form(req).await {
        Ok(f) => f,
        Err(e) => return error_page(StatusCode::BAD_REQUEST, &e.description),
    };
    let base = request_base(&state, &headers);
    let addr = crate::auth::client_addr(&state.config, &headers, peer);
    let r = match check_request(&state, &oauth, &params, &base, addr).await {
        Ok(r) => r,
        Err(refusal) => return refusal.into_response(),
    };
    let key = match oauth.csrf_key(&state).await {
        Ok(k) => k,
        Err(e) => {
            e.log_if_internal();
            return error_page(
                StatusCode::SERVICE_UNAVAILABLE,
                "The server could not check this form just now; try again.",
            );
        }
    };
    if !params.get("csrf").is_some_and(|t| csrf_valid(key, &r, t)) {
        return error_page(
            StatusCode::FORBIDDEN,
            "This form expired or was not made by this server. Start again from the app.",
        );
    }
    let back = |extra: &[(&str, &str)]| {
        let mut all = extra.to_vec();
        all.push(("state", &r.state));
        all.push(("iss", &base));
        redirect_to(&r.redirect_uri, &all)
    };
    match params.get("decision") {
        Some("deny") => {
            return back(&[
                ("error", "access_denied"),
                ("error_description", "the owner denied the request"),
            ]);
        }
        Some("approve") => {}
        _ => {
            return consent(
                &state,
                &oauth,
                &r,
                StatusCode::BAD_REQUEST,
                Some("Choose Approve or Deny."),
            )
            .await;
        }
    }
    if let Some(retry) = oauth.connect_failures.blocked(network_of(addr)) {
        let message = format!("Too many wrong codes from this address; try again in {retry} s.");
        let mut response = consent(
            &state,
            &oauth,
            &r,
            StatusCode::TOO_MANY_REQUESTS,
            Some(&message),
        )
        .await;
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, retry.into());
        return response;
    }
    let typed = params.get("connect_code").unwrap_or("");
    let resource = (!r.resource.is_empty()).then_some(r.resource.as_str());
    let asked = oauth::Approval {
        redirect_uri: &r.redirect_uri,
        redirect_uri_given: r.redirect_uri_given,
        code_challenge: &r.code_challenge,
        resource,
    };
    match state.core.approve(&r.client, typed, asked).await {
        Ok(Some(code)) => {
            tracing::info!(%addr, client = %r.client.client_name, "an app was connected with a connect code");
            back(&[("code", code.expose())])
        }
        Ok(None) => {
            oauth.connect_failures.count(network_of(addr));
            tracing::info!(%addr, client = %r.client.client_name, "a wrong, used or expired connect code was entered");
            consent(
                &state,
                &oauth,
                &r,
                StatusCode::BAD_REQUEST,
                Some(
                    "That connect code is wrong, used or expired. Check it, or ask for a new one.",
                ),
            )
            .await
        }
        Err(e) => {
            e.log_if_internal();
            error_page(
                StatusCode::SERVICE_UNAVAILABLE,
                "The server could not finish this just now; try again.",
            )
        }
    }
}

// ---------------------------------------------------------------- token and revocation

/// The client of a token or revocation request, authenticated: HTTP Basic
/// (`client_secret_basic`) or `client_id` (+ `client_secret`) in the form.
async fn token_client(
    state: &AppState,
    oauth: &OAuth,
    headers: &HeaderMap,
    params: &FormParams,
    addr: IpAddr,
) -> Result<ClientInfo, OAuthError> {
    let basic = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("basic"))
        .map(|(_, b64)| {
            base64::engine::general_purpose::STANDARD
                .decode(b64.trim())
                .ok()
                .and_then(|raw| String::from_utf8(raw).ok())
                .and_then(|pair| {
                    let (id, secret) = pair.split_once(':')?;
                    let decode = |s: &str| {
                        url::form_urlencoded::parse(format!("x={s}").as_bytes())
                            .next()
                            .map(|(_, v)| v.into_owned())
                    };
                    Some((decode(id)?, decode(secret)?))
                })
                .ok_or_else(|| OAuthError::invalid_client("the Basic credentials are malformed"))
        })
        .transpose()?;
    let (client_id, secret) = match &basic {
        Some((id, secret)) => (id.as_str(), Some(secret.as_str())),
        None => (
            params
                .get("client_id")
                .ok_or_else(|| OAuthError::invalid_client("client_id is required"))?,
            params.get("client_secret"),
        ),
    };
    if basic.is_some() && params.get("client_id").is_some_and(|id| id != client_id) {
        return Err(OAuthError::invalid_request(
            "client_id differs from the Basic credentials",
        ));
    }
    let client = oauth
        .client(state, client_id, addr)
        .await
        .map_err(ClientError::oauth)?;
    oauth::authenticate_client(&client, secret)?;
    Ok(client)
}

async fn token(
    State(state): State<AppState>,
    Extension(oauth): Extension<Arc<OAuth>>,
    req: Request,
) -> Response {
    let result: Result<oauth::TokenResponse, TokenError> = async {
        let (headers, peer, params) = form(req).await?;
        let addr = crate::auth::client_addr(&state.config, &headers, peer);
        if let Err(retry) = oauth.token_addresses.take(network_of(addr)) {
            tracing::info!(%addr, "a token request was refused: too many from this address");
            return Err(Limited(retry, format!(
                "too many token requests from this address ({TOKEN_REQUESTS_PER_MINUTE} a minute); retry in {retry} s"
            )).into());
        }
        let client = token_client(&state, &oauth, &headers, &params, addr).await?;
        let base = request_base(&state, &headers);
        let ours = our_resources(&base);
        let life = Lifetimes {
            access_ms: state.config.oauth_access_ttl.as_millis() as i64,
            refresh_ms: state.config.oauth_refresh_ttl.as_millis() as i64,
        };
        let at = oauth::TokenEndpoint {
            key: oauth.refresh_key(&state).await?,
            resources: &ours,
            life,
        };
        match params.get("grant_type") {
            Some("authorization_code") => {
                let code = params
                    .get("code")
                    .ok_or_else(|| OAuthError::invalid_request("code is required"))?;
                let asked = oauth::CodeExchange {
                    code,
                    redirect_uri: params.get("redirect_uri"),
                    verifier: params.get("code_verifier"),
                    resource: params.get("resource"),
                };
                Ok(state.core.exchange_code(at, &client, asked).await?)
            }
            Some("refresh_token") => {
                let raw = params
                    .get("refresh_token")
                    .ok_or_else(|| OAuthError::invalid_request("refresh_token is required"))?;
                if let Some(grant) = oauth::refresh_grant_hint(raw)
                    && let Err(retry) = oauth.refreshes.take(grant)
                {
                    tracing::info!(grant, "a refresh was refused: too many for this grant");
                    return Err(Limited(retry, format!(
                        "too many refreshes of this sign-in ({REFRESHES_PER_MINUTE} a minute); retry in {retry} s"
                    )).into());
                }
                let resource = params.get("resource");
                Ok(state.core.refresh(at, &client, raw, resource).await?)
            }
            Some(_) => Err(OAuthError::new(
                400,
                "unsupported_grant_type",
                "grant_type must be authorization_code or refresh_token",
            )
            .into()),
            None => Err(OAuthError::invalid_request("grant_type is required").into()),
        }
    }
    .await;
    match result {
        Ok(tokens) => (StatusCode::OK, no_store(), Json(tokens)).into_response(),
        Err(TokenError::Limited(Limited(retry, why))) => too_many(retry, why),
        Err(TokenError::OAuth(e)) => oauth_error(e),
    }
}

/// A refusal of the token endpoint's rate limits: seconds to wait, and why.
struct Limited(u64, String);

enum TokenError {
    OAuth(OAuthError),
    Limited(Limited),
}

impl From<OAuthError> for TokenError {
    fn from(e: OAuthError) -> TokenError {
        TokenError::OAuth(e)
    }
}

impl From<Limited> for TokenError {
    fn from(l: Limited) -> TokenError {
        TokenError::Limited(l)
    }
}

impl From<crate::error::Error> for TokenError {
    fn from(e: crate::error::Error) -> TokenError {
        TokenError::OAuth(OAuthError::server(e))
    }
}

async fn revoke(
    State(state): State<AppState>,
    Extension(oauth): Extension<Arc<OAuth>>,
    req: Request,
) -> Response {
    let result = async {
        let (headers, peer, params) = form(req).await?;
        let addr = crate::auth::client_addr(&state.config, &headers, peer);
        let client = token_client(&state, &oauth, &headers, &params, addr).await?;
        let raw = params
            .get("token")
            .ok_or_else(|| OAuthError::invalid_request("token is required"))?;
        let key = oauth.refresh_key(&state).await?;
        state.core.revoke_oauth_token(key, &client, raw).await?;
        Ok::<_, OAuthError>(())
    }
    .await;
    match result {
        Ok(()) => (StatusCode::OK, no_store()).into_response(),
        Err(e) => oauth_error(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        Config::for_tests("unused.db")
    }

    /// Each `(Host header, came from the public side, the base URL)`.
    fn base_urls_are(c: &Config, cases: &[(&str, bool, &str)]) {
        for &(host, public, want) in cases {
            assert_eq!(base_url(c, Some(host), public), want, "{host}");
        }
    }

    #[test]
    fn base_url_follows_host_and_configured_urls() {
        let mut c = config();
        base_urls_are(
            &c,
            &[
                ("127.0.0.1:8080", false, "http://127.0.0.1:8080"),
                ("localhost:9", false, "http://localhost:9"),
                ("chat.example.com", false, "https://chat.example.com"),
            ],
        );
        c.public_url = Some("https://rooms.example.org/".into());
        c.lan_url = Some("http://nas.lan:8080".into());
        let listen = format!("http://{}", c.listen);
        base_urls_are(
            &c,
            &[
                ("whatever", true, "https://rooms.example.org"),
                ("nas.lan:8080", false, "http://nas.lan:8080"),
                ("bad\"host", false, &listen),
            ],
        );
    }
}
