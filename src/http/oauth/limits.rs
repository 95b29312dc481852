//! Counters of the sign-in routes: how many requests a key (an address, a
//! grant) made in the current window, in memory, per process. Memory stays
//! bounded however many keys come.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The most keys tracked at once; past it, expired windows are swept and,
/// if none expired, all are forgotten.
const MAX_TRACKED: usize = 65_536;

/// At most `limit` events per key within `window`.
pub struct Windows<K> {
    limit: u32,
    window: Duration,
    state: Mutex<HashMap<K, (Instant, u32)>>,
}

impl<K: Hash + Eq + Copy> Windows<K> {
    /// `limit == 0` disables it.
    pub fn new(limit: u32, window: Duration) -> Windows<K> {
        Windows {
            limit,
            window,
            state: Mutex::new(HashMap::new()),
        }
    }

    /// Counts one event of `key`; `Err(seconds to wait)` when it is over
    /// the limit (the refused event is not counted).
    pub fn take(&self, key: K) -> Result<(), u64> {
        let retry = self.blocked(key);
        if let Some(s) = retry {
            return Err(s);
        }
        self.count(key);
        Ok(())
    }

    /// `Some(seconds to wait)` while `key` is over the limit.
    pub fn blocked(&self, key: K) -> Option<u64> {
        if self.limit == 0 {
            return None;
        }
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let (started, n) = state.get(&key)?;
        let elapsed = started.elapsed();
        (elapsed < self.window && *n >= self.limit)
            .then(|| (self.window - elapsed).as_secs().max(1))
    }

    /// Counts one event of `key`.
    pub fn count(&self, key: K) {
        if self.limit == 0 {
            return;
        }
        let now = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.len() >= MAX_TRACKED && !state.contains_key(&key) {
            let window = self.window;
            state.retain(|_, (started, _)| now.duration_since(*started) < window);
            if state.len() >= MAX_TRACKED {
                state.clear();
            }
        }
        let entry = state.entry(key).or_insert((now, 0));
        if now.duration_since(entry.0) >= self.window {
            *entry = (now, 0);
        }
        entry.1 = entry.1.saturating_add(1);
    }
}

/// The key an address counts under: IPv4 as it is, IPv6 by its /64 (one
/// customer's network: a host there has 2^64 addresses to rotate through).
pub fn network_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_per_key_and_ipv6_by_its_64() {
        let w = Windows::new(2, Duration::from_secs(60));
        let a = network_of("2001:db8:1:2::5".parse().unwrap());
        let b = network_of("2001:db8:1:2:ffff::9".parse().unwrap());
        assert_eq!(a, b, "one /64");
        assert!(w.take(a).is_ok());
        assert!(w.take(b).is_ok());
        assert!(w.take(a).is_err());
        let other = network_of("2001:db8:1:3::5".parse().unwrap());
        assert!(w.take(other).is_ok());
        let v4: IpAddr = "192.0.2.7".parse().unwrap();
        assert_eq!(network_of(v4), v4);
    }
}
