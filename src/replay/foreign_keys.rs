//! The source's foreign keys around a replay: the rows that break one
//! (checked before and after, since cutover never lets a cascade or SET
//! NULL change rows the journal does not name), and the pending entries
//! that would set off a foreign-key action the role cannot switch off,
//! refused before anything is written.

use anyhow::Result;

use crate::apply::Conflict;
use crate::db::Db;
use crate::side_effects::Policy;
use crate::spec::Spec;

/// Every row of the source that breaks a foreign key of a spec table or a
/// foreign key referring to one (from any table of the source, in the
/// spec or not), described with table, key and the parent table it misses.
/// Empty (and free) when no such foreign key exists.
pub fn foreign_key_violations(spec: &Spec, source: &Db) -> Result<Vec<String>> {
    let mut tables: Vec<(String, Vec<String>)> = Vec::new();
    let mut add = |name: &str, key: Vec<String>| {
        if !tables.iter().any(|(t, _)| t == name) {
            tables.push((name.to_string(), key));
        }
    };
    for t in &spec.tables {
        if !source.catalogue().foreign_keys(&t.source_table)?.is_empty() {
            add(
                &t.source_table,
                t.source_names()[..t.key_len]
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
            );
        }
        for child in source.side_effects().referencing_tables(&t.source_table)? {
            match spec.tables.iter().find(|s| s.source_table == child) {
                Some(s) => add(
                    &child,
                    s.source_names()[..s.key_len]
                        .iter()
                        .map(|s| s.to_string())
                        .collect(),
                ),
                None => {
                    // A table outside the spec: its own primary key names it.
                    let mut pk: Vec<_> = source
                        .catalogue()
                        .table_columns(&child)?
                        .into_iter()
                        .filter(|c| c.pk > 0)
                        .collect();
                    pk.sort_by_key(|c| c.pk);
                    add(&child, pk.into_iter().map(|c| c.name).collect());
                }
            }
        }
    }
    let mut out = Vec::new();
    for (table, key) in &tables {
        let key_names: Vec<&str> = key.iter().map(String::as_str).collect();
        for crate::db::ForeignKeyViolation {
            child,
            key,
            parent,
            constraint,
        } in source
            .catalogue()
            .foreign_key_violations(table, &key_names)?
        {
            let key = key.map_or("(a row without a key to name it by)".to_string(), |k| {
                crate::value::display_key(&k)
            });
            let by = constraint.map_or(String::new(), |c| format!(" (foreign key '{c}')"));
            let v = format!(
                "table '{child}', key {key}: its parent in table '{parent}' is missing{by}"
            );
            if !out.contains(&v) {
                out.push(v);
            }
        }
    }
    Ok(out)
}

/// The pending entries that would set off a foreign-key action the role
/// cannot switch off (a delete, or a change of the referenced columns, of a
/// row other rows refer to), each a conflict naming the rows it would
/// change. Judged on the journal's order: a row refers to the parent at an
/// entry when the source holds it referring there and no earlier entry
/// moved it away, or an earlier entry moved it there (an entry of the spec's
/// child table that changes its foreign-key columns, or deletes it). Read
/// before anything is written.
pub fn refused_by_actions(
    spec: &Spec,
    source: &Db,
    target: &Db,
    policy: &Policy,
    after: i64,
    boundary: i64,
) -> Result<Vec<Conflict>> {
    let reader = crate::journal::Reader::new(spec, target)?;
    let actions: Vec<&crate::side_effects::Decided> = policy.live_actions().collect();
    let mut moves = Moves::default();
    let mut out = Vec::new();
    let mut from = after;
    let whole = |_: i64, _: usize, _: bool| false;
    let shape = crate::db::RunShape {
        limit: 1000,
        bytes: crate::journal::RUN_BYTES,
        digest: &whole,
    };
    loop {
        let page = target
            .journal()
            .journal_run(from, boundary, &shape)?
            .entries;
        let Some(last) = page.last() else { break };
        from = last.seq;
        for e in page {
            let e = reader.entry(spec, target, e)?;
            for (ai, d) in actions.iter().enumerate() {
                if let Some(c) = set_off(spec, source, d, &moves.of(ai), &e)? {
                    out.push(c);
                }
            }
            for (ai, d) in actions.iter().enumerate() {
                moves.follow(spec, ai, d, &e);
            }
        }
    }
    Ok(out)
}

/// What the journal's entries so far did to the rows referring to each
/// parent, per action: rows moved there, and rows moved away (a parent's
/// values as key JSON).
#[derive(Default)]
struct Moves {
    net: std::collections::HashMap<(usize, String), Moved>,
}

#[derive(Clone, Copy, Default)]
struct Moved {
    there: i64,
    away: i64,
}

impl Moves {
    fn of(&self, action: usize) -> impl Fn(&str) -> Moved + '_ {
        move |parent: &str| {
            self.net
                .get(&(action, parent.to_string()))
                .copied()
                .unwrap_or_default()
        }
    }

    /// Follows `e` when it writes a row of the action's child table in the
    /// spec: the parent its before-image referred to loses a row, the one
    /// its after-image refers to gains one.
    fn follow(
        &mut self,
        spec: &Spec,
        action: usize,
        d: &crate::side_effects::Decided,
        e: &crate::journal::Entry,
    ) {
        let Some(a) = &d.effect.action else { return };
        let t = &spec.tables[e.table];
        if t.source_table != a.child {
            return;
        }
        let refers = |img: &Option<crate::value::Row>| -> Option<String> {
            let src = crate::apply::source_form(t, img.as_ref()?, &e.unrecorded).ok()?;
            let values: Option<Vec<crate::value::Value>> = a
                .columns
                .iter()
                .map(|c| {
                    let i = t.columns.iter().position(|x| x.source == *c)?;
                    Some(src[i].clone()).filter(|v| !matches!(v, crate::value::Value::Null))
                })
                .collect();
            Some(crate::value::key_json(&values?).to_string())
        };
        let (was, now) = (refers(&e.before), refers(&e.after));
        if was == now {
            return;
        }
        if let Some(p) = was {
            self.net.entry((action, p)).or_default().away += 1;
        }
        if let Some(p) = now {
            self.net.entry((action, p)).or_default().there += 1;
        }
    }
}

/// The conflict of entry `e` when it sets off action `d` while rows still
/// refer to the parent it deletes or re-keys: those the source holds, less
/// those earlier entries moved away, with those they moved there.
fn set_off(
    spec: &Spec,
    source: &Db,
    d: &crate::side_effects::Decided,
    moved: &impl Fn(&str) -> Moved,
    e: &crate::journal::Entry,
) -> Result<Option<Conflict>> {
    let t = &spec.tables[e.table];
    let (Some(a), Some(before)) = (&d.effect.action, &e.before) else {
        return Ok(None);
    };
    if d.effect.table != t.source_table {
        return Ok(None);
    }
    let idx: Option<Vec<usize>> = a
        .parent_columns
        .iter()
        .map(|p| t.columns.iter().position(|c| c.source == *p))
        .collect();
    let Some(idx) = idx else { return Ok(None) };
    let Ok(src) = crate::apply::source_form(t, before, &e.unrecorded) else {
        return Ok(None);
    };
    let sets_off = match &e.after {
        None => a.on_delete,
        Some(after) => a.on_update && idx.iter().any(|&i| after[i] != before[i]),
    };
    if !sets_off {
        return Ok(None);
    }
    let values: Vec<crate::value::Value> = idx.iter().map(|&i| src[i].clone()).collect();
    let m = moved(&crate::value::key_json(&values).to_string());
    // Enough of the source's rows to tell whether any is left once those
    // moved away are taken out.
    const SHOWN: usize = 5;
    let limit = SHOWN + m.away.max(0) as usize;
    let rows = source
        .side_effects()
        .referencing_rows(&d.effect, &values, limit)?;
    let left = rows.len() as i64 + m.there - m.away;
    if left <= 0 && rows.len() < limit {
        return Ok(None);
    }
    let shown: Vec<&String> = rows.iter().take(SHOWN).collect();
    let moved_note = match (m.away, m.there) {
        (0, 0) => String::new(),
        (away, there) => format!(
            " (at this point in the journal, {away} of the source's rows referring to it were moved away and {there} moved there by earlier entries)"
        ),
    };
    Ok(Some(Conflict {
        tag: e.seq,
        table: t.name.clone(),
        key: crate::value::key_json(&before[..t.key_len]),
        column: None,
        reason: format!(
            "its {} would set off foreign-key action '{}' ({}) of the source, changing rows the journal does not name: {}{}{moved_note}; {}",
            if e.after.is_none() {
                "delete"
            } else {
                "change of key"
            },
            d.effect.name,
            d.effect.when,
            shown
                .iter()
                .map(|r| r.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            if rows.len() > SHOWN { ", …" } else { "" },
            d.cannot.as_deref().unwrap_or_default()
        ),
        expected: Some(crate::apply::row_json_of(t, before, &e.unrecorded)),
        found: None,
        wanted: e
            .after
            .as_ref()
            .map(|a| crate::apply::row_json_of(t, a, &e.unrecorded)),
    }))
}

/// The rows of the source that break a foreign key now and did not
/// `before` (a [`foreign_key_violations`] of then).
pub fn violations_since(spec: &Spec, source: &Db, before: &[String]) -> Result<Vec<String>> {
    let after = foreign_key_violations(spec, source)?;
    Ok(after.into_iter().filter(|v| !before.contains(v)).collect())
}
