//! Integer time: instants and durations in whole seconds, never floats.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A span of time in whole seconds (may be negative as the result of a subtraction).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Duration(pub i64);

impl Duration {
    /// Zero seconds.
    pub const ZERO: Duration = Duration(0);

    /// A duration of `s` seconds.
    pub const fn seconds(s: i64) -> Self {
        Duration(s)
    }

    /// A duration of `m` minutes.
    pub const fn minutes(m: i64) -> Self {
        Duration(m * 60)
    }

    /// A duration of `h` hours.
    pub const fn hours(h: i64) -> Self {
        Duration(h * 3600)
    }

    /// The length in seconds.
    pub const fn as_secs(self) -> i64 {
        self.0
    }
}

impl Add for Duration {
    type Output = Duration;
    fn add(self, rhs: Duration) -> Duration {
        Duration(self.0.saturating_add(rhs.0))
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}s", self.0)
    }
}

/// An instant: whole seconds since the Unix epoch, UTC. Serialized as RFC 3339.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Time(pub i64);

/// A timestamp that is not RFC 3339 (or a plain `YYYY-MM-DD[ HH:MM[:SS]]` UTC date).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a timestamp (expected RFC 3339, e.g. 2026-11-22T09:00:00Z)")]
pub struct TimeParseError(pub String);

impl Time {
    /// The Unix epoch.
    pub const EPOCH: Time = Time(0);

    /// Seconds since the Unix epoch.
    pub const fn unix(self) -> i64 {
        self.0
    }

    /// Parses RFC 3339, or the space-separated UTC forms that job languages use
    /// (`2026-11-22 09:00`, `2026-11-22 09:00:00`, `2026-11-22`).
    pub fn parse(s: &str) -> Result<Time, TimeParseError> {
        let t = s.trim();
        // Four-digit years only: what every job language writes, and what RFC 3339 can print back.
        let b = t.as_bytes();
        if b.len() < 5 || !b[..4].iter().all(u8::is_ascii_digit) || b[4] != b'-' {
            return Err(TimeParseError(s.to_string()));
        }
        if let Ok(dt) = chrono::DateTime::parse_from_rfc3339(t) {
            return Ok(Time(dt.timestamp()));
        }
        for fmt in [
            "%Y-%m-%d %H:%M:%S",
            "%Y-%m-%dT%H:%M:%S",
            "%Y-%m-%d %H:%M",
            "%Y-%m-%dT%H:%M",
        ] {
            if let Ok(dt) = chrono::NaiveDateTime::parse_from_str(t, fmt) {
                return Ok(Time(dt.and_utc().timestamp()));
            }
        }
        if let Ok(d) = chrono::NaiveDate::parse_from_str(t, "%Y-%m-%d") {
            if let Some(dt) = d.and_hms_opt(0, 0, 0) {
                return Ok(Time(dt.and_utc().timestamp()));
            }
        }
        Err(TimeParseError(s.to_string()))
    }

    /// The `YYYY-MM-DD HH:MM:SS` UTC form without a zone suffix.
    pub fn to_naive_string(self) -> String {
        match chrono::DateTime::from_timestamp(self.0, 0) {
            Some(dt) => dt.format("%Y-%m-%d %H:%M:%S").to_string(),
            None => self.0.to_string(),
        }
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match chrono::DateTime::from_timestamp(self.0, 0) {
            Some(dt) => write!(f, "{}", dt.format("%Y-%m-%dT%H:%M:%SZ")),
            None => write!(f, "@{}", self.0),
        }
    }
}

impl FromStr for Time {
    type Err = TimeParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Time::parse(s)
    }
}

impl Serialize for Time {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Time::parse(&s).map_err(serde::de::Error::custom)
    }
}

impl Add<Duration> for Time {
    type Output = Time;
    fn add(self, rhs: Duration) -> Time {
        Time(self.0.saturating_add(rhs.0))
    }
}

impl AddAssign<Duration> for Time {
    fn add_assign(&mut self, rhs: Duration) {
        *self = *self + rhs;
    }
}

impl Sub for Time {
    type Output = Duration;
    fn sub(self, rhs: Time) -> Duration {
        Duration(self.0.saturating_sub(rhs.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rfc3339_and_job_language_forms() {
        let t = Time::parse("2026-11-22T09:00:00Z").unwrap();
        assert_eq!(t, Time(1_795_338_000));
        assert_eq!(Time::parse("2026-11-22 09:00").unwrap(), t);
        assert_eq!(Time::parse("2026-11-22T10:00:00+01:00").unwrap(), t);
        assert_eq!(t.to_string(), "2026-11-22T09:00:00Z");
        assert!(Time::parse("tomorrow").is_err());
        // Regression (fuzzing): a negative year was read but could not be written back.
        assert!(Time::parse("-1013-11-23 02:00").is_err());
        assert!(Time::parse("3-0Θ").is_err());
    }

    #[test]
    fn json_form_is_rfc3339() {
        let t = Time(60);
        assert_eq!(serde_json::to_string(&t).unwrap(), "\"1970-01-01T00:01:00Z\"");
        let back: Time = serde_json::from_str("\"1970-01-01T00:01:00Z\"").unwrap();
        assert_eq!(back, t);
    }
}
