//! Rows between their forms: canonical to the source's (the reverse
//! transform, with the spec's column checks), canonical to and from JSON
//! keyed by target column names (receipts, conflicts, feeds), and the
//! comparisons the rules make of them.

use anyhow::{Context, Result, bail};
use serde_json::Value as Json;

use crate::spec::Table;
use crate::value::{Row, Value};

/// Whether two rows (or two absences of a row) agree on every column but
/// `unrecorded`.
pub fn same_recorded(a: Option<&Row>, b: Option<&Row>, unrecorded: &[usize]) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) if unrecorded.is_empty() => a == b,
        (Some(a), Some(b)) => a
            .iter()
            .zip(b)
            .enumerate()
            .all(|(i, (x, y))| x == y || unrecorded.contains(&i)),
        _ => false,
    }
}

/// `row` (canonical) as the source stores it: each column checked, then
/// carried back by its transform. What the engine writes into a source
/// whose stored row's storage classes it has not read. The columns in
/// `unrecorded` carry nothing and stay NULL, unchecked.
pub fn source_form(
    table: &Table,
    row: &Row,
    unrecorded: &[usize],
) -> Result<Row, (String, String)> {
    check_row(table, row, unrecorded)?;
    table
        .columns
        .iter()
        .zip(row)
        .enumerate()
        .map(|(i, (col, v))| match unrecorded.contains(&i) {
            true => Ok(Value::Null),
            false => reverse_column(col, v),
        })
        .collect()
}

/// The spec's checks of every column of a canonical row but `unrecorded`.
pub(super) fn check_row(
    table: &Table,
    row: &Row,
    unrecorded: &[usize],
) -> Result<(), (String, String)> {
    for (i, (col, v)) in table.columns.iter().zip(row).enumerate() {
        if unrecorded.contains(&i) {
            continue;
        }
        col.checks
            .check(v)
            .map_err(|why| (col.target.clone(), why))?;
    }
    Ok(())
}

/// One canonical value carried back to its source column.
pub(super) fn reverse_column(
    col: &crate::spec::Column,
    v: &Value,
) -> Result<Value, (String, String)> {
    col.transform.reverse(v).map_err(|r| {
        (
            col.target.clone(),
            format!(
                "{v} cannot be carried back to source column '{}': {r}",
                col.source
            ),
        )
    })
}

/// A money value written back to a source row in the storage class the row
/// holds: an INTEGER stays an integer when the amount is whole, a REAL a real
/// when the real reads back as exactly that amount; otherwise the canonical
/// text (`back`), which is exact. A new row gets the text, which the
/// column's affinity stores as the application's own writes would be.
pub(super) fn keep_class(back: Value, minor: &Value, was: &Value, scale: u32) -> Value {
    let (Value::Text(text), Value::Integer(m)) = (&back, minor) else {
        return back;
    };
    let unit = 10i64.pow(scale);
    match was {
        Value::Integer(_) if m % unit == 0 => Value::Integer(m / unit),
        Value::Integer(_) | Value::Real(_) => match text.parse::<f64>() {
            Ok(r) if crate::transform::real_to_minor(r, scale) == Ok(*m) => Value::Real(r),
            _ => back,
        },
        _ => back,
    }
}

pub(super) fn short(digest: &str) -> &str {
    &digest[..digest.len().min(12)]
}

pub(super) fn first_difference(
    table: &Table,
    a: Option<&Row>,
    b: Option<&Row>,
    unrecorded: &[usize],
) -> Option<String> {
    let (a, b) = (a?, b?);
    (0..a.len().min(b.len()))
        .find(|&i| a[i] != b[i] && !unrecorded.contains(&i))
        .map(|i| table.columns[i].target.clone())
}

/// A canonical row as a JSON object keyed by target column names.
pub fn row_json(table: &Table, row: &[Value]) -> Json {
    row_json_of(table, row, &[])
}

/// The same, leaving out the columns in `unrecorded`, which carry nothing
/// (see [`Change::unrecorded`]).
pub fn row_json_of(table: &Table, row: &[Value], unrecorded: &[usize]) -> Json {
    Json::Object(
        table
            .columns
            .iter()
            .zip(row)
            .enumerate()
            .filter(|(i, _)| !unrecorded.contains(i))
            .map(|(_, (c, v))| (c.target.clone(), v.to_json()))
            .collect(),
    )
}

/// A canonical row from a JSON object keyed by target column names. Every
/// mapped column must be present and no other.
pub fn row_from_json(table: &Table, json: &Json) -> Result<Row> {
    let (row, absent) = row_from_json_of(table, json)?;
    if let Some(&i) = absent.first() {
        bail!(
            "column '{}' of table '{}' is missing",
            table.columns[i].target,
            table.name
        );
    }
    Ok(row)
}

/// A canonical row from a JSON object keyed by target column names that
/// may leave out columns other than the key: the row, NULL in their
/// places, and the columns left out (see [`Change::unrecorded`]). No column
/// the spec does not map.
pub fn row_from_json_of(table: &Table, json: &Json) -> Result<(Row, Vec<usize>)> {
    let Json::Object(obj) = json else {
        bail!("a row must be a JSON object, found {json}");
    };
    for name in obj.keys() {
        if !table.columns.iter().any(|c| c.target == *name) {
            bail!(
                "column '{name}' is not a mapped target column of table '{}'",
                table.name
            );
        }
    }
    let mut absent = Vec::new();
    let mut row = Vec::with_capacity(table.columns.len());
    for (i, c) in table.columns.iter().enumerate() {
        match obj.get(&c.target) {
            Some(v) => {
                row.push(Value::from_json(v).with_context(|| format!("column '{}'", c.target))?)
            }
            None if i < table.key_len => bail!(
                "key column '{}' of table '{}' is missing",
                c.target,
                table.name
            ),
            None => {
                absent.push(i);
                row.push(Value::Null);
            }
        }
    }
    Ok((row, absent))
}
