//! Durations (`"500ms"`, `"10s"`, `"2m"`, `"1d"`) and sizes (`"256MiB"`) as written
//! in topology files.

use std::time::Duration;

/// Parse `"250ms"`, `"10s"`, `"2m"`, `"1h"`, `"1d"` (24 hours: event-time
/// days, with no calendar or time zone).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    match parse_duration_or_zero(text)? {
        d if d.is_zero() => Err(format!("`{text}` must be a positive duration")),
        d => Ok(d),
    }
}

/// Like [`parse_duration`], for settings where zero means "none" (a
/// watermark delay, an allowed lateness): `"0"`, `"0s"` are accepted.
pub fn parse_duration_or_zero(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("`{text}` is not a duration (e.g. \"500ms\", \"10s\", \"2m\")"))?;
    let secs = match unit.trim() {
        "ms" => value / 1000.0,
        "s" | "" => value,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        "d" => value * 86_400.0,
        other => {
            return Err(format!(
                "unknown duration unit `{other}` in `{text}`; use ms, s, m, h or d"
            ));
        }
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!("`{text}` must be a positive duration"));
    }
    // `from_secs_f64` panics past u64::MAX seconds.
    Duration::try_from_secs_f64(secs).map_err(|_| format!("`{text}` is too long a duration"))
}

/// Parse a duration that may be negative (`"-5s"`, `"10s"`, `"0"`) into
/// microseconds: the bounds of an interval join.
pub fn parse_signed_duration(text: &str) -> Result<i64, String> {
    let t = text.trim();
    let (sign, rest) = match t.strip_prefix('-') {
        Some(rest) => (-1, rest),
        None => (1, t.strip_prefix('+').unwrap_or(t)),
    };
    let d = parse_duration_or_zero(rest).map_err(|e| e.replace(rest, text))?;
    i64::try_from(d.as_micros())
        .map(|us| sign * us)
        .map_err(|_| format!("`{text}` is too long a duration"))
}

/// Parse `"64MiB"`, `"1GiB"`, `"512MB"`, `"1048576"` into bytes.
pub fn parse_size(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: usize = num
        .parse()
        .map_err(|_| format!("`{text}` is not a size (e.g. \"256MiB\")"))?;
    let mult = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "KB" | "kB" => 1000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        other => {
            return Err(format!(
                "unknown size unit `{other}` in `{text}`; use KiB, MiB, GiB, KB, MB or GB"
            ));
        }
    };
    value
        .checked_mul(mult)
        .ok_or_else(|| format!("`{text}` is too large"))
}

/// `bytes` as a person reads a size: the unit `parse_size` takes back
/// when exact (`64MiB`), else two decimals and the exact byte count
/// (`64.06 MiB (67174400 bytes)`), so two sizes that differ never read
/// the same.
pub fn format_size(bytes: u64) -> String {
    for (unit, size) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if bytes >= size {
            if bytes.is_multiple_of(size) {
                return format!("{}{unit}", bytes / size);
            }
            return format!("{:.2} {unit} ({bytes} bytes)", bytes as f64 / size as f64);
        }
    }
    format!("{bytes} bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_back_exactly_or_with_their_bytes() {
        assert_eq!(format_size(64 << 20), "64MiB");
        assert_eq!(parse_size(&format_size(64 << 20)), Ok(64 << 20));
        assert_eq!(
            format_size((64 << 20) + 65536),
            "64.06 MiB (67174400 bytes)"
        );
        assert_eq!(format_size(3 << 30), "3GiB");
        assert_eq!(format_size(1500), "1.46 KiB (1500 bytes)");
        assert_eq!(format_size(12), "12 bytes");
    }

    #[test]
    fn durations_and_sizes() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1d"), Ok(Duration::from_secs(86_400)));
        assert!(parse_duration("0s").is_err());
        assert_eq!(parse_duration_or_zero("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration_or_zero("0ms"), Ok(Duration::ZERO));
        assert_eq!(parse_duration_or_zero("4s"), Ok(Duration::from_secs(4)));
        assert!(parse_duration_or_zero("-1s").is_err());
        assert!(parse_duration("ten seconds").is_err());
        assert!(parse_duration("5 weeks").is_err());
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("1GB"), Ok(1_000_000_000));
        assert!(parse_size("12 parsecs").is_err());
    }

    /// A duration past u64::MAX seconds made `Duration::from_secs_f64`
    /// panic while the topology was parsed (found writing the `topology`
    /// fuzz target).
    #[test]
    fn durations_too_long_for_a_duration_are_errors() {
        for text in ["99999999999999999999", "18446744073709551616s", "1e400"] {
            assert!(parse_duration_or_zero(text).is_err(), "{text}");
        }
        assert_eq!(
            parse_duration("99999999999999999999h"),
            Err("`99999999999999999999h` is too long a duration".to_string())
        );
        assert!(parse_signed_duration("-99999999999999999999m").is_err());
    }
}
