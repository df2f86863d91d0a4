//! Opening a spec's databases and checking the spec against their
//! catalogues: columns mapped and present on both sides, keys, foreign keys'
//! order. The spec itself (src/spec.rs) is parsed without touching a
//! database; this is where the two meet.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{Result, bail};

use crate::db::{Catalogue, ColumnInfo, Db, Generated};
use crate::spec::{Location, Side, Spec, Table};

/// Opens both databases of a spec and checks the spec against their
/// catalogues, before anything reads a row.
pub fn open(
    spec: &Spec,
    source: crate::db::Access,
    target: crate::db::Access,
) -> Result<(Db, Db, SchemaNotes)> {
    open_with_snapshot(spec, None, source, target)
}

/// [`open`], reading the source from a CSV `snapshot` instead of the spec's.
pub fn open_with_snapshot(
    spec: &Spec,
    snapshot: Option<&Path>,
    source: crate::db::Access,
    target: crate::db::Access,
) -> Result<(Db, Db, SchemaNotes)> {
    let s = open_source(spec, snapshot, source)?;
    let t = Db::open(&spec.target, target, Side::Target)?;
    // Two spellings of one file (`./one.db`, `sub/../one.db`, a symlink,
    // a hard link) are still one database: the same device and inode.
    if let (Location::Sqlite(source), Location::Sqlite(target)) = (&spec.source, &spec.target)
        && let (Ok(a), Ok(b)) = (source.canonicalize(), target.canonicalize())
        && (a == b || same_inode(&a, &b))
    {
        bail!(
            "spec {}: source and target are the same file {}; they must be two databases",
            spec.path.display(),
            a.display()
        );
    }
    let notes = spec.check_schema(&s, &t)?;
    Ok((s, t, notes))
}

/// Opens the target of `spec` with `access`.
pub fn open_target(spec: &Spec, access: crate::db::Access) -> Result<Db> {
    Db::open(&spec.target, access, Side::Target)
}

#[cfg(unix)]
fn same_inode(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

#[cfg(not(unix))]
fn same_inode(_: &Path, _: &Path) -> bool {
    false
}

/// Opens the source: the database, or a CSV snapshot (the spec's, or
/// `snapshot` instead) read into a temporary database, typed by the target's
/// columns, that every command then reads like any other source.
pub fn open_source(spec: &Spec, snapshot: Option<&Path>, access: crate::db::Access) -> Result<Db> {
    match (&spec.source, snapshot) {
        (Location::Sqlite(_), None) => Db::open(&spec.source, access, Side::Source),
        (Location::Server(_), None) => {
            let db = Db::open(&spec.source, access, Side::Source)?;
            mark_typed_decimals(spec, &db)?;
            Ok(db)
        }
        (Location::Sqlite(_) | Location::Server(_), Some(_)) => bail!(
            "--snapshot is for a csv:// source; the spec's source {} is a database",
            spec.source.display()
        ),
        (Location::Csv(csv), s) => {
            if access == crate::db::Access::Write {
                bail!(
                    "the source {} is a CSV snapshot, which cutover never writes; replay and apply --into source need a database source",
                    spec.source.display()
                );
            }
            let target = Db::open(&spec.target, crate::db::Access::Read, Side::Target)?;
            crate::db::csv::materialize(s.unwrap_or(csv), &spec.tables[0], &target)
        }
    }
}

/// Marks each `decimal_to_minor` column whose source column is an exact
/// decimal of a server's engine (PostgreSQL's `NUMERIC`, MySQL's `DECIMAL`),
/// so that its zeros past the spec's scale are read as the exact zeros they
/// are ([`crate::transform::TypedSource`]). SQLite's `NUMERIC` is only an
/// affinity, whose values are integers, reals or text: not marked.
fn mark_typed_decimals(spec: &Spec, source: &Db) -> Result<()> {
    for t in &spec.tables {
        let money: Vec<_> = t
            .columns
            .iter()
            .filter_map(|c| match &c.transform {
                crate::transform::Transform::DecimalToMinor { typed, .. } => Some((c, typed)),
                _ => None,
            })
            .collect();
        if money.is_empty() {
            continue;
        }
        let columns = source.catalogue().table_columns(&t.source_table)?;
        for (c, typed) in money {
            if columns.iter().any(|s| {
                s.name == c.source && matches!(s.kind, crate::value::ColumnKind::Decimal { .. })
            }) {
                typed.mark();
            }
        }
    }
    Ok(())
}

/// Refuses a command that would write to a fenced target: `why` says what
/// the command would do there and what to do instead.
pub fn refuse_if_fenced(target: &Db, why: &str) -> Result<()> {
    if let Some(f) = target.fence_records().row()? {
        bail!(
            "target {} is fenced (boundary {}); {why}",
            target.location(),
            f.boundary
        );
    }
    Ok(())
}

/// Whether each edge `(child, parent, _)` of a graph of `n` tables lies on
/// a cycle: its parent reaches its child.
pub fn on_cycles<T>(n: usize, edges: &[(usize, usize, T)]) -> Vec<bool> {
    let reaches = |from: usize, to: usize| {
        let mut seen = vec![false; n];
        let mut stack = vec![from];
        while let Some(x) = stack.pop() {
            if x == to {
                return true;
            }
            if !std::mem::replace(&mut seen[x], true) {
                stack.extend(edges.iter().filter(|e| e.0 == x).map(|e| e.1));
            }
        }
        false
    };
    edges.iter().map(|e| reaches(e.1, e.0)).collect()
}

/// What the schema check found that is allowed but worth saying.
#[derive(Debug, Default)]
pub struct SchemaNotes {
    /// `(table, column)` source columns deliberately not carried.
    pub irreversible: Vec<(String, String)>,
    /// `(table, source column, target column)` added by `sync --evolve` and
    /// not yet in the spec: sync carries them, nothing else does.
    pub evolved: Vec<(String, String, String)>,
}

impl Spec {
    /// The spec's tables, parents before children by the target's foreign
    /// keys between them; in a cycle, parents first by the keys that are
    /// not `DEFERRABLE` (a load writes a cycle in one transaction whose
    /// commit checks the others), then in the spec's order: the order
    /// `load` writes them in, whatever order the spec lists them.
    pub fn parents_first(&self, target: &dyn Catalogue) -> Result<Vec<usize>> {
        let n = self.tables.len();
        let mut parents: Vec<Vec<(usize, bool)>> = vec![Vec::new(); n];
        for (i, t) in self.tables.iter().enumerate() {
            for crate::db::ForeignKey {
                parent, deferrable, ..
            } in target.foreign_keys(&t.target_table)?
            {
                if let Some(p) = self
                    .tables
                    .iter()
                    .position(|x| x.target_table.eq_ignore_ascii_case(&parent))
                    && p != i
                {
                    parents[i].push((p, deferrable));
                }
            }
        }
        let mut order = Vec::with_capacity(n);
        let mut placed = vec![false; n];
        loop {
            let ready = |i: usize, all: bool| {
                !placed[i] && parents[i].iter().all(|&(p, d)| placed[p] || (d && !all))
            };
            let next = (0..n)
                .find(|&i| ready(i, true))
                .or_else(|| (0..n).find(|&i| ready(i, false)));
            match next {
                Some(i) => {
                    placed[i] = true;
                    order.push(i);
                }
                None => break,
            }
        }
        order.extend((0..n).filter(|&i| !placed[i]));
        Ok(order)
    }

    /// The target's foreign keys between the spec's tables that lie on a
    /// cycle (`staff.store_id` → `store`, `store.manager_staff_id` →
    /// `staff`): no order of the tables loads them one at a time. Each
    /// with the index of its table and of its parent table; empty when
    /// there is no cycle.
    pub fn foreign_key_cycles(
        &self,
        target: &dyn Catalogue,
    ) -> Result<Vec<(usize, usize, crate::db::ForeignKey)>> {
        let mut edges = Vec::new();
        for (i, t) in self.tables.iter().enumerate() {
            for fk in target.foreign_keys(&t.target_table)? {
                if let Some(p) = self
                    .tables
                    .iter()
                    .position(|x| x.target_table.eq_ignore_ascii_case(&fk.parent))
                    && p != i
                {
                    edges.push((i, p, fk));
                }
            }
        }
        let on = on_cycles(self.tables.len(), &edges);
        Ok(edges
            .into_iter()
            .zip(on)
            .filter_map(|(e, c)| c.then_some(e))
            .collect())
    }

    /// The target half of [`Spec::check_schema`], for sync, which checks the
    /// source itself (as drift).
    pub fn check_target_columns(&self, target: &Db, tables: &[&Table]) -> Result<()> {
        for t in tables {
            let generated = target.catalogue().generated_columns(&t.target_table)?;
            let cols: Vec<ColumnInfo> = table_columns(target, &t.target_table, Side::Target, self)?
                .into_iter()
                .filter(|c| !generated.iter().any(|g| g.name == c.name))
                .collect();
            let evolved: Vec<String> = target
                .progress()
                .evolved_columns(&t.name)?
                .into_iter()
                .map(|e| e.target_column)
                .collect();
            for c in &t.columns {
                if !cols.iter().any(|x| x.name == c.target) && !evolved.contains(&c.target) {
                    bail!(
                        "spec {}: table '{}': target table '{}' in {} has no column '{}'; fix the column name in the spec",
                        self.path.display(),
                        t.name,
                        t.target_table,
                        self.target.display(),
                        c.target
                    );
                }
            }
            for c in &cols {
                if !t.columns.iter().any(|x| x.target == c.name)
                    && !evolved.contains(&c.name)
                    && !t.target_defaults.contains(&c.name)
                {
                    bail!(
                        "spec {}: table '{}': target column '{}' is not the target of any mapping; map a source column to it, hold a constant (target = \"{}\" with value = …), or leave it to the target's default (target = \"{}\" with default = true)",
                        self.path.display(),
                        t.name,
                        c.name,
                        c.name,
                        c.name
                    );
                }
            }
        }
        Ok(())
    }

    /// Compares the spec with both databases' catalogues.
    pub fn check_schema(&self, source: &Db, target: &Db) -> Result<SchemaNotes> {
        let mut notes = SchemaNotes::default();
        // Every column-level problem of every table, said in one run.
        let mut problems: Vec<String> = Vec::new();
        for t in &self.tables {
            // Generated columns are computed by their database: never
            // written, never required to be mapped, named as generated.
            let s_generated = source.catalogue().generated_columns(&t.source_table)?;
            let t_generated = target.catalogue().generated_columns(&t.target_table)?;
            // A source's generated column the spec maps is read and carried
            // like any other; replay leaves it to the source to compute.
            let mapped = |name: &str| t.columns.iter().any(|c| c.source == name);
            let mut s_cols: Vec<ColumnInfo> =
                table_columns(source, &t.source_table, Side::Source, self)?
                    .into_iter()
                    .filter(|c| !s_generated.iter().any(|g| g.name == c.name) || mapped(&c.name))
                    .collect();
            // SQLite lists its generated columns apart from the others.
            for g in &s_generated {
                if mapped(&g.name) && !s_cols.iter().any(|c| c.name == g.name) {
                    s_cols.push(ColumnInfo {
                        name: g.name.clone(),
                        decl_type: String::new(),
                        kind: crate::value::ColumnKind::Any,
                        pk: 0,
                        labels: None,
                        unread: None,
                        limit: crate::db::Limit::None,
                        required: false,
                    });
                }
            }
            let t_cols: Vec<ColumnInfo> =
                table_columns(target, &t.target_table, Side::Target, self)?
                    .into_iter()
                    .filter(|c| !t_generated.iter().any(|g| g.name == c.name))
                    .collect();
            let s_names: BTreeSet<&str> = s_cols.iter().map(|c| c.name.as_str()).collect();
            let t_names: BTreeSet<&str> = t_cols.iter().map(|c| c.name.as_str()).collect();
            for (i, c) in t.columns.iter().enumerate() {
                if let Some(kind) = s_generated
                    .iter()
                    .find(|g| g.name == c.source)
                    .map(Generated::kind)
                    && i < t.key_len
                {
                    problems.push(format!(
                        "spec {}: table '{}': key column '{}' of the source is generated ({kind}): the source computes it, so replay could not write a row under its key; key the table by the columns it is computed from",
                        self.path.display(),
                        t.name,
                        c.source
                    ));
                    continue;
                }
                if !c.source.is_empty() && !s_names.contains(c.source.as_str()) {
                    problems.push(format!(
                        "spec {}: table '{}': source table '{}' in {} has no column '{}' (it has: {}); fix the column name in the spec",
                        self.path.display(),
                        t.name,
                        t.source_table,
                        self.source.display(),
                        c.source,
                        join(&s_names)
                    ));
                }
                if let Some(kind) = t_generated
                    .iter()
                    .find(|g| g.name == c.target)
                    .map(Generated::kind)
                {
                    problems.push(format!(
                        "spec {}: table '{}': target column '{}' is generated ({kind}): the target computes it, so nothing can be loaded into it; remove its [[tables.columns]] entry (it needs no mapping)",
                        self.path.display(),
                        t.name,
                        c.target
                    ));
                } else if !t_names.contains(c.target.as_str()) {
                    problems.push(format!(
                        "spec {}: table '{}': target table '{}' in {} has no column '{}' (it has: {}); fix the column name in the spec",
                        self.path.display(),
                        t.name,
                        t.target_table,
                        self.target.display(),
                        c.target,
                        join(&t_names)
                    ));
                }
            }
            for i in &t.ignore {
                if !s_names.contains(i.as_str()) {
                    problems.push(format!(
                        "spec {}: table '{}': ignored column '{i}' does not exist in source table '{}'",
                        self.path.display(),
                        t.name,
                        t.source_table
                    ));
                }
                notes.irreversible.push((t.name.clone(), i.clone()));
            }
            for w in &t.watched {
                if !s_names.contains(w.as_str()) {
                    problems.push(format!(
                        "spec {}: table '{}': source_limit names column '{w}', which does not exist in source table '{}'; it has {}",
                        self.path.display(),
                        t.name,
                        t.source_table,
                        join(&s_names)
                    ));
                }
            }
            // Columns `sync --evolve` added to the target are carried as
            // copy by sync until the spec maps them.
            let evolved = target.progress().evolved_columns(&t.name)?;
            for e in &evolved {
                notes.evolved.push((
                    t.name.clone(),
                    e.source_column.clone(),
                    e.target_column.clone(),
                ));
            }
            let mapped_s: BTreeSet<&str> = t
                .columns
                .iter()
                .map(|c| c.source.as_str())
                .chain(evolved.iter().map(|e| e.source_column.as_str()))
                .collect();
            for c in &s_cols {
                if !mapped_s.contains(c.name.as_str()) && !t.ignore.contains(&c.name) {
                    problems.push(format!(
                        "spec {}: table '{}': source column '{}' is not mapped; add a [[tables.columns]] entry with source = \"{}\", or list it in ignore = [...] to drop it (rollback cannot restore an ignored column)",
                        self.path.display(),
                        t.name,
                        c.name,
                        c.name
                    ));
                }
            }
            let mapped_t: BTreeSet<&str> = t
                .columns
                .iter()
                .map(|c| c.target.as_str())
                .chain(evolved.iter().map(|e| e.target_column.as_str()))
                .chain(t.target_defaults.iter().map(String::as_str))
                .collect();
            for c in &t_cols {
                if !mapped_t.contains(c.name.as_str()) {
                    problems.push(format!(
                        "spec {}: table '{}': target column '{}' is not the target of any mapping, so it could be neither loaded nor reconciled; map a source column to it, hold a constant (target = \"{}\" with value = …), or leave it to the target's default (target = \"{}\" with default = true: never loaded nor compared)",
                        self.path.display(),
                        t.name,
                        c.name,
                        c.name,
                        c.name
                    ));
                }
            }
        }
        if !problems.is_empty() {
            bail!("{}", problems.join("\n"));
        }
        Ok(notes)
    }
}

fn table_columns(db: &Db, table: &str, side: Side, spec: &Spec) -> Result<Vec<ColumnInfo>> {
    let cols = db.catalogue().table_columns(table)?;
    if cols.is_empty() {
        let have = db.catalogue().tables(false)?;
        bail!(
            "spec {}: {side} {} has no table '{table}' (it has: {}); fix the table name in the spec",
            spec.path.display(),
            db.location(),
            if have.is_empty() {
                "no tables".to_string()
            } else {
                have.join(", ")
            }
        );
    }
    Ok(cols)
}

fn join(names: &BTreeSet<&str>) -> String {
    names.iter().copied().collect::<Vec<_>>().join(", ")
}
