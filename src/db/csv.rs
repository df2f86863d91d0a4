//! A CSV snapshot as a source: read once (csv crate), checked, typed, and
//! written into a temporary SQLite database, which every command then reads
//! like any other source: in key order, through the same code.
//!
//! CSV carries only text, so a value is typed by the target column it is
//! copied to: an integer column gets an integer when the text is exactly one
//! (`-?[0-9]+`), otherwise the text stays text and reconcile or apply report
//! it; nothing is trimmed or coerced. An empty field is NULL (CSV cannot tell
//! the two apart).

use std::path::Path;

use anyhow::{Context, Result, bail};

use super::Db;
use super::sqlite::{Sqlite, quote_ident};
use crate::spec::Table;
use crate::transform::Transform;
use crate::value::{Row, Value};

/// How a CSV field becomes a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Text,
    Integer,
    Real,
}

/// SQLite's affinity rules on a declared type.
fn kind_of(decl: &str) -> Kind {
    let d = decl.to_ascii_uppercase();
    if d.contains("INT") {
        Kind::Integer
    } else if d.contains("CHAR")
        || d.contains("CLOB")
        || d.contains("TEXT")
        || d.is_empty()
        || d.contains("BLOB")
    {
        Kind::Text
    } else if d.contains("REAL") || d.contains("FLOA") || d.contains("DOUB") {
        Kind::Real
    } else {
        Kind::Integer
    }
}

fn typed(text: &str, kind: Kind) -> Value {
    if text.is_empty() {
        return Value::Null;
    }
    let digits = text.strip_prefix('-').unwrap_or(text);
    match kind {
        Kind::Integer if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => text
            .parse::<i64>()
            .map_or_else(|_| Value::Text(text.to_string()), Value::Integer),
        Kind::Real => match text.parse::<f64>() {
            Ok(f)
                if f.is_finite()
                    && text
                        .bytes()
                        .all(|b| b.is_ascii_digit() || b == b'.' || b == b'-') =>
            {
                Value::Real(f)
            }
            _ => Value::Text(text.to_string()),
        },
        _ => Value::Text(text.to_string()),
    }
}

/// Reads the snapshot at `path` for `table` into a temporary database.
pub fn materialize(path: &Path, table: &Table, target: &Db) -> Result<Db> {
    if path.is_dir() {
        bail!(
            "snapshot {} is a directory; give the CSV file",
            path.display()
        );
    }
    let file = std::fs::File::open(path).with_context(|| {
        format!(
            "opening snapshot {}; check the path (nothing was written, the cursor is unchanged)",
            path.display()
        )
    })?;
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(false)
        .from_reader(std::io::BufReader::new(file));
    let mut records = rdr.byte_records();
    let header = match records.next() {
        None => bail!(
            "snapshot {} is empty: a CSV snapshot needs a header row naming its columns",
            path.display()
        ),
        Some(r) => r.map_err(|e| csv_error(path, e))?,
    };
    let mut names = Vec::new();
    for (i, field) in header.iter().enumerate() {
        // A byte-order mark is allowed before the first name.
        let field = if i == 0 {
            field.strip_prefix(b"\xef\xbb\xbf").unwrap_or(field)
        } else {
            field
        };
        let name = std::str::from_utf8(field).map_err(|_| {
            anyhow::anyhow!(
                "snapshot {}, line 1: column name {} is not valid UTF-8",
                path.display(),
                i + 1
            )
        })?;
        if name.is_empty() {
            bail!(
                "snapshot {}, line 1: column {} has an empty name; every column needs one",
                path.display(),
                i + 1
            );
        }
        if names.iter().any(|n: &String| n == name) {
            bail!(
                "snapshot {}, line 1: column '{name}' appears twice in the header",
                path.display()
            );
        }
        names.push(name.to_string());
    }
    let target_cols = target.catalogue().table_columns(&table.target_table)?;
    let kinds: Vec<Kind> = names
        .iter()
        .map(|n| {
            table
                .columns
                .iter()
                .find(|c| c.source == *n && c.transform == Transform::Copy)
                .and_then(|c| target_cols.iter().find(|t| t.name == c.target))
                .map_or(Kind::Text, |t| kind_of(&t.decl_type))
        })
        .collect();
    let cols = names
        .iter()
        .map(|n| quote_ident(n))
        .collect::<Vec<_>>()
        .join(", ");
    let t = quote_ident(&table.source_table);
    let mut ddl = format!("CREATE TABLE {t} ({cols});");
    if table
        .key_columns()
        .iter()
        .all(|k| names.contains(&k.source))
    {
        let keys = table
            .key_columns()
            .iter()
            .map(|k| quote_ident(&k.source))
            .collect::<Vec<_>>()
            .join(", ");
        ddl.push_str(&format!("CREATE INDEX snapshot_key ON {t} ({keys});"));
    }
    let db = Sqlite::temporary(&ddl, path)?;
    let width = names.len();
    let rows = records.map(|r| -> Result<Row> {
        let r = r.map_err(|e| csv_error(path, e))?;
        let line = r.position().map_or(0, |p| p.line());
        r.iter()
            .zip(&kinds)
            .enumerate()
            .map(|(i, (field, kind))| {
                let text = std::str::from_utf8(field).map_err(|_| {
                    anyhow::anyhow!("snapshot {}, line {line}, column '{}': not valid UTF-8; the snapshot must be UTF-8", path.display(), names[i])
                })?;
                Ok(typed(text, *kind))
            })
            .collect()
    });
    db.fill(&table.source_table, width, rows)?;
    let at = db.location().to_string();
    Ok(Db::new(db, &super::engines::SQLITE, at))
}

fn csv_error(path: &Path, e: csv::Error) -> anyhow::Error {
    let at = e
        .position()
        .map(|p| format!(", line {}", p.line()))
        .unwrap_or_default();
    match e.kind() {
        csv::ErrorKind::UnequalLengths {
            expected_len, len, ..
        } => anyhow::anyhow!(
            "snapshot {}{at}: the row has {len} fields but the header has {expected_len}; fix the row (a field with a comma must be quoted)",
            path.display()
        ),
        _ => anyhow::anyhow!("snapshot {}{at}: {e}", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_typed_strictly_by_the_target_column() {
        assert_eq!(typed("42", Kind::Integer), Value::Integer(42));
        assert_eq!(typed(" 42", Kind::Integer), Value::Text(" 42".into()));
        assert_eq!(typed("4.0", Kind::Integer), Value::Text("4.0".into()));
        assert_eq!(
            typed("99999999999999999999", Kind::Integer),
            Value::Text("99999999999999999999".into())
        );
        assert_eq!(typed("", Kind::Text), Value::Null);
        assert_eq!(typed("12.50", Kind::Text), Value::Text("12.50".into()));
        assert_eq!(typed("1e3", Kind::Real), Value::Text("1e3".into()));
    }
}
