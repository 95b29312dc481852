//! The per-token tool-call rate limit: a token bucket per token that refills
//! `per_minute` calls a minute. In memory, per process.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

pub struct RateLimiter {
    per_minute: u32,
    buckets: Mutex<HashMap<i64, Bucket>>,
}

struct Bucket {
    tokens: f64,
    refreshed: Instant,
}

impl RateLimiter {
    /// `per_minute == 0` disables the limit.
    pub fn new(per_minute: u32) -> RateLimiter {
        RateLimiter {
            per_minute,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one call from `token_id`'s bucket; `Err(seconds)` says when the
    /// next call will be allowed.
    pub fn check(&self, token_id: i64) -> Result<(), u64> {
        if self.per_minute == 0 {
            return Ok(());
        }
        let capacity = f64::from(self.per_minute);
        let rate = capacity / 60.0;
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let b = buckets.entry(token_id).or_insert(Bucket {
            tokens: capacity,
            refreshed: now,
        });
        let elapsed = now.duration_since(b.refreshed).as_secs_f64();
        b.tokens = (b.tokens + elapsed * rate).min(capacity);
        b.refreshed = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Ok(())
        } else {
            Err(((1.0 - b.tokens) / rate).ceil().max(1.0) as u64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_past_the_budget() {
        let r = RateLimiter::new(5);
        for _ in 0..5 {
            assert!(r.check(1).is_ok());
        }
        let wait = r.check(1).unwrap_err();
        assert!((1..=12).contains(&wait));
        assert!(r.check(2).is_ok(), "other tokens are unaffected");
    }
}
