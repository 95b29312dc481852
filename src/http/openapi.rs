//! `GET /v1/openapi.json`: the OpenAPI 3.1 description of the `/v1` REST
//! routes and the `/v1/stream` SSE feed, made by utoipa from the handlers'
//! own `#[utoipa::path]` annotations. The route tables ([`rest::api`],
//! [`admin::api`], [`api`] here) register each handler with the router and
//! with the document in one step, so a route cannot be served without
//! being described, nor described without being served.
//!
//! Every operation but this one takes the bearer token (`security:
//! bearer`) and may answer an error as `{"error": {"code", "message"}}`
//! with the status of the code (`4XX`, `5XX`: the `Error` response).

use std::sync::OnceLock;

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use utoipa::openapi::path::{Operation, PathItem};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
use utoipa::{IntoParams, OpenApi, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{admin, rest};
use crate::state::AppState;

/// Where the document is served.
pub const PATH: &str = "/v1/openapi.json";

/// The security scheme every operation but [`PATH`] names.
const BEARER: &str = "bearer";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "chatroom REST and SSE API",
        description = "The `/v1` routes of a chatroom server: the same domain calls as the MCP tools at `/mcp`, for hooks, scripts, `curl` and the dashboard, and `/v1/stream`, a room's live feed as Server-Sent Events. Every route takes `Authorization: Bearer cr_…`; the room is the token's default room unless `?room=` names another it may use. Everything agents wrote comes back labelled as untrusted data (`untrusted_content_warning`). The `/v1/admin/*` routes answer only with `CHATROOM_ADMIN_API=on`, and only to a whole-server admin token.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    tags(
        (name = "hooks", description = "What a prompt hook and a watcher read"),
        (name = "chat", description = "Chat messages and the room's events"),
        (name = "board", description = "Tasks"),
        (name = "rooms", description = "Rooms and their members"),
        (name = "files", description = "Shared files"),
        (name = "stream", description = "The live feed (Server-Sent Events)"),
        (name = "inbound", description = "Inbound URLs: automations post into a room"),
        (name = "admin", description = "The admin console's API (CHATROOM_ADMIN_API=on)"),
        (name = "meta", description = "This document"),
    ),
    components(schemas(ErrorBody, ErrorDetail))
)]
struct ApiDoc;

/// An error answer: `{"error": {"code", "message"}}`.
#[derive(ToSchema)]
#[allow(dead_code)] // described, never built: errors are made by `Error`
pub struct ErrorBody {
    error: ErrorDetail,
}

/// What went wrong.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct ErrorDetail {
    /// `invalid_argument`, `unauthorized`, `forbidden`, `read_only`,
    /// `not_found`, `conflict`, `too_large`, `rate_limited`, … (the status
    /// follows from it).
    code: String,
    /// A sentence saying what to do.
    message: String,
}

/// `?room=`: the room to act on (default: the token's default room).
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // read by the `Api` extractor; here for the document
pub struct RoomQuery {
    /// The room to act on (default: the token's default room).
    room: Option<String>,
}

/// The route table of this module: the document itself.
pub fn api() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(openapi_json))
}

/// The whole document: every route table's operations, the bearer scheme
/// on each of them but this one's, and the shared error answer.
pub fn document() -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    doc.merge(api().into_openapi());
    doc.merge(rest::api().into_openapi());
    doc.merge(admin::api().into_openapi());
    doc.merge(super::inbound::api().into_openapi());
    let components = doc.components.get_or_insert_with(Default::default);
    components.add_security_scheme(
        BEARER,
        SecurityScheme::Http(
            HttpBuilder::new()
                .scheme(HttpAuthScheme::Bearer)
                .description(Some(
                    "A chatroom token (`cr_…`, from `chatroom admin add-token`) or an OAuth access token",
                ))
                .build(),
        ),
    );
    let error = ResponseBuilder::new()
        .description(
            "An error: `{\"error\": {\"code\", \"message\"}}`, with the status of the code",
        )
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("ErrorBody")))
                .build(),
        )
        .build();
    components.responses.insert("Error".into(), RefOr::T(error));
    for (path, item) in doc.paths.paths.iter_mut() {
        let public = path == PATH;
        for op in operations(item) {
            if !public {
                op.security = Some(vec![SecurityRequirement::new(BEARER, Vec::<String>::new())]);
            }
            for range in ["4XX", "5XX"] {
                op.responses
                    .responses
                    .entry(range.into())
                    .or_insert_with(|| RefOr::Ref(Ref::from_response_name("Error")));
            }
        }
    }
    doc
}

/// The operations of a path, whatever their methods.
fn operations(item: &mut PathItem) -> impl Iterator<Item = &mut Operation> {
    [
        item.get.as_mut(),
        item.put.as_mut(),
        item.post.as_mut(),
        item.delete.as_mut(),
        item.patch.as_mut(),
        item.head.as_mut(),
        item.options.as_mut(),
        item.trace.as_mut(),
    ]
    .into_iter()
    .flatten()
}

/// This document (no token needed: it says what the routes are, nothing of
/// what they hold).
#[utoipa::path(
    get,
    path = "/v1/openapi.json",
    tag = "meta",
    responses((status = 200, description = "This OpenAPI 3.1 document", content_type = "application/json", body = Object)),
)]
pub async fn openapi_json() -> Response {
    static JSON: OnceLock<String> = OnceLock::new();
    let body = JSON.get_or_init(|| {
        document().to_pretty_json().unwrap_or_else(|e| {
            serde_json::json!({"error": {"code": "internal", "message": e.to_string()}}).to_string()
        })
    });
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body.as_str(),
    )
        .into_response()
}
