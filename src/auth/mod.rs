//! Who is calling and whether they may: the bearer-token layer and the
//! `Caller` extractor (the caller itself is the domain's, its token's
//! secret in [`crate::secret`]), the Host allowlist, the browser-Origin
//! check, the request-body budget, the failed-auth throttle and the
//! per-token rate limit.
//! All of it runs in layers and extractors, never inside a handler; every
//! call then passes [`admit`](admit::admit) (rate limit, audit row).

pub mod admit;
pub mod body;
pub mod budget;
pub mod caller;
pub mod hosts;
pub mod layers;
pub mod ratelimit;
pub mod streams;
pub mod throttle;

pub use admit::{Meter, admit};
pub use caller::Caller;
pub use layers::{client_addr, require_token};
