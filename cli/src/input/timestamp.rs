//! RFC 3339 timestamps to microseconds since the Unix epoch.
//!
//! Every RFC 3339 date-time from year 0000 to 9999 is read: `Z` or a numeric offset (`+05:00`,
//! `-08:00`), any number of fraction digits (truncated to the microsecond), dates before 1970
//! (negative results), and the leap second `:60`. A space or a lowercase `t` may separate date and
//! time, and a missing zone means UTC, as the console files of older tools have it. The result
//! always fits in an `i64` (±3.2 × 10¹⁷ µs), so differences of two timestamps cannot overflow.

/// Microseconds per second.
const US: i64 = 1_000_000;

/// Days from 1970-01-01 to the given civil date (proleptic Gregorian; Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Reads exactly `n` ASCII digits at `s[at..]`.
fn digits(s: &[u8], at: usize, n: usize) -> Option<i64> {
    let part = s.get(at..at + n)?;
    part.iter().try_fold(0i64, |acc, &b| {
        b.is_ascii_digit().then(|| acc * 10 + i64::from(b - b'0'))
    })
}

/// Parses an RFC 3339 date-time into µs since the epoch; `None` when it is not one.
pub fn parse_time_us(s: &str) -> Option<i64> {
    let s = s.trim().as_bytes();
    let year = digits(s, 0, 4)?;
    let month = digits(s, 5, 2)?;
    let day = digits(s, 8, 2)?;
    let hour = digits(s, 11, 2)?;
    let minute = digits(s, 14, 2)?;
    let second = digits(s, 17, 2)?;
    if s[4] != b'-'
        || s[7] != b'-'
        || !matches!(s[10], b'T' | b't' | b' ')
        || s[13] != b':'
        || s[16] != b':'
    {
        return None;
    }
    if !(1..=12).contains(&month)
        || !(1..=days_in_month(year, month)).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut i = 19;
    let mut micros = 0;
    if s.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while s.get(i).is_some_and(u8::is_ascii_digit) {
            if i - start < 6 {
                micros = micros * 10 + i64::from(s[i] - b'0');
            }
            i += 1;
        }
        let n = i - start;
        if n == 0 {
            return None;
        }
        for _ in n..6 {
            micros *= 10;
        }
    }
    let offset_s = match s.get(i) {
        None => 0,
        Some(b'Z' | b'z') if i + 1 == s.len() => 0,
        Some(&sign @ (b'+' | b'-')) if i + 6 == s.len() && s[i + 3] == b':' => {
            let (h, m) = (digits(s, i + 1, 2)?, digits(s, i + 4, 2)?);
            if h > 23 || m > 59 {
                return None;
            }
            let off = h * 3600 + m * 60;
            if sign == b'+' { off } else { -off }
        }
        _ => return None,
    };
    let seconds =
        days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second - offset_s;
    Some(seconds * US + micros)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_offsets_fractions_and_the_whole_year_range() {
        assert_eq!(
            parse_time_us("2026-11-29T22:09:34.298704Z"),
            Some(1_795_990_174_298_704)
        );
        assert_eq!(
            parse_time_us("2026-11-30T03:09:34.298704+05:00"),
            parse_time_us("2026-11-29T22:09:34.298704Z")
        );
        assert_eq!(
            parse_time_us("2026-11-29T14:09:34.298704-08:00"),
            parse_time_us("2026-11-29T22:09:34.298704Z")
        );
        assert_eq!(parse_time_us("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_time_us("1969-12-31T23:59:59.5Z"), Some(-500_000));
        assert_eq!(
            parse_time_us("1900-01-01T00:00:00Z"),
            Some(-2_208_988_800 * US)
        );
        assert_eq!(
            parse_time_us("0000-01-01T00:00:00Z"),
            Some(-62_167_219_200 * US)
        );
        assert_eq!(
            parse_time_us("9999-12-31T23:59:59.999999999Z"),
            Some(253_402_300_799 * US + 999_999)
        );
        assert_eq!(
            parse_time_us("2024-02-29 12:00:00"),
            Some(1_709_208_000 * US)
        );
        assert_eq!(
            parse_time_us("2016-12-31T23:59:60Z"),
            Some(1_483_228_800 * US)
        );
    }

    #[test]
    fn malformed_dates_are_refused() {
        for bad in [
            "yesterday",
            "",
            "2026-13-01T00:00:00Z",
            "2025-02-29T00:00:00Z",
            "2026-01-01T24:00:00Z",
            "2026-01-01T00:00:00.Z",
            "2026-01-01T00:00:00+5:00",
            "2026-01-01T00:00:00+05:00x",
            "2026-01-01T00:00:00Zjunk",
            "20260101T000000Z",
            "2026-01-01T00:00",
        ] {
            assert_eq!(parse_time_us(bad), None, "{bad:?}");
        }
    }
}
