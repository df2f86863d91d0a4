//! Watermarks: the typed values a sync cursor is made of (an integer, or a
//! point in time), how two compare, what shape a column's watermarks share,
//! and how far a lookback reaches behind a cursor. Used by `sync`, `load`
//! (which leaves the first cursor) and the apply engine's watermark rule.
//!
//! A time is read from the text every engine gives it: ISO-8601 as SQLite
//! holds it (`2024-01-05T10:00:00.5Z`), and the spelling PostgreSQL's
//! `date`, `timestamp(p)` and `timestamptz` and MySQL's `DATE`,
//! `DATETIME(p)` and `TIMESTAMP` are read as (`2024-01-05 10:00:00.5+00`,
//! a fraction only when there is one, `0044-03-15 BC`, `infinity`). A time
//! with a zone is an instant, compared in UTC; one without is compared as
//! written.

use std::cmp::Ordering;

use anyhow::{Result, bail};

use crate::value::{CellRef, ColumnKind, Value};

/// A watermark as a typed value: an integer, or a point in time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Mark {
    Int(i64),
    /// Nanoseconds since 1970-01-01 00:00:00 (UTC for a time with a zone);
    /// `infinity` and `-infinity` are the largest and least.
    Time(i128),
}

const NANOS: i128 = 1_000_000_000;

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        _ => 28,
    }
}

/// Days from 1970-01-01 to a day of the proleptic Gregorian calendar
/// (year 0 is 1 BC): PostgreSQL's dates reach past chrono's.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A run of ASCII digits at the start of `b` (at most `max`): its value and
/// length.
fn digits(b: &[u8], max: usize) -> (i64, usize) {
    let n = b
        .iter()
        .take(max)
        .take_while(|c| c.is_ascii_digit())
        .count();
    let v = b[..n]
        .iter()
        .fold(0i64, |v, c| v * 10 + i64::from(c - b'0'));
    (v, n)
}

/// Exactly `n` digits at `b[at..]`.
fn fixed(b: &[u8], at: usize, n: usize) -> Option<i64> {
    let (v, got) = digits(b.get(at..)?, n);
    (got == n).then_some(v)
}

/// The zone designator at the end of a time (`Z`, `±HH`, `±HH:MM`) as
/// seconds east of UTC.
fn offset(z: &[u8]) -> Option<i64> {
    let sign = match z {
        [b'Z'] => return Some(0),
        [b'+', ..] => 1,
        [b'-', ..] => -1,
        _ => return None,
    };
    let h = fixed(z, 1, 2)?;
    let m = match z.len() {
        3 => 0,
        6 if z[3] == b':' => fixed(z, 4, 2)?,
        _ => return None,
    };
    (h <= 15 && m <= 59).then_some(sign * (h * 3600 + m * 60))
}

/// A date, or a date and time to the second with an optional fraction (up
/// to nanoseconds) and an optional zone, then an optional ` BC`; `None`
/// when `t` is not one, or not a day of the calendar.
fn parse_time(t: &str) -> Option<i128> {
    match t {
        "infinity" => return Some(i128::MAX),
        "-infinity" => return Some(i128::MIN),
        _ => {}
    }
    let (t, bc) = match t.strip_suffix(" BC") {
        Some(t) => (t, true),
        None => (t, false),
    };
    let b = t.as_bytes();
    // Years of four digits or more: PostgreSQL prints 10000 and later.
    let (y, yn) = digits(b, 7);
    if yn < 4 || b.get(yn) != Some(&b'-') || b.get(yn + 3) != Some(&b'-') {
        return None;
    }
    let (m, d) = (fixed(b, yn + 1, 2)?, fixed(b, yn + 4, 2)?);
    let year = if bc { 1 - y } else { y };
    if !(1..=12).contains(&m) || d < 1 || d > days_in_month(year, m) || (bc && y == 0) {
        return None;
    }
    let days = i128::from(days_from_civil(year, m, d));
    let rest = &b[yn + 6..];
    if rest.is_empty() {
        return Some(days * 86_400 * NANOS);
    }
    if rest.len() < 9 || !matches!(rest[0], b'T' | b' ') || rest[3] != b':' || rest[6] != b':' {
        return None;
    }
    let (h, mi, s) = (fixed(rest, 1, 2)?, fixed(rest, 4, 2)?, fixed(rest, 7, 2)?);
    if h > 23 || mi > 59 || s > 59 {
        return None;
    }
    let mut i = 9;
    let mut frac = 0i128;
    if rest.get(i) == Some(&b'.') {
        let (f, n) = digits(&rest[i + 1..], 10);
        if n == 0 || n > 9 {
            return None;
        }
        frac = i128::from(f) * 10i128.pow(9 - n as u32);
        i += 1 + n;
    }
    let east = match &rest[i..] {
        [] => 0,
        z => offset(z)?,
    };
    let secs = days * 86_400 + i128::from(h * 3600 + mi * 60 + s - east);
    Some(secs * NANOS + frac)
}

/// Reads a watermark as a typed value, borrowing (sync reads one per row).
pub(crate) fn mark(v: CellRef<'_>) -> Result<Mark, String> {
    let t = match v {
        CellRef::Integer(i) => return Ok(Mark::Int(i)),
        CellRef::Null => return Err("the watermark is NULL".into()),
        CellRef::Text(b) => {
            std::str::from_utf8(b).map_err(|_| "the watermark is not UTF-8 text".to_string())?
        }
        other => {
            let v = other.to_value();
            return Err(format!(
                "the watermark {v} is a {}, not an integer or a date or time",
                v.class()
            ));
        }
    };
    if t.is_empty() {
        return Err("the watermark is empty".into());
    }
    parse_time(t).map(Mark::Time).ok_or_else(|| {
        format!(
            "the watermark '{t}' is not a date or time (YYYY-MM-DD[THH:MM:SS[.fff]][Z|±HH[:MM]]) on the calendar, nor an integer"
        )
    })
}

/// Compares two watermark values as typed values; `None` when either is not
/// a watermark or they are of different kinds.
pub fn watermark_cmp(a: &Value, b: &Value) -> Option<Ordering> {
    match (mark(a.as_cell()).ok()?, mark(b.as_cell()).ok()?) {
        (Mark::Int(x), Mark::Int(y)) => Some(x.cmp(&y)),
        (Mark::Time(x), Mark::Time(y)) => Some(x.cmp(&y)),
        _ => None,
    }
}

/// The shape a table's watermarks must share. A column of a date or time
/// type is ordered by the engine as that type, whatever the width of its
/// text (a server drops a fraction's trailing zeros): any time fits. Text
/// is ordered by SQLite as text, which is the order of the times only when
/// they are of one length and one zone, so the first one seen sets those
/// ("2024-1-5" beside "2024-01-05" is refused as mixed widths).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    Int,
    /// Text of this length, with this zone designator (`Z`, `+02:00`, none).
    Text(usize, String),
    /// A column of a date or time type: any time of it.
    Typed,
}

/// The shape a column of `kind` gives its watermarks before any is read:
/// [`Shape::Typed`] for a date or time type, else none (the first
/// watermark sets it).
pub(crate) fn declared_shape(kind: &ColumnKind) -> Option<Shape> {
    matches!(kind, ColumnKind::Date | ColumnKind::Timestamp { .. }).then_some(Shape::Typed)
}

pub(crate) fn shape(v: CellRef<'_>) -> Option<Shape> {
    match v {
        CellRef::Integer(_) => Some(Shape::Int),
        CellRef::Text(t) => {
            let zone = std::str::from_utf8(zone(t)).ok()?;
            Some(Shape::Text(t.len(), zone.to_string()))
        }
        _ => None,
    }
}

impl Shape {
    /// Whether `v` has this shape; asked of every row, so it allocates
    /// nothing.
    pub(crate) fn fits(&self, v: CellRef<'_>) -> bool {
        match (self, v) {
            (Shape::Int, CellRef::Integer(_)) => true,
            (Shape::Text(len, z), CellRef::Text(t)) => t.len() == *len && zone(t) == z.as_bytes(),
            (Shape::Typed, CellRef::Text(_)) => matches!(mark(v), Ok(Mark::Time(_))),
            _ => false,
        }
    }
}

/// The zone designator of ISO-8601 text (`Z`, `+02:00`, or nothing). Two
/// offsets of one length would sort as text in one order and as times in
/// another: one zone per table.
fn zone(t: &[u8]) -> &[u8] {
    let tail = t.get(19..).unwrap_or(b"");
    tail.iter()
        .position(|c| matches!(c, b'Z' | b'+' | b'-'))
        .map_or(b"", |i| &tail[i..])
}

/// `--lookback`: an integer for integer watermarks, a duration (`90s`,
/// `30m`, `12h`, `2d`) for time watermarks.
pub(crate) fn lower_bound(cursor: &Value, lookback: &str) -> Result<Mark> {
    let m = mark(cursor.as_cell())
        .map_err(|e| anyhow::anyhow!("the cursor's watermark cannot be read: {e}"))?;
    let (digits, unit) = lookback.split_at(
        lookback
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(lookback.len()),
    );
    let n: i64 = digits.parse().map_err(|_| {
        anyhow::anyhow!(
            "--lookback '{lookback}' is neither a number nor a duration like 30m, 12h, 2d"
        )
    })?;
    match (m, unit) {
        (Mark::Int(i), "") => Ok(Mark::Int(i.saturating_sub(n))),
        (Mark::Time(t), "s" | "m" | "h" | "d") => {
            let secs = i128::from(n)
                * match unit {
                    "s" => 1,
                    "m" => 60,
                    "h" => 3600,
                    _ => 86_400,
                };
            // `infinity` stays itself, as the engines have it.
            Ok(Mark::Time(if t == i128::MAX || t == i128::MIN {
                t
            } else {
                t.saturating_sub(secs * NANOS)
            }))
        }
        (Mark::Int(_), _) => bail!(
            "--lookback '{lookback}': the watermark is an integer, so give a number of units (e.g. --lookback 100)"
        ),
        (Mark::Time(_), _) => bail!(
            "--lookback '{lookback}': the watermark is a time, so give a duration (e.g. --lookback 30m, 12h, 2d)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watermarks_compare_as_typed_values() {
        let t = |s: &str| Value::Text(s.into());
        assert_eq!(
            watermark_cmp(&Value::Integer(9), &Value::Integer(10)),
            Some(Ordering::Less)
        );
        assert_eq!(
            watermark_cmp(&t("2024-01-05T10:00:00Z"), &t("2024-01-05T11:00:00+02:00")),
            Some(Ordering::Greater)
        );
        assert_eq!(
            watermark_cmp(&t("2024-01-05"), &t("2024-01-05T00:00:01")),
            Some(Ordering::Less)
        );
        assert_eq!(watermark_cmp(&t("2024-1-5"), &t("2024-01-05")), None);
        assert_eq!(watermark_cmp(&t(""), &t("2024-01-05")), None);
        assert_eq!(watermark_cmp(&Value::Integer(1), &t("2024-01-05")), None);
    }

    #[test]
    fn the_engines_own_spellings_of_times_are_read_as_times() {
        let m = |s: &str| mark(CellRef::Text(s.as_bytes()));
        let t = |s: &str| Value::Text(s.into());
        // PostgreSQL's timestamptz in UTC, its fraction's zeros dropped.
        for s in [
            "2024-01-01 00:00:01+00",
            "2024-01-01 00:00:01.5+00",
            "2024-01-01 00:00:01.123456",
            "2024-01-01",
            "0044-03-15 12:00:00.5+00 BC",
            "10000-01-01 00:00:00",
            "2024-01-01T00:00:01+05:30",
            "infinity",
            "-infinity",
        ] {
            assert!(matches!(m(s), Ok(Mark::Time(_))), "{s}: {:?}", m(s));
        }
        // An instant, whatever the zone it is written in.
        assert_eq!(
            watermark_cmp(
                &t("2024-01-01 00:00:00+00"),
                &t("2024-01-01T05:30:00+05:30")
            ),
            Some(Ordering::Equal)
        );
        assert_eq!(
            watermark_cmp(&t("2024-01-01 00:00:01+00"), &t("2024-01-01 00:00:01.5+00")),
            Some(Ordering::Less)
        );
        assert_eq!(
            watermark_cmp(&t("2024-01-01 00:00:01.5"), &t("2024-01-01 00:00:01.25")),
            Some(Ordering::Greater)
        );
        assert_eq!(
            watermark_cmp(&t("0044-03-15 BC"), &t("0001-01-01")),
            Some(Ordering::Less)
        );
        assert_eq!(
            watermark_cmp(&t("infinity"), &t("10000-01-01 00:00:00")),
            Some(Ordering::Greater)
        );
        assert_eq!(
            watermark_cmp(&t("-infinity"), &t("0044-03-15 BC")),
            Some(Ordering::Less)
        );
        for s in [
            "2024-02-30",
            "2024-01-01 24:00:00",
            "2024-01-01 00:00:01+0",
            "0000-01-01 BC",
            "2024-01-01 00:00:01.1234567890",
        ] {
            assert!(m(s).is_err(), "{s}");
        }
    }

    #[test]
    fn a_typed_shape_fits_any_width_of_time() {
        let t = |s: &'static str| CellRef::Text(s.as_bytes());
        assert!(Shape::Typed.fits(t("2024-01-01 00:00:01+00")));
        assert!(Shape::Typed.fits(t("2024-01-01 00:00:01.5+00")));
        assert!(!Shape::Typed.fits(t("soon")));
        assert!(!Shape::Typed.fits(CellRef::Integer(3)));
    }

    #[test]
    fn a_shape_fits_only_text_of_its_length_and_zone() {
        let t = |s: &'static str| CellRef::Text(s.as_bytes());
        let Some(plus) = shape(t("2024-01-05T10:00:00+02:00")) else {
            panic!("no shape")
        };
        assert!(plus.fits(t("2024-01-06T11:30:00+02:00")));
        // The same length, another offset: text order is not time order.
        assert!(!plus.fits(t("2024-01-06T11:30:00-05:00")));
        assert!(!plus.fits(t("2024-01-06T11:30:00.5+02:00")));
        assert!(!plus.fits(CellRef::Integer(7)));
        let Some(z) = shape(t("2024-01-05T10:00:00Z")) else {
            panic!("no shape")
        };
        assert!(z.fits(t("2024-01-05T10:00:01Z")));
        assert!(!z.fits(t("2024-01-05T10:00:01")));
        assert!(shape(CellRef::Integer(1)).is_some_and(|s| s.fits(CellRef::Integer(-4))));
    }

    #[test]
    fn lookback_subtracts_in_the_watermark_kind() -> Result<()> {
        assert_eq!(lower_bound(&Value::Integer(100), "10")?, Mark::Int(90));
        assert_eq!(
            lower_bound(&Value::Text("2024-01-05T10:00:00".into()), "2h")?,
            mark(CellRef::Text(b"2024-01-05T08:00:00")).map_err(anyhow::Error::msg)?
        );
        assert_eq!(
            lower_bound(&Value::Text("2024-01-05 00:30:00+00".into()), "1h")?,
            mark(CellRef::Text(b"2024-01-04 23:30:00+00")).map_err(anyhow::Error::msg)?
        );
        assert!(lower_bound(&Value::Integer(100), "2h").is_err());
        assert!(lower_bound(&Value::Text("2024-01-05".into()), "10").is_err());
        Ok(())
    }
}
