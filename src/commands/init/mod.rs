//! `cutover init`: drafts a spec from the two schemas. Tables and columns
//! are matched by name (case, underscores and a plural `s` ignored:
//! `InvoiceLine` ↔ `invoice_lines`), keys come from the source's primary
//! key, `decimal_to_minor` is proposed where a decimal, NUMERIC or REAL
//! source column meets an INTEGER target column, `map` where a text column
//! holds few distinct values that the target spells otherwise or where a
//! target CHECK allows only certain words, `is_x` ↔ `x` columns paired
//! either way, and whatever
//! does not match is a commented line to decide on. The draft is a proposal:
//! `cutover check` is what proves it.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result, bail};
use serde::Serialize;

use crate::db::{Access, Db};
use crate::report::Report;
use crate::spec::Side;

mod check_words;
mod draft;
mod map;
mod unread;

/// The spec `init` drafted: where, what it matched, what is left to decide.
#[derive(Debug, Serialize)]
pub struct InitReport {
    pub out: Option<String>,
    pub tables: Vec<String>,
    pub unmatched_source_tables: Vec<String>,
    pub unmatched_target_tables: Vec<String>,
    pub to_decide: usize,
    /// The draft itself (printed when there is no `--out`).
    #[serde(skip)]
    pub toml: String,
}

impl Report for InitReport {
    fn holds(&self) -> bool {
        true
    }
}

fn open(url: &str, side: Side) -> Result<Db> {
    let location =
        crate::spec::database(Path::new(""), url).with_context(|| format!("--{side}"))?;
    Db::open(&location, Access::Read, side)
}

pub fn run(source_url: &str, target_url: &str, out: Option<&Path>) -> Result<InitReport> {
    if let Some(p) = out
        && p.exists()
    {
        bail!(
            "{} already exists; init never overwrites a file. Choose another --out, or remove it first",
            p.display()
        );
    }
    let source = open(source_url, Side::Source)?;
    let target = open(target_url, Side::Target)?;
    let s_tables = source.catalogue().tables(false)?;
    let t_tables = target.catalogue().tables(false)?;
    let mut toml = String::new();
    let _ = writeln!(
        toml,
        "# Drafted by `cutover init` from {} and {}.\n# Read every comment marked DECIDE, then run `cutover check --spec <this file>`.\n\n[source]\nurl = {}\n\n[target]\nurl = {}",
        crate::spec::without_password(source_url),
        crate::spec::without_password(target_url),
        draft::lit(&crate::spec::password_removed(source_url)),
        draft::lit(&crate::spec::password_removed(target_url))
    );
    for (side, url) in [(Side::Source, source_url), (Side::Target, target_url)] {
        if crate::spec::password_removed(url) != url {
            let _ = writeln!(
                toml,
                "# the {side}'s password given to init is not written here (a spec is committed and\n# attached to tickets): give it in {}, or in PGPASSWORD or ~/.pgpass\n# (PostgreSQL), MYSQL_PWD or ~/.my.cnf (MySQL).",
                side.password_variable()
            );
        }
    }
    let mut matched = Vec::new();
    let mut to_decide = 0usize;
    let mut used_targets = Vec::new();
    for st in &s_tables {
        let Some(tt) = t_tables
            .iter()
            .find(|t| draft::norm(t) == draft::norm(st) && !used_targets.contains(*t))
        else {
            continue;
        };
        used_targets.push(tt.clone());
        matched.push(tt.clone());
        draft::table(&source, &target, st, tt, &mut toml, &mut to_decide)?;
    }
    let unmatched_s: Vec<String> = s_tables
        .iter()
        .filter(|s| !t_tables.iter().any(|t| draft::norm(t) == draft::norm(s)))
        .cloned()
        .collect();
    let unmatched_t: Vec<String> = t_tables
        .iter()
        .filter(|t| !used_targets.contains(t))
        .cloned()
        .collect();
    for s in &unmatched_s {
        to_decide += 1;
        let _ = writeln!(
            toml,
            "\n# DECIDE: source table {s} has no target table of a matching name; add a [[tables]] with source_table = {}",
            draft::lit(s)
        );
    }
    for t in &unmatched_t {
        to_decide += 1;
        let _ = writeln!(
            toml,
            "\n# DECIDE: target table {t} has no source table of a matching name; add a [[tables]] with target_table = {}",
            draft::lit(t)
        );
    }
    // The draft must itself be valid TOML.
    toml::from_str::<toml::Value>(&toml).context("the drafted spec is not valid TOML (a bug)")?;
    let toml = decisions(toml, &source, &target, &mut to_decide);
    if let Some(p) = out {
        write_new(p, &toml)?;
    }
    Ok(InitReport {
        out: out.map(|p| p.display().to_string()),
        tables: matched,
        unmatched_source_tables: unmatched_s,
        unmatched_target_tables: unmatched_t,
        to_decide,
        toml,
    })
}

/// The draft with, under each table's key, a `DECIDE` comment for what
/// `check` will ask to be decided there: the hazards (docs/spec.md,
/// "Hazards"), with the commented line that accepts them, and the source's
/// triggers replay cannot hold as the policy decides (docs/spec.md,
/// "Triggers, rules and foreign-key actions of the source"), with the line
/// that lets each fire. A draft that does not load yet (a table without a
/// key, say) gets none: `check` names them once it does.
fn decisions(toml: String, source: &Db, target: &Db, to_decide: &mut usize) -> String {
    let Ok(spec) = crate::spec::from_text(&toml, Path::new("draft.toml")) else {
        return toml;
    };
    let found = crate::hazards::of(&spec, source, target).unwrap_or_default();
    let policy = crate::side_effects::Policy::read(&spec, source).unwrap_or_default();
    let mut out = toml;
    for t in &spec.tables {
        let mut note = String::new();
        let here: Vec<&crate::hazards::Hazard> =
            found.iter().filter(|h| h.table == t.name).collect();
        if !here.is_empty() {
            note.push_str("# DECIDE: the target can hold values these source columns cannot store exactly\n# (docs/spec.md, \"Hazards\"); after the switch such a write cannot go back:\n");
            for h in &here {
                note.push_str(&format!(
                    "#   {}: {} hazard: {}\n",
                    h.column,
                    h.kind.name(),
                    h.why
                ));
            }
            let mut columns: Vec<&str> = here.iter().map(|h| h.column.as_str()).collect();
            columns.dedup();
            let accepted: Vec<String> = columns
                .iter()
                .map(|c| format!("{} = \"watch\"", draft::lit(c)))
                .collect();
            note.push_str(&format!(
                "# widen the source, add the target CHECKs `cutover check` prints, or accept them:\n# source_limit = {{ {} }}\n",
                accepted.join(", ")
            ));
        }
        let unheld: Vec<&crate::side_effects::Decided> = policy
            .unheld_triggers()
            .filter(|d| d.effect.table == t.source_table)
            .collect();
        if !unheld.is_empty() {
            note.push_str("# DECIDE: replay cannot hold these source triggers as decided (`cutover check` says CANNOT HOLD):\n");
            for d in &unheld {
                note.push_str(&format!(
                    "#   {} '{}' ({}): {}\n",
                    d.effect.kind,
                    d.effect.name,
                    d.effect.when,
                    d.cannot.as_deref().unwrap_or_default()
                ));
            }
            let fire: Vec<String> = unheld
                .iter()
                .map(|d| format!("{} = \"fire\"", draft::lit(&d.effect.name)))
                .collect();
            note.push_str(&format!(
                "# let them fire on replay's writes, or drop them for the rollback (RUNBOOK.md, \"A MySQL source\"):\n# replay_policy = {{ {} }}\n",
                fire.join(", ")
            ));
        }
        if note.is_empty() {
            continue;
        }
        let head = format!("\n[[tables]]\nname = {}\n", draft::lit(&t.name));
        let Some(at) = out.find(&head) else {
            continue;
        };
        let Some(key) = out[at..].find("\nkey = ").map(|k| at + k + 1) else {
            continue;
        };
        let end = out[key..].find('\n').map_or(out.len(), |e| key + e + 1);
        out.insert_str(end, &note);
        *to_decide += 1;
    }
    out
}

/// Writes the draft to `p`, which must not exist: never overwrites, even a
/// file that appeared meanwhile.
fn write_new(p: &Path, toml: &str) -> Result<()> {
    let dir = p
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("creating a temporary file in {}", dir.display()))?;
    std::io::Write::write_all(&mut tmp, toml.as_bytes())?;
    // Never overwrites: refused if the file appeared meanwhile.
    tmp.persist_noclobber(p)
        .with_context(|| format!("writing {}", p.display()))?;
    Ok(())
}

/// The report as text: the draft itself, or where it was written.
pub fn render(rep: &InitReport) -> String {
    match &rep.out {
        Some(p) => format!(
            "init: drafted {p} ({} tables matched, {} things to decide: see the DECIDE comments); next: cutover check --spec {p}\n",
            rep.tables.len(),
            rep.to_decide,
        ),
        None => rep.toml.clone(),
    }
}
