//! NUMERIC: PostgreSQL's binary form (base-10000 digits, weight, sign,
//! display scale) to and from decimal text, exactly. No value ever passes
//! through a float.
//!
//! Reading gives the text PostgreSQL's own `numeric_out` gives (`12.50`
//! keeps its scale, `NaN`, `Infinity`, `-Infinity`), so a key ordered by
//! `col::text` is in the order of the values read. Writing takes any plain
//! decimal text (`-12.5`, `007`, `.5`) and refuses a value the column's
//! scale would round.

use anyhow::{Result, bail};

const POS: u16 = 0x0000;
const NEG: u16 = 0x4000;
const NAN: u16 = 0xC000;
const PINF: u16 = 0xD000;
const NINF: u16 = 0xF000;

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Appends the text of a binary NUMERIC to `out`, as `numeric_out` writes it.
pub fn decode(raw: &[u8], out: &mut String) -> Result<()> {
    if raw.len() < 8 {
        bail!("a NUMERIC of {} bytes is truncated", raw.len());
    }
    let ndigits = be16(raw, 0) as usize;
    let weight = i64::from(be16(raw, 2) as i16);
    let sign = be16(raw, 4);
    let dscale = i64::from(be16(raw, 6));
    if raw.len() != 8 + 2 * ndigits {
        bail!(
            "a NUMERIC of {ndigits} digits takes {} bytes, not {}",
            8 + 2 * ndigits,
            raw.len()
        );
    }
    match sign {
        NAN => {
            out.push_str("NaN");
            return Ok(());
        }
        PINF => {
            out.push_str("Infinity");
            return Ok(());
        }
        NINF => {
            out.push_str("-Infinity");
            return Ok(());
        }
        POS => {}
        NEG => out.push('-'),
        other => bail!("NUMERIC sign {other:#06x} is not one PostgreSQL writes"),
    }
    // Digit `d` of the array weighs 10000^(weight - d); any other is zero.
    let digit = |d: i64| -> u16 {
        if d >= 0 && (d as usize) < ndigits {
            be16(raw, 8 + 2 * d as usize)
        } else {
            0
        }
    };
    let mut d: i64 = 0;
    if weight < 0 {
        out.push('0');
        d = weight + 1;
    } else {
        while d <= weight {
            let g = digit(d);
            if g > 9999 {
                bail!("NUMERIC digit {g} is past 9999");
            }
            if d == 0 {
                push_group(out, g, false);
            } else {
                push_group(out, g, true);
            }
            d += 1;
        }
    }
    if dscale > 0 {
        out.push('.');
        let end = out.len() + dscale as usize;
        while out.len() < end {
            let g = digit(d);
            if g > 9999 {
                bail!("NUMERIC digit {g} is past 9999");
            }
            push_group(out, g, true);
            d += 1;
        }
        out.truncate(end);
    }
    Ok(())
}

/// Appends a base-10000 digit (`0..=9999`) as decimal digits: all four
/// when `padded`, else without leading zeros. Called per digit of every
/// NUMERIC a scan reads, so not through `fmt`.
fn push_group(out: &mut String, g: u16, padded: bool) {
    let digits = [
        b'0' + (g / 1000) as u8,
        b'0' + (g / 100 % 10) as u8,
        b'0' + (g / 10 % 10) as u8,
        b'0' + (g % 10) as u8,
    ];
    let skip = if padded {
        0
    } else {
        digits[..3].iter().take_while(|&&b| b == b'0').count()
    };
    for &b in &digits[skip..] {
        out.push(b as char);
    }
}

/// A decimal text split into its parts: sign, integer digits (no leading
/// zeros), fraction digits as written.
struct Parts<'a> {
    negative: bool,
    int: &'a str,
    frac: &'a str,
}

fn parse(text: &str) -> Option<Parts<'_>> {
    let (negative, rest) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let (int, frac) = match rest.split_once('.') {
        Some((i, f)) => (i, f),
        None => (rest, ""),
    };
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (int.is_empty() && frac.is_empty()) || !digits(int) || !digits(frac) {
        return None;
    }
    Some(Parts {
        negative,
        int: int.trim_start_matches('0'),
        frac,
    })
}

/// Appends the binary NUMERIC of a decimal text (`-12.50`, `NaN`,
/// `Infinity`) to `out`. With `scale` (the column's declared scale), a value
/// with more non-zero fraction digits is refused: PostgreSQL would round it.
pub fn encode(text: &str, scale: Option<i16>, out: &mut Vec<u8>) -> Result<()> {
    let special = match text {
        "NaN" => Some(NAN),
        "Infinity" => Some(PINF),
        "-Infinity" => Some(NINF),
        _ => None,
    };
    if let Some(sign) = special {
        if scale.is_some() {
            bail!("'{text}' cannot be stored in a NUMERIC column with a declared scale");
        }
        for v in [0u16, 0, sign, 0] {
            out.extend_from_slice(&v.to_be_bytes());
        }
        return Ok(());
    }
    let Some(p) = parse(text) else {
        bail!("'{text}' is not a decimal number");
    };
    if let Some(s) = scale {
        let significant = p.frac.trim_end_matches('0').len() as i64;
        // A negative scale rounds to tens, hundreds, …: those integer
        // digits must be zero.
        let low_int = if s < 0 {
            let n = (-i64::from(s)) as usize;
            let tail = &p.int[p.int.len().saturating_sub(n)..];
            tail.bytes().any(|b| b != b'0')
        } else {
            false
        };
        if significant > i64::from(s).max(0) || low_int {
            bail!(
                "'{text}' has more digits after the column's scale ({s}) than it keeps: PostgreSQL would round it"
            );
        }
    }
    let dscale = p.frac.len();
    if dscale > 0x3FFF {
        bail!("'{text}' has more decimal places than NUMERIC keeps (16383)");
    }
    // Align on the decimal point in groups of four digits.
    let lead = (4 - p.int.len() % 4) % 4;
    let mut groups: Vec<u16> = Vec::with_capacity(p.int.len() / 4 + p.frac.len() / 4 + 2);
    let int_digits = std::iter::repeat_n(0u8, lead).chain(p.int.bytes().map(|b| b - b'0'));
    let frac_pad = (4 - p.frac.len() % 4) % 4;
    let frac_digits = p
        .frac
        .bytes()
        .map(|b| b - b'0')
        .chain(std::iter::repeat_n(0u8, frac_pad));
    let mut acc = 0u16;
    for (i, d) in int_digits.enumerate() {
        acc = acc * 10 + u16::from(d);
        if i % 4 == 3 {
            groups.push(acc);
            acc = 0;
        }
    }
    let int_groups = groups.len() as i64;
    for (i, d) in frac_digits.enumerate() {
        acc = acc * 10 + u16::from(d);
        if i % 4 == 3 {
            groups.push(acc);
            acc = 0;
        }
    }
    let mut weight = int_groups - 1;
    let first = groups.iter().position(|&g| g != 0);
    let (weight, digits) = match first {
        None => (0, &groups[..0]),
        Some(f) => {
            weight -= f as i64;
            let last = groups.iter().rposition(|&g| g != 0).unwrap_or(f);
            (weight, &groups[f..=last])
        }
    };
    if digits.len() > u16::MAX as usize || !(-32768..=32767).contains(&weight) {
        bail!("'{text}' is past the range of NUMERIC");
    }
    let sign = if p.negative && !digits.is_empty() {
        NEG
    } else {
        POS
    };
    for v in [
        digits.len() as u16,
        weight as i16 as u16,
        sign,
        dscale as u16,
    ] {
        out.extend_from_slice(&v.to_be_bytes());
    }
    for g in digits {
        out.extend_from_slice(&g.to_be_bytes());
    }
    Ok(())
}

/// The declared scale of a NUMERIC column from its type modifier, if any
/// (eleven bits, signed: PostgreSQL 15 allows a negative scale).
pub fn scale_of(typmod: i32) -> Option<i16> {
    (typmod >= 4).then(|| {
        let s = ((typmod - 4) & 0x7FF) as i16;
        if s & 0x400 != 0 { s - 0x800 } else { s }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(text: &str) -> String {
        let mut raw = Vec::new();
        encode(text, None, &mut raw).unwrap();
        let mut out = String::new();
        decode(&raw, &mut out).unwrap();
        out
    }

    #[test]
    fn text_survives_the_binary_form() {
        for t in [
            "0",
            "12.50",
            "-12.50",
            "99999999999999.99",
            "0.0001",
            "0.00000000000000000001",
            "10000",
            "123456789012345678901234567890.123456789012345678901234567890",
            "NaN",
            "Infinity",
            "-Infinity",
        ] {
            assert_eq!(round_trip(t), t);
        }
        assert_eq!(round_trip("-0.00"), "0.00");
        assert_eq!(round_trip("007.10"), "7.10");
        assert_eq!(round_trip(".5"), "0.5");
        assert_eq!(round_trip("+5."), "5");
    }

    #[test]
    fn rounding_and_garbage_are_refused() {
        let mut v = Vec::new();
        assert!(encode("12.505", Some(2), &mut v).is_err());
        assert!(encode("12.500", Some(2), &mut v).is_ok());
        for bad in ["", "-", ".", "1e5", "1,5", " 1", "0x10", "1.2.3"] {
            assert!(encode(bad, None, &mut v).is_err(), "{bad}");
        }
    }

    #[test]
    fn scale_comes_from_the_type_modifier() {
        assert_eq!(scale_of(((10 << 16) | 2) + 4), Some(2));
        assert_eq!(scale_of(-1), None);
        assert_eq!(scale_of(((5 << 16) | 0x7FE) + 4), Some(-2));
        let mut v = Vec::new();
        assert!(encode("1200", Some(-2), &mut v).is_ok());
        assert!(encode("1250", Some(-2), &mut v).is_err());
    }
}
