//! `cutover check`: the spec is valid, both databases open with safe
//! durability settings, and every source row transforms and comes back.
//! Reads only the source's rows; writes nothing anywhere.

use anyhow::Result;
use serde::Serialize;

use crate::db::{Access, Catalogue, Db};
use crate::reconcile::{self, Diff};
use crate::report::{self, Report, Verdict};
use crate::schema;
use crate::side_effects::Policy;
use crate::spec::Spec;
use crate::value::Row;

/// Where a database is and how it commits, in its engine's own settings.
#[derive(Debug, Serialize)]
pub struct Durability {
    pub path: String,
    #[serde(flatten)]
    pub settings: std::collections::BTreeMap<&'static str, String>,
    /// The settings in the engine's order, for the text.
    #[serde(skip)]
    pub shown: String,
    /// How the connection to a server is protected: encrypted or not (as
    /// the server records it), what was verified, where the password came
    /// from. Absent for a file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connection: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct TableCheck {
    pub name: String,
    pub rows: u64,
    pub reversible: u64,
    pub invalid: u64,
    pub non_canonical: u64,
    pub ignored_columns: Vec<String>,
}

/// What `cutover check` found.
#[derive(Debug, Serialize)]
pub struct CheckReport {
    pub verdict: Verdict,
    pub strict: bool,
    pub source: Durability,
    pub target: Durability,
    pub tables: Vec<TableCheck>,
    pub diffs: Vec<Diff>,
    pub diffs_found: u64,
    /// Every finding, counted per table, column and kind, with the first
    /// five keys and one reason: what to fix, in one run.
    pub summary: Vec<Finding>,
    /// The foreign keys of the spec's tables on both sides, and what load
    /// and replay do about each.
    pub foreign_keys: Vec<ForeignKey>,
    /// The source's own triggers, rules and foreign-key actions on the
    /// spec's tables, with what replay does about each and whether the
    /// source's role can hold it.
    pub side_effects: Policy,
    /// Where the target can hold a value the source cannot store exactly:
    /// each a warning, with what to do before the switch.
    pub hazards: Vec<crate::hazards::Hazard>,
    /// What to fix that does not fail the check: a password in a spec's
    /// URL.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl Report for CheckReport {
    fn holds(&self) -> bool {
        self.verdict.holds()
    }
}

#[derive(Debug, Serialize)]
pub struct ForeignKey {
    pub side: &'static str,
    pub table: String,
    pub columns: Vec<String>,
    pub parent: String,
    /// Whether the parent is a table of the spec.
    pub in_spec: bool,
    pub handling: &'static str,
}

/// The foreign keys of every spec table on one side.
fn foreign_keys(spec: &Spec, db: &dyn Catalogue, side: &'static str) -> Result<Vec<ForeignKey>> {
    let mut out = Vec::new();
    for t in &spec.tables {
        let (table, others): (&str, Vec<&str>) = match side {
            "source" => (
                &t.source_table,
                spec.tables
                    .iter()
                    .map(|x| x.source_table.as_str())
                    .collect(),
            ),
            _ => (
                &t.target_table,
                spec.tables
                    .iter()
                    .map(|x| x.target_table.as_str())
                    .collect(),
            ),
        };
        for fk in db.foreign_keys(table)? {
            let parent = fk.parent;
            let in_spec = others.iter().any(|o| o.eq_ignore_ascii_case(&parent));
            let handling = match (side, in_spec) {
                ("target", true) => "load writes the parent table first; the gate reconciles both",
                ("target", false) => {
                    "the parent is not migrated: load does not check the reference; fill the parent table before the application uses the target"
                }
                (_, true) => {
                    "replay never enforces it statement by statement (no cascade, no SET NULL); it checks the source's foreign keys after the last batch and reports a row left without its parent"
                }
                _ => {
                    "the parent is outside the spec: cutover never writes it, and no cascade from it or to it ever fires; replay reports a source row left without its parent"
                }
            };
            out.push(ForeignKey {
                side,
                table: table.to_string(),
                columns: fk.columns.into_iter().map(|c| c.0).collect(),
                parent,
                in_spec,
                handling,
            });
        }
    }
    Ok(out)
}

#[derive(Debug, Serialize)]
pub struct Finding {
    pub table: String,
    pub column: String,
    pub kind: FindingKind,
    pub rows: u64,
    pub first_keys: Vec<serde_json::Value>,
    pub reason: String,
}

/// What is wrong with a source value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum FindingKind {
    /// The forward transform refuses it, or a check fails.
    #[serde(rename = "invalid")]
    Invalid,
    /// Value-equal, but not the text reverse would write back.
    #[serde(rename = "non-canonical")]
    NonCanonical,
}

/// How `db` commits and, for a server, how the connection is protected;
/// its warnings go to `warnings`, naming the side.
fn durability(db: &Db, side: &str, warnings: &mut Vec<String>) -> Result<Durability> {
    let facts = db.connection().facts()?;
    let d = facts.durability;
    let connection = facts.security.map(|s| {
        warnings.extend(s.warnings.into_iter().map(|w| format!("{side}: {w}")));
        s.transport
    });
    Ok(Durability {
        path: db.location().to_string(),
        shown: d
            .settings
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", "),
        settings: d.settings.into_iter().collect(),
        connection,
    })
}

pub fn run(spec: &Spec, strict: bool, max_diffs: usize) -> Result<CheckReport> {
    let (mut source, target, notes) = schema::open(spec, Access::Read, Access::Read)?;
    let mut tables = Vec::new();
    let mut diffs = Vec::new();
    let mut found = 0u64;
    let mut summary: Vec<Finding> = Vec::new();
    for t in &spec.tables {
        let mut record = |key: Row, note: &crate::canonical::Note| {
            found += 1;
            let (column, kind, reason) = match note {
                crate::canonical::Note::Invalid(col, _, why) => {
                    (col.clone(), FindingKind::Invalid, why.clone())
                }
                crate::canonical::Note::NonCanonical(i, _, canonical) => (
                    t.columns[*i].source.clone(),
                    FindingKind::NonCanonical,
                    format!("value-equal but not canonical (replay writes {canonical})"),
                ),
            };
            match summary
                .iter_mut()
                .find(|f| f.table == t.name && f.column == column && f.kind == kind)
            {
                Some(f) => {
                    f.rows += 1;
                    if f.first_keys.len() < 5 {
                        f.first_keys.push(crate::value::key_json(&key));
                    }
                }
                None => summary.push(Finding {
                    table: t.name.clone(),
                    column,
                    kind,
                    rows: 1,
                    first_keys: vec![crate::value::key_json(&key)],
                    reason,
                }),
            }
            if diffs.len() < max_diffs {
                diffs.push(Diff::from_note(t, &key, note));
            }
        };
        let scanned = reconcile::scan_source(t, &mut source, true, |key, note| {
            record(key, note);
            Ok(true)
        })?;
        // Values the target casts from text, asked of the target itself.
        let refused = crate::target_casts::refused(t, &source, &target)?;
        for (key, note) in &refused {
            record(key.clone(), note);
        }
        let invalid = scanned.invalid + refused.len() as u64;
        tables.push(TableCheck {
            name: t.name.clone(),
            rows: scanned.rows,
            reversible: scanned.rows - invalid,
            invalid,
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
    let side_effects = Policy::read(spec, &source)?;
    // A trigger or rule the role cannot hold as the policy says would make
    // replay refuse: the rollback is not ready.
    let holds = invalid == 0
        && (!strict || non_canonical == 0)
        && side_effects.unheld_triggers().next().is_none();
    let mut warnings = Vec::new();
    let rep = CheckReport {
        verdict: Verdict::of(holds),
        strict,
        source: durability(&source, "source", &mut warnings)?,
        target: durability(&target, "target", &mut warnings)?,
        tables,
        diffs,
        diffs_found: found,
        summary,
        foreign_keys: {
            let mut fks = foreign_keys(spec, source.catalogue(), "source")?;
            fks.extend(foreign_keys(spec, target.catalogue(), "target")?);
            fks
        },
        side_effects,
        hazards: crate::hazards::of(spec, &source, &target)?,
        warnings,
    };
    Ok(rep)
}

/// The report as text: the tables, the durability of both databases,
/// foreign keys, triggers and ignored columns, then the findings.
pub fn render(rep: &CheckReport) -> String {
    let invalid: u64 = rep.tables.iter().map(|t| t.invalid).sum();
    let non_canonical: u64 = rep.tables.iter().map(|t| t.non_canonical).sum();
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
    let mut pairs = Vec::new();
    for (side, d) in [("source", &rep.source), ("target", &rep.target)] {
        pairs.push((side, format!("{} ({})", d.path, d.shown)));
        if let Some(c) = &d.connection {
            pairs.push(("", format!("connection: {c}")));
        }
    }
    text.push_str(&report::pairs(&pairs));
    for w in &rep.warnings {
        text.push_str(&format!("warning: {w}\n"));
    }
    for fk in &rep.foreign_keys {
        text.push_str(&format!(
            "foreign key ({}): table '{}' ({}) references '{}'{}: {}\n",
            fk.side,
            fk.table,
            fk.columns.join(", "),
            fk.parent,
            if fk.in_spec { "" } else { ", outside the spec" },
            fk.handling
        ));
    }
    text.push_str(&crate::side_effects::render(&rep.side_effects));
    for (t, c) in rep
        .tables
        .iter()
        .flat_map(|t| t.ignored_columns.iter().map(move |c| (&t.name, c)))
    {
        text.push_str(&format!(
            "note: table '{t}': source column '{c}' is ignored; the migration is irreversible for it (rollback keeps it on rows that exist before and after, and leaves it NULL or at its default on rows new to the source)\n"
        ));
    }
    text.push_str(&crate::hazards::render(&rep.hazards));
    render_findings(rep, &mut text);
    let open = crate::hazards::undecided(&rep.hazards).count();
    if open > 0 {
        text.push_str(&format!(
            "{open} hazard(s) undecided: the target can hold values the source cannot store exactly; after the switch such a write cannot go back, and journal install refuses until each is decided (WARN above: fix or accept each before the switch)\n"
        ));
    }
    text.push_str(&if rep.holds() {
        if non_canonical > 0 {
            format!("check: pass ({non_canonical} non-canonical texts would be rewritten by replay; --strict makes that a failure)\n")
        } else {
            "check: pass (every source row transforms and round-trips)\n".to_string()
        }
    } else if invalid > 0 {
        format!("check: FAIL ({invalid} invalid source rows; fix them in the source, or the spec, and run check again)\n")
    } else if let Some(d) = rep.side_effects.unheld_triggers().next() {
        format!(
            "check: FAIL (the rollback is not ready: replay cannot hold the source {} '{}' on '{}' as its policy says, and would refuse; see CANNOT HOLD above)\n",
            d.effect.kind, d.effect.name, d.effect.table
        )
    } else {
        format!("check: FAIL under --strict ({non_canonical} non-canonical texts)\n")
    });
    text
}

/// The findings per column, then the first differences found.
fn render_findings(rep: &CheckReport, text: &mut String) {
    if !rep.summary.is_empty() {
        text.push_str("\nfindings per column\n");
        text.push_str(&report::table(
            &[
                "table",
                "column",
                "kind",
                "rows",
                "first keys",
                "for example",
            ],
            rep.summary.iter().map(|f| {
                vec![
                    f.table.clone(),
                    f.column.clone(),
                    report::name(&f.kind),
                    f.rows.to_string(),
                    f.first_keys
                        .iter()
                        .map(|k| k.to_string())
                        .collect::<Vec<_>>()
                        .join(" "),
                    f.reason.clone(),
                ]
            }),
        ));
        text.push('\n');
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
}
