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
    // A fixed width, so timestamps also sort as text. Every row of every
    // answer carries one (it was a third of a `read_messages` call's work
    // through `format!`), so years 0–9999, all there will be, are written
    // digit by digit into a buffer.
    let days = ms.div_euclid(86_400_000);
    let in_day = ms.rem_euclid(86_400_000);
    let (year, month, day) = civil_from_days(days);
    if !(0..=9999).contains(&year) {
        let t = OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
            .unwrap_or(OffsetDateTime::UNIX_EPOCH);
        return t
            .format(format_description!(
                "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
            ))
            .unwrap_or_default();
    }
    let mut b = *b"0000-00-00T00:00:00.000Z";
    let mut put = |at: usize, width: usize, mut v: i64| {
        for i in (at..at + width).rev() {
            b[i] = b'0' + (v % 10) as u8;
            v /= 10;
        }
    };
    put(0, 4, year);
    put(5, 2, month);
    put(8, 2, day);
    put(11, 2, in_day / 3_600_000);
    put(14, 2, in_day / 60_000 % 60);
    put(17, 2, in_day / 1000 % 60);
    put(20, 3, in_day % 1000);
    // Only ASCII digits and separators were written.
    String::from_utf8(b.to_vec()).unwrap_or_default()
}

/// The proleptic Gregorian date of a day counted from 1970-01-01 (Howard
/// Hinnant's `civil_from_days`): year, month 1–12, day 1–31.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
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

    /// The digit-by-digit path writes what the `time` crate's format
    /// description writes, byte for byte, from year 0 to 9999: leap days,
    /// century years, both ends, and a sweep of odd steps across the range.
    #[test]
    fn digits_match_the_format_description() {
        use time::OffsetDateTime;
        use time::macros::format_description;
        let reference = |ms: i64| {
            OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
                .unwrap()
                .format(format_description!(
                    "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
                ))
                .unwrap()
        };
        let first = -62_167_219_200_000; // 0000-01-01T00:00:00.000Z
        let last = 253_402_300_799_999; // 9999-12-31T23:59:59.999Z
        let mut cases = vec![first, last, -1, 0, 951_782_400_000, 4_107_542_399_999];
        let mut ms = first;
        while ms < last {
            cases.push(ms);
            ms += 7_919_999_937; // about three months, never a round number
        }
        for ms in cases {
            assert_eq!(super::fmt_ts(ms), reference(ms), "at {ms} ms");
        }
    }
}
