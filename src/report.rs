//! Rendering: human tables (comfy-table, width-independent so output is the
//! same on any terminal and in golden files) and the one JSON document a
//! command prints with `--format json`.

use comfy_table::{ContentArrangement, Table, presets};
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

use crate::reconcile::{Diff, Reconciliation};
use crate::spec::Side;

/// A command's verdict: everything it checked holds (`pass`, exit 0) or not
/// (`fail`, exit 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Pass,
    Fail,
}

impl Verdict {
    pub fn of(holds: bool) -> Verdict {
        if holds { Verdict::Pass } else { Verdict::Fail }
    }

    pub fn holds(self) -> bool {
        self == Verdict::Pass
    }
}

/// What became of a batch of changes (a sync batch, a feed's delivery).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BatchStatus {
    /// Committed, with its checkpoint.
    Applied,
    /// Committed before: its checkpoint was already there; nothing written.
    Replayed,
    /// Refused, rolled back whole.
    Rejected,
    /// Not tried: an earlier batch was rejected.
    NotAttempted,
    /// Applied, then rolled back with the rest of a run that commits whole
    /// or not at all (`apply --into source`): nothing of it stays.
    RolledBack,
}

/// A command's result as a typed value. Its JSON is its `Serialize` form;
/// its text comes from the command's `render` function; both are made at
/// the edge ([`Outcome::of`]).
pub trait Report: Serialize {
    /// Whether everything the command checked holds: exit 0, else 1.
    fn holds(&self) -> bool;
}

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

    /// A typed report and its text, as printed.
    pub fn of(report: &impl Report, text: String) -> anyhow::Result<Outcome> {
        Outcome::new(report.holds(), report, text)
    }
}

/// The name a unit variant has in the JSON (`changed`, `not_attempted`),
/// for the text.
pub fn name(variant: &impl Serialize) -> String {
    serde_json::to_value(variant)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
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
                name(&d.kind),
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

/// The time as the reports write it: UTC, RFC 3339, milliseconds.
pub fn timestamp(at: std::time::SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(at).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// SHA-256 of a file's bytes, read in chunks.
fn file_digest(path: &std::path::Path) -> anyhow::Result<(u64, String)> {
    use sha2::{Digest, Sha256};
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut size = 0u64;
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        size += n as u64;
        h.update(&buf[..n]);
    }
    Ok((size, hex::encode(h.finalize())))
}

/// One database's content fingerprint for a report, taken before or after
/// the run: the engine's identity (`Facts::identity`), the file's
/// size and SHA-256 for a file, and per spec table its rows and the SHA-256
/// of its rows in key order (`Db::digest_rows`).
#[derive(Clone, Debug, Serialize)]
pub struct Fingerprint {
    pub role: String,
    /// `before` or `after` the run.
    pub taken: String,
    pub location: String,
    pub identity: Vec<(String, String)>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file_sha256: Option<String>,
    pub tables: Vec<TableDigest>,
    /// What could not be read, when something could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreadable: Option<String>,
}

/// A table's rows and their digest.
#[derive(Clone, Debug, Serialize)]
pub struct TableDigest {
    pub table: String,
    pub rows: i64,
    pub sha256: String,
}

/// The fingerprints of a spec's databases now (`taken`: `before` or
/// `after`). A database that cannot be read is named with the reason: the
/// report is still written.
pub fn fingerprints(spec_path: &std::path::Path, taken: &str) -> anyhow::Result<Vec<Fingerprint>> {
    let spec = crate::spec::load(spec_path)?;
    let mut out = Vec::new();
    for (side, loc) in [(Side::Source, &spec.source), (Side::Target, &spec.target)] {
        let mut f = Fingerprint {
            role: side.to_string(),
            taken: taken.to_string(),
            location: loc.display(),
            identity: Vec::new(),
            file_sha256: None,
            tables: Vec::new(),
            unreadable: None,
        };
        if let Some(path) = loc.path() {
            f.file_sha256 = file_digest(path).ok().map(|(_, d)| d);
        }
        if let Err(e) = fill(&spec, loc, side, &mut f) {
            f.unreadable = Some(format!("{e:#}"));
        }
        out.push(f);
    }
    Ok(out)
}

fn fill(
    spec: &crate::spec::Spec,
    loc: &crate::spec::Location,
    side: Side,
    f: &mut Fingerprint,
) -> anyhow::Result<()> {
    let db = crate::db::Db::open(loc, crate::db::Access::Read, side)?;
    f.identity = db.connection().facts()?.identity;
    for t in &spec.tables {
        let sql = match side {
            Side::Source => db.source_sql(t),
            Side::Target => db.target_sql(t),
        };
        f.tables.push(TableDigest {
            table: t.name.clone(),
            rows: db.rows().row_count(&sql, crate::db::Count::Exact)?,
            sha256: db.digest_rows(&sql)?,
        });
    }
    Ok(())
}

/// What a report is written from, beside the command's outcome.
pub struct Run<'a> {
    pub command: &'a str,
    /// The command line as given.
    pub args: Vec<String>,
    pub spec: Option<&'a std::path::Path>,
    pub started: std::time::SystemTime,
    /// The fingerprints taken before the run.
    pub before: Vec<Fingerprint>,
    /// A rehearsal (`gate --inject-mismatch`, `replay --rehearse`): its
    /// verdict says so.
    pub rehearsal: bool,
}

/// The verdict as a report states it: a rehearsal's says it is one (a
/// gate rehearsal that caught every fault exits 1, and is no failure).
fn verdict_text(run: &Run<'_>, out: &Outcome) -> String {
    let caught = (out.json.get("caught"), out.json.get("injected"));
    match (run.rehearsal, caught) {
        (true, (Some(c), Some(i))) => format!(
            "rehearsal: the gate caught {c} of {i} injected faults{}",
            if c == i {
                ""
            } else {
                " (the gate missed some: it cannot be trusted)"
            }
        ),
        (true, _) => format!("rehearsal: {}", name(&Verdict::of(out.holds))),
        (false, _) => name(&Verdict::of(out.holds)),
    }
}

/// Writes `--report FILE`: the command's JSON document with its provenance
/// (tool version, the command line, operator and host, the spec's path and
/// SHA-256, the journal's identity, each database's fingerprint before and
/// after the run, start and end times, the verdict) as JSON for a `.json`
/// file, or as Markdown (provenance, fingerprints, then the report as
/// printed) otherwise. Written to a temporary file and renamed, so a report
/// is whole or absent.
pub fn write_report(path: &std::path::Path, run: &Run<'_>, out: &Outcome) -> anyhow::Result<()> {
    use anyhow::Context;
    let finished = std::time::SystemTime::now();
    let mut provenance = serde_json::Map::new();
    provenance.insert(
        "tool".into(),
        serde_json::json!({"name": "cutover", "version": env!("CARGO_PKG_VERSION")}),
    );
    provenance.insert("command".into(), Json::String(run.command.to_string()));
    provenance.insert(
        "command_line".into(),
        Json::String(crate::spec::mask_passwords(&run.args.join(" "))),
    );
    provenance.insert(
        "operator".into(),
        Json::String(whoami::username().unwrap_or_else(|e| format!("unknown ({e})"))),
    );
    provenance.insert(
        "host".into(),
        Json::String(whoami::hostname().unwrap_or_else(|e| format!("unknown ({e})"))),
    );
    provenance.insert("started_at".into(), Json::String(timestamp(run.started)));
    provenance.insert("finished_at".into(), Json::String(timestamp(finished)));
    provenance.insert("verdict".into(), Json::String(verdict_text(run, out)));
    let mut fingerprints = run.before.clone();
    if let Some(spec_path) = run.spec {
        let (_, digest) = file_digest(spec_path)
            .with_context(|| format!("reading spec {} for the report", spec_path.display()))?;
        provenance.insert(
            "spec".into(),
            serde_json::json!({"path": spec_path.display().to_string(), "sha256": digest}),
        );
        let loaded = crate::spec::load(spec_path)?;
        let mut databases = Vec::new();
        for (role, db) in [("source", &loaded.source), ("target", &loaded.target)] {
            match db.path() {
                Some(file) => {
                    let (size, digest) = file_digest(file).with_context(|| {
                        format!("reading {role} {} for the report", db.display())
                    })?;
                    databases.push(serde_json::json!({"role": role, "path": db.display(), "size": size, "sha256": digest}));
                }
                // A server's database is not a file to digest: its
                // fingerprint below names it and digests its tables.
                None => databases.push(serde_json::json!({"role": role, "url": db.display()})),
            }
        }
        provenance.insert("databases".into(), Json::Array(databases));
        let journal = crate::db::Db::open(&loaded.target, crate::db::Access::Read, Side::Target)
            .and_then(|t| t.identity().id())
            .map(|j| j.map_or_else(|| "none installed".to_string(), |j| j.as_str().to_string()))
            .unwrap_or_else(|e| format!("unreadable ({e:#})"));
        provenance.insert("journal".into(), Json::String(journal));
        fingerprints.extend(fingerprints_after(spec_path)?);
    }
    let body = if path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"))
    {
        let mut doc = match &out.json {
            Json::Object(m) => m.clone(),
            other => {
                let mut m = serde_json::Map::new();
                m.insert("report".into(), other.clone());
                m
            }
        };
        // The command's own verdict, if it has one, is kept; provenance
        // fills in the rest.
        for (k, v) in provenance {
            doc.entry(k).or_insert(v);
        }
        doc.insert("fingerprints".into(), serde_json::to_value(&fingerprints)?);
        format!("{:#}\n", Json::Object(doc))
    } else {
        markdown(&provenance, &fingerprints, out)
    };
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("creating a temporary file in {}", dir.display()))?;
    std::io::Write::write_all(&mut tmp, body.as_bytes())?;
    tmp.as_file().sync_all()?;
    tmp.persist(path)
        .with_context(|| format!("writing report {}", path.display()))?;
    Ok(())
}

fn fingerprints_after(spec: &std::path::Path) -> anyhow::Result<Vec<Fingerprint>> {
    fingerprints(spec, "after")
}

/// The report as Markdown: every cell a plain value.
fn markdown(
    provenance: &serde_json::Map<String, Json>,
    fingerprints: &[Fingerprint],
    out: &Outcome,
) -> String {
    let cell = |v: &Json| match v {
        Json::String(s) => s.clone(),
        Json::Object(o) => o
            .iter()
            .map(|(k, v)| {
                format!(
                    "{k} {}",
                    v.as_str().map_or_else(|| v.to_string(), str::to_string)
                )
            })
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    };
    let mut md = String::from("# cutover report\n\n");
    md.push_str(&table(
        &["field", "value"],
        // The databases are in their own table below.
        provenance
            .iter()
            .filter(|(k, _)| *k != "databases")
            .map(|(k, v)| vec![k.clone(), cell(v)]),
    ));
    if !fingerprints.is_empty() {
        md.push_str("\n\n## Databases\n\n");
        md.push_str(&table(
            &[
                "role",
                "taken",
                "location",
                "identity",
                "file SHA-256",
                "unreadable",
            ],
            fingerprints.iter().map(|f| {
                vec![
                    f.role.clone(),
                    f.taken.clone(),
                    f.location.clone(),
                    f.identity
                        .iter()
                        .map(|(k, v)| format!("{k}: {v}"))
                        .collect::<Vec<_>>()
                        .join("; "),
                    f.file_sha256.clone().unwrap_or_default(),
                    f.unreadable.clone().unwrap_or_default(),
                ]
            }),
        ));
        md.push_str("\n\n## Tables\n\n");
        md.push_str(&table(
            &["role", "taken", "table", "rows", "rows SHA-256"],
            fingerprints.iter().flat_map(|f| {
                f.tables.iter().map(move |t| {
                    vec![
                        f.role.clone(),
                        f.taken.clone(),
                        t.table.clone(),
                        t.rows.to_string(),
                        t.sha256.clone(),
                    ]
                })
            }),
        ));
    }
    md.push_str("\n\n## Report\n\n```text\n");
    md.push_str(&out.text);
    md.push_str("```\n");
    md
}
