//! What the replay would apply, for `replay --dry-run`: the pending
//! entries per op, and every key of the source they change, with the
//! journal's ops on it and their net effect.

use anyhow::Result;
use serde::Serialize;

use crate::db::{Db, JournalLogExt, Op};
use crate::spec::Spec;

/// A key of the source that the pending entries change.
#[derive(Debug, Serialize)]
pub struct StaleKey {
    pub table: String,
    pub key: serde_json::Value,
    /// The journal's ops on the key, in order, comma-separated.
    pub ops: String,
    pub effect: Effect,
}

/// What the pending entries do to a key, first op to last.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Effect {
    #[serde(rename = "new")]
    New,
    #[serde(rename = "updated")]
    Updated,
    #[serde(rename = "deleted")]
    Deleted,
    #[serde(rename = "inserted and deleted")]
    InsertedAndDeleted,
}

/// What the replay would apply.
#[derive(Debug, Serialize)]
pub struct Plan {
    pub boundary: i64,
    pub already_applied: i64,
    pub pending: i64,
    pub gaps: i64,
    pub insert: i64,
    pub update: i64,
    pub delete: i64,
    pub stale_keys: u64,
    pub keys: Vec<StaleKey>,
}

/// What the replay would apply: entries per op and the stale keys.
pub fn plan(
    spec: &Spec,
    target: &Db,
    boundary: i64,
    applied: i64,
    last_applied: i64,
    gaps: i64,
    max_keys: usize,
) -> Result<Plan> {
    let counts = target.journal().counts_by_op(last_applied, boundary)?;
    let mut keys = Vec::new();
    let mut stale = 0u64;
    // Every key the pending entries touch, with its ops in order, first
    // touched first. Held in memory: it grows with the keys the application
    // wrote after the cutover, not with the table.
    let reader = crate::journal::Reader::new(spec, target)?;
    let mut order: Vec<(String, serde_json::Value)> = Vec::new();
    let mut ops: std::collections::HashMap<(String, String), Vec<Op>> = Default::default();
    let mut after = last_applied;
    // Only the keys are read from the entries: every other large value is
    // taken as its digest.
    let keys_only = |img: i64, col: usize, _: bool| reader.outside_key(img, col);
    let shape = crate::db::RunShape {
        limit: 1000,
        bytes: usize::MAX,
        digest: &keys_only,
    };
    loop {
        let page = target
            .journal()
            .journal_run(after, boundary, &shape)?
            .entries;
        let Some(last) = page.last() else { break };
        after = last.seq;
        for e in page {
            let e = reader.entry(spec, target, e)?;
            let t = &spec.tables[e.table];
            let mut keys = Vec::new();
            for r in [&e.before, &e.after].into_iter().flatten() {
                let k = crate::value::key_json(&r[..t.key_len]);
                if !keys.contains(&k) {
                    keys.push(k);
                }
            }
            for k in keys {
                let id = (t.name.clone(), k.to_string());
                let list = ops.entry(id).or_insert_with(|| {
                    order.push((t.name.clone(), k.clone()));
                    Vec::new()
                });
                list.push(e.op);
            }
        }
    }
    for (tbl, key) in order {
        let seen = &ops[&(tbl.clone(), key.to_string())];
        stale += 1;
        if keys.len() < max_keys {
            let effect = match (seen.first(), seen.last()) {
                (Some(Op::Insert), Some(Op::Delete)) => Effect::InsertedAndDeleted,
                (Some(Op::Insert), _) => Effect::New,
                (_, Some(Op::Delete)) => Effect::Deleted,
                _ => Effect::Updated,
            };
            let list = seen
                .iter()
                .map(|o| o.as_str())
                .collect::<Vec<_>>()
                .join(",");
            keys.push(StaleKey {
                table: tbl,
                key,
                ops: list,
                effect,
            });
        }
    }
    Ok(Plan {
        boundary,
        already_applied: applied,
        pending: counts.total(),
        gaps,
        insert: counts.insert,
        update: counts.update,
        delete: counts.delete,
        stale_keys: stale,
        keys,
    })
}
