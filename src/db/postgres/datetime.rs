//! DATE, TIMESTAMP and TIMESTAMPTZ: PostgreSQL's binary forms (days or
//! microseconds since 2000-01-01) to and from text.
//!
//! The text is exactly what PostgreSQL itself prints with `DateStyle = ISO`
//! and `TimeZone = UTC`, which every connection sets:
//!
//! - date: `2024-03-15`;
//! - timestamp: `2024-03-15 13:45:00`, with a fraction only when there is
//!   one, trailing zeros dropped (`13:45:00.5`, `13:45:00.123456`);
//! - timestamptz: the same in UTC, then `+00` (`2024-03-15 13:45:00+00`);
//! - years before 1 AD end in ` BC` (`0044-03-15 BC`), years are at least
//!   four digits, and `infinity` / `-infinity` are themselves.
//!
//! So a key ordered by `col::text COLLATE "C"` is in the order of the text
//! read. Writing takes only that same text back: any other spelling (a `T`,
//! `Z`, another offset) is refused rather than silently reread differently.

use std::fmt::Write as _;

use anyhow::{Result, bail};

/// Days from 1970-01-01 to PostgreSQL's epoch, 2000-01-01.
const EPOCH_DAYS: i64 = 10_957;
const DAY_US: i64 = 86_400_000_000;

/// Which of the three types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    Date,
    Timestamp,
    Timestamptz,
}

/// `(year, month, day)` of a day counted from 1970-01-01 (proleptic
/// Gregorian; year 0 is 1 BC). Not chrono's: its dates end at year
/// 262,143, PostgreSQL's go to 5,874,897, and a date read must be written
/// back exactly whatever its year.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// The inverse of [`civil_from_days`].
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn write_date(out: &mut String, days: i64) -> bool {
    let (y, m, d) = civil_from_days(days + EPOCH_DAYS);
    let bc = y <= 0;
    let year = if bc { 1 - y } else { y };
    let _ = write!(out, "{year:04}-{m:02}-{d:02}");
    bc
}

/// Appends the text of a binary value of `form` to `out`.
pub fn decode(form: Form, raw: &[u8], out: &mut String) -> Result<()> {
    match form {
        Form::Date => {
            let Ok(b) = <[u8; 4]>::try_from(raw) else {
                bail!("a DATE takes 4 bytes, not {}", raw.len());
            };
            match i32::from_be_bytes(b) {
                i32::MAX => out.push_str("infinity"),
                i32::MIN => out.push_str("-infinity"),
                days => {
                    if write_date(out, i64::from(days)) {
                        out.push_str(" BC");
                    }
                }
            }
        }
        Form::Timestamp | Form::Timestamptz => {
            let Ok(b) = <[u8; 8]>::try_from(raw) else {
                bail!("a TIMESTAMP takes 8 bytes, not {}", raw.len());
            };
            match i64::from_be_bytes(b) {
                i64::MAX => out.push_str("infinity"),
                i64::MIN => out.push_str("-infinity"),
                us => {
                    let bc = write_date(out, us.div_euclid(DAY_US));
                    let t = us.rem_euclid(DAY_US);
                    let (secs, frac) = (t / 1_000_000, t % 1_000_000);
                    let _ = write!(
                        out,
                        " {:02}:{:02}:{:02}",
                        secs / 3600,
                        secs / 60 % 60,
                        secs % 60
                    );
                    if frac != 0 {
                        let f = format!("{frac:06}");
                        out.push('.');
                        out.push_str(f.trim_end_matches('0'));
                    }
                    if form == Form::Timestamptz {
                        out.push_str("+00");
                    }
                    if bc {
                        out.push_str(" BC");
                    }
                }
            }
        }
    }
    Ok(())
}

fn number(s: &str, what: &str, text: &str) -> Result<i64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || s.len() > 9 {
        bail!("'{text}': the {what} is not a number");
    }
    Ok(s.parse()?)
}

/// Appends the binary form of `text` (as [`decode`] writes it) to `out`.
pub fn encode(form: Form, text: &str, out: &mut Vec<u8>) -> Result<()> {
    let what = match form {
        Form::Date => "date",
        Form::Timestamp => "timestamp",
        Form::Timestamptz => "timestamptz",
    };
    let infinite = match text {
        "infinity" => Some(true),
        "-infinity" => Some(false),
        _ => None,
    };
    if let Some(up) = infinite {
        match (form, up) {
            (Form::Date, true) => out.extend_from_slice(&i32::MAX.to_be_bytes()),
            (Form::Date, false) => out.extend_from_slice(&i32::MIN.to_be_bytes()),
            (_, true) => out.extend_from_slice(&i64::MAX.to_be_bytes()),
            (_, false) => out.extend_from_slice(&i64::MIN.to_be_bytes()),
        }
        return Ok(());
    }
    let (body, bc) = match text.strip_suffix(" BC") {
        Some(b) => (b, true),
        None => (text, false),
    };
    let body = match form {
        Form::Timestamptz => match body.strip_suffix("+00") {
            Some(b) => b,
            None => bail!("'{text}' is not a {what} in UTC ending in +00"),
        },
        _ => body,
    };
    let (date, time) = match (form, body.split_once(' ')) {
        (Form::Date, None) => (body, None),
        (Form::Timestamp | Form::Timestamptz, Some((d, t))) => (d, Some(t)),
        _ => bail!(
            "'{text}' is not a {what} (YYYY-MM-DD{})",
            if form == Form::Date { "" } else { " HH:MM:SS" }
        ),
    };
    let mut ymd = date.splitn(3, '-');
    let (Some(y), Some(m), Some(d)) = (ymd.next(), ymd.next(), ymd.next()) else {
        bail!("'{text}' is not a {what} (YYYY-MM-DD…)");
    };
    let (y, m, d) = (
        number(y, "year", text)?,
        number(m, "month", text)?,
        number(d, "day", text)?,
    );
    let year = if bc { 1 - y } else { y };
    if !(1..=12).contains(&m) || d < 1 || (bc && y == 0) {
        bail!("'{text}' is not a valid {what}");
    }
    let days = days_from_civil(year, m, d);
    if civil_from_days(days).1 != m {
        bail!("'{text}' is not a valid {what}: that month has no day {d}");
    }
    let days = days - EPOCH_DAYS;
    match time {
        None => {
            let Ok(days) = i32::try_from(days) else {
                bail!("'{text}' is past the range of a date");
            };
            if days == i32::MAX || days == i32::MIN {
                bail!("'{text}' is past the range of a date");
            }
            out.extend_from_slice(&days.to_be_bytes());
        }
        Some(t) => {
            let (hms, frac) = match t.split_once('.') {
                Some((a, f)) => (a, Some(f)),
                None => (t, None),
            };
            let mut parts = hms.splitn(3, ':');
            let (Some(h), Some(mi), Some(s)) = (parts.next(), parts.next(), parts.next()) else {
                bail!("'{text}' is not a {what} (… HH:MM:SS)");
            };
            let (h, mi, s) = (
                number(h, "hour", text)?,
                number(mi, "minute", text)?,
                number(s, "second", text)?,
            );
            if h > 23 || mi > 59 || s > 59 {
                bail!("'{text}' is not a valid {what}");
            }
            let us = match frac {
                None => 0,
                Some(f) if !f.is_empty() && f.len() <= 6 => {
                    number(f, "fraction", text)? * 10_i64.pow(6 - f.len() as u32)
                }
                Some(_) => bail!("'{text}': a {what} keeps at most 6 fraction digits"),
            };
            let total = days
                .checked_mul(DAY_US)
                .and_then(|v| v.checked_add((h * 3600 + mi * 60 + s) * 1_000_000 + us))
                .filter(|v| *v != i64::MAX && *v != i64::MIN);
            let Some(total) = total else {
                bail!("'{text}' is past the range of a {what}");
            };
            out.extend_from_slice(&total.to_be_bytes());
        }
    }
    // Only the spelling read back is accepted: `2024-1-5` or `…00.50`
    // would be stored, but read as other text.
    let mut back = String::new();
    decode(
        form,
        &out[out.len() - if time.is_some() { 8 } else { 4 }..],
        &mut back,
    )?;
    if back != text {
        let n = if time.is_some() { 8 } else { 4 };
        out.truncate(out.len() - n);
        bail!("'{text}' would be stored and read back as '{back}'; write it that way");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(form: Form, text: &str) -> Result<String> {
        let mut raw = Vec::new();
        encode(form, text, &mut raw)?;
        let mut out = String::new();
        decode(form, &raw, &mut out)?;
        Ok(out)
    }

    #[test]
    fn text_survives_the_binary_form() -> Result<()> {
        for (form, t) in [
            (Form::Date, "2000-01-01"),
            (Form::Date, "1999-12-31"),
            (Form::Date, "2024-02-29"),
            (Form::Date, "0044-03-15 BC"),
            (Form::Date, "0001-01-01"),
            (Form::Date, "0001-12-31 BC"),
            (Form::Date, "infinity"),
            (Form::Timestamp, "2024-03-15 13:45:00"),
            (Form::Timestamp, "2024-03-15 13:45:00.5"),
            (Form::Timestamp, "1999-12-31 23:59:59.999999"),
            (Form::Timestamp, "10000-01-01 00:00:00"),
            (Form::Timestamptz, "1970-01-01 00:00:00+00"),
            (Form::Timestamptz, "0044-03-15 12:00:00.5+00 BC"),
            (Form::Timestamptz, "-infinity"),
        ] {
            assert_eq!(round_trip(form, t)?, t);
        }
        Ok(())
    }

    #[test]
    fn other_spellings_are_refused() {
        for (form, t) in [
            (Form::Date, "2023-02-29"),
            (Form::Date, "2024-1-05"),
            (Form::Date, "0000-01-01 BC"),
            (Form::Timestamp, "2024-03-15T13:45:00"),
            (Form::Timestamp, "2024-03-15 13:45:00.50"),
            (Form::Timestamp, "2024-03-15 24:00:00"),
            (Form::Timestamp, "2024-03-15 13:45:00+00"),
            (Form::Timestamptz, "2024-03-15 13:45:00Z"),
            (Form::Timestamptz, "2024-03-15 13:45:00+02"),
            (Form::Timestamptz, "2024-03-15 13:45:00"),
        ] {
            assert!(round_trip(form, t).is_err(), "{t}");
        }
    }
}
