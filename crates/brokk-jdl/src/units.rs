//! Sizes and durations as job languages write them.

use brokk_model::Duration;

const KIB: u64 = 1024;

/// Bytes from `1024`, `230MB`, `5 GB`, `10kB`, `2GiB`. Suffixes are binary
/// (kB = 1024 bytes), as ARC and the batch systems read them.
pub(crate) fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let n: u64 = s[..digits].parse().ok()?;
    let mult = match s[digits..].trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => KIB,
        "m" | "mb" | "mib" => KIB.pow(2),
        "g" | "gb" | "gib" => KIB.pow(3),
        "t" | "tb" | "tib" => KIB.pow(4),
        _ => return None,
    };
    n.checked_mul(mult)
}

/// Bytes with the largest binary suffix that keeps the value exact (`230MB`, `5GB`, `17`).
pub(crate) fn format_size(bytes: u64) -> String {
    for (suffix, mult) in [("TB", KIB.pow(4)), ("GB", KIB.pow(3)), ("MB", KIB.pow(2)), ("kB", KIB)] {
        if bytes >= mult && bytes.is_multiple_of(mult) {
            return format!("{}{suffix}", bytes / mult);
        }
    }
    bytes.to_string()
}

/// A duration from a number in `default_unit` seconds or from `N unit` pairs
/// (`2 hours`, `1 hour 30 minutes`, `90s`) or from `[[D:]H:]M:S`-style colon forms
/// counted from seconds.
pub(crate) fn parse_duration(s: &str, default_unit: i64) -> Option<Duration> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    if let Ok(n) = s.parse::<i64>() {
        return if n >= 0 {
            n.checked_mul(default_unit).map(Duration)
        } else {
            None
        };
    }
    if s.contains(':') {
        let mut total: i64 = 0;
        let parts: Vec<&str> = s.split(':').collect();
        if parts.len() > 4 {
            return None;
        }
        for (i, p) in parts.iter().rev().enumerate() {
            let v: i64 = p.trim().parse().ok().filter(|v| *v >= 0)?;
            let unit = [1, 60, 3600, 86400][i];
            total = total.checked_add(v.checked_mul(unit)?)?;
        }
        return Some(Duration(total));
    }
    let mut total: i64 = 0;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        if digits == 0 {
            return None;
        }
        let n: i64 = rest[..digits].parse().ok()?;
        rest = rest[digits..].trim_start();
        let unit_len = rest.find(|c: char| !c.is_ascii_alphabetic()).unwrap_or(rest.len());
        let unit = match rest[..unit_len].to_ascii_lowercase().as_str() {
            "s" | "sec" | "secs" | "second" | "seconds" => 1,
            "m" | "min" | "mins" | "minute" | "minutes" => 60,
            "h" | "hr" | "hrs" | "hour" | "hours" => 3600,
            "d" | "day" | "days" => 86400,
            "w" | "week" | "weeks" => 604800,
            _ => return None,
        };
        total = total.checked_add(n.checked_mul(unit)?)?;
        rest = rest[unit_len..].trim_start();
    }
    Some(Duration(total))
}

/// Whole minutes when exact, else `N seconds`: what RSL reads back unchanged.
pub(crate) fn format_minutes(d: Duration) -> String {
    if d.0 % 60 == 0 {
        (d.0 / 60).to_string()
    } else {
        format!("{} seconds", d.0)
    }
}

/// A duration with its unit said (`5 minutes`, `90 seconds`): a bare
/// number is minutes to ARC's client but seconds to an A-REX that reads the
/// description as it arrives, so xRSL says which.
pub(crate) fn format_with_unit(d: Duration) -> String {
    if d.0 % 60 == 0 {
        format!("{} minutes", d.0 / 60)
    } else {
        format!("{} seconds", d.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("230MB"), Some(230 * 1024 * 1024));
        assert_eq!(parse_size("5 GB"), Some(5 << 30));
        assert_eq!(parse_size("17"), Some(17));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size("99999999999999999999GB"), None);
        assert_eq!(format_size(5 << 30), "5GB");
        assert_eq!(format_size(1536), "1536");
        assert_eq!(format_size(2048), "2kB");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("65", 60), Some(Duration(3900)));
        assert_eq!(parse_duration("1 hour 30 minutes", 60), Some(Duration(5400)));
        assert_eq!(parse_duration("90s", 60), Some(Duration(90)));
        assert_eq!(parse_duration("1:02:03", 60), Some(Duration(3723)));
        assert_eq!(parse_duration("soon", 60), None);
        assert_eq!(parse_duration("-5", 60), None);
        assert_eq!(format_minutes(Duration(3900)), "65");
        assert_eq!(format_minutes(Duration(61)), "61 seconds");
    }
}
