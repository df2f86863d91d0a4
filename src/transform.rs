//! Column transforms: a forward function (source → target) and its reverse,
//! bound by one law: `reverse(forward(x))` has the same value as `x` for every
//! `x` that forward accepts.
//!
//! Money is parsed by a strict grammar into integer minor units with checked
//! `i64` arithmetic and rendered back through `rust_decimal`; no value ever
//! passes through floating point, and nothing is rounded, trimmed or clamped.
//! Anything the grammar does not accept is a [`Reject`] naming the reason.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};

use rust_decimal::Decimal;

use crate::value::{CellRef, Value};

/// The largest scale whose factor `10^scale` fits an `i64`.
pub const MAX_SCALE: u32 = 18;

/// A column's transform, resolved from the spec.
#[derive(Clone, Debug, PartialEq)]
pub enum Transform {
    /// The value is carried as it is, storage class included.
    Copy,
    /// Decimal text ↔ integer minor units at a fixed scale (`"12.50"` ↔ `1250`).
    DecimalToMinor { scale: u32, typed: TypedSource },
    /// A bijective code table: `forward` maps codes to words, `reverse` back.
    Map {
        forward: BTreeMap<String, String>,
        reverse: BTreeMap<String, String>,
        /// The codes as [`packed`] integers with their words, when there are
        /// a few and each is short: the per-row lookup, one integer compare
        /// per code.
        packed: Option<Vec<(u64, String)>>,
        /// The codes are integers (an `active` flag of 1 and 0, a status
        /// number, a boolean read as 0/1): forward takes integer values,
        /// reverse writes integers back. `None` for text codes.
        integers: Option<Vec<(i64, String)>>,
    },
    /// A target-only column holding one value (`value = "USD"`): the
    /// source has no such column; reverse requires the target row to hold
    /// exactly this value and writes nothing back.
    Constant(Value),
    /// A MySQL `SET` (`'a,b'`: labels in declaration order, each once) ↔
    /// an array as PostgreSQL prints it (`{a,b}`), both spelt in the
    /// labels' declaration order so each side has one spelling per value.
    SetToArray(SetLabels),
}

/// The labels of a `set_to_array` column and every value's two spellings,
/// indexed by the value's bit mask (bit `i` for label `i`): a value is one
/// of at most 2^[`SET_MAX_LABELS`], so each is spelt once, here, and a row's
/// lookup allocates nothing.
#[derive(Clone, Debug, PartialEq)]
pub struct SetLabels {
    pub labels: Vec<String>,
    /// The SET text of each mask (`a,b`).
    set: Vec<String>,
    /// The array text of each mask (`{a,"b c"}`).
    array: Vec<String>,
    /// Mask of each array text, for reverse.
    masks: std::collections::HashMap<String, usize>,
}

/// The most labels a `set_to_array` column may have: every value of the
/// SET is spelt in advance (2^16 values).
pub const SET_MAX_LABELS: usize = 16;

impl SetLabels {
    /// Refuses labels MySQL would not keep apart in a SET (empty, holding
    /// a comma, twice) and more than [`SET_MAX_LABELS`].
    pub fn new(labels: Vec<String>) -> Result<SetLabels, String> {
        if labels.is_empty() || labels.len() > SET_MAX_LABELS {
            return Err(format!(
                "set_to_array needs the SET's labels in declaration order, 1 to {SET_MAX_LABELS} of them (labels = [\"a\", \"b\"]); {} given",
                labels.len()
            ));
        }
        for (i, l) in labels.iter().enumerate() {
            if l.is_empty() || l.contains(',') {
                return Err(format!(
                    "set_to_array label '{l}' is empty or holds a comma, which a SET value cannot tell apart"
                ));
            }
            if labels[..i].contains(l) {
                return Err(format!("set_to_array label '{l}' is listed twice"));
            }
        }
        let n = 1usize << labels.len();
        let members = |mask: usize| (0..labels.len()).filter(move |i| mask & (1 << i) != 0);
        let set: Vec<String> = (0..n)
            .map(|m| {
                members(m)
                    .map(|i| labels[i].as_str())
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .collect();
        let array: Vec<String> = (0..n)
            .map(|m| {
                let items: Vec<String> = members(m).map(|i| array_item(&labels[i])).collect();
                format!("{{{}}}", items.join(","))
            })
            .collect();
        let masks = array
            .iter()
            .enumerate()
            .map(|(m, a)| (a.clone(), m))
            .collect();
        Ok(SetLabels {
            labels,
            set,
            array,
            masks,
        })
    }

    /// The mask of a SET text: labels in declaration order, each once.
    fn mask(&self, text: &[u8]) -> Option<usize> {
        if text.is_empty() {
            return Some(0);
        }
        let mut mask = 0usize;
        let mut next = 0usize;
        for part in text.split(|&b| b == b',') {
            let i = next
                + self.labels[next..]
                    .iter()
                    .position(|l| l.as_bytes() == part)?;
            mask |= 1 << i;
            next = i + 1;
        }
        Some(mask)
    }

    fn shown(&self) -> String {
        let l: Vec<String> = self.labels.iter().map(|l| format!("'{l}'")).collect();
        format!("({})", l.join(","))
    }
}

/// One element of an array as PostgreSQL's `array_out` prints it: quoted
/// when empty, `NULL` in any case, or holding a brace, comma, quote,
/// backslash or white space, with `"` and `\` escaped inside the quotes.
fn array_item(label: &str) -> String {
    let quote = label.is_empty()
        || label.eq_ignore_ascii_case("null")
        || label.chars().any(|c| {
            matches!(
                c,
                '{' | '}' | ',' | '"' | '\\' | ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c'
            )
        });
    if !quote {
        return label.to_string();
    }
    let mut out = String::from("\"");
    for c in label.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// Whether a `decimal_to_minor` column's source is an exact decimal type of
/// its engine (PostgreSQL's `NUMERIC`, MySQL's `DECIMAL`), learnt when the
/// source's catalogue is read ([`TypedSource::mark`]). Such a column prints
/// every value with its own scale, so `12.5000` in a `numeric(19,4)` is
/// exactly 1250 cents at scale 2: zeros past the spec's scale are dropped
/// before the grammar, and only a non-zero digit there is refused. Decimal
/// text (a TEXT column) keeps its grammar: `'12.5000'` there is refused.
/// Unmarked, the strict reading holds, which refuses and never accepts
/// more.
#[derive(Debug, Default)]
pub struct TypedSource(AtomicBool);

impl TypedSource {
    pub fn mark(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    pub fn get(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

impl Clone for TypedSource {
    fn clone(&self) -> Self {
        TypedSource(AtomicBool::new(self.get()))
    }
}

impl PartialEq for TypedSource {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

/// Why a value cannot be carried across.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reject(pub String);

impl fmt::Display for Reject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A text of at most seven bytes as one integer: its bytes, then its length
/// in the top byte, so that two texts are equal exactly when their integers
/// are. `None` for a longer text.
#[inline]
fn packed(b: &[u8]) -> Option<u64> {
    if b.len() > 7 {
        return None;
    }
    let mut x = (b.len() as u64) << 56;
    for (i, &c) in b.iter().enumerate() {
        x |= u64::from(c) << (8 * i);
    }
    Some(x)
}

#[cold]
fn reject<T>(why: impl Into<String>) -> Result<T, Reject> {
    Err(Reject(why.into()))
}

impl Transform {
    /// Builds a `map` transform, refusing a table that is not bijective.
    /// Its codes are text.
    pub fn map(forward: BTreeMap<String, String>) -> Result<Transform, String> {
        Transform::map_of(forward, false)
    }

    /// Builds a `map` transform whose codes are integers (`integers`) or
    /// text, refusing a table that is not bijective or an integer code that
    /// is not a plain integer.
    pub fn map_of(forward: BTreeMap<String, String>, integers: bool) -> Result<Transform, String> {
        let mut reverse = BTreeMap::new();
        for (code, word) in &forward {
            if let Some(first) = reverse.insert(word.clone(), code.clone()) {
                return Err(format!(
                    "map is not reversible: codes '{first}' and '{code}' both map to '{word}'; give each code its own word"
                ));
            }
        }
        let integers = match integers {
            false => None,
            true => Some(
                forward
                    .iter()
                    .map(|(c, w)| match c.parse::<i64>() {
                        Ok(i) if i.to_string() == *c => Ok((i, w.clone())),
                        _ => Err(format!(
                            "map code '{c}' is not a plain integer, but the codes are integers (codes = \"integer\"); write it as 1, 0, -2, or say codes = \"text\""
                        )),
                    })
                    .collect::<Result<Vec<_>, String>>()?,
            ),
        };
        let packed = (forward.len() <= 16 && integers.is_none())
            .then(|| {
                forward
                    .iter()
                    .map(|(c, w)| packed(c.as_bytes()).map(|p| (p, w.clone())))
                    .collect()
            })
            .flatten();
        Ok(Transform::Map {
            forward,
            reverse,
            packed,
            integers,
        })
    }

    pub fn name(&self) -> &'static str {
        match self {
            Transform::Copy => "copy",
            Transform::DecimalToMinor { .. } => "decimal_to_minor",
            Transform::Map { .. } => "map",
            Transform::Constant(_) => "constant",
            Transform::SetToArray(_) => "set_to_array",
        }
    }

    /// Source value → target value, borrowing (the hot path of reconcile,
    /// check and load): the forwarded cell, and whether the source text is
    /// already canonical (what reverse would write back).
    #[inline]
    pub fn forward_ref<'a>(&'a self, v: CellRef<'a>) -> Result<(CellRef<'a>, bool), Reject> {
        let mut out = CellRef::Null;
        let canonical = self.forward_into(v, &mut out)?;
        Ok((out, canonical))
    }

    /// [`Transform::forward_ref`] writing the forwarded cell in place: the
    /// merge's per-row step, where moving the cell out of a returned tuple
    /// stalled on reading back what had just been written.
    #[inline]
    pub fn forward_into<'a>(
        &'a self,
        v: CellRef<'a>,
        out: &mut CellRef<'a>,
    ) -> Result<bool, Reject> {
        match (self, v) {
            (Transform::Copy, v) => {
                *out = v;
                Ok(true)
            }
            (Transform::Constant(c), _) => {
                *out = c.as_cell();
                Ok(true)
            }
            (_, CellRef::Null) => {
                *out = CellRef::Null;
                Ok(true)
            }
            (Transform::SetToArray(s), CellRef::Text(t)) => match s.mask(t) {
                Some(m) => {
                    *out = CellRef::Text(s.array[m].as_bytes());
                    Ok(true)
                }
                None => reject(format!(
                    "{} is not a value of SET{}: labels in that order, each once, joined by ','",
                    v.to_value(),
                    s.shown()
                )),
            },
            (Transform::SetToArray(_), other) => {
                let v = other.to_value();
                reject(format!(
                    "expected the text of a SET, found {} {v}",
                    v.class()
                ))
            }
            (Transform::DecimalToMinor { scale, typed }, CellRef::Text(t)) => {
                let parsed = match typed.get() {
                    true => parse_typed_decimal(t, *scale),
                    false => parse_decimal_bytes(t, *scale),
                };
                parsed.map(|d| {
                    *out = CellRef::Integer(d.minor);
                    d.canonical
                })
            }
            // SQLite stores money in NUMERIC or REAL columns as an INTEGER
            // or a REAL, whatever the application wrote. An integer is a
            // whole amount; a REAL is read through its shortest decimal form
            // that reads back to the same bits, and must fit the scale.
            (Transform::DecimalToMinor { scale, .. }, CellRef::Integer(i)) => i
                .checked_mul(10i64.pow(*scale))
                .map(|m| {
                    *out = CellRef::Integer(m);
                    true
                })
                .ok_or_else(|| {
                    Reject(format!(
                        "the integer {i} at scale {scale} is past the 64-bit range of minor units"
                    ))
                }),
            (Transform::DecimalToMinor { scale, .. }, CellRef::Real(r)) => real_to_minor(r, *scale)
                .map(|m| {
                    *out = CellRef::Integer(m);
                    true
                }),
            (Transform::DecimalToMinor { .. }, other) => {
                let v = other.to_value();
                reject(format!("expected decimal text, found {} {v}", v.class()))
            }
            (
                Transform::Map {
                    integers: Some(codes),
                    ..
                },
                CellRef::Integer(i),
            ) => match codes.iter().find(|(c, _)| *c == i) {
                Some((_, word)) => {
                    *out = CellRef::Text(word.as_bytes());
                    Ok(true)
                }
                None => reject(format!("code {i} is not in the map")),
            },
            (
                Transform::Map {
                    integers: Some(_), ..
                },
                other,
            ) => {
                let v = other.to_value();
                reject(format!(
                    "expected an integer code, found {} {v} (the map's codes are integers; say codes = \"text\" to map texts)",
                    v.class()
                ))
            }
            (
                Transform::Map {
                    forward, packed: p, ..
                },
                CellRef::Text(code),
            ) => {
                let word = match (p, packed(code)) {
                    (Some(codes), Some(c)) => codes.iter().find(|(k, _)| *k == c).map(|(_, w)| w),
                    // A code too long to pack is in no packed table.
                    (Some(_), None) => None,
                    (None, _) => std::str::from_utf8(code).ok().and_then(|c| forward.get(c)),
                };
                match word {
                    Some(word) => {
                        *out = CellRef::Text(word.as_bytes());
                        Ok(true)
                    }
                    None => reject(format!("code {} is not in the map", v.to_value())),
                }
            }
            (Transform::Map { .. }, other) => {
                let v = other.to_value();
                let hint = match other {
                    CellRef::Integer(_) => {
                        " (the map's codes are text; for integer codes such as 1 and 0 say codes = \"integer\")"
                    }
                    _ => "",
                };
                reject(format!(
                    "expected a text code, found {} {v}{hint}",
                    v.class()
                ))
            }
        }
    }

    /// Source value → target value.
    pub fn forward(&self, v: &Value) -> Result<Value, Reject> {
        self.forward_ref(v.as_cell()).map(|(c, _)| c.to_value())
    }

    /// Target value → source value, in canonical form.
    pub fn reverse(&self, v: &Value) -> Result<Value, Reject> {
        match (self, v) {
            (Transform::Copy, v) => Ok(v.clone()),
            // Nothing is written back; the source has no such column.
            (Transform::Constant(c), v) if v == c => Ok(Value::Null),
            (Transform::Constant(c), v) => reject(format!(
                "the target holds {v} where the spec's constant is {c}; the source has no column to keep it in"
            )),
            (_, Value::Null) => Ok(Value::Null),
            (Transform::DecimalToMinor { scale, .. }, Value::Integer(minor)) => {
                Ok(Value::Text(render_minor(*minor, *scale)))
            }
            (Transform::DecimalToMinor { .. }, other) => reject(format!(
                "expected integer minor units, found {} {other}",
                other.class()
            )),
            (
                Transform::Map {
                    reverse, integers, ..
                },
                Value::Text(word),
            ) => match reverse.get(word) {
                // An integer code is written back as the integer it is.
                Some(code) if integers.is_some() => code
                    .parse::<i64>()
                    .map(Value::Integer)
                    .map_err(|_| Reject(format!("map code '{code}' is not an integer"))),
                Some(code) => Ok(Value::Text(code.clone())),
                None => reject(format!(
                    "word {v} is not in the map, so no source code carries it"
                )),
            },
            (Transform::Map { .. }, other) => reject(format!(
                "expected a text word, found {} {other}",
                other.class()
            )),
            (Transform::SetToArray(s), Value::Text(array)) => match s.masks.get(array) {
                Some(&m) => Ok(Value::Text(s.set[m].clone())),
                None => reject(format!(
                    "{v} is not an array of labels of SET{} in that order, each once (as PostgreSQL prints it), so no SET value carries it",
                    s.shown()
                )),
            },
            (Transform::SetToArray(_), other) => reject(format!(
                "expected the text of an array, found {} {other}",
                other.class()
            )),
        }
    }
}

/// Minor units of a REAL: its shortest round-trip decimal form (what Rust's
/// `Display` writes for an `f64`, never an exponent) parsed by the strict
/// grammar. `0.99` is 99 at scale 2; `0.1 + 0.2`, whose shortest form is
/// `0.30000000000000004`, is refused, as is anything not finite.
pub fn real_to_minor(r: f64, scale: u32) -> Result<i64, Reject> {
    if !r.is_finite() {
        return reject(format!("the real {r} is not an amount"));
    }
    let text = format!("{r}");
    parse_decimal(&text, scale).map(|p| p.minor).map_err(|_| {
        Reject(format!(
            "the real {text} has more than {scale} decimal places (or is past the 64-bit range): the floating point value is not the amount it was meant to be"
        ))
    })
}

/// A parsed decimal: its minor units and whether the text was canonical.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parsed {
    pub minor: i64,
    pub canonical: bool,
}

/// Parses `-?[0-9]+(\.[0-9]{1,scale})?` (ASCII digits only) into minor units.
///
/// Rejected, never repaired: exponents (`1e3`), `NaN`, `inf`, a leading `+`,
/// surrounding or inner whitespace, `.5`, `5.`, `12,50`, non-ASCII digits,
/// more fraction digits than the scale, and anything past the `i64` range.
/// Runs in time linear in the text, however long.
pub fn parse_decimal(text: &str, scale: u32) -> Result<Parsed, Reject> {
    parse_decimal_bytes(text.as_bytes(), scale)
}

/// [`parse_decimal`] of a value's bytes as stored: a well-formed decimal is
/// ASCII, so the hot path checks no UTF-8; anything else must be UTF-8 to
/// be explained.
pub fn parse_decimal_bytes(b: &[u8], scale: u32) -> Result<Parsed, Reject> {
    if let Some(p) = parse_plain(b, scale) {
        return Ok(p);
    }
    let text = std::str::from_utf8(b)
        .map_err(|_| Reject("expected decimal text, found bytes that are not UTF-8".into()))?;
    parse_decimal_explained(text, scale)
}

/// [`parse_decimal_bytes`] of a value an exact decimal column printed
/// (see [`TypedSource`]): zeros past `scale` are dropped first, so
/// `12.5000` is `12.50`; a non-zero digit past it is refused, naming how
/// many places the value really has.
pub fn parse_typed_decimal(b: &[u8], scale: u32) -> Result<Parsed, Reject> {
    if let Some(p) = parse_plain(b, scale) {
        return Ok(p);
    }
    let s = scale as usize;
    if let Some(dot) = b.iter().position(|&c| c == b'.')
        && b.len() - dot - 1 > s
        && b[dot + 1..].iter().all(u8::is_ascii_digit)
    {
        let frac = &b[dot + 1..];
        let places = frac.iter().rposition(|&c| c != b'0').map_or(0, |i| i + 1);
        if places > s {
            return reject(format!(
                "'{}' has {places} decimal places once its trailing zeros are dropped, past the scale of {scale}; it would have to be rounded",
                String::from_utf8_lossy(b)
            ));
        }
        // Only zeros past the scale: the value is the text cut there (at
        // scale 0, without its point).
        let end = if s == 0 { dot } else { dot + 1 + s };
        return parse_decimal_bytes(&b[..end], scale);
    }
    parse_decimal_bytes(b, scale)
}

/// The hot path: one pass over the bytes of a well-formed decimal. `None`
/// for anything else, which [`parse_decimal_explained`] then parses again
/// to say exactly what is wrong.
fn parse_plain(b: &[u8], scale: u32) -> Option<Parsed> {
    let (negative, digits) = match b.first()? {
        b'-' => (true, &b[1..]),
        _ => (false, b),
    };
    let mut acc: i64 = 0;
    let mut int_len = 0usize;
    let mut frac_len: Option<usize> = None;
    for &c in digits {
        match c {
            b'0'..=b'9' => {
                acc = acc.checked_mul(10)?.checked_sub(i64::from(c - b'0'))?;
                match &mut frac_len {
                    Some(n) => *n += 1,
                    None => int_len += 1,
                }
            }
            b'.' if frac_len.is_none() => frac_len = Some(0),
            _ => return None,
        }
    }
    let frac = frac_len.unwrap_or(0);
    if int_len == 0 || frac_len == Some(0) || frac > scale as usize {
        return None;
    }
    for _ in frac..scale as usize {
        acc = acc.checked_mul(10)?;
    }
    let minor = if negative { acc } else { acc.checked_neg()? };
    let canonical = !(int_len > 1 && digits[0] == b'0')
        && frac == scale as usize
        && (frac_len.is_some() || scale == 0)
        && !(negative && minor == 0);
    Some(Parsed { minor, canonical })
}

/// The strict grammar again, slowly, with the reason for every rejection.
fn parse_decimal_explained(text: &str, scale: u32) -> Result<Parsed, Reject> {
    let shown = || {
        if text.len() > 40 {
            format!(
                "'{}…' ({} bytes)",
                &text[..text.floor_char_boundary(40)],
                text.len()
            )
        } else {
            format!("'{text}'")
        }
    };
    if text.is_empty() {
        return reject("empty text is not a decimal");
    }
    let (negative, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (int_part, frac_part) = match body.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (body, None),
    };
    let check_digits = |part: &str, what: &str| -> Result<(), Reject> {
        if let Some(c) = part.chars().find(|c| !c.is_ascii_digit()) {
            let why = if c.is_whitespace() {
                "contains whitespace".to_string()
            } else if c.is_numeric() {
                format!("contains the non-ASCII digit {c:?}")
            } else {
                format!("contains {c:?}")
            };
            return reject(format!("{} is not a plain decimal: {what} {why}", shown()));
        }
        Ok(())
    };
    if int_part.is_empty() {
        return reject(format!(
            "{} is not a plain decimal: no digit before the point",
            shown()
        ));
    }
    check_digits(int_part, "the integer part")?;
    if let Some(f) = frac_part {
        if f.is_empty() {
            return reject(format!(
                "{} is not a plain decimal: no digit after the point",
                shown()
            ));
        }
        check_digits(f, "the fraction")?;
        if f.len() > scale as usize {
            return reject(format!(
                "{} has {} decimal places, past the scale of {scale}; it would have to be rounded",
                shown(),
                f.len()
            ));
        }
    }
    let out_of_range = || {
        Reject(format!(
            "{} is past the 64-bit range of minor units",
            shown()
        ))
    };
    // Accumulate negatively so that i64::MIN itself is representable.
    let mut acc: i64 = 0;
    let digits = int_part.bytes().chain(frac_part.unwrap_or("").bytes());
    for d in digits {
        acc = acc
            .checked_mul(10)
            .and_then(|a| a.checked_sub(i64::from(d - b'0')))
            .ok_or_else(out_of_range)?;
    }
    let pad = scale as usize - frac_part.map_or(0, str::len);
    for _ in 0..pad {
        acc = acc.checked_mul(10).ok_or_else(out_of_range)?;
    }
    let minor = if negative {
        acc
    } else {
        acc.checked_neg().ok_or_else(out_of_range)?
    };
    // What render_minor would write: no leading zero, exactly `scale`
    // fraction digits, no minus sign on zero. Decided from the text's shape,
    // so the hot path allocates nothing.
    let canonical = !(int_part.len() > 1 && int_part.starts_with('0'))
        && frac_part.map_or(0, str::len) == scale as usize
        && (frac_part.is_some() || scale == 0)
        && !(negative && minor == 0);
    Ok(Parsed { minor, canonical })
}

/// Renders minor units as canonical decimal text: `1250` at scale 2 is `"12.50"`.
pub fn render_minor(minor: i64, scale: u32) -> String {
    Decimal::new(minor, scale).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn minor(t: &str) -> Result<i64, Reject> {
        parse_decimal(t, 2).map(|p| p.minor)
    }

    #[test]
    fn running_example_amounts_parse_exactly() {
        assert_eq!(minor("12.50"), Ok(1250));
        assert_eq!(minor("7.50"), Ok(750));
        assert_eq!(minor("20.00"), Ok(2000));
        assert_eq!(minor("-0.01"), Ok(-1));
        assert_eq!(minor("0"), Ok(0));
    }

    #[test]
    fn every_rejected_form_is_rejected() {
        for bad in [
            "1e3",
            "NaN",
            "nan",
            "inf",
            "-inf",
            "+7.50",
            " 7.50",
            "7.50 ",
            "7. 50",
            ".5",
            "5.",
            "12,50",
            "12.345",
            "",
            "-",
            "--1",
            "1-",
            "0x10",
            "１２.５０",
            "١٢.٥٠",
            "12.5.0",
            "1_000",
            "99999999999999999.00",
            "92233720368547758.08",
            "-92233720368547758.09",
        ] {
            assert!(minor(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn reasons_name_what_is_wrong() {
        assert!(
            minor("12.345")
                .unwrap_err()
                .0
                .contains("past the scale of 2")
        );
        assert!(
            minor("１２.５０")
                .unwrap_err()
                .0
                .contains("non-ASCII digit")
        );
        assert!(minor(" 7.50").unwrap_err().0.contains("whitespace"));
        assert!(
            minor("92233720368547758.08")
                .unwrap_err()
                .0
                .contains("64-bit")
        );
    }

    #[test]
    fn i64_limits_are_exact() {
        assert_eq!(minor("92233720368547758.07"), Ok(i64::MAX));
        assert_eq!(minor("-92233720368547758.08"), Ok(i64::MIN));
        assert_eq!(render_minor(i64::MIN, 2), "-92233720368547758.08");
    }

    #[test]
    fn very_long_digit_strings_are_refused_quickly() {
        let long = "9".repeat(1_000_000);
        let err = minor(&long).unwrap_err();
        assert!(err.0.contains("64-bit"), "{err}");
        let zeros = format!("{}1.00", "0".repeat(1_000_000));
        assert_eq!(
            parse_decimal(&zeros, 2),
            Ok(Parsed {
                minor: 100,
                canonical: false
            })
        );
    }

    #[test]
    fn non_canonical_text_is_value_equal_but_flagged() {
        assert_eq!(
            parse_decimal("12.5", 2),
            Ok(Parsed {
                minor: 1250,
                canonical: false
            })
        );
        assert_eq!(
            parse_decimal("-0.00", 2),
            Ok(Parsed {
                minor: 0,
                canonical: false
            })
        );
        assert_eq!(
            parse_decimal("012.50", 2),
            Ok(Parsed {
                minor: 1250,
                canonical: false
            })
        );
        assert_eq!(
            parse_decimal("12.50", 2),
            Ok(Parsed {
                minor: 1250,
                canonical: true
            })
        );
    }

    #[test]
    fn scale_zero_takes_no_fraction() {
        assert_eq!(parse_decimal("12", 0).map(|p| p.minor), Ok(12));
        assert!(parse_decimal("12.0", 0).is_err());
        assert_eq!(render_minor(12, 0), "12");
    }

    #[test]
    fn decimal_reads_reals_and_integers_only_when_they_are_the_amount() {
        let t = Transform::DecimalToMinor {
            scale: 2,
            typed: TypedSource::default(),
        };
        assert_eq!(t.forward(&Value::Real(12.5)), Ok(Value::Integer(1250)));
        assert_eq!(t.forward(&Value::Real(0.99)), Ok(Value::Integer(99)));
        assert_eq!(t.forward(&Value::Integer(25)), Ok(Value::Integer(2500)));
        assert!(
            t.forward(&Value::Real(0.1 + 0.2))
                .unwrap_err()
                .0
                .contains("0.30000000000000004")
        );
        assert!(t.forward(&Value::Real(f64::INFINITY)).is_err());
        assert!(t.forward(&Value::Real(1e300)).is_err());
        assert!(t.forward(&Value::Integer(i64::MAX / 10)).is_err());
        assert!(t.reverse(&Value::Text("1250".into())).is_err());
        assert_eq!(t.forward(&Value::Null), Ok(Value::Null));
    }

    /// A `numeric(19,4)` prints `12.5000`: exactly 1250 cents at scale 2,
    /// canonical (reverse writes `12.50`, which the column stores as
    /// `12.5000`); `12.3450` is refused for its one real digit past the
    /// scale. Decimal text keeps its grammar.
    #[test]
    fn an_exact_decimal_column_s_zeros_past_the_scale_are_exact() {
        let typed = TypedSource::default();
        typed.mark();
        let t = Transform::DecimalToMinor { scale: 2, typed };
        let fwd = |s: &str| {
            t.forward_ref(CellRef::Text(s.as_bytes()))
                .map(|(c, canon)| (c.to_value(), canon))
        };
        assert_eq!(fwd("12.5000"), Ok((Value::Integer(1250), true)));
        assert_eq!(fwd("-0.0100"), Ok((Value::Integer(-1), true)));
        assert_eq!(fwd("0.0000"), Ok((Value::Integer(0), true)));
        assert_eq!(fwd("12.50"), Ok((Value::Integer(1250), true)));
        assert_eq!(fwd("12.5"), Ok((Value::Integer(1250), false)));
        assert_eq!(
            fwd("92233720368547758.0700"),
            Ok((Value::Integer(i64::MAX), true))
        );
        let why = fwd("12.3450").unwrap_err().0;
        assert!(
            why.contains("'12.3450' has 3 decimal places once its trailing zeros are dropped, past the scale of 2"),
            "{why}"
        );
        assert!(fwd("12.0001").unwrap_err().0.contains("4 decimal places"));
        assert!(
            fwd("92233720368547758.0800")
                .unwrap_err()
                .0
                .contains("64-bit")
        );
        for bad in ["NaN", "Infinity", "-Infinity", "1e3", "12.50 ", "12.", ""] {
            assert!(fwd(bad).is_err(), "{bad:?} was accepted");
        }
        assert_eq!(parse_typed_decimal(b"12.000", 0).map(|p| p.minor), Ok(12));
        assert!(parse_typed_decimal(b"12.5", 0).is_err());
        assert_eq!(
            parse_typed_decimal(b"12.345000", 3).map(|p| p.minor),
            Ok(12345)
        );
        // Text keeps its grammar: the same spelling in a TEXT column is refused.
        let text = Transform::DecimalToMinor {
            scale: 2,
            typed: TypedSource::default(),
        };
        let why = text.forward(&Value::Text("12.5000".into())).unwrap_err().0;
        assert!(
            why.contains("has 4 decimal places, past the scale of 2"),
            "{why}"
        );
    }

    #[test]
    fn map_with_two_codes_for_one_word_is_refused() {
        let m = BTreeMap::from([("A".into(), "active".into()), ("B".into(), "active".into())]);
        let err = Transform::map(m).unwrap_err();
        assert!(err.contains("'A' and 'B' both map to 'active'"), "{err}");
    }

    #[test]
    fn map_rejects_unknown_codes_both_ways() -> Result<(), String> {
        let m = Transform::map(BTreeMap::from([("A".into(), "active".into())]))?;
        assert_eq!(
            m.forward(&Value::Text("A".into())),
            Ok(Value::Text("active".into()))
        );
        assert!(m.forward(&Value::Text("Z".into())).is_err());
        assert!(m.forward(&Value::Text("а".into())).is_err()); // Cyrillic look-alike
        assert!(m.reverse(&Value::Text("gone".into())).is_err());
        assert!(m.forward(&Value::Integer(1)).is_err());
        Ok(())
    }

    /// The per-row lookup compares codes as packed integers: a code found
    /// is exactly the code given, whatever its length, trailing NUL bytes
    /// included, and a table with a code too long to pack looks codes up by
    /// text.
    #[test]
    fn an_integer_map_takes_integers_and_writes_integers_back() -> Result<(), String> {
        let m = Transform::map_of(
            BTreeMap::from([
                ("1".into(), "active".into()),
                ("0".into(), "inactive".into()),
            ]),
            true,
        )?;
        assert_eq!(
            m.forward(&Value::Integer(1)),
            Ok(Value::Text("active".into()))
        );
        assert_eq!(
            m.reverse(&Value::Text("inactive".into())),
            Ok(Value::Integer(0))
        );
        assert!(
            m.forward(&Value::Integer(2))
                .unwrap_err()
                .0
                .contains("code 2 is not in the map")
        );
        let text = m.forward(&Value::Text("1".into())).unwrap_err().0;
        assert!(
            text.contains("expected an integer code") && text.contains("codes = \"text\""),
            "{text}"
        );
        let t = Transform::map(BTreeMap::from([("1".into(), "active".into())]))?;
        let hint = t.forward(&Value::Integer(1)).unwrap_err().0;
        assert!(hint.contains("codes = \"integer\""), "{hint}");
        assert!(Transform::map_of(BTreeMap::from([("01".into(), "x".into())]), true).is_err());
        Ok(())
    }

    #[test]
    fn map_finds_exactly_the_code_given() -> Result<(), String> {
        let word = |m: &Transform, s: &str| match m.forward_ref(CellRef::Text(s.as_bytes())) {
            Ok((CellRef::Text(w), _)) => Some(String::from_utf8(w.to_vec()).unwrap()),
            _ => None,
        };
        let short = Transform::map(BTreeMap::from([
            ("".into(), "empty".into()),
            ("A".into(), "one".into()),
            ("A\0".into(), "one and nul".into()),
            ("ABCDEFG".into(), "seven".into()),
        ]))?;
        assert!(matches!(
            short,
            Transform::Map {
                packed: Some(_),
                ..
            }
        ));
        let long = Transform::map(BTreeMap::from([
            ("A".into(), "one".into()),
            ("ABCDEFGH".into(), "eight".into()),
        ]))?;
        assert!(matches!(long, Transform::Map { packed: None, .. }));
        for (m, code, want) in [
            (&short, "", Some("empty")),
            (&short, "A", Some("one")),
            (&short, "A\0", Some("one and nul")),
            (&short, "A\0\0", None),
            (&short, "\0", None),
            (&short, "ABCDEFG", Some("seven")),
            (&short, "ABCDEFGH", None),
            (&short, "B", None),
            (&long, "A", Some("one")),
            (&long, "ABCDEFGH", Some("eight")),
            (&long, "ABCDEFG", None),
        ] {
            assert_eq!(word(m, code).as_deref(), want, "code {code:?}");
        }
        Ok(())
    }

    fn sakila() -> Transform {
        Transform::SetToArray(
            SetLabels::new(
                [
                    "Trailers",
                    "Commentaries",
                    "Deleted Scenes",
                    "Behind the Scenes",
                ]
                .map(String::from)
                .to_vec(),
            )
            .unwrap(),
        )
    }

    #[test]
    fn a_set_is_the_array_postgresql_prints_and_back() {
        let t = sakila();
        let text = |s: &str| Value::Text(s.into());
        for (set, array) in [
            ("", "{}"),
            ("Trailers", "{Trailers}"),
            ("Trailers,Deleted Scenes", "{Trailers,\"Deleted Scenes\"}"),
            (
                "Trailers,Commentaries,Deleted Scenes,Behind the Scenes",
                "{Trailers,Commentaries,\"Deleted Scenes\",\"Behind the Scenes\"}",
            ),
        ] {
            assert_eq!(t.forward(&text(set)), Ok(text(array)), "{set}");
            assert_eq!(t.reverse(&text(array)), Ok(text(set)), "{array}");
        }
        assert_eq!(t.forward(&Value::Null), Ok(Value::Null));
        // Not a SET value: out of order, twice, unknown, another case.
        for bad in [
            "Commentaries,Trailers",
            "Trailers,Trailers",
            "Bloopers",
            "trailers",
            ",",
        ] {
            assert!(t.forward(&text(bad)).is_err(), "{bad}");
        }
        // Not the array of a SET value: out of order, twice, a NULL
        // element, unquoted where PostgreSQL quotes, bounds.
        for bad in [
            "{Commentaries,Trailers}",
            "{Trailers,Trailers}",
            "{NULL}",
            "{Trailers,Deleted Scenes}",
            "[1:1]={Trailers}",
            "Trailers",
        ] {
            let why = t.reverse(&text(bad)).unwrap_err().0;
            assert!(why.contains("'Deleted Scenes'"), "{why}");
        }
        assert!(t.reverse(&Value::Integer(1)).is_err());
    }

    #[test]
    fn set_labels_are_quoted_as_array_out_quotes_them() {
        let labels = ["null", "a\"b", "c\\d", "{e}", "tab\tx", "é"].map(String::from);
        let s = SetLabels::new(labels.to_vec()).unwrap();
        let t = Transform::SetToArray(s);
        let all = labels.join(",");
        let array = r#"{"null","a\"b","c\\d","{e}","tab	x",é}"#;
        assert_eq!(
            t.forward(&Value::Text(all.clone())),
            Ok(Value::Text(array.into()))
        );
        assert_eq!(t.reverse(&Value::Text(array.into())), Ok(Value::Text(all)));
        for bad in [
            vec![],
            vec!["a".into(), "a".into()],
            vec!["a,b".into()],
            vec!["".into()],
        ] {
            assert!(SetLabels::new(bad).is_err());
        }
        assert!(SetLabels::new((0..17).map(|i| i.to_string()).collect()).is_err());
    }

    proptest! {
        // The law, on generated values: reverse(forward(x)) is value-equal to x,
        // and exactly x when x is canonical.
        #[test]
        fn decimal_law_holds(m in any::<i64>(), scale in 0u32..=MAX_SCALE) {
            let t = Transform::DecimalToMinor { scale, typed: TypedSource::default() };
            let text = Value::Text(render_minor(m, scale));
            let fwd = t.forward(&text).map_err(|e| TestCaseError::fail(e.0))?;
            prop_assert_eq!(&fwd, &Value::Integer(m));
            prop_assert_eq!(t.reverse(&fwd).map_err(|e| TestCaseError::fail(e.0))?, text);
        }

        #[test]
        fn decimal_law_holds_for_non_canonical_text(int in 0u64..1_000_000, frac in 0u32..10, zeros in 0usize..4) {
            let text = format!("{}{int}.{frac}", "0".repeat(zeros));
            let t = Transform::DecimalToMinor { scale: 2, typed: TypedSource::default() };
            let fwd = t.forward(&Value::Text(text.clone())).map_err(|e| TestCaseError::fail(e.0))?;
            let back = t.reverse(&fwd).map_err(|e| TestCaseError::fail(e.0))?;
            prop_assert_eq!(t.forward(&back).map_err(|e| TestCaseError::fail(e.0))?, fwd);
        }

        // On an exact decimal column, a value with zeros appended past the
        // scale is the value itself, and any non-zero digit there is refused.
        #[test]
        fn typed_decimal_zeros_past_the_scale_change_nothing(m in any::<i64>(), scale in 0u32..=MAX_SCALE, zeros in 1usize..6, digit in 1u8..10) {
            let text = render_minor(m, scale);
            let padded = if scale == 0 { format!("{text}.{}", "0".repeat(zeros)) } else { format!("{text}{}", "0".repeat(zeros)) };
            prop_assert_eq!(parse_typed_decimal(padded.as_bytes(), scale), parse_decimal(&text, scale));
            let past = format!("{padded}{digit}");
            prop_assert!(parse_typed_decimal(past.as_bytes(), scale).is_err());
        }

        #[test]
        fn arbitrary_text_never_panics(s in "\\PC{0,40}") {
            let _ = parse_decimal(&s, 2);
        }

                // The fast path and the explaining path are one grammar: on any
        // text they accept and reject alike, with the same value.
        #[test]
        fn fast_and_explained_parsers_agree(s in "[-+0-9. e]{0,24}", scale in 0u32..4) {
            prop_assert_eq!(parse_plain(s.as_bytes(), scale).ok_or(()), parse_decimal_explained(&s, scale).map_err(|_| ()));
        }

        // The canonical flag, decided from the text's shape, says exactly
        // whether reverse would write the same text back.
        #[test]
        fn canonical_flag_matches_rendering(s in "-?[0-9]{1,6}(\\.[0-9]{0,3})?", scale in 0u32..4) {
            if let Ok(p) = parse_decimal(&s, scale) {
                prop_assert_eq!(p.canonical, render_minor(p.minor, scale) == s);
            }
        }

        #[test]
        fn map_law_holds(codes in proptest::collection::btree_map("[A-Z]{1,3}", "[a-z]{1,8}", 1..8)) {
            if let Ok(m) = Transform::map(codes.clone()) {
                for code in codes.keys() {
                    let v = Value::Text(code.clone());
                    let fwd = m.forward(&v).map_err(|e| TestCaseError::fail(e.0))?;
                    prop_assert_eq!(m.reverse(&fwd).map_err(|e| TestCaseError::fail(e.0))?, v);
                }
            }
        }
    }
}
