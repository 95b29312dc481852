//! The MQTT bridge: room events to a broker, for home automation.
//!
//! [`Stats`] is what the rest of the server (the console posture, logs) sees
//! of the bridge.

use std::sync::atomic::{AtomicBool, AtomicU64};

/// Live counters of the bridge; all zero and disconnected when it is off.
#[derive(Debug, Default)]
pub struct Stats {
    pub enabled: AtomicBool,
    pub connected: AtomicBool,
    pub published: AtomicU64,
    pub dropped: AtomicU64,
}
