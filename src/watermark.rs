//! Watermarks: the typed values a sync cursor is made of (an integer, or
//! ISO-8601 text read as a point in time), how two compare, what shape a
//! column's watermarks share, and how far a lookback reaches behind a cursor.
//! Used by `sync` and by the apply engine's watermark rule.

use std::cmp::Ordering;

use anyhow::{Result, bail};
use chrono::{DateTime, NaiveDate, NaiveDateTime};

use crate::value::{CellRef, Value};

/// A watermark as a typed value: an integer, or a point in time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Mark {
    Int(i64),
    Time(NaiveDateTime),
}

/// The shape of ISO-8601 text the parser accepts: a date, or a date and time
/// to the second with an optional fraction, and an optional `Z` or offset.
fn iso_shape(t: &str) -> bool {
    let b = t.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| r.clone().all(|i| b.get(i).is_some_and(u8::is_ascii_digit));
    if b.len() < 10
        || !digits(0..4)
        || b[4] != b'-'
        || !digits(5..7)
        || b[7] != b'-'
        || !digits(8..10)
    {
        return false;
    }
    if b.len() == 10 {
        return true;
    }
    if b.len() < 19
        || !(b[10] == b'T' || b[10] == b' ')
        || !digits(11..13)
        || b[13] != b':'
        || !digits(14..16)
        || b[16] != b':'
        || !digits(17..19)
    {
        return false;
    }
    let mut i = 19;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start || i - start > 9 {
            return false;
        }
    }
    match &b[i..] {
        [] | [b'Z'] => true,
        [s, h1, h2, b':', m1, m2]
            if (*s == b'+' || *s == b'-')
                && [h1, h2, m1, m2].iter().all(|c| c.is_ascii_digit()) =>
        {
            true
        }
        _ => false,
    }
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
                "the watermark {v} is a {}, not an integer or ISO-8601 text",
                v.class()
            ));
        }
    };
    if t.is_empty() {
        return Err("the watermark is empty".into());
    }
    if !iso_shape(t) {
        return Err(format!(
            "the watermark '{t}' is not ISO-8601 (YYYY-MM-DD[THH:MM:SS[.fff]][Z|±HH:MM]) nor an integer"
        ));
    }
    // chrono wants the `T` separator; a space is allowed in the shape.
    let t_sep: std::borrow::Cow<'_, str> = if t.as_bytes().get(10) == Some(&b' ') {
        t.replacen(' ', "T", 1).into()
    } else {
        t.into()
    };
    let parsed = if t.len() == 10 {
        NaiveDate::parse_from_str(t, "%Y-%m-%d")
            .ok()
            .and_then(|d| d.and_hms_opt(0, 0, 0))
    } else if t.ends_with('Z') || t[19..].contains(['+', '-']) {
        DateTime::parse_from_rfc3339(&t_sep)
            .ok()
            .map(|d| d.naive_utc())
    } else {
        NaiveDateTime::parse_from_str(&t_sep, "%Y-%m-%dT%H:%M:%S%.f").ok()
    };
    parsed
        .map(Mark::Time)
        .ok_or_else(|| format!("the watermark '{t}' is not a valid date or time"))
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

/// The shape a table's watermarks must share, set by the first one seen:
/// integers, or text of one length and one zone (so that SQLite's order is the typed
/// order, and "2024-1-5" beside "2024-01-05" is refused as mixed widths).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    Int,
    /// Text of this length, with this zone designator (`Z`, `+02:00`, none).
    Text(usize, String),
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
            let secs = n.saturating_mul(match unit {
                "s" => 1,
                "m" => 60,
                "h" => 3600,
                _ => 86_400,
            });
            Ok(Mark::Time(t - chrono::Duration::seconds(secs)))
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
        let Mark::Time(t) = lower_bound(&Value::Text("2024-01-05T10:00:00".into()), "2h")? else {
            bail!("not a time")
        };
        assert_eq!(t.to_string(), "2024-01-05 08:00:00");
        assert!(lower_bound(&Value::Integer(100), "2h").is_err());
        assert!(lower_bound(&Value::Text("2024-01-05".into()), "10").is_err());
        Ok(())
    }
}
