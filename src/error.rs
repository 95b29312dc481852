//! The one error type of the domain, and the one place where errors become
//! answers: a JSON body `{"error": {"code", "message"}}` on HTTP, a tool error
//! with the same JSON on MCP.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// A refused or failed operation. The variant is the wire `code`; the message
/// says what to do about it and never holds a secret.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    TooLarge(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    ReadOnly(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{message}")]
    RateLimited { message: String, retry_after_s: u64 },
    #[error("{0}")]
    Unauthorized(String),
    /// A failure of ours (database, I/O). The cause is logged; the caller
    /// sees a generic message.
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The wire code of this error.
    pub fn code(&self) -> &'static str {
        match self {
            Error::InvalidArgument(_) => "invalid_argument",
            Error::TooLarge(_) => "too_large",
            Error::NotFound(_) => "not_found",
            Error::Forbidden(_) => "forbidden",
            Error::ReadOnly(_) => "read_only",
            Error::Conflict(_) => "conflict",
            Error::RateLimited { .. } => "rate_limited",
            Error::Unauthorized(_) => "unauthorized",
            Error::Internal(_) => "internal",
        }
    }

    /// The HTTP status of this error on `/v1`.
    pub fn status(&self) -> StatusCode {
        match self {
            Error::InvalidArgument(_) => StatusCode::BAD_REQUEST,
            Error::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Error::NotFound(_) => StatusCode::NOT_FOUND,
            Error::Forbidden(_) | Error::ReadOnly(_) => StatusCode::FORBIDDEN,
            Error::Conflict(_) => StatusCode::CONFLICT,
            Error::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            Error::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Error::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The JSON body `{"error": {"code", "message"}}`.
    pub fn body(&self) -> serde_json::Value {
        let mut message = self.to_string();
        if matches!(self, Error::Internal(_)) {
            message = "internal error; the server log has the details".into();
        }
        json!({"error": {"code": self.code(), "message": message}})
    }

    pub fn invalid(msg: impl Into<String>) -> Error {
        Error::InvalidArgument(msg.into())
    }
    pub fn not_found(msg: impl Into<String>) -> Error {
        Error::NotFound(msg.into())
    }
    pub fn forbidden(msg: impl Into<String>) -> Error {
        Error::Forbidden(msg.into())
    }
    pub fn conflict(msg: impl Into<String>) -> Error {
        Error::Conflict(msg.into())
    }
    pub fn internal(e: impl Into<anyhow::Error>) -> Error {
        Error::Internal(e.into())
    }

    /// Logs an internal error's cause chain; other errors are the caller's
    /// business and are not logged here.
    pub fn log_if_internal(&self) {
        if let Error::Internal(cause) = self {
            tracing::error!(error = format!("{cause:#}"), "internal error");
        }
    }
}

impl From<sqlx::Error> for Error {
    fn from(e: sqlx::Error) -> Self {
        Error::Internal(e.into())
    }
}

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        Error::Internal(e.into())
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        self.log_if_internal();
        let status = self.status();
        let mut response = (status, axum::Json(self.body())).into_response();
        let headers = response.headers_mut();
        match &self {
            Error::Unauthorized(_) => {
                headers.insert(
                    http::header::WWW_AUTHENTICATE,
                    http::HeaderValue::from_static("Bearer"),
                );
            }
            Error::RateLimited { retry_after_s, .. } => {
                headers.insert(http::header::RETRY_AFTER, (*retry_after_s).into());
            }
            _ => {}
        }
        response
    }
}

/// A plain JSON error answer for our own layers (`421`, `403`, `404`…).
pub fn http_error(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"error": {"code": code, "message": message}})),
    )
        .into_response()
}
