//! DATE, DATETIME, TIMESTAMP and TIME: the binary protocol's parts (year
//! to microsecond) to and from text, in the spelling the PostgreSQL engine
//! reads `date`, `timestamp` and `timestamptz` as, so that the same instant
//! is the same value on either engine:
//!
//! - DATE: `2024-03-15`;
//! - DATETIME: `2024-03-15 13:45:00`, a fraction only when there is one,
//!   its trailing zeros dropped (`13:45:00.5`, `13:45:00.123456`): a
//!   PostgreSQL `timestamp`;
//! - TIMESTAMP: the same in UTC (every session's `time_zone` is `+00:00`),
//!   then `+00`: a PostgreSQL `timestamptz`;
//! - TIME: `[-]HH:MM:SS[.fraction]`, hours past 24 as they are (`838:59:59`,
//!   `-01:30:00`): within a day, PostgreSQL's `time` text.
//!
//! Years run from 1 to 9999. What is not a date on the calendar is refused
//! on reading, never carried: the zero date `0000-00-00`, a zero month or
//! day (`2024-00-10`, which a server outside strict mode stores), a day the
//! month does not have (`2024-02-30`, stored under `ALLOW_INVALID_DATES`),
//! and year 0 (no year of PostgreSQL's calendar spells it alike). Writing
//! takes only the spelling reading gives, and refuses more fraction digits
//! than the column keeps (the server would round or cut them).

use std::fmt::Write as _;

use mysql::Value;

/// Which of the four types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    Date,
    DateTime,
    Timestamp,
    Time,
}

impl Form {
    fn what(self) -> &'static str {
        match self {
            Form::Date => "DATE",
            Form::DateTime => "DATETIME",
            Form::Timestamp => "TIMESTAMP",
            Form::Time => "TIME",
        }
    }
}

/// The largest TIME: 838:59:59.999999 either way.
const TIME_MAX_HOURS: u32 = 838;

fn days_in_month(y: u32, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (y.is_multiple_of(4) && !y.is_multiple_of(100)) || y.is_multiple_of(400) => 29,
        _ => 28,
    }
}

/// A temporal value as the server would print it, for messages about a
/// value that cannot be read (`0000-00-00`, `2024-02-30 10:00:00`).
pub fn raw(v: &Value) -> String {
    match *v {
        Value::Date(y, m, d, 0, 0, 0, 0) => format!("{y:04}-{m:02}-{d:02}"),
        Value::Date(y, m, d, h, mi, s, 0) => {
            format!("{y:04}-{m:02}-{d:02} {h:02}:{mi:02}:{s:02}")
        }
        Value::Date(y, m, d, h, mi, s, us) => {
            format!("{y:04}-{m:02}-{d:02} {h:02}:{mi:02}:{s:02}.{us:06}")
        }
        Value::Time(neg, days, h, mi, s, us) => format!(
            "{}{:02}:{mi:02}:{s:02}.{us:06}",
            if neg { "-" } else { "" },
            days * 24 + u32::from(h)
        ),
        ref other => other.as_sql(true),
    }
}

fn push_fraction(out: &mut String, us: u32) {
    if us != 0 {
        let digits = format!("{us:06}");
        out.push('.');
        out.push_str(digits.trim_end_matches('0'));
    }
}

/// Appends the text of a temporal value of `form` to `out`, or says why it
/// is not a value cutover carries.
pub fn decode(form: Form, v: &Value, out: &mut String) -> Result<(), String> {
    match (form, v) {
        (Form::Time, &Value::Time(neg, days, h, mi, s, us)) => {
            let hours = days * 24 + u32::from(h);
            if hours > TIME_MAX_HOURS || mi > 59 || s > 59 || us > 999_999 {
                return Err(format!("{} is not a TIME", raw(v)));
            }
            let zero = hours == 0 && mi == 0 && s == 0 && us == 0;
            if neg && !zero {
                out.push('-');
            }
            let _ = write!(out, "{hours:02}:{mi:02}:{s:02}");
            push_fraction(out, us);
        }
        (Form::Date | Form::DateTime | Form::Timestamp, &Value::Date(y, m, d, h, mi, s, us)) => {
            let (y, m, d) = (u32::from(y), u32::from(m), u32::from(d));
            if y == 0 && m == 0 && d == 0 {
                return Err(format!(
                    "{} is the zero date, which is no date: set it to NULL or a real date",
                    raw(v)
                ));
            }
            if m == 0 || d == 0 {
                return Err(format!(
                    "{} has a zero month or day, which is no date: correct it",
                    raw(v)
                ));
            }
            if m > 12 || d > days_in_month(y, m) {
                return Err(format!(
                    "{} is not a date on the calendar: correct it",
                    raw(v)
                ));
            }
            if y == 0 || y > 9999 {
                return Err(format!(
                    "{} is outside the years 0001 to 9999 that cutover carries",
                    raw(v)
                ));
            }
            if h > 23 || mi > 59 || s > 59 || us > 999_999 {
                return Err(format!("{} is not a time of day", raw(v)));
            }
            let _ = write!(out, "{y:04}-{m:02}-{d:02}");
            if form != Form::Date {
                let _ = write!(out, " {h:02}:{mi:02}:{s:02}");
                push_fraction(out, us);
                if form == Form::Timestamp {
                    out.push_str("+00");
                }
            } else if (h, mi, s, us) != (0, 0, 0, 0) {
                return Err(format!("{} is a DATE with a time of day", raw(v)));
            }
        }
        (_, Value::Bytes(b)) => {
            return Err(format!(
                "{} came as text '{}', not as a {}",
                form.what(),
                String::from_utf8_lossy(b),
                form.what()
            ));
        }
        (_, other) => {
            return Err(format!("{} is not a {}", other.as_sql(true), form.what()));
        }
    }
    Ok(())
}

fn number(text: &str, part: &str, whole: &str) -> Result<u32, String> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) || text.len() > 9 {
        return Err(format!("'{whole}': the {part} is not a number"));
    }
    text.parse().map_err(|_| format!("'{whole}': bad {part}"))
}

/// `HH:MM:SS[.fraction]` into its parts and the fraction's digit count.
fn clock(t: &str, whole: &str) -> Result<(u32, u32, u32, u32, usize), String> {
    let (hms, frac) = match t.split_once('.') {
        Some((a, f)) => (a, Some(f)),
        None => (t, None),
    };
    let mut parts = hms.splitn(3, ':');
    let (Some(h), Some(mi), Some(s)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(format!("'{whole}' has no HH:MM:SS"));
    };
    let (h, mi, s) = (
        number(h, "hour", whole)?,
        number(mi, "minute", whole)?,
        number(s, "second", whole)?,
    );
    let (us, digits) = match frac {
        None => (0, 0),
        Some(f) if !f.is_empty() && f.len() <= 6 => (
            number(f, "fraction", whole)? * 10u32.pow(6 - f.len() as u32),
            f.len(),
        ),
        Some(_) => return Err(format!("'{whole}': at most 6 fraction digits")),
    };
    Ok((h, mi, s, us, digits))
}

/// The value to bind for the text `text` of `form`, written to a column
/// keeping `precision` fraction digits. Only the spelling [`decode`] gives
/// is accepted: another one (`2024-1-5`, `…T…`, `…00.50`, another offset)
/// would be stored, but read back as other text.
pub fn encode(form: Form, text: &str, precision: u32) -> Result<Value, String> {
    let what = form.what();
    let value = match form {
        Form::Time => {
            let (neg, body) = match text.strip_prefix('-') {
                Some(b) => (true, b),
                None => (false, text),
            };
            let (h, mi, s, us, digits) = clock(body, text)?;
            if digits > precision as usize {
                return Err(format!(
                    "'{text}' has {digits} fraction digits; the TIME({precision}) column keeps {precision}"
                ));
            }
            if h > TIME_MAX_HOURS || mi > 59 || s > 59 {
                return Err(format!("'{text}' is not a TIME (-838:59:59 to 838:59:59)"));
            }
            Value::Time(neg, h / 24, (h % 24) as u8, mi as u8, s as u8, us)
        }
        _ => {
            let body = match form {
                Form::Timestamp => text
                    .strip_suffix("+00")
                    .ok_or_else(|| format!("'{text}' is not a TIMESTAMP in UTC ending in +00"))?,
                _ => text,
            };
            let (date, time) = match (form, body.split_once(' ')) {
                (Form::Date, None) => (body, None),
                (Form::DateTime | Form::Timestamp, Some((d, t))) => (d, Some(t)),
                _ => {
                    return Err(format!(
                        "'{text}' is not a {what} (YYYY-MM-DD{})",
                        if form == Form::Date { "" } else { " HH:MM:SS" }
                    ));
                }
            };
            let mut ymd = date.splitn(3, '-');
            let (Some(y), Some(m), Some(d)) = (ymd.next(), ymd.next(), ymd.next()) else {
                return Err(format!("'{text}' is not a {what} (YYYY-MM-DD…)"));
            };
            let (y, m, d) = (
                number(y, "year", text)?,
                number(m, "month", text)?,
                number(d, "day", text)?,
            );
            if !(1..=9999).contains(&y)
                || !(1..=12).contains(&m)
                || d < 1
                || d > days_in_month(y, m)
            {
                return Err(format!(
                    "'{text}' is not a {what} of the years 0001 to 9999"
                ));
            }
            let (h, mi, s, us) = match time {
                None => (0, 0, 0, 0),
                Some(t) => {
                    let (h, mi, s, us, digits) = clock(t, text)?;
                    if digits > precision as usize {
                        return Err(format!(
                            "'{text}' has {digits} fraction digits; the {what}({precision}) column keeps {precision}"
                        ));
                    }
                    if h > 23 || mi > 59 || s > 59 {
                        return Err(format!("'{text}' is not a valid {what}"));
                    }
                    (h, mi, s, us)
                }
            };
            Value::Date(y as u16, m as u8, d as u8, h as u8, mi as u8, s as u8, us)
        }
    };
    let mut back = String::new();
    decode(form, &value, &mut back)?;
    if back != text {
        return Err(format!(
            "'{text}' would be stored and read back as '{back}'; write it that way"
        ));
    }
    Ok(value)
}

/// The text the server prints for a TIME of `precision` digits (its
/// fraction padded to the precision): what a TIME key is ordered by.
pub fn time_as_printed(text: &str, precision: u32) -> String {
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    if precision == 0 {
        return whole.to_string();
    }
    format!("{whole}.{frac:0<width$}", width = precision as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(form: Form, v: Value) -> Result<String, String> {
        let mut out = String::new();
        decode(form, &v, &mut out).map(|()| out)
    }

    #[test]
    fn parts_read_as_postgresql_spells_them() -> Result<(), String> {
        assert_eq!(
            text(Form::Date, Value::Date(2024, 2, 29, 0, 0, 0, 0))?,
            "2024-02-29"
        );
        assert_eq!(
            text(Form::DateTime, Value::Date(2024, 3, 15, 13, 45, 0, 0))?,
            "2024-03-15 13:45:00"
        );
        assert_eq!(
            text(Form::DateTime, Value::Date(1, 1, 1, 0, 0, 0, 500_000))?,
            "0001-01-01 00:00:00.5"
        );
        assert_eq!(
            text(Form::Timestamp, Value::Date(2038, 1, 19, 3, 14, 7, 999_999))?,
            "2038-01-19 03:14:07.999999+00"
        );
        assert_eq!(
            text(Form::Time, Value::Time(false, 34, 22, 59, 59, 0))?,
            "838:59:59"
        );
        assert_eq!(
            text(Form::Time, Value::Time(true, 0, 1, 30, 0, 120_000))?,
            "-01:30:00.12"
        );
        assert_eq!(
            text(Form::Time, Value::Time(true, 0, 0, 0, 0, 0))?,
            "00:00:00"
        );
        Ok(())
    }

    #[test]
    fn what_is_not_a_date_is_refused_on_reading() {
        for (form, v, says) in [
            (Form::Date, Value::Date(0, 0, 0, 0, 0, 0, 0), "zero date"),
            (
                Form::DateTime,
                Value::Date(0, 0, 0, 0, 0, 0, 0),
                "zero date",
            ),
            (
                Form::Date,
                Value::Date(2024, 0, 10, 0, 0, 0, 0),
                "zero month or day",
            ),
            (
                Form::Date,
                Value::Date(2024, 5, 0, 0, 0, 0, 0),
                "zero month or day",
            ),
            (
                Form::Date,
                Value::Date(2023, 2, 29, 0, 0, 0, 0),
                "not a date",
            ),
            (
                Form::Date,
                Value::Date(2024, 4, 31, 0, 0, 0, 0),
                "not a date",
            ),
            (
                Form::Date,
                Value::Date(0, 1, 1, 0, 0, 0, 0),
                "years 0001 to 9999",
            ),
            (Form::Time, Value::Time(false, 35, 0, 0, 0, 0), "not a TIME"),
            (
                Form::Date,
                Value::Bytes(b"2024-01-01".to_vec()),
                "came as text",
            ),
        ] {
            let e = text(form, v.clone()).expect_err(&raw(&v));
            assert!(e.contains(says), "{}: {e}", raw(&v));
        }
        assert_eq!(raw(&Value::Date(2024, 0, 10, 0, 0, 0, 0)), "2024-00-10");
    }

    #[test]
    fn text_survives_the_parts() -> Result<(), String> {
        for (form, t) in [
            (Form::Date, "2024-02-29"),
            (Form::Date, "0001-01-01"),
            (Form::Date, "9999-12-31"),
            (Form::DateTime, "2024-03-15 13:45:00"),
            (Form::DateTime, "2024-03-15 13:45:00.5"),
            (Form::DateTime, "1999-12-31 23:59:59.999999"),
            (Form::Timestamp, "1970-01-01 00:00:01+00"),
            (Form::Time, "838:59:59.999999"),
            (Form::Time, "-838:59:59"),
            (Form::Time, "00:00:00"),
            (Form::Time, "25:00:00.25"),
        ] {
            let v = encode(form, t, 6)?;
            assert_eq!(text(form, v)?, t);
        }
        Ok(())
    }

    #[test]
    fn other_spellings_and_lost_digits_are_refused_on_writing() {
        for (form, t, p) in [
            (Form::Date, "2023-02-29", 0),
            (Form::Date, "2024-1-05", 0),
            (Form::Date, "0000-01-01", 0),
            (Form::Date, "0001-01-01 BC", 0),
            (Form::Date, "10000-01-01", 0),
            (Form::DateTime, "2024-03-15T13:45:00", 0),
            (Form::DateTime, "2024-03-15 13:45:00.50", 6),
            (Form::DateTime, "2024-03-15 13:45:00.5", 0),
            (Form::DateTime, "2024-03-15 24:00:00", 0),
            (Form::DateTime, "2024-03-15 13:45:00+00", 0),
            (Form::Timestamp, "2024-03-15 13:45:00", 0),
            (Form::Timestamp, "2024-03-15 13:45:00+02", 0),
            (Form::Timestamp, "2024-03-15 13:45:00.123+00", 2),
            (Form::Time, "839:00:00", 0),
            (Form::Time, "005:00:00", 0),
            (Form::Time, "-00:00:00", 0),
            (Form::Time, "10:00:00.5", 0),
            (Form::Time, "10:60:00", 0),
        ] {
            assert!(encode(form, t, p).is_err(), "{t}");
        }
    }

    #[test]
    fn a_time_key_is_compared_as_the_server_prints_it() {
        assert_eq!(time_as_printed("13:45:00.5", 3), "13:45:00.500");
        assert_eq!(time_as_printed("13:45:00", 2), "13:45:00.00");
        assert_eq!(time_as_printed("-838:59:59", 0), "-838:59:59");
    }
}
