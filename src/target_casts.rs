//! Values the target takes as text and casts to a type of its own (a
//! PostgreSQL array, `uuid`, `json`, …): `cutover check` asks the target
//! itself whether it accepts each one, so a value that `load` could not
//! write is refused before the load, with its table, key, column and the
//! server's reason, instead of stopping a load part-way.

use std::collections::HashSet;

use anyhow::Result;

use crate::canonical::Note;
use crate::db::Db;
use crate::spec::Table;
use crate::value::{ColumnKind, Row, Value};

/// At most this many values are remembered as accepted per table; past it
/// the memory starts over (and a value seen again is asked again).
const PROVEN_MAX: usize = 1_000_000;

/// Every source row of `t` whose forwarded value the target refuses for a
/// column it casts from text, as `(key, note)` in key order: `note` is
/// each row's first refusal. Each distinct value is asked once (a round
/// trip to the target); a table without such a column is not read.
pub fn refused(t: &Table, source: &Db, target: &Db) -> Result<Vec<(Row, Note)>> {
    let kinds = target.catalogue().table_columns(&t.target_table)?;
    let cast: Vec<usize> = (0..t.columns.len())
        .filter(|&i| {
            kinds.iter().any(|k| {
                k.name == t.columns[i].target && matches!(k.kind, ColumnKind::Other { .. })
            })
        })
        .collect();
    if cast.is_empty() {
        return Ok(Vec::new());
    }
    let t_sql = target.target_sql(t);
    let holding = target.catalogue().holding(&t_sql, true)?;
    let mut proven: HashSet<(usize, String)> = HashSet::new();
    let mut out = Vec::new();
    source.scan(&source.source_sql(t), None, |row| {
        let Ok(fwd) = row
            .iter()
            .zip(&t.columns)
            .map(|(v, c)| c.transform.forward(v))
            .collect::<Result<Vec<Value>, _>>()
        else {
            // The transform's refusal is check's own finding already.
            return Ok(true);
        };
        let text = |i: usize| match &fwd[i] {
            Value::Text(s) => Some((i, s.clone())),
            _ => None,
        };
        let new = cast
            .iter()
            .filter_map(|&i| text(i))
            .any(|k| !proven.contains(&k));
        if !new {
            return Ok(true);
        }
        match holding.unfit(&fwd)? {
            Some(unfit) => {
                let i = t.columns.iter().position(|c| c.target == unfit.column);
                let (column, value) = match i {
                    Some(i) => (t.columns[i].source.clone(), row[i].clone()),
                    None => (unfit.column.clone(), Value::Null),
                };
                out.push((
                    row[..t.key_len].to_vec(),
                    Note::Invalid(column, value, unfit.why),
                ));
            }
            None => {
                if proven.len() >= PROVEN_MAX {
                    proven.clear();
                }
                proven.extend(cast.iter().filter_map(|&i| text(i)));
            }
        }
        Ok(true)
    })?;
    Ok(out)
}
