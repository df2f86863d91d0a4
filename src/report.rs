//! Rendering: human tables (comfy-table, width-independent so output is the
//! same on any terminal and in golden files) and the one JSON document a
//! command prints with `--format json`.

use comfy_table::{ContentArrangement, Table, presets};
use serde::Serialize;
use serde_json::Value as Json;

use crate::reconcile::{Diff, Reconciliation};

/// What a command found: whether everything it checked holds (exit 0) or
/// not (exit 1), and the report in both forms.
#[derive(Debug)]
pub struct Outcome {
    pub holds: bool,
    pub json: Json,
    pub text: String,
}

impl Outcome {
    pub fn new(holds: bool, report: &impl Serialize, text: String) -> anyhow::Result<Outcome> {
        Ok(Outcome {
            holds,
            json: serde_json::to_value(report)?,
            text,
        })
    }
}

/// A plain table with a header row.
pub fn table<R: IntoIterator<Item = String>>(
    header: &[&str],
    rows: impl IntoIterator<Item = R>,
) -> String {
    let mut t = Table::new();
    t.load_style(presets::ASCII_MARKDOWN)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(header.iter().copied());
    for r in rows {
        t.add_row(r.into_iter().collect::<Vec<_>>());
    }
    t.to_string()
}

/// The per-table counts, totals and kept differences of a reconciliation.
pub fn reconciliation(rec: &Reconciliation) -> String {
    let mut out = table(
        &[
            "table",
            "source rows",
            "target rows",
            "matched",
            "changed",
            "missing",
            "extra",
            "invalid",
        ],
        rec.tables.iter().map(|t| {
            vec![
                t.name.clone(),
                t.source_rows.to_string(),
                t.target_rows.to_string(),
                t.matched.to_string(),
                t.changed.to_string(),
                t.missing.to_string(),
                t.extra.to_string(),
                t.invalid.to_string(),
            ]
        }),
    );
    let totals: Vec<Vec<String>> = rec
        .tables
        .iter()
        .flat_map(|t| {
            t.totals.iter().map(move |tot| {
                vec![
                    t.name.clone(),
                    tot.column.clone(),
                    tot.currency.clone().unwrap_or_default(),
                    tot.source.to_string(),
                    tot.target.to_string(),
                    if tot.source == tot.target {
                        "equal".into()
                    } else {
                        "DIFFERENT".into()
                    },
                ]
            })
        })
        .collect();
    if !totals.is_empty() {
        out.push_str("\ncontrol totals\n");
        out.push_str(&table(
            &[
                "table",
                "column",
                "currency",
                "source sum",
                "target sum",
                "",
            ],
            totals,
        ));
    }
    if !rec.diffs.is_empty() {
        out.push_str(&format!(
            "\ndifferences (first {} of {})\n",
            rec.diffs.len(),
            rec.diffs_found
        ));
        out.push_str(&diffs(&rec.diffs));
    }
    out
}

pub fn diffs(diffs: &[Diff]) -> String {
    table(
        &[
            "table", "key", "kind", "column", "expected", "actual", "reason",
        ],
        diffs.iter().map(|d| {
            vec![
                d.table.clone(),
                d.key.to_string(),
                serde_json::to_value(d.kind)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                d.column.clone().unwrap_or_default(),
                d.shown.0.clone(),
                d.shown.1.clone(),
                d.reason.clone().unwrap_or_default(),
            ]
        }),
    )
}

/// `key: value` lines, for short summaries.
pub fn pairs(items: &[(&str, String)]) -> String {
    let width = items.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    items
        .iter()
        .map(|(k, v)| format!("{k:width$}  {v}\n"))
        .collect()
}
