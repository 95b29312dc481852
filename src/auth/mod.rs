//! Who is calling and whether they may: bearer tokens, the Host allowlist, the
//! browser-Origin check, the failed-auth throttle and the per-token rate limit.
//! All of it runs in layers and extractors, never inside a handler.

pub mod caller;
pub mod hosts;
pub mod ratelimit;
pub mod throttle;
pub mod token;

pub use caller::Caller;
