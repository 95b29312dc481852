//! Size limits, counted in characters (Unicode scalar values). Over a limit
//! is `too_large`: nothing is ever truncated.

use crate::error::{Error, Result};

pub const TITLE: usize = 200;
pub const BODY: usize = 8_000;
pub const MESSAGE: usize = 8_000;
pub const NOTE: usize = 4_000;
pub const RESULT: usize = 20_000;
pub const REASON: usize = 4_000;
pub const SKILL: usize = 100;
pub const DESCRIPTION: usize = 2_000;
pub const REPO_URL: usize = 500;
pub const ONBOARDING: usize = 8_000;
pub const AGENT_NAME: usize = 64;
pub const FILE_NAME: usize = 255;
pub const MIME: usize = 200;
pub const SEARCH_QUERY: usize = 500;
/// Agents indexed as mentioned by one message or note; later `@name`s in
/// the same body are text (the body still shows them).
pub const MENTIONS: usize = 20;
/// How long one search query may run before it is stopped with an error.
pub const SEARCH_MILLIS: u64 = 2_000;
pub const RETENTION_DAYS_MAX: i64 = 3_650;
pub const LEASE_SECONDS_MAX: i64 = 86_400;

/// Refuses `value` when it holds more than `max` characters.
pub fn check(field: &str, value: &str, max: usize) -> Result<()> {
    let n = value.chars().count();
    if n > max {
        return Err(Error::TooLarge(format!(
            "{field} is {n} characters; the limit is {max}. Shorten it (nothing was stored)."
        )));
    }
    Ok(())
}

/// [`check`] of an optional text: an absent one passes.
pub fn check_given(field: &str, value: Option<&str>, max: usize) -> Result<()> {
    value.map_or(Ok(()), |v| check(field, v, max))
}

/// Refuses an empty or whitespace-only required text.
pub fn non_empty(field: &str, value: &str) -> Result<()> {
    if value.trim().is_empty() {
        return Err(Error::invalid(format!("{field} must not be empty")));
    }
    Ok(())
}

/// Clamps a list `limit` into `1..=max`, `default` when absent (as the
/// original server does, negative values included).
pub fn clamp_limit(limit: Option<i64>, default: i64, max: i64) -> i64 {
    limit.unwrap_or(default).clamp(1, max)
}
