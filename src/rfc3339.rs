//! RFC 3339 timestamps: the kernel's protobuf format (writing) and `expiresAt` (reading).

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// UTC with microseconds (the demo kernel's timestamps), e.g. `2026-11-30T00:10:05.838980Z`.
#[cfg(any(test, feature = "demo"))]
pub(crate) fn format_micros(t: std::time::SystemTime) -> String {
    format_frac(t, 6)
}

/// UTC with milliseconds (log records, as env_logger writes them), e.g.
/// `2026-11-30T00:10:05.838Z`.
pub(crate) fn format_millis(t: std::time::SystemTime) -> String {
    format_frac(t, 3)
}

fn format_frac(t: std::time::SystemTime, digits: usize) -> String {
    let d = t
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = if month <= 2 { y + 1 } else { y };
    let frac = if digits == 3 {
        format!("{:03}", d.subsec_millis())
    } else {
        format!("{:06}", d.subsec_micros())
    };
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{frac}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
    )
}

/// Parse `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)` into Unix milliseconds.
pub(crate) fn parse_millis(s: &str) -> Option<i64> {
    // Everything below slices by byte position: a non-ASCII string is never a timestamp.
    if !s.is_ascii() {
        return None;
    }
    let b = s.as_bytes();
    if b.len() < 20 {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        if !t.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        t.parse().ok()
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    if b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let (h, mi, se) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if b[13] != b':'
        || b[16] != b':'
        || !(1..=12).contains(&mo)
        || !(1..=31).contains(&d)
        || h > 23
        || mi > 59
        || se > 60
    {
        return None;
    }
    let mut i = 19;
    let mut millis = 0i64;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        let frac = s.get(start..i)?;
        if frac.is_empty() {
            return None;
        }
        let ms = format!("{frac:0<3}");
        millis = ms[..3].parse().ok()?;
    }
    let offset_min = match s.get(i..)? {
        "Z" | "z" => 0,
        tz if tz.len() == 6 && (tz.starts_with('+') || tz.starts_with('-')) && &tz[3..4] == ":" => {
            let oh: i64 = tz[1..3].parse().ok()?;
            let om: i64 = tz[4..6].parse().ok()?;
            let v = oh * 60 + om;
            if tz.starts_with('-') { -v } else { v }
        }
        _ => return None,
    };
    let days = days_from_civil(y, mo, d);
    let secs = days * 86400 + h * 3600 + mi * 60 + se - offset_min * 60;
    Some(secs * 1000 + millis)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    #[test]
    fn non_ascii_timestamps_are_refused_without_panicking() {
        assert_eq!(parse_millis("2026-11-30T00:00:00+0é:0"), None);
        assert_eq!(parse_millis("2026-11-30T00:00:00.é"), None);
        assert_eq!(parse_millis("２０２６-11-30T00:00:00Z"), None);
    }

    #[test]
    fn round_trip() {
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_micros(1_795_997_807_849_123);
        let s = format_micros(t);
        assert_eq!(s, "2026-11-30T00:16:47.849123Z");
        assert_eq!(parse_millis(&s), Some(1_795_997_807_849));
        assert_eq!(
            format_micros(SystemTime::UNIX_EPOCH),
            "1970-01-01T00:00:00.000000Z"
        );
        assert_eq!(parse_millis("1970-01-01T01:00:00+01:00"), Some(0));
        assert_eq!(parse_millis("2000-02-29T00:00:00Z"), Some(951_782_400_000));
        assert_eq!(
            parse_millis("2026-11-30T00:13:48Z"),
            Some(1_795_997_628_000)
        );
        for bad in [
            "",
            "2026-13-01T00:00:00Z",
            "2026-11-30 00:00:00",
            "2026-11-30T00:00:00+0100",
            "x026-11-30T00:00:00Z",
        ] {
            assert_eq!(parse_millis(bad), None, "{bad}");
        }
    }
}
