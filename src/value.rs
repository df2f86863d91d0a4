//! Typed values as SQLite stores them, and the one ordering every key-ordered
//! scan and merge relies on.
//!
//! A value keeps its storage class: the text `'1250'` is not the integer
//! `1250`, and a reconcile that forgot this would pass a target whose money
//! column silently became text.

use std::cmp::Ordering;
use std::fmt;

use anyhow::{Result, bail};
use serde_json::Value as Json;

/// One SQLite value with its storage class.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Integer(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

/// A row of a table in spec column order (key columns first).
pub type Row = Vec<Value>;

impl Value {
    /// The storage class name SQLite's `typeof()` would give.
    pub fn class(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Integer(_) => "integer",
            Value::Real(_) => "real",
            Value::Text(_) => "text",
            Value::Blob(_) => "blob",
        }
    }

    /// The JSON form used in journal images, feeds and reports. A blob becomes
    /// `{"blob": "<hex>"}` so that it cannot be mistaken for text.
    pub fn to_json(&self) -> Json {
        match self {
            Value::Null => Json::Null,
            Value::Integer(i) => Json::from(*i),
            Value::Real(r) => serde_json::Number::from_f64(*r).map_or(Json::Null, Json::Number),
            Value::Text(t) => Json::String(t.clone()),
            Value::Blob(b) => serde_json::json!({ "blob": hex::encode(b) }),
        }
    }

    /// Reads the JSON form back. A JSON integer is an integer and a JSON
    /// fraction or exponent is a real, as SQLite's `json_object` writes them.
    pub fn from_json(json: &Json) -> Result<Value> {
        Ok(match json {
            Json::Null => Value::Null,
            Json::Number(n) => {
                if let Some(i) = n.as_i64() {
                    Value::Integer(i)
                } else if n.is_u64() {
                    bail!("integer {n} is past the 64-bit range")
                } else if let Some(f) = n.as_f64() {
                    Value::Real(f)
                } else {
                    bail!("number {n} cannot be read")
                }
            }
            Json::String(s) => Value::Text(s.clone()),
            Json::Object(o) if o.len() == 1 && o.contains_key("blob") => match &o["blob"] {
                Json::String(h) => Value::Blob(hex::decode(h)?),
                other => bail!("blob must be hex text, found {other}"),
            },
            other => bail!("{other} is not a value SQLite can store"),
        })
    }

    /// SQLite's ordering for `ORDER BY` with the BINARY collation: NULL, then
    /// numbers (integers and reals compared by value), then text by bytes,
    /// then blobs by bytes. The merge depends on this matching the engine.
    pub fn sql_cmp(&self, other: &Value) -> Ordering {
        fn rank(v: &Value) -> u8 {
            match v {
                Value::Null => 0,
                Value::Integer(_) | Value::Real(_) => 1,
                Value::Text(_) => 2,
                Value::Blob(_) => 3,
            }
        }
        match (self, other) {
            (Value::Integer(a), Value::Integer(b)) => a.cmp(b),
            (Value::Real(a), Value::Real(b)) => a.total_cmp(b),
            (Value::Integer(a), Value::Real(b)) => cmp_int_real(*a, *b),
            (Value::Real(a), Value::Integer(b)) => cmp_int_real(*b, *a).reverse(),
            (Value::Text(a), Value::Text(b)) => a.as_bytes().cmp(b.as_bytes()),
            (Value::Blob(a), Value::Blob(b)) => a.cmp(b),
            _ => rank(self).cmp(&rank(other)),
        }
    }
}

fn cmp_int_real(i: i64, r: f64) -> Ordering {
    // Comparing through f64 alone would call 2^53+1 equal to 2^53.
    if r.is_nan() {
        return Ordering::Greater;
    }
    // 2^63 exactly: the first real past i64::MAX.
    const TWO_63: f64 = 9_223_372_036_854_775_808_u64 as f64;
    if r >= TWO_63 {
        return Ordering::Less;
    }
    if r < -TWO_63 {
        return Ordering::Greater;
    }
    let t = r.trunc() as i64;
    match i.cmp(&t) {
        Ordering::Equal => {
            let frac = r - r.trunc();
            if frac > 0.0 {
                Ordering::Less
            } else if frac < 0.0 {
                Ordering::Greater
            } else {
                Ordering::Equal
            }
        }
        o => o,
    }
}

/// Compares two keys column by column in SQLite's order.
pub fn key_cmp(a: &[Value], b: &[Value]) -> Ordering {
    for (x, y) in a.iter().zip(b) {
        match x.sql_cmp(y) {
            Ordering::Equal => continue,
            o => return o,
        }
    }
    a.len().cmp(&b.len())
}

/// A key as a JSON array: the journal's form, which never lets two composite
/// keys collide whatever their parts contain.
pub fn key_json(key: &[Value]) -> Json {
    Json::Array(key.iter().map(Value::to_json).collect())
}

/// Parses a key written as a JSON array.
pub fn key_from_json(json: &Json) -> Result<Vec<Value>> {
    match json {
        Json::Array(items) => items.iter().map(Value::from_json).collect(),
        other => bail!("a key must be a JSON array, found {other}"),
    }
}

impl fmt::Display for Value {
    /// Text is quoted so that `'1250'` and `1250` read differently.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Null => f.write_str("NULL"),
            Value::Integer(i) => write!(f, "{i}"),
            Value::Real(r) => write!(f, "{r:?}"),
            Value::Text(t) => write!(f, "'{}'", t.replace('\'', "''")),
            Value::Blob(b) => write!(f, "x'{}'", hex::encode(b)),
        }
    }
}

/// Renders a key for messages: `101` or `('a', 2)`.
pub fn display_key(key: &[Value]) -> String {
    if key.len() == 1 {
        key[0].to_string()
    } else {
        let parts: Vec<String> = key.iter().map(Value::to_string).collect();
        format!("({})", parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sql_order_puts_classes_in_sqlite_order() {
        let mut v = vec![
            Value::Blob(vec![0]),
            Value::Text("a".into()),
            Value::Integer(2),
            Value::Real(1.5),
            Value::Null,
        ];
        v.sort_by(Value::sql_cmp);
        assert_eq!(
            v,
            vec![
                Value::Null,
                Value::Real(1.5),
                Value::Integer(2),
                Value::Text("a".into()),
                Value::Blob(vec![0]),
            ]
        );
    }

    #[test]
    fn integer_and_real_compare_exactly_past_two_to_the_53() {
        let big = 9_007_199_254_740_993_i64; // 2^53 + 1
        assert_eq!(
            Value::Integer(big).sql_cmp(&Value::Real(9_007_199_254_740_992.0)),
            Ordering::Greater
        );
    }

    #[test]
    fn json_round_trip_keeps_storage_class() -> Result<()> {
        for v in [
            Value::Null,
            Value::Integer(1250),
            Value::Text("1250".into()),
            Value::Real(12.5),
            Value::Blob(vec![1, 2, 255]),
        ] {
            assert_eq!(Value::from_json(&v.to_json())?, v);
        }
        assert_ne!(Value::Integer(1250), Value::Text("1250".into()));
        Ok(())
    }

    #[test]
    fn composite_keys_with_separators_do_not_collide() {
        let a = key_json(&[Value::Text("a,b".into()), Value::Text("".into())]);
        let b = key_json(&[Value::Text("a".into()), Value::Text("b,".into())]);
        assert_ne!(a.to_string(), b.to_string());
    }
}
