//! Integer time: instants and durations in whole seconds, never floats.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A span of time in whole seconds (may be negative as the result of a subtraction).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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

    /// Whether it is zero seconds long.
    pub const fn is_zero(&self) -> bool {
        self.0 == 0
    }

    /// Parses a duration as people write one on a command line: seconds
    /// (`90`), units (`90s`, `15m`, `2h`, `1d`, `1h30m`, `1w`), or a clock
    /// (`MM:SS`, `HH:MM:SS`, `D-HH:MM:SS` as Slurm's `--time` takes them).
    pub fn parse_human(text: &str) -> Result<Duration, String> {
        let s = text.trim();
        let bad = || format!("`{text}` is not a duration (examples: 90, 90s, 15m, 1h30m, 2d, 01:30:00)");
        if s.is_empty() {
            return Err(bad());
        }
        if let Ok(n) = s.parse::<i64>() {
            return (n >= 0).then_some(Duration(n)).ok_or_else(bad);
        }
        let total = if s.contains(':') {
            let (days, clock) = match s.split_once('-') {
                Some((d, c)) => (d.parse::<i64>().map_err(|_| bad())?, c),
                None => (0, s),
            };
            let parts: Vec<i64> = clock
                .split(':')
                .map(|p| p.parse::<i64>().map_err(|_| bad()))
                .collect::<Result<_, _>>()?;
            let (h, m, sec) = match parts.as_slice() {
                [m, sec] => (0, *m, *sec),
                [h, m, sec] => (*h, *m, *sec),
                _ => return Err(bad()),
            };
            days.checked_mul(86_400)
                .and_then(|d| d.checked_add(h.checked_mul(3600)?))
                .and_then(|t| t.checked_add(m.checked_mul(60)?))
                .and_then(|t| t.checked_add(sec))
        } else {
            let mut total: Option<i64> = Some(0);
            let mut digits = String::new();
            for c in s.chars() {
                if c.is_ascii_digit() {
                    digits.push(c);
                    continue;
                }
                let unit = match c {
                    's' => 1,
                    'm' => 60,
                    'h' => 3600,
                    'd' => 86_400,
                    'w' => 7 * 86_400,
                    _ => return Err(bad()),
                };
                let n: i64 = digits.parse().map_err(|_| bad())?;
                digits.clear();
                total = total.and_then(|t| t.checked_add(n.checked_mul(unit)?));
            }
            if !digits.is_empty() {
                return Err(bad());
            }
            total
        };
        match total {
            Some(t) if t >= 0 => Ok(Duration(t)),
            _ => Err(bad()),
        }
    }

    /// The duration as people read it: `45s`, `9m`, `2h05m`, `3d04h`
    /// (two units at most, the larger first; negative with a `-`).
    pub fn human(self) -> String {
        let sign = if self.0 < 0 { "-" } else { "" };
        let s = self.0.unsigned_abs();
        let (d, h, m, sec) = (s / 86_400, s % 86_400 / 3600, s % 3600 / 60, s % 60);
        match () {
            _ if d > 0 => format!("{sign}{d}d{h:02}h"),
            _ if h > 0 => format!("{sign}{h}h{m:02}m"),
            _ if m > 0 && sec == 0 => format!("{sign}{m}m"),
            _ if m > 0 => format!("{sign}{m}m{sec:02}s"),
            _ => format!("{sign}{sec}s"),
        }
    }
}

impl FromStr for Duration {
    type Err = String;
    fn from_str(s: &str) -> Result<Duration, String> {
        Duration::parse_human(s)
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

/// An instant on the wire: RFC 3339 in UTC, as it is serialized.
#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for Time {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime)))
            .description(Some("an instant, RFC 3339 in UTC"))
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for Time {}

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

impl Sub<Duration> for Time {
    type Output = Time;
    fn sub(self, rhs: Duration) -> Time {
        Time(self.0.saturating_sub(rhs.0))
    }
}

impl Sub for Duration {
    type Output = Duration;
    fn sub(self, rhs: Duration) -> Duration {
        Duration(self.0.saturating_sub(rhs.0))
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
    fn human_durations_read_and_print() {
        for (text, secs) in [
            ("90", 90),
            ("90s", 90),
            ("15m", 900),
            ("1h30m", 5400),
            ("2d", 172_800),
            ("1w", 604_800),
            ("01:30:00", 5400),
            ("05:07", 307),
            ("1-02:00:00", 93_600),
        ] {
            assert_eq!(Duration::parse_human(text), Ok(Duration(secs)), "{text}");
        }
        for bad in ["", "-5", "1x", "h", "1:2:3:4", "99999999999999999999d", "5m3"] {
            assert!(Duration::parse_human(bad).is_err(), "{bad}");
        }
        assert_eq!(Duration(45).human(), "45s");
        assert_eq!(Duration(540).human(), "9m");
        assert_eq!(Duration(547).human(), "9m07s");
        assert_eq!(Duration(7500).human(), "2h05m");
        assert_eq!(Duration(273_600).human(), "3d04h");
        assert_eq!(Duration(-60).human(), "-1m");
    }

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
