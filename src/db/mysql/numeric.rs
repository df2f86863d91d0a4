//! DECIMAL: the exact decimal text MySQL sends (`12.50`, `-0.05`,
//! `12345678901234567890.1234`), kept digit for digit, and the text written
//! back checked against the column's precision and scale so that the server
//! never rounds it. No value passes through a float.
//!
//! MySQL prints a DECIMAL with exactly its scale's fraction digits, and has
//! neither `-0` nor `NaN` nor infinities. Writing takes plain decimal text
//! (`-12.5`, `007`, `.5`) or an integer; more non-zero fraction digits than
//! the scale keeps is refused, as are more integer digits than
//! `precision - scale` (strict mode would refuse those too, but later and
//! less clearly), and a negative value in an `UNSIGNED` column.

use anyhow::{Result, bail};

/// Whether `text` is a DECIMAL as MySQL prints it: an optional `-`, digits,
/// and when `scale > 0` a point and exactly `scale` digits.
pub fn is_printed(text: &[u8], scale: u32) -> bool {
    let body = text.strip_prefix(b"-").unwrap_or(text);
    let (int, frac) = match body.iter().position(|&b| b == b'.') {
        Some(p) => (&body[..p], Some(&body[p + 1..])),
        None => (body, None),
    };
    let digits = |s: &[u8]| !s.is_empty() && s.iter().all(u8::is_ascii_digit);
    digits(int)
        && match frac {
            None => scale == 0,
            Some(f) => digits(f) && f.len() == scale as usize,
        }
}

/// The text to send for a DECIMAL(`precision`, `scale`) column, from the
/// decimal text or integer text `value`: the same number, with any
/// trailing zeros past the scale dropped. Refused when the column would
/// round or reject it.
pub fn encode(value: &str, precision: u32, scale: u32, unsigned: bool) -> Result<String> {
    let (negative, body) = match value.as_bytes().first() {
        Some(b'-') => (true, &value[1..]),
        Some(b'+') => (false, &value[1..]),
        _ => (false, value),
    };
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (int.is_empty() && frac.is_empty()) || !digits(int) || !digits(frac) {
        bail!("'{value}' is not a decimal number");
    }
    let int = int.trim_start_matches('0');
    let kept = frac.trim_end_matches('0');
    if kept.len() > scale as usize {
        bail!(
            "'{value}' has more digits after the point than the column's scale ({scale}) keeps: MySQL would round it"
        );
    }
    let int_room = precision.saturating_sub(scale) as usize;
    if int.len() > int_room {
        bail!(
            "'{value}' has more digits before the point than DECIMAL({precision},{scale}) holds ({int_room})"
        );
    }
    let zero = int.is_empty() && kept.is_empty();
    if negative && unsigned && !zero {
        bail!("'{value}' is negative and the column is UNSIGNED");
    }
    let mut out = String::with_capacity(value.len() + 1);
    if negative && !zero {
        out.push('-');
    }
    out.push_str(if int.is_empty() { "0" } else { int });
    // The fraction as written up to the scale, so that `12.5` stays what
    // the caller wrote; the server pads it to the scale itself.
    let frac = &frac[..frac.len().min(scale as usize)];
    if !frac.is_empty() {
        out.push('.');
        out.push_str(frac);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printed_decimals_are_recognised() {
        for (t, s) in [("12.50", 2), ("-0.05", 2), ("0", 0), ("123", 0)] {
            assert!(is_printed(t.as_bytes(), s), "{t}");
        }
        for (t, s) in [
            ("12.5", 2),
            ("12.50", 0),
            ("1e5", 0),
            ("", 0),
            ("-", 0),
            (".5", 1),
        ] {
            assert!(!is_printed(t.as_bytes(), s), "{t}");
        }
    }

    #[test]
    fn what_the_column_holds_is_sent_exactly() -> Result<()> {
        assert_eq!(encode("12.50", 5, 2, false)?, "12.50");
        assert_eq!(encode("12.5", 5, 2, false)?, "12.5");
        assert_eq!(encode("12.500", 5, 2, false)?, "12.50");
        assert_eq!(encode("007", 5, 2, false)?, "7");
        assert_eq!(encode(".5", 5, 2, false)?, "0.5");
        assert_eq!(encode("-0.00", 5, 2, true)?, "0.00");
        assert_eq!(encode("+999.99", 5, 2, false)?, "999.99");
        assert_eq!(
            encode(
                "-99999999999999999999999999999999999.999999999999999999999999999999",
                65,
                30,
                false
            )?,
            "-99999999999999999999999999999999999.999999999999999999999999999999"
        );
        Ok(())
    }

    #[test]
    fn what_the_column_would_change_is_refused() {
        for (v, p, s, u, says) in [
            ("12.505", 5, 2, false, "round"),
            ("1000", 5, 2, false, "before the point"),
            ("-1", 5, 2, true, "UNSIGNED"),
            ("1e3", 5, 2, false, "not a decimal"),
            ("", 5, 2, false, "not a decimal"),
            (".", 5, 2, false, "not a decimal"),
            ("1,5", 5, 2, false, "not a decimal"),
            ("NaN", 5, 2, false, "not a decimal"),
        ] {
            let e = encode(v, p, s, u).expect_err(v).to_string();
            assert!(e.contains(says), "{v}: {e}");
        }
    }
}
