//! The failed-credential throttle: every `401` counts against the client
//! address; past the limit within the window the address gets `429` until the
//! window has passed. Memory stays bounded however many addresses try. Its
//! counter, [`Windows`], also counts the sign-in routes' requests.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The most keys a [`Windows`] tracks at once. Past it, expired windows are
/// swept and, if none expired, its [`WhenFull`] says what is forgotten.
const MAX_TRACKED: usize = 65_536;

/// The failed credentials of each client address.
pub struct Throttle(Windows<IpAddr>);

impl Throttle {
    /// `limit == 0` disables the throttle.
    pub fn new(limit: u32, window: Duration) -> Throttle {
        Throttle(Windows::new(limit, window).when_full(WhenFull::ForgetOldest))
    }

    /// `Some(seconds to wait)` when `addr` is over the limit right now.
    pub fn blocked(&self, addr: IpAddr) -> Option<u64> {
        self.0.blocked(addr)
    }

    /// Counts one failed credential from `addr`.
    pub fn record_failure(&self, addr: IpAddr) {
        self.0.count(addr)
    }

    /// How many addresses are tracked (for tests and the posture).
    pub fn tracked(&self) -> usize {
        self.0.tracked()
    }
}

/// What a full [`Windows`] forgets for a new key when no window expired.
#[derive(Clone, Copy)]
pub enum WhenFull {
    /// Every window (cheap; the sign-in routes' counters).
    ForgetAll,
    /// The oldest window (the failed-credential throttle).
    ForgetOldest,
}

/// At most `limit` events per key within `window`, in memory, per process.
/// Memory stays bounded however many keys come.
pub struct Windows<K> {
    limit: u32,
    window: Duration,
    when_full: WhenFull,
    state: Mutex<HashMap<K, (Instant, u32)>>,
}

impl<K: Hash + Eq + Copy> Windows<K> {
    /// `limit == 0` disables it. Full, it forgets every window.
    pub fn new(limit: u32, window: Duration) -> Windows<K> {
        Windows {
            limit,
            window,
            when_full: WhenFull::ForgetAll,
            state: Mutex::new(HashMap::new()),
        }
    }

    /// The same, forgetting as `when_full` says when full.
    pub fn when_full(self, when_full: WhenFull) -> Windows<K> {
        Windows { when_full, ..self }
    }

    /// Counts one event of `key`; `Err(seconds to wait)` when it is over
    /// the limit (the refused event is not counted).
    pub fn take(&self, key: K) -> Result<(), u64> {
        if self.limit == 0 {
            return Ok(());
        }
        // One lock for the look and the count: callers arriving together
        // cannot all pass a look that only one of them should.
        let mut state = self.lock();
        if let Some(s) = self.wait_of(&state, &key) {
            return Err(s);
        }
        self.count_in(&mut state, key);
        Ok(())
    }

    /// `Some(seconds to wait)` while `key` is over the limit.
    pub fn blocked(&self, key: K) -> Option<u64> {
        if self.limit == 0 {
            return None;
        }
        self.wait_of(&self.lock(), &key)
    }

    fn wait_of(&self, state: &HashMap<K, (Instant, u32)>, key: &K) -> Option<u64> {
        let (started, n) = state.get(key)?;
        let elapsed = started.elapsed();
        (elapsed < self.window && *n >= self.limit)
            .then(|| (self.window - elapsed).as_secs().max(1))
    }

    /// Counts one event of `key`.
    pub fn count(&self, key: K) {
        if self.limit == 0 {
            return;
        }
        self.count_in(&mut self.lock(), key);
    }

    fn count_in(&self, state: &mut HashMap<K, (Instant, u32)>, key: K) {
        let now = Instant::now();
        if state.len() >= MAX_TRACKED && !state.contains_key(&key) {
            let window = self.window;
            state.retain(|_, (started, _)| now.duration_since(*started) < window);
            if state.len() >= MAX_TRACKED {
                match self.when_full {
                    WhenFull::ForgetAll => state.clear(),
                    WhenFull::ForgetOldest => {
                        if let Some(oldest) = state.iter().min_by_key(|(_, w)| w.0).map(|(k, _)| *k)
                        {
                            state.remove(&oldest);
                        }
                    }
                }
            }
        }
        let entry = state.entry(key).or_insert((now, 0));
        if now.duration_since(entry.0) >= self.window {
            *entry = (now, 0);
        }
        entry.1 = entry.1.saturating_add(1);
    }

    /// How many keys are tracked.
    pub fn tracked(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, (Instant, u32)>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
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
