//! Column types: how a PostgreSQL column's values become [`Value`]s, how
//! they are ordered as keys, and how values are written back in binary.
//!
//! | PostgreSQL | value |
//! |---|---|
//! | smallint, integer, bigint | `Integer` |
//! | boolean | `Integer` 0 / 1 |
//! | real, double precision | `Real` |
//! | numeric | `Text`, exact decimal as PostgreSQL prints it (`12.50`) |
//! | text, varchar, char(n) (padded), name, enums | `Text` |
//! | bytea | `Blob` |
//! | date, timestamp, timestamptz | `Text`, ISO as PostgreSQL prints it in UTC ([`super::datetime`]) |
//! | anything else (uuid, json, time, interval, arrays, …) | `Text`, the server's own text for it |
//! | NULL | `Null` |
//!
//! Domains are their base type. Key order is cutover's (SQLite's BINARY):
//! numbers by value, text by bytes; a key whose value is text made from
//! another type is ordered by that text (`col::text COLLATE "C"`).

use anyhow::{Result, bail};

use super::{datetime, numeric};
use crate::value::CellRef;

/// How one column is read, ordered and written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Bool,
    Int2,
    Int4,
    Int8,
    Float4,
    Float8,
    /// With the declared scale, when there is one.
    Numeric(Option<i16>),
    /// text, varchar, name: bytes as stored.
    Text,
    /// char(n): bytes as stored, padding included.
    Bpchar,
    /// An enum: its label.
    Enum,
    Bytea,
    Date,
    Timestamp,
    Timestamptz,
    /// Any other type, read as the server's text for it (`col::text`).
    Other,
    /// A column the table does not have: read as NULL, never written.
    Absent,
}

impl Kind {
    /// The kind of a column of type `oid` (a domain's base type already
    /// resolved) with modifier `typmod`; `typtype` is `pg_type.typtype`.
    pub fn of(oid: u32, typtype: &str, typmod: i32) -> Kind {
        match oid {
            16 => Kind::Bool,
            21 => Kind::Int2,
            23 => Kind::Int4,
            20 => Kind::Int8,
            700 => Kind::Float4,
            701 => Kind::Float8,
            1700 => Kind::Numeric(numeric::scale_of(typmod)),
            25 | 1043 | 19 => Kind::Text,
            1042 => Kind::Bpchar,
            17 => Kind::Bytea,
            1082 => Kind::Date,
            1114 => Kind::Timestamp,
            1184 => Kind::Timestamptz,
            _ if typtype == "e" => Kind::Enum,
            _ => Kind::Other,
        }
    }

    /// How a statement reads the quoted column `col`.
    pub fn select(self, col: &str) -> String {
        match self {
            Kind::Other => format!("{col}::text"),
            Kind::Absent => "NULL::text".to_string(),
            _ => col.to_string(),
        }
    }

    /// The expression a key column is ordered and compared by, so that the
    /// engine's order is the order of the values read.
    pub fn order(self, col: &str) -> String {
        match self {
            Kind::Bool
            | Kind::Int2
            | Kind::Int4
            | Kind::Int8
            | Kind::Float4
            | Kind::Float8
            | Kind::Bytea => col.to_string(),
            Kind::Text => format!("{col} COLLATE \"C\""),
            // `::text` would drop char(n)'s padding; concat() keeps it.
            Kind::Bpchar => format!("concat({col}) COLLATE \"C\""),
            Kind::Numeric(_)
            | Kind::Enum
            | Kind::Date
            | Kind::Timestamp
            | Kind::Timestamptz
            | Kind::Other => format!("{col}::text COLLATE \"C\""),
            Kind::Absent => "NULL::text".to_string(),
        }
    }

    /// Whether a key of this kind is compared by its text (see [`Kind::order`]).
    pub fn ordered_as_text(self) -> bool {
        !matches!(
            self,
            Kind::Bool
                | Kind::Int2
                | Kind::Int4
                | Kind::Int8
                | Kind::Float4
                | Kind::Float8
                | Kind::Bytea
        )
    }

    /// Whether values of this kind can be written in binary (COPY, bound
    /// parameters) by [`encode`].
    pub fn writable(self) -> bool {
        !matches!(self, Kind::Other | Kind::Absent)
    }
}

fn int(b: &[u8]) -> Result<i64> {
    Ok(match b.len() {
        2 => i64::from(i16::from_be_bytes([b[0], b[1]])),
        4 => i64::from(i32::from_be_bytes([b[0], b[1], b[2], b[3]])),
        8 => i64::from_be_bytes(b.try_into()?),
        n => bail!("an integer of {n} bytes"),
    })
}

/// Decodes one non-NULL binary field of `kind` and hands the cell to `f`.
/// `scratch` holds text made from other types (NUMERIC, dates).
pub fn decode<R>(
    kind: Kind,
    raw: &[u8],
    scratch: &mut String,
    f: impl FnOnce(CellRef<'_>) -> R,
) -> Result<R> {
    Ok(match kind {
        Kind::Bool => match raw {
            [b] => f(CellRef::Integer(i64::from(*b != 0))),
            _ => bail!("a boolean of {} bytes", raw.len()),
        },
        Kind::Int2 | Kind::Int4 | Kind::Int8 => f(CellRef::Integer(int(raw)?)),
        Kind::Float4 => match <[u8; 4]>::try_from(raw) {
            Ok(b) => f(CellRef::Real(f64::from(f32::from_be_bytes(b)))),
            Err(_) => bail!("a real of {} bytes", raw.len()),
        },
        Kind::Float8 => match <[u8; 8]>::try_from(raw) {
            Ok(b) => f(CellRef::Real(f64::from_be_bytes(b))),
            Err(_) => bail!("a double of {} bytes", raw.len()),
        },
        Kind::Numeric(_) => {
            scratch.clear();
            numeric::decode(raw, scratch)?;
            f(CellRef::Text(scratch.as_bytes()))
        }
        Kind::Date | Kind::Timestamp | Kind::Timestamptz => {
            scratch.clear();
            datetime::decode(form(kind), raw, scratch)?;
            f(CellRef::Text(scratch.as_bytes()))
        }
        Kind::Text | Kind::Bpchar | Kind::Enum | Kind::Other | Kind::Absent => {
            f(CellRef::Text(raw))
        }
        Kind::Bytea => f(CellRef::Blob(raw)),
    })
}

fn form(kind: Kind) -> datetime::Form {
    match kind {
        Kind::Date => datetime::Form::Date,
        Kind::Timestamp => datetime::Form::Timestamp,
        _ => datetime::Form::Timestamptz,
    }
}

fn text_of<'a>(c: &CellRef<'a>) -> Option<&'a str> {
    match c {
        CellRef::Text(t) => std::str::from_utf8(t).ok(),
        _ => None,
    }
}

/// Appends the binary form of a non-NULL cell for a column of `kind`.
/// A value the column cannot hold exactly (the wrong storage class, an
/// integer out of range, a fraction the scale would round, text that is not
/// UTF-8 or holds a NUL) is refused, never converted.
pub fn encode(kind: Kind, cell: CellRef<'_>, out: &mut Vec<u8>) -> Result<()> {
    let refuse = |why: &str| -> Result<()> {
        bail!(
            "{} cannot be written to a {} column{why}",
            cell.to_value(),
            name(kind)
        )
    };
    match (kind, cell) {
        (Kind::Bool, CellRef::Integer(i @ (0 | 1))) => out.push(i as u8),
        (Kind::Int2, CellRef::Integer(i)) => match i16::try_from(i) {
            Ok(v) => out.extend_from_slice(&v.to_be_bytes()),
            Err(_) => return refuse(": out of range"),
        },
        (Kind::Int4, CellRef::Integer(i)) => match i32::try_from(i) {
            Ok(v) => out.extend_from_slice(&v.to_be_bytes()),
            Err(_) => return refuse(": out of range"),
        },
        (Kind::Int8, CellRef::Integer(i)) => out.extend_from_slice(&i.to_be_bytes()),
        (Kind::Float4, CellRef::Real(r)) => {
            let v = r as f32;
            if f64::from(v) != r && !r.is_nan() {
                return refuse(": it would be rounded to single precision");
            }
            out.extend_from_slice(&v.to_be_bytes());
        }
        (Kind::Float8, CellRef::Real(r)) => out.extend_from_slice(&r.to_be_bytes()),
        (Kind::Float8, CellRef::Integer(i)) if i.unsigned_abs() <= 1 << 53 => {
            out.extend_from_slice(&(i as f64).to_be_bytes())
        }
        (Kind::Numeric(scale), CellRef::Integer(i)) => numeric::encode(&i.to_string(), scale, out)?,
        (Kind::Numeric(scale), c @ CellRef::Text(_)) => match text_of(&c) {
            Some(t) => numeric::encode(t, scale, out)?,
            None => return refuse(": not UTF-8"),
        },
        (Kind::Text | Kind::Bpchar | Kind::Enum | Kind::Other, c @ CellRef::Text(t)) => {
            if text_of(&c).is_none() {
                return refuse(": not UTF-8");
            }
            if t.contains(&0) {
                return refuse(": PostgreSQL text cannot hold a NUL character");
            }
            out.extend_from_slice(t);
        }
        (Kind::Bytea, CellRef::Blob(b)) => out.extend_from_slice(b),
        (Kind::Date | Kind::Timestamp | Kind::Timestamptz, c @ CellRef::Text(_)) => {
            match text_of(&c) {
                Some(t) => datetime::encode(form(kind), t, out)?,
                None => return refuse(": not UTF-8"),
            }
        }
        (Kind::Absent, _) => bail!("a column the table does not have is never written"),
        _ => return refuse(""),
    }
    Ok(())
}

/// The type's name for messages.
pub fn name(kind: Kind) -> &'static str {
    match kind {
        Kind::Bool => "boolean",
        Kind::Int2 => "smallint",
        Kind::Int4 => "integer",
        Kind::Int8 => "bigint",
        Kind::Float4 => "real",
        Kind::Float8 => "double precision",
        Kind::Numeric(_) => "numeric",
        Kind::Text => "text",
        Kind::Bpchar => "character",
        Kind::Enum => "enum",
        Kind::Bytea => "bytea",
        Kind::Date => "date",
        Kind::Timestamp => "timestamp",
        Kind::Timestamptz => "timestamptz",
        Kind::Other => "other",
        Kind::Absent => "absent",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrong_storage_classes_and_ranges_are_refused() {
        let mut out = Vec::new();
        assert!(encode(Kind::Int2, CellRef::Integer(32768), &mut out).is_err());
        assert!(encode(Kind::Int4, CellRef::Integer(-2147483649), &mut out).is_err());
        assert!(encode(Kind::Int8, CellRef::Text(b"1"), &mut out).is_err());
        assert!(encode(Kind::Bool, CellRef::Integer(2), &mut out).is_err());
        assert!(encode(Kind::Float4, CellRef::Real(0.1), &mut out).is_err());
        assert!(encode(Kind::Float8, CellRef::Integer(i64::MAX), &mut out).is_err());
        assert!(encode(Kind::Text, CellRef::Text(b"a\0b"), &mut out).is_err());
        assert!(encode(Kind::Text, CellRef::Text(&[0xfe]), &mut out).is_err());
        assert!(encode(Kind::Bytea, CellRef::Text(b"ab"), &mut out).is_err());
        assert!(encode(Kind::Numeric(None), CellRef::Real(1.5), &mut out).is_err());
        assert!(out.is_empty());
    }

    #[test]
    fn cells_survive_the_binary_form() -> Result<()> {
        let cases = [
            (Kind::Bool, CellRef::Integer(1)),
            (Kind::Int2, CellRef::Integer(-32768)),
            (Kind::Int4, CellRef::Integer(2147483647)),
            (Kind::Int8, CellRef::Integer(i64::MIN)),
            (Kind::Float4, CellRef::Real(0.5)),
            (Kind::Float8, CellRef::Real(-0.0)),
            (Kind::Numeric(Some(2)), CellRef::Text(b"-12.50")),
            (Kind::Text, CellRef::Text("é".as_bytes())),
            (Kind::Bytea, CellRef::Blob(&[0, 255])),
            (Kind::Date, CellRef::Text(b"2024-02-29")),
        ];
        for (kind, cell) in cases {
            let mut raw = Vec::new();
            encode(kind, cell, &mut raw)?;
            let mut scratch = String::new();
            let back = decode(kind, &raw, &mut scratch, |c| c.to_value())?;
            assert_eq!(back, cell.to_value(), "{kind:?}");
        }
        Ok(())
    }
}
