//! Time as the database stores it (milliseconds since the Unix epoch) and as
//! clients see it (RFC 3339, UTC, millisecond precision), and the [`Clock`]
//! the domain decides at: the system's, or a test's moved by hand, so
//! leases, OAuth expiry and retention are tested without sleeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use time::OffsetDateTime;
use time::macros::format_description;

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    (OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000) as i64
}

/// The time the domain decides at: the system's, or one that moves only
/// when told, so tests of leases and expiry need not sleep. Clones share
/// the time.
#[derive(Debug, Clone, Default)]
pub struct Clock {
    /// `None` reads the system clock.
    manual: Option<Arc<AtomicI64>>,
}

impl Clock {
    /// The system clock.
    pub fn system() -> Clock {
        Clock::default()
    }

    /// A clock standing at `start_ms` until [`Clock::advance`] moves it.
    pub fn manual(start_ms: i64) -> Clock {
        Clock {
            manual: Some(Arc::new(AtomicI64::new(start_ms))),
        }
    }

    /// Milliseconds since the Unix epoch, as this clock says.
    pub fn now_ms(&self) -> i64 {
        match &self.manual {
            None => now_ms(),
            Some(t) => t.load(Ordering::Relaxed),
        }
    }

    /// Moves a manual clock on by `by`; the system clock moves by itself.
    pub fn advance(&self, by: Duration) {
        if let Some(t) = &self.manual {
            t.fetch_add(by.as_millis() as i64, Ordering::Relaxed);
        }
    }
}

/// Renders stored milliseconds as `2026-11-29T12:00:00.123Z`.
pub fn fmt_ts(ms: i64) -> String {
    let t = OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH);
    // A fixed width, so timestamps also sort as text. Every row of every
    // answer carries one, so years 0–9999 (all there will be) take a plain
    // `format!`, several times faster than a format description.
    if (0..=9999).contains(&t.year()) {
        return format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second(),
            t.millisecond()
        );
    }
    t.format(format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    ))
    .unwrap_or_default()
}

/// Serde helper: serialise an `i64` millisecond field as RFC 3339.
pub mod ts {
    pub fn serialize<S: serde::Serializer>(ms: &i64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::fmt_ts(*ms))
    }
}

/// Serde helper: serialise an `Option<i64>` millisecond field as RFC 3339 or null.
pub mod ts_opt {
    pub fn serialize<S: serde::Serializer>(ms: &Option<i64>, s: S) -> Result<S::Ok, S::Error> {
        match ms {
            Some(ms) => s.serialize_str(&super::fmt_ts(*ms)),
            None => s.serialize_none(),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn formats_with_milliseconds() {
        assert_eq!(super::fmt_ts(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(super::fmt_ts(1_500), "1970-01-01T00:00:01.500Z");
        assert_eq!(super::fmt_ts(1_796_040_000_007), "2026-11-30T12:00:00.007Z");
        // Before year 0 the format description takes over.
        assert!(super::fmt_ts(-62_198_755_200_000).starts_with("-0001-"));
    }
}
