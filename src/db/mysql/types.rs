//! Column types: how a MySQL or MariaDB column's values become [`Value`]s
//! exactly, how they are written back exactly, and how a key of each type
//! is ordered in cutover's key order.
//!
//! | MySQL / MariaDB | value | written back from |
//! |---|---|---|
//! | `TINYINT`, `SMALLINT`, `MEDIUMINT`, `INT`, `BIGINT`, signed or `UNSIGNED` | integer | an integer in the column's range |
//! | `BIGINT UNSIGNED` past 9223372036854775807 | refused on reading, naming table, key, column and value (`check` reports it): cutover's integers are 64-bit signed | — |
//! | `TINYINT(1)`, `BOOLEAN` (MySQL's `BOOLEAN` is `TINYINT(1)`) | integer (0 / 1 as stored, as PostgreSQL's `boolean` reads) | an integer |
//! | `DECIMAL(p,s)` / `NUMERIC` | text, the decimal as the server prints it, digit for digit (`12.50`), never through a float | decimal text or an integer, refused when the scale would round it or the precision cannot hold it ([`super::numeric`]) |
//! | `FLOAT` | real (single precision, widened exactly) | a real single precision holds exactly |
//! | `DOUBLE` / `REAL` | real | a real, or an integer up to 2^53 |
//! | `CHAR(n)` | text, trailing spaces removed (the server removes them) | text without trailing spaces |
//! | `VARCHAR`, `TINYTEXT` … `LONGTEXT`, MariaDB's `JSON` (a `LONGTEXT` with a `json_valid` check) | text, utf8mb4 whatever the column's character set | UTF-8 text |
//! | `ENUM`, `SET` | text: the label, or the labels in declaration order joined by `,` | text that is exactly a label (a `SET`: labels in declaration order) |
//! | `BINARY(n)` | bytes (padded with NUL to `n`, as stored) | exactly `n` bytes |
//! | `VARBINARY`, `TINYBLOB` … `LONGBLOB` | bytes | bytes |
//! | `DATE` | text `2024-03-15` | that spelling |
//! | `DATETIME(n)` | text `2024-03-15 13:45:00.5`, as PostgreSQL's `timestamp` | that spelling, at most `n` fraction digits |
//! | `TIMESTAMP(n)` | text in UTC `2024-03-15 13:45:00.5+00`, as PostgreSQL's `timestamptz` | that spelling, at most `n` fraction digits |
//! | `TIME(n)` | text `-838:59:59` … `838:59:59.999999` | that spelling |
//! | `YEAR` | integer | an integer 1901 to 2155, or 0 |
//! | `BIT(n)` | integer (`b'101'` is 5); past 2^63 refused as `BIGINT UNSIGNED` | an integer that fits `n` bits |
//! | MySQL's `JSON` | text, as the server prints it (it normalises: written text may read back differently) | UTF-8 text |
//! | NULL | NULL | NULL |
//!
//! The zero date and other dates that are not on the calendar are refused
//! on reading ([`super::datetime`]). Spatial types, and MariaDB's `UUID`,
//! `INET4`, `INET6` and `VECTOR`, are refused by [`Kind::of`] naming the
//! column: their values have no exact form here yet.
//!
//! Key order is cutover's ([`crate::value::CellRef::sql_cmp`]): numbers by
//! value, text by its bytes, bytes by bytes. Numbers, dates, times of day
//! and bytes are ordered by the column itself (an index serves the scan);
//! text by its utf8mb4 bytes (`CAST(CONVERT(col USING utf8mb4) AS BINARY)`,
//! or the column itself when its collation is already a `NO PAD` binary
//! one); a `DECIMAL`, `TIME`, `ENUM` or `SET` key by the text it is read as.

use std::sync::Arc;

use anyhow::{Result, bail};
use mysql::Value as My;

use super::catalogue::Column;
use super::datetime::{self, Form};
use super::numeric;
use crate::value::CellRef;

/// How one column is read, ordered and written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// An integer of `bytes` bytes (1, 2, 3, 4 or 8).
    Int {
        bytes: u8,
        unsigned: bool,
    },
    Decimal {
        precision: u32,
        scale: u32,
        unsigned: bool,
    },
    /// `FLOAT`; with `FLOAT(M,D)`'s `D`, which rounds what is stored.
    Float {
        scale: Option<u32>,
    },
    Double {
        scale: Option<u32>,
    },
    /// `CHAR(n)`: the server drops trailing spaces when it reads one.
    Char,
    /// Any other text: `VARCHAR`, the `TEXT`s, MariaDB's `JSON`.
    Text,
    /// MySQL's own `JSON`.
    Json,
    Enum(Arc<[String]>),
    Set(Arc<[String]>),
    /// `BINARY(n)`: padded with NUL to `n` bytes when stored.
    Binary {
        length: u64,
    },
    /// `VARBINARY` and the `BLOB`s.
    Blob,
    Date,
    DateTime {
        precision: u32,
    },
    Timestamp {
        precision: u32,
    },
    Time {
        precision: u32,
    },
    Year,
    Bit {
        width: u32,
    },
}

/// A value that cannot be read exactly: the table, key, column and value,
/// and why. `check` reports each one; any other reader stops on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadValue {
    pub table: String,
    /// The row's key, as messages show it.
    pub key: String,
    pub column: String,
    /// The value as the server would print it.
    pub value: String,
    pub why: String,
}

impl std::fmt::Display for BadValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "table '{}', key {}, column '{}': {}",
            self.table, self.key, self.column, self.why
        )
    }
}

impl std::error::Error for BadValue {}

/// The labels of `enum('a','b''c')` or `set(…)`, unquoted.
fn labels(declared: &str) -> Result<Arc<[String]>> {
    let open = declared.find('(').map(|i| i + 1);
    let body = match (open, declared.rfind(')')) {
        (Some(a), Some(b)) if a <= b => &declared[a..b],
        _ => bail!("'{declared}' has no list of labels"),
    };
    let mut out = Vec::new();
    let mut chars = body.chars().peekable();
    loop {
        match chars.next() {
            None => break,
            Some('\'') => {}
            Some(c) => bail!("'{declared}': unexpected {c:?} in the list of labels"),
        }
        let mut label = String::new();
        loop {
            match chars.next() {
                None => bail!("'{declared}': a label is not closed"),
                Some('\'') if chars.peek() == Some(&'\'') => {
                    chars.next();
                    label.push('\'');
                }
                Some('\'') => break,
                // Shown with NO_BACKSLASH_ESCAPES off, a backslash is doubled.
                Some('\\') if chars.peek() == Some(&'\\') => {
                    chars.next();
                    label.push('\\');
                }
                Some(c) => label.push(c),
            }
        }
        out.push(label);
        match chars.next() {
            None => break,
            Some(',') => {}
            Some(c) => bail!("'{declared}': unexpected {c:?} after a label"),
        }
    }
    Ok(out.into())
}

fn precision_of(c: &Column) -> u32 {
    c.datetime_precision.unwrap_or(0) as u32
}

impl Kind {
    /// The kind of a column as the catalogue describes it; a type whose
    /// values cutover does not carry is an error naming the column.
    pub fn of(c: &Column) -> Result<Kind> {
        let declared = c.declared.to_ascii_lowercase();
        let unsigned = declared.contains("unsigned");
        let scale = || c.numeric_scale.map(|s| s as u32);
        Ok(match c.data_type.as_str() {
            "tinyint" => Kind::Int { bytes: 1, unsigned },
            "smallint" => Kind::Int { bytes: 2, unsigned },
            "mediumint" => Kind::Int { bytes: 3, unsigned },
            "int" | "integer" => Kind::Int { bytes: 4, unsigned },
            "bigint" => Kind::Int { bytes: 8, unsigned },
            "decimal" | "numeric" => Kind::Decimal {
                precision: c.numeric_precision.unwrap_or(10) as u32,
                scale: c.numeric_scale.unwrap_or(0) as u32,
                unsigned,
            },
            // A plain FLOAT has no scale; `FLOAT(M,D)` shows it.
            "float" => Kind::Float {
                scale: scale().filter(|_| declared.contains(',')),
            },
            "double" | "real" | "double precision" => Kind::Double {
                scale: scale().filter(|_| declared.contains(',')),
            },
            "char" => Kind::Char,
            "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" => Kind::Text,
            "json" => Kind::Json,
            "enum" => Kind::Enum(labels(&c.declared)?),
            "set" => Kind::Set(labels(&c.declared)?),
            "binary" => Kind::Binary {
                length: c.max_length.unwrap_or(0),
            },
            "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob" => Kind::Blob,
            "date" => Kind::Date,
            "datetime" => Kind::DateTime {
                precision: precision_of(c),
            },
            "timestamp" => Kind::Timestamp {
                precision: precision_of(c),
            },
            "time" => Kind::Time {
                precision: precision_of(c),
            },
            "year" => Kind::Year,
            "bit" => Kind::Bit {
                width: c.numeric_precision.unwrap_or(1) as u32,
            },
            other => bail!(
                "column '{}' is of type {} ({other}), whose values cutover does not carry exactly yet (docs/engines.md, MySQL)",
                c.name,
                c.declared
            ),
        })
    }

    /// The type's name for messages.
    pub fn name(&self) -> String {
        match self {
            Kind::Int { bytes, unsigned } => format!(
                "{}{}",
                match bytes {
                    1 => "TINYINT",
                    2 => "SMALLINT",
                    3 => "MEDIUMINT",
                    4 => "INT",
                    _ => "BIGINT",
                },
                if *unsigned { " UNSIGNED" } else { "" }
            ),
            Kind::Decimal {
                precision, scale, ..
            } => format!("DECIMAL({precision},{scale})"),
            Kind::Float { .. } => "FLOAT".into(),
            Kind::Double { .. } => "DOUBLE".into(),
            Kind::Char => "CHAR".into(),
            Kind::Text => "text".into(),
            Kind::Json => "JSON".into(),
            Kind::Enum(_) => "ENUM".into(),
            Kind::Set(_) => "SET".into(),
            Kind::Binary { length } => format!("BINARY({length})"),
            Kind::Blob => "BLOB".into(),
            Kind::Date => "DATE".into(),
            Kind::DateTime { precision } => format!("DATETIME({precision})"),
            Kind::Timestamp { precision } => format!("TIMESTAMP({precision})"),
            Kind::Time { precision } => format!("TIME({precision})"),
            Kind::Year => "YEAR".into(),
            Kind::Bit { width } => format!("BIT({width})"),
        }
    }

    /// The integer range of an integer column.
    fn range(bytes: u8, unsigned: bool) -> (i64, i64) {
        let bits = 8 * u32::from(bytes);
        match (unsigned, bits) {
            (true, 64) => (0, i64::MAX),
            (true, b) => (0, (1i64 << b) - 1),
            (false, 64) => (i64::MIN, i64::MAX),
            (false, b) => (-(1i64 << (b - 1)), (1i64 << (b - 1)) - 1),
        }
    }

    /// Whether a key of this kind is ordered by the column itself (its
    /// native order is cutover's), rather than by its text.
    fn ordered_natively(&self, collation: Option<&str>) -> bool {
        match self {
            Kind::Int { .. }
            | Kind::Float { .. }
            | Kind::Double { .. }
            | Kind::Binary { .. }
            | Kind::Blob
            | Kind::Date
            | Kind::DateTime { .. }
            | Kind::Timestamp { .. }
            | Kind::Year
            | Kind::Bit { .. } => true,
            Kind::Char | Kind::Text => matches!(
                collation,
                Some("utf8mb4_nopad_bin" | "utf8mb4_0900_bin" | "binary")
            ),
            Kind::Decimal { .. }
            | Kind::Json
            | Kind::Enum(_)
            | Kind::Set(_)
            | Kind::Time { .. } => false,
        }
    }

    /// The expression a key column (the quoted `col`, of `collation`) is
    /// ordered and compared by, so that the server's order is the order of
    /// the values read.
    pub fn order(&self, col: &str, collation: Option<&str>) -> Result<String> {
        Ok(match self {
            Kind::Json => bail!("a JSON column cannot be part of a key"),
            k if k.ordered_natively(collation) => col.to_string(),
            Kind::Char | Kind::Text | Kind::Enum(_) | Kind::Set(_) => {
                format!("CAST(CONVERT({col} USING utf8mb4) AS BINARY)")
            }
            _ => format!("CAST({col} AS BINARY)"),
        })
    }

    /// The parameter a scan compares with the key column's [`Kind::order`]
    /// expression to resume after the key value `cell`.
    pub fn order_param(&self, cell: CellRef<'_>, collation: Option<&str>) -> Result<My> {
        let native = self.ordered_natively(collation);
        Ok(match (self, cell) {
            (_, CellRef::Null) => bail!("a key value is NULL; a scan cannot resume after it"),
            (Kind::Time { precision }, CellRef::Text(t)) => {
                let t = std::str::from_utf8(t)
                    .map_err(|_| anyhow::anyhow!("a TIME key that is not UTF-8"))?;
                My::Bytes(datetime::time_as_printed(t, *precision).into_bytes())
            }
            (_, CellRef::Text(t)) if !native => My::Bytes(t.to_vec()),
            _ => match encode(self, cell) {
                Ok(v) => v,
                Err(why) => bail!("{why}"),
            },
        })
    }
}

/// Why a value read cannot be carried, or the cell handed to `f`.
/// `scratch` holds text made from other types (dates, bits).
pub fn decode<R>(
    kind: &Kind,
    v: &My,
    scratch: &mut String,
    f: impl FnOnce(CellRef<'_>) -> R,
) -> Result<R, String> {
    if let My::NULL = v {
        return Ok(f(CellRef::Null));
    }
    Ok(match (kind, v) {
        (Kind::Int { .. } | Kind::Year, My::Int(i)) => f(CellRef::Integer(*i)),
        (Kind::Int { .. } | Kind::Year, My::UInt(u)) => match i64::try_from(*u) {
            Ok(i) => f(CellRef::Integer(i)),
            Err(_) => {
                return Err(format!(
                    "{} value {u} is past 9223372036854775807, the largest integer cutover carries",
                    kind.name()
                ));
            }
        },
        (Kind::Decimal { scale, .. }, My::Bytes(b)) => {
            if !numeric::is_printed(b, *scale) {
                return Err(format!(
                    "'{}' is not a DECIMAL with {scale} fraction digits",
                    String::from_utf8_lossy(b)
                ));
            }
            f(CellRef::Text(b))
        }
        (Kind::Float { .. }, My::Float(r)) => f(CellRef::Real(f64::from(*r))),
        (Kind::Double { .. }, My::Double(r)) => f(CellRef::Real(*r)),
        (Kind::Char | Kind::Text | Kind::Json | Kind::Enum(_) | Kind::Set(_), My::Bytes(b)) => {
            f(CellRef::Text(b))
        }
        (Kind::Binary { .. } | Kind::Blob, My::Bytes(b)) => f(CellRef::Blob(b)),
        (Kind::Date, d) | (Kind::DateTime { .. }, d) | (Kind::Timestamp { .. }, d) => {
            scratch.clear();
            let form = match kind {
                Kind::Date => Form::Date,
                Kind::DateTime { .. } => Form::DateTime,
                _ => Form::Timestamp,
            };
            datetime::decode(form, d, scratch)?;
            f(CellRef::Text(scratch.as_bytes()))
        }
        (Kind::Time { .. }, t) => {
            scratch.clear();
            datetime::decode(Form::Time, t, scratch)?;
            f(CellRef::Text(scratch.as_bytes()))
        }
        (Kind::Bit { .. }, My::Bytes(b)) => {
            if b.len() > 8 {
                return Err(format!("a BIT value of {} bytes", b.len()));
            }
            let u = b.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x));
            match i64::try_from(u) {
                Ok(i) => f(CellRef::Integer(i)),
                Err(_) => {
                    return Err(format!(
                        "{} value {u} is past 9223372036854775807, the largest integer cutover carries",
                        kind.name()
                    ));
                }
            }
        }
        (_, other) => {
            return Err(format!(
                "{} is not a value of a {} column",
                other.as_sql(true),
                kind.name()
            ));
        }
    })
}

/// The value as the server would print it, for messages about a value
/// that cannot be read.
pub fn raw(v: &My) -> String {
    match v {
        My::NULL => "NULL".into(),
        My::Int(i) => i.to_string(),
        My::UInt(u) => u.to_string(),
        My::Float(f) => f.to_string(),
        My::Double(d) => d.to_string(),
        My::Bytes(b) => match std::str::from_utf8(b) {
            Ok(t) => format!("'{}'", t.replace('\'', "''")),
            Err(_) => format!("x'{}'", hex::encode(b)),
        },
        d => datetime::raw(d),
    }
}

/// Why a cell cannot be written, as the end of a sentence (`": out of
/// range"`); empty when its kind is simply not the column's.
type Why = String;

fn utf8(t: &[u8]) -> Result<&str, Why> {
    std::str::from_utf8(t).map_err(|_| ": it is not UTF-8".to_string())
}

/// The value to bind for a cell written to a column of `kind`. A value the
/// column cannot hold exactly (the wrong kind, out of range, a fraction the
/// column would round, text the server would change) is refused with the
/// reason, never converted.
pub fn encode(kind: &Kind, cell: CellRef<'_>) -> Result<My, String> {
    if let CellRef::Null = cell {
        return Ok(My::NULL);
    }
    let written = match kind {
        Kind::Int { .. } | Kind::Year | Kind::Bit { .. } => encode_integer(kind, cell),
        Kind::Decimal { .. } => encode_decimal(kind, cell),
        Kind::Float { .. } | Kind::Double { .. } => encode_real(kind, cell),
        Kind::Char | Kind::Text | Kind::Json | Kind::Enum(_) | Kind::Set(_) => {
            encode_text(kind, cell)
        }
        Kind::Binary { length } => match cell {
            CellRef::Blob(b) if b.len() as u64 == *length => Ok(My::Bytes(b.to_vec())),
            CellRef::Blob(_) => Err(format!(
                ": BINARY({length}) holds exactly {length} bytes (it pads shorter ones with NUL)"
            )),
            _ => Err(String::new()),
        },
        Kind::Blob => match cell {
            CellRef::Blob(b) => Ok(My::Bytes(b.to_vec())),
            _ => Err(String::new()),
        },
        Kind::Date | Kind::DateTime { .. } | Kind::Timestamp { .. } | Kind::Time { .. } => {
            encode_temporal(kind, cell)
        }
    };
    written.map_err(|why| {
        format!(
            "{} cannot be written to a {} column{why}",
            cell.to_value(),
            kind.name()
        )
    })
}

fn encode_integer(kind: &Kind, cell: CellRef<'_>) -> Result<My, Why> {
    let CellRef::Integer(i) = cell else {
        return Err(String::new());
    };
    match kind {
        Kind::Int { bytes, unsigned } => {
            let (lo, hi) = Kind::range(*bytes, *unsigned);
            if i < lo || i > hi {
                return Err(format!(": out of range ({lo} to {hi})"));
            }
        }
        Kind::Year if i != 0 && !(1901..=2155).contains(&i) => {
            return Err(": a YEAR is 1901 to 2155, or 0".into());
        }
        Kind::Bit { width } if i < 0 || (*width < 64 && i >= 1i64 << width) => {
            return Err(format!(": it does not fit {width} bits"));
        }
        _ => {}
    }
    Ok(My::Int(i))
}

fn encode_decimal(kind: &Kind, cell: CellRef<'_>) -> Result<My, Why> {
    let Kind::Decimal {
        precision,
        scale,
        unsigned,
    } = kind
    else {
        return Err(String::new());
    };
    let text = match cell {
        CellRef::Integer(i) => i.to_string(),
        CellRef::Text(t) => utf8(t)?.to_string(),
        _ => return Err(String::new()),
    };
    numeric::encode(&text, *precision, *scale, *unsigned)
        .map(|t| My::Bytes(t.into_bytes()))
        .map_err(|e| format!(": {e}"))
}

fn encode_real(kind: &Kind, cell: CellRef<'_>) -> Result<My, Why> {
    let single = matches!(kind, Kind::Float { .. });
    let (Kind::Float { scale } | Kind::Double { scale }) = kind else {
        return Err(String::new());
    };
    let r = match cell {
        CellRef::Real(r) => r,
        CellRef::Integer(i) if !single && scale.is_none() && i.unsigned_abs() <= 1 << 53 => {
            return Ok(My::Double(i as f64));
        }
        _ => return Err(String::new()),
    };
    if !r.is_finite() {
        return Err(": MySQL stores no NaN or infinity".into());
    }
    if single && f64::from(r as f32) != r {
        return Err(": it would be rounded to single precision".into());
    }
    if let Some(d) = scale {
        let shortest = if single {
            format!("{}", r as f32)
        } else {
            format!("{r}")
        };
        let fraction = shortest.split_once('.').map_or(0, |(_, f)| f.len());
        if fraction > *d as usize {
            return Err(format!(": the column rounds to {d} decimals"));
        }
    }
    Ok(if single {
        My::Float(r as f32)
    } else {
        My::Double(r)
    })
}

fn encode_text(kind: &Kind, cell: CellRef<'_>) -> Result<My, Why> {
    let CellRef::Text(bytes) = cell else {
        return Err(String::new());
    };
    let t = utf8(bytes)?;
    match kind {
        Kind::Char if t.ends_with(' ') => {
            return Err(": a CHAR column drops trailing spaces when it is read".into());
        }
        Kind::Enum(labels) if !labels.iter().any(|l| l == t) => {
            return Err(format!(": the labels are {}", labels.join(", ")));
        }
        Kind::Set(labels) => {
            let mut at = 0;
            for part in t.split(',').filter(|_| !t.is_empty()) {
                match labels[at..].iter().position(|l| l == part) {
                    Some(p) => at += p + 1,
                    None => {
                        return Err(format!(
                            ": a SET value is labels of {} in that order, each once",
                            labels.join(", ")
                        ));
                    }
                }
            }
        }
        _ => {}
    }
    Ok(My::Bytes(bytes.to_vec()))
}

fn encode_temporal(kind: &Kind, cell: CellRef<'_>) -> Result<My, Why> {
    let CellRef::Text(t) = cell else {
        return Err(String::new());
    };
    let t = utf8(t)?;
    let (form, precision) = match kind {
        Kind::Date => (Form::Date, 0),
        Kind::DateTime { precision } => (Form::DateTime, *precision),
        Kind::Timestamp { precision } => (Form::Timestamp, *precision),
        Kind::Time { precision } => (Form::Time, *precision),
        _ => return Err(String::new()),
    };
    datetime::encode(form, t, precision).map_err(|e| format!(": {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(data_type: &str, declared: &str) -> Column {
        Column {
            name: "c".into(),
            position: 1,
            data_type: data_type.into(),
            declared: declared.into(),
            nullable: true,
            default: None,
            generated: None,
            auto_increment: false,
            key_position: 0,
            charset: None,
            collation: None,
            numeric_precision: None,
            numeric_scale: None,
            datetime_precision: None,
            max_length: None,
        }
    }

    #[test]
    fn declared_types_become_kinds() -> Result<()> {
        assert_eq!(
            Kind::of(&column("bigint", "bigint(20) unsigned"))?,
            Kind::Int {
                bytes: 8,
                unsigned: true
            }
        );
        assert_eq!(
            Kind::of(&column("enum", "enum('a','b''c','d\\\\e')"))?,
            Kind::Enum(vec!["a".into(), "b'c".into(), "d\\e".into()].into())
        );
        assert_eq!(
            Kind::of(&column("set", "set('')"))?,
            Kind::Set(vec![String::new()].into())
        );
        let e = Kind::of(&column("point", "point")).expect_err("spatial");
        assert!(e.to_string().contains("column 'c' is of type point"), "{e}");
        Ok(())
    }

    #[test]
    fn integers_are_range_checked_and_big_unsigned_refused() {
        let tiny = Kind::Int {
            bytes: 1,
            unsigned: false,
        };
        assert!(encode(&tiny, CellRef::Integer(-128)).is_ok());
        assert!(encode(&tiny, CellRef::Integer(128)).is_err());
        let medium = Kind::Int {
            bytes: 3,
            unsigned: true,
        };
        assert!(encode(&medium, CellRef::Integer(16_777_215)).is_ok());
        assert!(encode(&medium, CellRef::Integer(16_777_216)).is_err());
        assert!(encode(&medium, CellRef::Integer(-1)).is_err());
        let big = Kind::Int {
            bytes: 8,
            unsigned: true,
        };
        let mut s = String::new();
        let e = decode(&big, &My::UInt(u64::MAX), &mut s, |c| c.to_value()).expect_err("past i64");
        assert!(e.contains("18446744073709551615"), "{e}");
        assert_eq!(
            decode(&big, &My::UInt(i64::MAX as u64), &mut s, |c| c.to_value()),
            Ok(crate::value::Value::Integer(i64::MAX))
        );
        assert!(encode(&big, CellRef::Text(b"1")).is_err());
    }

    #[test]
    fn reals_text_and_labels_are_refused_when_the_server_would_change_them() {
        let float = Kind::Float { scale: None };
        assert!(encode(&float, CellRef::Real(0.5)).is_ok());
        assert!(encode(&float, CellRef::Real(0.1)).is_err());
        assert!(encode(&float, CellRef::Real(f64::NAN)).is_err());
        let scaled = Kind::Double { scale: Some(2) };
        assert!(encode(&scaled, CellRef::Real(1.25)).is_ok());
        assert!(encode(&scaled, CellRef::Real(1.255)).is_err());
        assert!(encode(&Kind::Char, CellRef::Text(b"a ")).is_err());
        assert!(encode(&Kind::Text, CellRef::Text(b"a ")).is_ok());
        assert!(encode(&Kind::Text, CellRef::Text(&[0xff])).is_err());
        let e = Kind::Enum(vec!["a".into(), "B".into()].into());
        assert!(encode(&e, CellRef::Text(b"B")).is_ok());
        assert!(encode(&e, CellRef::Text(b"b")).is_err());
        let s = Kind::Set(vec!["x".into(), "y".into()].into());
        for ok in ["", "x", "y", "x,y"] {
            assert!(encode(&s, CellRef::Text(ok.as_bytes())).is_ok(), "{ok}");
        }
        for bad in ["y,x", "x,x", "z", "x,"] {
            assert!(encode(&s, CellRef::Text(bad.as_bytes())).is_err(), "{bad}");
        }
        let bin = Kind::Binary { length: 2 };
        assert!(encode(&bin, CellRef::Blob(&[1, 0])).is_ok());
        assert!(encode(&bin, CellRef::Blob(&[1])).is_err());
        assert!(encode(&Kind::Bit { width: 3 }, CellRef::Integer(8)).is_err());
        assert!(encode(&Kind::Year, CellRef::Integer(1900)).is_err());
    }

    #[test]
    fn keys_are_ordered_by_what_is_read() -> Result<()> {
        let int = Kind::Int {
            bytes: 4,
            unsigned: false,
        };
        assert_eq!(int.order("`id`", None)?, "`id`");
        assert_eq!(
            Kind::Text.order("`k`", Some("utf8mb4_general_ci"))?,
            "CAST(CONVERT(`k` USING utf8mb4) AS BINARY)"
        );
        assert_eq!(Kind::Text.order("`k`", Some("utf8mb4_nopad_bin"))?, "`k`");
        let dec = Kind::Decimal {
            precision: 5,
            scale: 2,
            unsigned: false,
        };
        assert_eq!(dec.order("`d`", None)?, "CAST(`d` AS BINARY)");
        assert!(Kind::Json.order("`j`", None).is_err());
        assert_eq!(
            Kind::Time { precision: 2 }.order_param(CellRef::Text(b"10:00:00.5"), None)?,
            My::Bytes(b"10:00:00.50".to_vec())
        );
        assert_eq!(int.order_param(CellRef::Integer(7), None)?, My::Int(7));
        assert!(int.order_param(CellRef::Null, None).is_err());
        Ok(())
    }
}
