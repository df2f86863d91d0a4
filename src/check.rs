//! `cutover check`: the spec is valid, both databases open with safe
//! durability settings, and every source row transforms and comes back.
//! Reads only the source's rows; writes nothing anywhere.

use anyhow::Result;
use serde::Serialize;

use crate::db::{Access, Db, TableSql};
use crate::reconcile::{Diff, DiffKind, canonical};
use crate::report::{self, Outcome};
use crate::spec::{self, Spec};
use crate::value::key_json;

#[derive(Debug, Serialize)]
struct Durability {
    path: String,
    journal_mode: String,
    synchronous: String,
}

#[derive(Debug, Serialize)]
struct TableCheck {
    name: String,
    rows: u64,
    reversible: u64,
    invalid: u64,
    non_canonical: u64,
    ignored_columns: Vec<String>,
}

#[derive(Debug, Serialize)]
struct CheckReport {
    verdict: &'static str,
    strict: bool,
    source: Durability,
    target: Durability,
    tables: Vec<TableCheck>,
    diffs: Vec<Diff>,
    diffs_found: u64,
}

fn durability(db: &Db) -> Result<Durability> {
    Ok(Durability {
        path: db.path().display().to_string(),
        journal_mode: db.journal_mode()?,
        synchronous: db.synchronous()?.to_string(),
    })
}

pub fn run(spec: &Spec, strict: bool, max_diffs: usize) -> Result<Outcome> {
    let (source, target, notes) = spec::open(spec, Access::Read, Access::Read)?;
    let mut tables = Vec::new();
    let mut diffs = Vec::new();
    let mut found = 0u64;
    let mut keep = |d: Diff| {
        found += 1;
        if diffs.len() < max_diffs {
            diffs.push(d);
        }
    };
    for t in &spec.tables {
        let sql = TableSql::new(&t.source_table, &t.source_names(), t.key_len);
        let mut tc = TableCheck {
            name: t.name.clone(),
            rows: 0,
            reversible: 0,
            invalid: 0,
            non_canonical: 0,
            ignored_columns: notes
                .irreversible
                .iter()
                .filter(|(n, _)| *n == t.name)
                .map(|(_, c)| c.clone())
                .collect(),
        };
        source.scan(&sql, None, |row| {
            tc.rows += 1;
            let key = key_json(&row[..t.key_len]);
            let diff = |kind,
                        column: &str,
                        expected: Option<&crate::value::Value>,
                        actual: &crate::value::Value,
                        reason: String| Diff {
                table: t.name.clone(),
                key: key.clone(),
                kind,
                column: Some(column.to_string()),
                expected: expected.map(|v| v.to_json()),
                actual: Some(actual.to_json()),
                reason: Some(reason),
                shown: (
                    expected.map_or_else(String::new, |v| v.to_string()),
                    actual.to_string(),
                ),
            };
            for (col, v) in t.columns.iter().zip(&row) {
                if !col.transform.is_canonical(v)
                    && let Ok(fwd) = col.transform.forward(v)
                    && let Ok(back) = col.transform.reverse(&fwd)
                {
                    tc.non_canonical += 1;
                    keep(diff(
                        DiffKind::NonCanonical,
                        &col.source,
                        Some(&back),
                        v,
                        "value-equal but not canonical; replay would write the canonical text"
                            .into(),
                    ));
                }
            }
            match canonical(t, row.clone()) {
                Err((_, column, value, reason)) => {
                    tc.invalid += 1;
                    keep(diff(DiffKind::Invalid, &column, None, &value, reason));
                }
                Ok(fwd) => {
                    // The law, checked on real data: the reverse must carry
                    // every value back to one forward maps to the same place.
                    let mut ok = true;
                    for ((col, f), orig) in t.columns.iter().zip(&fwd).zip(&row) {
                        let back = col.transform.reverse(f).ok();
                        if back
                            .as_ref()
                            .and_then(|b| col.transform.forward(b).ok())
                            .as_ref()
                            != Some(f)
                        {
                            ok = false;
                            keep(diff(
                                DiffKind::Invalid,
                                &col.source,
                                back.as_ref(),
                                orig,
                                "does not round-trip".into(),
                            ));
                        }
                    }
                    if ok {
                        tc.reversible += 1;
                    } else {
                        tc.invalid += 1;
                    }
                }
            }
            Ok(true)
        })?;
        tables.push(tc);
    }
    let invalid: u64 = tables.iter().map(|t| t.invalid).sum();
    let non_canonical: u64 = tables.iter().map(|t| t.non_canonical).sum();
    let holds = invalid == 0 && (!strict || non_canonical == 0);
    let rep = CheckReport {
        verdict: if holds { "pass" } else { "fail" },
        strict,
        source: durability(&source)?,
        target: durability(&target)?,
        tables,
        diffs,
        diffs_found: found,
    };
    let mut text = report::table(
        &[
            "table",
            "source rows",
            "reversible",
            "invalid",
            "non-canonical",
            "ignored (irreversible)",
        ],
        rep.tables.iter().map(|t| {
            vec![
                t.name.clone(),
                t.rows.to_string(),
                t.reversible.to_string(),
                t.invalid.to_string(),
                t.non_canonical.to_string(),
                t.ignored_columns.join(", "),
            ]
        }),
    );
    text.push('\n');
    text.push_str(&report::pairs(&[
        (
            "source",
            format!(
                "{} (journal_mode={}, synchronous={})",
                rep.source.path, rep.source.journal_mode, rep.source.synchronous
            ),
        ),
        (
            "target",
            format!(
                "{} (journal_mode={}, synchronous={})",
                rep.target.path, rep.target.journal_mode, rep.target.synchronous
            ),
        ),
    ]));
    for (t, c) in &notes.irreversible {
        text.push_str(&format!(
            "note: table '{t}': source column '{c}' is ignored; the migration is irreversible for it (rollback leaves it NULL or at its default for new rows)\n"
        ));
    }
    if !rep.diffs.is_empty() {
        text.push_str(&format!(
            "\nfindings (first {} of {})\n",
            rep.diffs.len(),
            rep.diffs_found
        ));
        text.push_str(&report::diffs(&rep.diffs));
        text.push('\n');
    }
    text.push_str(&if holds {
        if non_canonical > 0 {
            format!("check: pass ({non_canonical} non-canonical texts would be rewritten by replay; --strict makes that a failure)\n")
        } else {
            "check: pass (every source row transforms and round-trips)\n".to_string()
        }
    } else if invalid > 0 {
        format!("check: FAIL ({invalid} invalid source rows; fix them in the source, or the spec, and run check again)\n")
    } else {
        format!("check: FAIL under --strict ({non_canonical} non-canonical texts)\n")
    });
    Outcome::new(holds, &rep, text)
}
