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

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, PoisonError};

/// Gives one hold on `key` back to a map of what each key holds (a request
/// budget's, the open streams', the open connections'): `give_back` takes
/// it off the entry and says whether nothing is held any more, and then the
/// entry goes, so that the map only has keys with something in flight.
pub fn release<K: Hash + Eq, V>(
    held: &Mutex<HashMap<K, V>>,
    key: &K,
    give_back: impl FnOnce(&mut V) -> bool,
) {
    let mut held = held.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(entry) = held.get_mut(key)
        && give_back(entry)
    {
        held.remove(key);
    }
}
