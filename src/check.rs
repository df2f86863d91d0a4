//! `cutover check`: the spec is valid, both databases open with safe
//! durability settings, and every source row transforms and comes back.
//! Reads only the source's rows; writes nothing anywhere.

use anyhow::Result;
use serde::Serialize;

use crate::db::{Access, Db};
use crate::reconcile::{self, Diff};
use crate::report::{self, Outcome};
use crate::spec::{self, Spec};

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
    for t in &spec.tables {
        let scanned = reconcile::scan_source(t, &source, |key, note| {
            found += 1;
            if diffs.len() < max_diffs {
                diffs.push(Diff::from_note(t, &key, note));
            }
            Ok(true)
        })?;
        tables.push(TableCheck {
            name: t.name.clone(),
            rows: scanned.rows,
            reversible: scanned.rows - scanned.invalid,
            invalid: scanned.invalid,
            non_canonical: scanned.non_canonical,
            ignored_columns: notes
                .irreversible
                .iter()
                .filter(|(n, _)| *n == t.name)
                .map(|(_, c)| c.clone())
                .collect(),
        });
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
