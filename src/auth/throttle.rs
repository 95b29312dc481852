//! The failed-credential throttle: every `401` counts against the client
//! address; past the limit within the window the address gets `429` until the
//! window has passed. Memory stays bounded however many addresses try.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The most addresses tracked at once. Past it, expired entries are swept
/// and, if none expired, the oldest window is forgotten.
const MAX_TRACKED: usize = 65_536;

pub struct Throttle {
    limit: u32,
    window: Duration,
    state: Mutex<HashMap<IpAddr, Window>>,
}

#[derive(Clone, Copy)]
struct Window {
    started: Instant,
    failures: u32,
}

impl Throttle {
    /// `limit == 0` disables the throttle.
    pub fn new(limit: u32, window: Duration) -> Throttle {
        Throttle {
            limit,
            window,
            state: Mutex::new(HashMap::new()),
        }
    }

    /// `Some(seconds to wait)` when `addr` is over the limit right now.
    pub fn blocked(&self, addr: IpAddr) -> Option<u64> {
        if self.limit == 0 {
            return None;
        }
        let now = Instant::now();
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let w = state.get(&addr)?;
        let elapsed = now.duration_since(w.started);
        if elapsed < self.window && w.failures >= self.limit {
            Some((self.window - elapsed).as_secs().max(1))
        } else {
            None
        }
    }

    /// Counts one failed credential from `addr`.
    pub fn record_failure(&self, addr: IpAddr) {
        if self.limit == 0 {
            return;
        }
        let now = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.len() >= MAX_TRACKED && !state.contains_key(&addr) {
            let window = self.window;
            state.retain(|_, w| now.duration_since(w.started) < window);
            if state.len() >= MAX_TRACKED
                && let Some(oldest) = state.iter().min_by_key(|(_, w)| w.started).map(|(k, _)| *k)
            {
                state.remove(&oldest);
            }
        }
        let w = state.entry(addr).or_insert(Window {
            started: now,
            failures: 0,
        });
        if now.duration_since(w.started) >= self.window {
            *w = Window {
                started: now,
                failures: 0,
            };
        }
        w.failures = w.failures.saturating_add(1);
    }

    /// How many addresses are tracked (for tests and the posture).
    pub fn tracked(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_after_limit_and_memory_stays_bounded() {
        let t = Throttle::new(3, Duration::from_secs(60));
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        for _ in 0..3 {
            assert!(t.blocked(a).is_none());
            t.record_failure(a);
        }
        assert!(t.blocked(a).is_some());
        for i in 0..(MAX_TRACKED as u32 + 100) {
            t.record_failure(IpAddr::from(i.to_be_bytes()));
        }
        assert!(t.tracked() <= MAX_TRACKED);
    }

    #[test]
    fn zero_limit_disables() {
        let t = Throttle::new(0, Duration::from_secs(60));
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        for _ in 0..100 {
            t.record_failure(a);
        }
        assert!(t.blocked(a).is_none());
    }
}
