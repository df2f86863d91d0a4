//! How the target differs from what the spec and the journal expect: a
//! table gone, columns the spec does not map or maps but the table lacks,
//! journal triggers missing or out of date. Writes there may be unjournaled,
//! which `status` raises as an alarm and `fence on` reports.

use std::fmt;

use anyhow::Result;
use serde::Serialize;

use crate::db::{Db, JournalLogExt};
use crate::spec::Spec;

/// Whether every table of the spec has its journal triggers, as the spec
/// needs them now.
pub fn installed(spec: &Spec, target: &Db) -> Result<bool> {
    if !target.identity().installed()? {
        return Ok(false);
    }
    for t in &spec.tables {
        if !stale(t, target)?.is_empty() {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The journal triggers of a table that are missing or out of date.
pub fn stale(t: &crate::spec::Table, target: &Db) -> Result<Vec<String>> {
    let columns = t.target_names();
    target
        .capture()
        .stale_journal_triggers(&super::journaled(t, &columns))
}

/// Since when writes to a drifted table may be unjournaled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Since {
    /// After the table's last journaled entry.
    Seq(i64),
    /// Since the journal was installed: the table has no entry yet.
    Install,
}

impl fmt::Display for Since {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Since::Seq(seq) => write!(f, "writes after journal seq {seq}, the table's last entry,"),
            Since::Install => f.write_str("writes since journal install"),
        }
    }
}

/// One way a table of the target differs from what the spec and the
/// journal expect. Reports carry it as it is and render it as text (JSON
/// as that text, too).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Drift {
    /// The table is gone from the target.
    TableGone { table: String, since: Since },
    /// Columns the spec does not map: their writes are not journaled.
    Unmapped { table: String, columns: Vec<String> },
    /// Columns the spec maps that the table lacks; with one column gone
    /// and one new, most likely a rename (`from`, `to`).
    Lacks {
        table: String,
        columns: Vec<String>,
        renamed: Option<(String, String)>,
    },
    /// Journal triggers missing or out of date.
    StaleTriggers {
        table: String,
        triggers: Vec<String>,
        since: Since,
    },
}

impl fmt::Display for Drift {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Drift::TableGone { table, since } => {
                write!(
                    f,
                    "table {table} is gone from the target; {since} may be unjournaled"
                )
            }
            Drift::Unmapped { table, columns } => write!(
                f,
                "table {table} has columns the spec does not map: {} (writes to them are not journaled; add them to the source, map them in the spec and run `cutover journal install` again: replay reports the values written before then as not journaled, by key)",
                columns.join(", ")
            ),
            Drift::Lacks {
                table,
                columns,
                renamed,
            } => {
                let hint = match renamed {
                    Some((from, to)) => format!(
                        "if '{from}' was renamed to '{to}', set target = \"{to}\" and was = [\"{from}\"] in its [[tables.columns]] entry and run `cutover journal install` again; the entries before keep the name '{from}', which was = […] lets replay read"
                    ),
                    None => "renamed or dropped after the switch: map the new name, or keep the journaled one, before the replay".to_string(),
                };
                write!(
                    f,
                    "table {table} lacks columns the spec maps: {} ({hint})",
                    columns.join(", ")
                )
            }
            Drift::StaleTriggers {
                table,
                triggers,
                since,
            } => write!(
                f,
                "table {table}: journal triggers missing or out of date ({}); {since} may be unjournaled or out of order. Run `cutover journal install` again",
                triggers.join(", ")
            ),
        }
    }
}

impl Serialize for Drift {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// How the target differs from what the spec and the journal expect: each
/// table missing, with columns the spec does not map or maps but the table
/// lacks, or with journal triggers missing or out of date.
pub fn drift(spec: &Spec, target: &Db) -> Result<Vec<Drift>> {
    let mut out = Vec::new();
    for t in &spec.tables {
        // Since when: the table's last journaled write.
        let since = match target.journal().last_journaled(&t.name)? {
            Some(seq) => Since::Seq(seq),
            None => Since::Install,
        };
        let table = t.target_table.clone();
        let cols = target.catalogue().table_columns(&t.target_table)?;
        if cols.is_empty() {
            out.push(Drift::TableGone { table, since });
            continue;
        }
        // A generated column is the target's to compute: no write sets
        // it, so there is nothing to journal or carry back.
        let generated = target.catalogue().generated_columns(&t.target_table)?;
        let extra: Vec<String> = cols
            .iter()
            .map(|c| c.name.clone())
            .filter(|c| {
                !t.columns.iter().any(|x| x.target == *c)
                    && !t.target_defaults.iter().any(|d| d == c)
                    && !generated.iter().any(|g| g.name == *c)
            })
            .collect();
        let missing: Vec<String> = t
            .columns
            .iter()
            .map(|c| c.target.clone())
            .filter(|c| !cols.iter().any(|x| x.name == *c))
            .collect();
        // One column gone and one new is said once, as a rename.
        let renamed = match (&missing[..], &extra[..]) {
            ([from], [to]) => Some((from.clone(), to.clone())),
            _ => None,
        };
        if !extra.is_empty() && renamed.is_none() {
            out.push(Drift::Unmapped {
                table: table.clone(),
                columns: extra,
            });
        }
        if !missing.is_empty() {
            out.push(Drift::Lacks {
                table: table.clone(),
                columns: missing,
                renamed,
            });
        }
        let triggers = stale(t, target)?;
        if !triggers.is_empty() {
            out.push(Drift::StaleTriggers {
                table,
                triggers,
                since,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::{Drift, Since};

    #[test]
    fn a_drift_is_said_and_serialized_as_one_line_naming_its_table() {
        let gone = Drift::TableGone {
            table: "orders".into(),
            since: Since::Seq(42),
        };
        assert_eq!(
            gone.to_string(),
            "table orders is gone from the target; writes after journal seq 42, the table's last entry, may be unjournaled"
        );
        assert_eq!(
            serde_json::to_value(&gone).unwrap(),
            serde_json::Value::String(gone.to_string())
        );
        let renamed = Drift::Lacks {
            table: "orders".into(),
            columns: vec!["total".into()],
            renamed: Some(("total".into(), "amount".into())),
        };
        let text = renamed.to_string();
        assert!(
            text.starts_with("table orders lacks columns the spec maps: total (if 'total' was renamed to 'amount'"),
            "{text}"
        );
        let stale = Drift::StaleTriggers {
            table: "orders".into(),
            triggers: vec!["_cutover_journal_orders_insert".into()],
            since: Since::Install,
        };
        assert!(
            stale
                .to_string()
                .contains("writes since journal install may be unjournaled or out of order")
        );
    }
}
