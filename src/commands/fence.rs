//! The fence: makes the target read-only for every writer, in every process,
//! while the rollback runs.
//!
//! `PRAGMA query_only` is per connection and fences nothing. On SQLite the
//! fence is a set of `BEFORE INSERT/UPDATE/DELETE` triggers that abort, on
//! every journaled table and on the journal itself, installed in one
//! `BEGIN IMMEDIATE` transaction together with the fence row: the journal
//! boundary and a fingerprint. That transaction waits for a writer in flight,
//! so nothing lands between boundary and fence, and a crash leaves a whole
//! fence or none.
//!
//! Triggers cannot stop `DROP TRIGGER`, `ALTER TABLE` or a connection with
//! triggers disabled. The fingerprint (schema of the fenced tables and
//! triggers, journal size and digest) and the target's change token let replay
//! notice that before and after every batch and stop with "fence breached".

use anyhow::{Context, Result, bail};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::db::{Access, Db, FenceRecord};
use crate::report::{self, Report};
use crate::schema;
use crate::spec::Spec;

const FENCE_TABLE: &str = "_cutover_fence";

/// The format of the fingerprints `fence on` writes now. Format 1 (a fence
/// set before the record was covered; its `parts` carry no `version`) hashes
/// the schema, the rows and the journal; format 2 hashes the same parts and
/// the fence record itself (boundary, entries, tables, time); format 3 is
/// format 2 with each table's rows read as the table holds them (every
/// column, in the table's order) rather than as the spec maps them, so that
/// a change of the spec is no breach. docs/journal.md gives each byte for
/// byte; a fence is checked in the format it was set in.
pub const FORMAT: u32 = 3;

fn format_one() -> u32 {
    1
}

/// What the fence protects, as found now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Fingerprint {
    /// The format the fence was set in (1 when its parts do not say).
    #[serde(default = "format_one")]
    version: u32,
    schema: Vec<(String, String)>,
    /// Digest of each fenced table's rows: a write made with triggers
    /// disabled changes it.
    content: Vec<(String, String)>,
    journal_rows: i64,
    max_seq: i64,
    digest: String,
    /// A query that failed on a table that is there as the fence saw it: the
    /// fingerprint was not computed, which says nothing of a breach.
    #[serde(skip)]
    failed: Option<String>,
}

/// One part of the fingerprint: its value, or what stands for it when it
/// could not be read, and whether that was a failed query (the tables it
/// reads are there) rather than a difference (they are gone or reshaped).
struct Part<T> {
    value: T,
    failed: Option<String>,
}

impl<T> Part<T> {
    /// An error reading a part: a difference when `gone`, else a failure.
    fn unreadable(value: T, e: &anyhow::Error, gone: Result<bool>) -> Part<T> {
        Part {
            value,
            failed: match gone {
                Ok(true) => None,
                Ok(false) => Some(format!("{e:#}")),
                Err(other) => Some(format!("{e:#} (and then: {other:#})")),
            },
        }
    }
}

/// Whether a spec table is gone from the target or lacks a column the spec
/// reads: then reading it fails because of what changed.
fn table_gone(db: &Db, t: &crate::spec::Table) -> Result<bool> {
    let cols = db.table_columns(&t.target_table)?;
    Ok(cols.is_empty()
        || t.target_names()
            .iter()
            .filter(|n| !n.is_empty())
            .any(|n| !cols.iter().any(|c| c.name == *n)))
}

/// Whether a table of the journal is gone (or its list of tables).
fn journal_gone(db: &Db) -> Result<bool> {
    let tables = match db.journal_image_tables() {
        Ok(t) => t,
        Err(_) => return Ok(db.table_columns("_cutover_journal_tables")?.is_empty()),
    };
    for t in tables {
        if db.table_columns(&t)?.is_empty() {
            return Ok(true);
        }
    }
    Ok(false)
}

impl Fingerprint {
    /// Reads the fingerprint of a spec's fenced tables now: a scan of each.
    pub fn read(db: &Db, spec: &Spec, format: u32) -> Result<Fingerprint> {
        let content = Fingerprint::content(db, spec, format);
        Fingerprint::with_content_part(db, spec, format, content)
    }

    /// [`Fingerprint::read`] of the spec's target, with the journal digested
    /// over a second connection on its own thread while this one reads the
    /// tables. For a target outside any transaction of this process: a
    /// write between the two reads shows as a difference, as any other.
    pub fn read_beside(db: &Db, spec: &Spec, format: u32) -> Result<Fingerprint> {
        std::thread::scope(|scope| {
            let journal = scope.spawn(|| -> Result<Part<String>> {
                let other = Db::open(&spec.target, crate::db::Access::Read, "target")?;
                Ok(Fingerprint::journal_digest(&other))
            });
            let content = Fingerprint::content(db, spec, format);
            let digest = journal
                .join()
                .map_err(|_| anyhow::anyhow!("the journal digest panicked"))??;
            Fingerprint::with_digests(db, spec, format, content, digest)
        })
    }

    /// The rows' digests. Formats 1 and 2 read the columns the spec maps,
    /// in its order; format 3 the key the spec names, then every other
    /// column of the table in the table's order, whatever the spec maps.
    fn content(db: &Db, spec: &Spec, format: u32) -> Part<Vec<(String, String)>> {
        let mut failed = None;
        let value = spec
            .tables
            .iter()
            // A table dropped or altered behind the fence cannot be read as
            // the spec says: that is a difference. A query that fails on a
            // table that is there is no difference: it is kept as a failure.
            .map(|t| {
                let rows = if format >= 3 {
                    db.table_columns(&t.target_table).and_then(|cols| {
                        let key: Vec<&str> = t.target_names()[..t.key_len].to_vec();
                        let mut names = key.clone();
                        names.extend(
                            cols.iter()
                                .map(|c| c.name.as_str())
                                .filter(|c| !key.contains(c)),
                        );
                        db.digest_rows(&db.table_sql(&t.target_table, &names, t.key_len, None))
                    })
                } else {
                    db.digest_rows(&db.target_sql(t))
                };
                let d = match rows {
                    Ok(d) => d,
                    Err(e) => {
                        let p =
                            Part::unreadable(format!("unreadable: {e:#}"), &e, table_gone(db, t));
                        failed = failed.take().or(p.failed.map(|f| {
                            format!(
                                "reading table {} of target {}: {f}",
                                t.target_table,
                                db.location()
                            )
                        }));
                        p.value
                    }
                };
                (t.target_table.clone(), d)
            })
            .collect();
        Part { value, failed }
    }

    fn journal_digest(db: &Db) -> Part<String> {
        match db.journal_digest() {
            Ok(d) => Part {
                value: d,
                failed: None,
            },
            Err(e) => {
                let mut p = Part::unreadable(format!("unreadable: {e:#}"), &e, journal_gone(db));
                p.failed = p
                    .failed
                    .map(|f| format!("reading the journal of target {}: {f}", db.location()));
                p
            }
        }
    }

    /// The same, with the rows' digests already computed (by a reconcile
    /// that read the tables anyway).
    pub fn with_content(
        db: &Db,
        spec: &Spec,
        format: u32,
        content: Vec<(String, String)>,
    ) -> Result<Fingerprint> {
        Fingerprint::with_content_part(
            db,
            spec,
            format,
            Part {
                value: content,
                failed: None,
            },
        )
    }

    fn with_content_part(
        db: &Db,
        spec: &Spec,
        format: u32,
        content: Part<Vec<(String, String)>>,
    ) -> Result<Fingerprint> {
        Fingerprint::with_digests(db, spec, format, content, Fingerprint::journal_digest(db))
    }

    fn with_digests(
        db: &Db,
        spec: &Spec,
        format: u32,
        content: Part<Vec<(String, String)>>,
        digest: Part<String>,
    ) -> Result<Fingerprint> {
        let names: Vec<&str> = spec
            .tables
            .iter()
            .map(|t| t.target_table.as_str())
            .collect();
        // A journal table dropped behind the fence leaves the journal
        // unreadable: that is a difference (the schema part names it), not
        // an error. A failed query on a journal that is there is a failure.
        let extent = match db.journal_extent() {
            Ok(e) => Part {
                value: e,
                failed: None,
            },
            Err(e) => {
                let mut p = Part::unreadable((-1, -1), &e, journal_gone(db));
                p.failed = p
                    .failed
                    .map(|f| format!("counting the journal of target {}: {f}", db.location()));
                p
            }
        };
        let (journal_rows, max_seq) = extent.value;
        Ok(Fingerprint {
            version: format,
            // The catalogue's answer: a query that fails here fails the command.
            schema: db.schema_of(&names)?,
            content: content.value,
            journal_rows,
            max_seq,
            digest: digest.value,
            failed: content.failed.or(digest.failed).or(extent.failed),
        })
    }

    /// Format 1: SHA-256 over the schema, the rows' digests, the journal's
    /// extent and digest (docs/journal.md).
    pub fn hash(&self) -> String {
        let mut h = Sha256::new();
        self.hash_parts(&mut h);
        h.update(self.digest.as_bytes());
        hex::encode(h.finalize())
    }

    fn hash_parts(&self, h: &mut Sha256) {
        self.hash_schema(h, &self.schema);
        self.hash_rest(h);
    }

    fn hash_schema(&self, h: &mut Sha256, schema: &[(String, String)]) {
        for (name, sql) in schema {
            for part in [name, sql] {
                h.update((part.len() as u64).to_le_bytes());
                h.update(part.as_bytes());
            }
        }
    }

    fn hash_rest(&self, h: &mut Sha256) {
        for (table, digest) in &self.content {
            for part in [table, digest] {
                h.update((part.len() as u64).to_le_bytes());
                h.update(part.as_bytes());
            }
        }
        h.update(self.journal_rows.to_le_bytes());
        h.update(self.max_seq.to_le_bytes());
    }

    /// Format 2: a tag, format 1's parts with the journal digest's length
    /// before it, then the fence record: boundary and entries (8 bytes
    /// each, little-endian), the fenced tables (JSON) and the time, each
    /// with its length (docs/journal.md).
    pub fn hash_v2(&self, record: &FenceRecord) -> String {
        self.hash_tagged("cutover-fence-2", record)
    }

    /// Format 3: format 2's bytes under the tag `cutover-fence-3`; what
    /// differs is how the rows' digests were read ([`Fingerprint::content`]).
    pub fn hash_v3(&self, record: &FenceRecord) -> String {
        self.hash_tagged("cutover-fence-3", record)
    }

    fn hash_tagged(&self, tag: &str, record: &FenceRecord) -> String {
        let mut h = Sha256::new();
        let text = |h: &mut Sha256, s: &str| {
            h.update((s.len() as u64).to_le_bytes());
            h.update(s.as_bytes());
        };
        text(&mut h, tag);
        // Sorted by name, then definition: the catalogue lists parts of one
        // name (a trigger on every table) in no fixed order.
        let mut schema = self.schema.clone();
        schema.sort();
        self.hash_schema(&mut h, &schema);
        self.hash_rest(&mut h);
        text(&mut h, &self.digest);
        h.update(record.boundary.to_le_bytes());
        h.update(record.journal_rows.to_le_bytes());
        text(&mut h, &record.tables);
        text(&mut h, &record.fenced_at);
        hex::encode(h.finalize())
    }

    /// What differs from `earlier`, in words an operator can act on. Parts
    /// of the schema go by name; on PostgreSQL the fence's triggers have one
    /// name on every table, so a name's definitions are compared together.
    pub fn describe_change(&self, earlier: &Fingerprint) -> String {
        let mut what = Vec::new();
        let defs = |parts: &[(String, String)], name: &str| -> Vec<String> {
            let mut d: Vec<String> = parts
                .iter()
                .filter(|(n, _)| n == name)
                .map(|(_, s)| s.clone())
                .collect();
            d.sort();
            d
        };
        let mut seen: Vec<&str> = Vec::new();
        for (name, _) in &earlier.schema {
            if seen.contains(&name.as_str()) {
                continue;
            }
            seen.push(name);
            let (then, now) = (defs(&earlier.schema, name), defs(&self.schema, name));
            if now.is_empty() {
                what.push(format!("{name} was dropped"));
            } else if now.len() < then.len() {
                what.push(format!(
                    "{name} was dropped from {} of the {} tables that had it",
                    then.len() - now.len(),
                    then.len()
                ));
            } else if now != then {
                what.push(format!("{name} was altered"));
            }
        }
        for (name, _) in &self.schema {
            if !earlier.schema.iter().any(|(n, _)| n == name) && !seen.contains(&name.as_str()) {
                seen.push(name);
                what.push(format!("{name} was created"));
            }
        }
        for (table, digest) in &earlier.content {
            if self.content.iter().any(|(t, d)| t == table && d != digest) {
                what.push(format!(
                    "the rows of table {table} changed without going through its triggers"
                ));
            }
        }
        if self.journal_rows != earlier.journal_rows || self.max_seq != earlier.max_seq {
            what.push(format!(
                "the journal changed from {} entries (last seq {}) to {} (last seq {})",
                earlier.journal_rows, earlier.max_seq, self.journal_rows, self.max_seq
            ));
        } else if self.digest != earlier.digest {
            what.push("journal entries were rewritten".to_string());
        }
        what.join("; ")
    }
}

/// The fence as recorded in the target.
#[derive(Clone, Debug, Serialize)]
pub struct FenceRow {
    pub boundary: i64,
    pub journal_rows: i64,
    pub fingerprint: String,
    pub tables: Vec<String>,
    pub fenced_at: String,
    /// The fingerprint's format (see [`FORMAT`]).
    pub format: u32,
    /// What the fingerprint was made of when the fence went on.
    #[serde(skip)]
    pub parts: Option<Fingerprint>,
    /// The row as stored, field for field.
    #[serde(skip)]
    pub record: FenceRecord,
}

/// The copy of the fence record kept in the source, against the target's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Copy {
    /// The source keeps a copy equal to the target's record.
    Kept,
    /// The source keeps none (a fence set by an earlier cutover, or a
    /// source that could not be written when the fence went on).
    Missing,
    /// The source's copy differs: the target's record was rewritten.
    Differs(String),
}

impl FenceRow {
    /// The fingerprint `now` would have under this fence's format.
    fn expected(&self, now: &Fingerprint) -> String {
        match self.format {
            1 => {
                // Format 1 hashed the schema in the catalogue's order, which
                // for parts of one name is no fixed order: the same parts
                // are hashed in the order the fence recorded them.
                let mut now = now.clone();
                if let Some(p) = &self.parts {
                    let (mut a, mut b) = (now.schema.clone(), p.schema.clone());
                    a.sort();
                    b.sort();
                    if a == b {
                        now.schema = p.schema.clone();
                    }
                }
                now.hash()
            }
            2 => now.hash_v2(&self.record),
            _ => now.hash_v3(&self.record),
        }
    }

    /// Whether `now` still matches the fence: `Ok(None)`; a breach:
    /// `Ok(Some(what changed))`; `Err` when what was read cannot say — a
    /// query failed on tables that are there as the fence saw them, or the
    /// target's file is damaged.
    pub fn judge(&self, target: &Db, now: &Fingerprint) -> Result<Option<String>> {
        if self.expected(now) == self.fingerprint {
            return Ok(None);
        }
        not_damaged(target)?;
        if let Some(failed) = &now.failed
            && self.parts.as_ref().is_none_or(|p| p.schema == now.schema)
        {
            bail!(
                "the fence's fingerprint could not be computed, which is not a breach: {failed}. Fix what stopped the query (a statement_timeout or a permission of the role, a lost connection), then run the command again"
            );
        }
        let what = self
            .parts
            .as_ref()
            .map(|p| now.describe_change(p))
            .unwrap_or_default();
        Ok(Some(if what.is_empty() {
            "the fingerprint no longer matches (schema, rows, journal or the fence record changed since fence on)"
                .to_string()
        } else {
            what
        }))
    }

    /// Whether the target still matches the fence (a scan of the fenced
    /// tables); if not, what changed.
    pub fn breach(&self, target: &Db, spec: &Spec) -> Result<Option<String>> {
        self.judge(target, &Fingerprint::read(target, spec, self.format)?)
    }

    /// The target's record against the copy the source keeps.
    pub fn against(&self, copy: Option<&FenceRecord>, source: &Db) -> Copy {
        let Some(c) = copy else {
            return Copy::Missing;
        };
        let r = &self.record;
        if c == r {
            return Copy::Kept;
        }
        let mut what = Vec::new();
        if c.boundary != r.boundary {
            what.push(format!("boundary {} (kept: {})", r.boundary, c.boundary));
        }
        if c.journal_rows != r.journal_rows {
            what.push(format!(
                "journal entries {} (kept: {})",
                r.journal_rows, c.journal_rows
            ));
        }
        if c.tables != r.tables {
            what.push(format!("tables {} (kept: {})", r.tables, c.tables));
        }
        if c.fenced_at != r.fenced_at {
            what.push(format!("fenced at {} (kept: {})", r.fenced_at, c.fenced_at));
        }
        if c.fingerprint != r.fingerprint || c.parts != r.parts {
            what.push("fingerprint".to_string());
        }
        Copy::Differs(format!(
            "the fence record on the target was rewritten: it differs from the copy kept in source {} ({})",
            source.location(),
            what.join(", ")
        ))
    }
}

/// Refuses to call a difference a breach on a damaged file.
fn not_damaged(target: &Db) -> Result<()> {
    if let Some(d) = target.damage()? {
        return Err(anyhow::Error::new(crate::db::Damaged(format!(
            "target: {d}"
        ))));
    }
    Ok(())
}

/// Fence triggers without a fence row: the row (or its table) was removed
/// behind cutover's back, and the target is still fenced. What is left, as
/// a breach.
pub fn orphaned(target: &Db, spec: &Spec) -> Result<Option<String>> {
    for t in spec
        .tables
        .iter()
        .map(|t| t.target_table.clone())
        .chain(journal_tables(target)?)
    {
        if target.fence_triggers(&t)? > 0 {
            return Ok(Some(format!(
                "table {t} still has fence triggers but the fence row is gone (was _cutover_fence deleted or dropped?)"
            )));
        }
    }
    Ok(None)
}

pub fn read(target: &Db) -> Result<Option<FenceRow>> {
    Ok(match target.fence_row()? {
        None => None,
        Some(f) => {
            let parts: Option<Fingerprint> = serde_json::from_str(&f.parts).ok();
            Some(FenceRow {
                boundary: f.boundary,
                journal_rows: f.journal_rows,
                fingerprint: f.fingerprint.clone(),
                tables: serde_json::from_str(&f.tables)?,
                fenced_at: f.fenced_at.clone(),
                format: parts.as_ref().map_or(FORMAT, |p| p.version),
                parts,
                record: f,
            })
        }
    })
}

/// The copy of the fence record that the source keeps for the target's
/// journal, and how the target's record compares with it.
pub fn copy_of(fence: &FenceRow, source: &Db, target: &Db) -> Result<Copy> {
    let Some(journal) = crate::commands::journal::identity(target)? else {
        return Ok(Copy::Missing);
    };
    Ok(fence.against(source.fence_copy(&journal)?.as_ref(), source))
}

/// What to do when the source keeps no copy of the fence record.
pub fn copy_missing(spec: &Spec) -> String {
    format!(
        "the source keeps no copy of the fence record (a fence set by an earlier cutover, or a source that could not be written at fence on): run `cutover fence on --spec {}` again; it changes nothing on the target and keeps the copy",
        spec.path.display()
    )
}

/// Watches a fence from a reader's connection during a replay.
pub struct Watch {
    fence: FenceRow,
    at_start: Fingerprint,
    change_token: i64,
}

impl Watch {
    /// Verifies the fence now, and its record against the copy the source
    /// keeps; `Err` when there is none (or no copy, or a check could not be
    /// made), `Ok(Err(why))` when it was breached.
    pub fn start(target: &Db, spec: &Spec) -> Result<Result<Watch, String>> {
        let fence = read(target)?;
        if fence.is_none()
            && let Some(what) = orphaned(target, spec)?
        {
            return Ok(Err(format!(
                "fence breached: {what}; nothing was replayed. Find what wrote to the target, then re-plan the rollback"
            )));
        }
        let Some(fence) = fence else {
            bail!(
                "target {} is not fenced; run `cutover fence on` first so that nothing writes to it while the source is rolled back",
                target.location()
            );
        };
        let source = crate::schema::open_source(spec, None, Access::Read)?;
        match copy_of(&fence, &source, target)? {
            Copy::Kept => {}
            Copy::Missing => bail!("{}; nothing was replayed", copy_missing(spec)),
            Copy::Differs(what) => {
                return Ok(Err(format!(
                    "fence breached: {what}; nothing was replayed. Find what rewrote it, then re-plan the rollback"
                )));
            }
        }
        drop(source);
        let change_token = target.change_token()?;
        let now = Fingerprint::read_beside(target, spec, fence.format)?;
        if let Some(what) = fence.judge(target, &now)? {
            return Ok(Err(format!(
                "fence breached: {what} (fenced at {}); nothing was replayed. Find what wrote to the target, then re-plan the rollback",
                fence.fenced_at
            )));
        }
        Ok(Ok(Watch {
            fence,
            at_start: now,
            change_token,
        }))
    }

    pub fn fence(&self) -> &FenceRow {
        &self.fence
    }

    /// Cheap re-check before each batch: any commit by another connection to
    /// a fenced target is a breach; the fingerprint then says what it was.
    pub fn recheck(&mut self, target: &Db, spec: &Spec) -> Result<Option<String>> {
        let v = target.change_token()?;
        if v == self.change_token {
            return Ok(None);
        }
        // Another connection committed: a breach only if what the fence
        // protects changed (a commit to another table, VACUUM or ANALYZE
        // move the change token too).
        let now = Fingerprint::read(target, spec, self.fence.format)?;
        if self.fence.judge(target, &now)?.is_none() {
            self.change_token = v;
            return Ok(None);
        }
        let what = now.describe_change(&self.at_start);
        Ok(Some(if what.is_empty() {
            format!(
                "fence breached: something committed a write to the fenced target (tables {}) without going through its triggers",
                self.fence.tables.join(", ")
            )
        } else {
            format!("fence breached: {what}")
        }))
    }

    /// The full check at the end, with the rows' digests a reconcile of the
    /// target just computed.
    pub fn verify(
        &self,
        target: &Db,
        spec: &Spec,
        content: Vec<(String, String)>,
    ) -> Result<Option<String>> {
        // No other connection, in any process, has committed to the target
        // since the fingerprint was checked at the start: nothing can differ.
        let v = target.change_token()?;
        if v == self.change_token {
            return Ok(None);
        }
        // Other commits (another table, VACUUM, ANALYZE) move the change token
        // too: what counts is whether the rows the reconcile read, and the
        // schema and journal now, are still what the fence recorded.
        // The reconcile read the columns the spec maps, as formats 1 and 2
        // do; a fence of format 3 reads the tables as they are.
        let now = if self.fence.format >= 3 {
            Fingerprint::read(target, spec, self.fence.format)?
        } else {
            Fingerprint::with_content(target, spec, self.fence.format, content)?
        };
        if self.fence.judge(target, &now)?.is_none() {
            return Ok(None);
        }
        let what = now.describe_change(&self.at_start);
        Ok(Some(format!(
            "fence breached: {}",
            if what.is_empty() {
                "something committed a write to the fenced target".to_string()
            } else {
                what
            }
        )))
    }
}

/// Which fence command made a report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    On,
    Off,
    Status,
}

/// The fence as `fence on`, `off` or `status` found or left it.
#[derive(Debug, Serialize)]
pub struct FenceReport {
    pub action: Action,
    pub fenced: bool,
    pub intact: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub breach: Option<String>,
    /// How the target's schema and journal triggers differ from the spec.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub drift: Vec<String>,
    #[serde(flatten)]
    pub fence: Option<FenceRow>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verification: Option<String>,
    /// The copy of the fence record in the source: `kept`, `recorded` (by
    /// this command), or what is wrong with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub copy: Option<String>,
    /// What guards cutover's tables against schema changes (PostgreSQL).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ddl_guard: Option<String>,
    /// Whether this command put the fence on or took it off (rather than
    /// finding it so).
    #[serde(skip)]
    pub changed: bool,
    /// `fence off --force`: journal entries left unreplayed.
    #[serde(skip)]
    pub not_replayed: i64,
}

impl FenceReport {
    fn of(action: Action, fence: Option<FenceRow>) -> FenceReport {
        FenceReport {
            action,
            fenced: fence.is_some(),
            intact: None,
            breach: None,
            drift: Vec::new(),
            fence,
            verification: None,
            copy: None,
            ddl_guard: None,
            changed: false,
            not_replayed: 0,
        }
    }
}

/// Holds unless the fence is found breached.
impl Report for FenceReport {
    fn holds(&self) -> bool {
        self.intact != Some(false)
    }
}

fn fence_message(table: &str) -> String {
    format!(
        "cutover fence: table {table} is read-only while the migration rolls back; lift it only with `cutover fence off`"
    )
}

/// The report as text: what the command did, then the fence's figures.
pub fn render(rep: &FenceReport) -> String {
    let headline = match (rep.action, &rep.fence) {
        (Action::On, Some(f)) if rep.changed => format!(
            "fence: on; the target is read-only for every writer; journal_boundary={}",
            f.boundary
        ),
        (Action::On, Some(f)) => {
            format!("fence: already on since {}; nothing changed", f.fenced_at)
        }
        (Action::Off, Some(_)) if rep.intact == Some(false) => {
            "fence: still on; nothing changed".to_string()
        }
        (Action::Off, Some(_)) if rep.not_replayed > 0 => format!(
            "fence: off (forced, with {} entries not replayed); writers can change the target again",
            rep.not_replayed
        ),
        (Action::Off, Some(_)) => "fence: off; writers can change the target again".to_string(),
        (Action::Off | Action::Status, None) if rep.fenced => {
            "fence: still on (fence triggers stand), but its record is gone".to_string()
        }
        (Action::Off, None) if rep.changed => {
            "fence: off (forced); writers can change the target again".to_string()
        }
        (Action::Off, None) => "fence: not on; nothing to do".to_string(),
        (Action::Status, Some(_)) => "fence: on".to_string(),
        (Action::Status | Action::On, None) => "fence: off".to_string(),
    };
    let mut text = with_figures(rep, &headline);
    if rep.action == Action::On && rep.changed {
        for d in &rep.drift {
            text.push_str(&format!("drift: {d}\n"));
        }
    }
    text
}

fn with_figures(rep: &FenceReport, headline: &str) -> String {
    let mut text = format!("{headline}\n");
    if let Some(f) = &rep.fence {
        text.push_str(&report::pairs(&[
            ("journal_boundary", f.boundary.to_string()),
            ("journal_entries", f.journal_rows.to_string()),
            ("fenced_tables", f.tables.join(", ")),
            ("fenced_at", f.fenced_at.clone()),
            ("fingerprint", f.fingerprint.clone()),
            (
                "intact",
                match rep.intact {
                    Some(true) => "yes".into(),
                    Some(false) => "NO".into(),
                    None => "-".into(),
                },
            ),
        ]));
    }
    if let Some(v) = &rep.verification {
        text.push_str(&format!("verification  {v}\n"));
    }
    if let Some(c) = &rep.copy {
        text.push_str(&format!("copy          {c}\n"));
    }
    if let Some(g) = &rep.ddl_guard {
        text.push_str(&format!("ddl_guard     {g}\n"));
    }
    if let Some(b) = &rep.breach {
        text.push_str(&format!("{b}\n"));
    }
    text
}

/// Keeps a copy of the fence record in the source. `Err` says why it could
/// not, and what to run.
fn keep_copy(spec: &Spec, target: &Db, fence: &FenceRow) -> Result<String> {
    let journal = crate::commands::journal::identity(target)?
        .context("the target's journal has no identity")?;
    let source = schema::open_source(spec, None, Access::Write)?;
    source.write(|| source.record_fence_copy(&journal, &fence.record))?;
    Ok("kept in the source".to_string())
}

/// Keeps the copy, or says (as an error, exit 2) that the fence stands
/// without one and how to record it.
fn keep_copy_or_say(spec: &Spec, target: &Db, fence: &FenceRow) -> Result<String> {
    keep_copy(spec, target, fence).map_err(|e| {
        e.context(format!(
            "the fence is on (journal_boundary={}) and the target is read-only, but the copy of its record could not be kept in the source; replay refuses until it is. When the source can be written, run `cutover fence on --spec {}` again: it changes nothing on the target and keeps the copy",
            fence.boundary,
            spec.path.display()
        ))
    })
}

pub fn on(spec: &Spec) -> Result<FenceReport> {
    // The emergency brake: no schema check against the spec. A target whose
    // schema drifted after the switch (a column added, a table rebuilt) is
    // fenced as it is, and the drift reported.
    let target = Db::open(&spec.target, Access::Write, "target")?;
    if !(target.has_journal()? && target.journal_id()?.is_some()) {
        // Before the switch a spec that does not fit is the error to report.
        schema::open(spec, Access::Read, Access::Read)?;
        bail!(
            "the journal is not installed on target {}; without it there is nothing to replay. Run `cutover journal install` at cutover time",
            target.location()
        );
    }
    let drift = crate::commands::journal::drift(spec, &target)?;
    let tables: Vec<String> = spec
        .tables
        .iter()
        .map(|t| t.target_table.clone())
        .filter(|t| target.table_columns(t).is_ok_and(|c| !c.is_empty()))
        .collect();
    let images = journal_tables(&target)?;
    // Waits for a writer in flight, so its commit lands inside the boundary;
    // nothing is read before the writers are drained.
    target.begin_write()?;
    let guarded: Vec<&str> = tables.iter().chain(&images).map(String::as_str).collect();
    if let Err(e) = target.drain_writers(&guarded) {
        target.rollback();
        return Err(e.context("the fence was not installed; the target is unchanged"));
    }
    if let Some(existing) = read(&target)? {
        target.rollback();
        let mut rep = FenceReport::of(Action::On, Some(existing.clone()));
        rep.drift = drift;
        let source = schema::open_source(spec, None, Access::Read)?;
        let copy = copy_of(&existing, &source, &target)?;
        drop(source);
        let breach = match &copy {
            Copy::Differs(what) => Some(what.clone()),
            _ => existing.breach(&target, spec)?,
        };
        rep.intact = Some(breach.is_none());
        rep.breach = breach.map(|what| format!("fence breached: {what}; the fence stays as it was. Find what changed, then re-plan: `cutover fence off --force` and `cutover fence on` set a new boundary"));
        rep.copy = Some(match copy {
            Copy::Kept => "kept in the source".to_string(),
            Copy::Differs(_) => "DIFFERS from the target's record".to_string(),
            // Intact: this is the fence `fence on` set; keep its copy now.
            Copy::Missing if rep.intact == Some(true) => {
                keep_copy_or_say(spec, &target, &existing)?
            }
            Copy::Missing => "none kept in the source".to_string(),
        });
        return Ok(rep);
    }
    // What `fence on` may leave behind besides its triggers, row and guard,
    // as it stands before anything is written: should the fence not stand,
    // these are put back as they were.
    let before = match Before::read(&target, &guarded) {
        Ok(b) => b,
        Err(e) => {
            target.rollback();
            return Err(e.context("the fence was not installed; the target is unchanged"));
        }
    };
    let r = (|| -> Result<Option<String>> {
        for t in tables.iter().chain(&images) {
            target.install_fence_triggers(t, &fence_message(t))?;
        }
        target.install_fence_guard(&fence_message(FENCE_TABLE))?;
        let fp = Fingerprint::read(&target, spec, FORMAT)?;
        if let Some(failed) = &fp.failed {
            bail!("{failed}");
        }
        let mut record = FenceRecord {
            boundary: fp.max_seq,
            journal_rows: fp.journal_rows,
            fingerprint: String::new(),
            tables: serde_json::to_string(&tables)?,
            parts: serde_json::to_string(&fp)?,
            fenced_at: target.now()?,
        };
        record.fingerprint = fp.hash_v3(&record);
        target.set_fence_row(&record)?;
        let guard = target.install_ddl_guard(
            "cutover fence: the schema of cutover's tables cannot change while the target is fenced; lift the fence only with `cutover fence off`",
        )?;
        target.commit()?;
        Ok(guard)
    })();
    let ddl_guard = match r {
        Ok(guard) => guard,
        Err(e) => {
            target.rollback();
            return Err(e.context("the fence was not installed; the target is unchanged"));
        }
    };
    // The fence is committed. Until it is proven from another connection
    // and its copy is kept in the source, any failure takes it off again:
    // an exit 2 leaves the target as it was before this command.
    let (row, refused, copy) = match stand(spec, &tables, &images) {
        Ok(stood) => stood,
        Err(e) => return Err(take_off(&target, &tables, &before, e)),
    };
    let mut rep = FenceReport::of(Action::On, Some(row));
    rep.intact = Some(true);
    rep.drift = drift;
    rep.verification = Some(format!(
        "a write from another connection to each of the {} fenced tables and to the journal was refused: {}",
        tables.len(),
        refused.first().cloned().unwrap_or_default()
    ));
    rep.copy = Some(copy);
    rep.ddl_guard = ddl_guard;
    rep.changed = true;
    Ok(rep)
}

/// What `fence on` changes on the target besides the fence's triggers, row
/// and guard, as it was before: the functions the triggers call
/// (PostgreSQL), and the id sequences of the tables it probes, which a
/// refused insert still moves (PostgreSQL's `nextval` is not rolled back).
struct Before {
    functions: Vec<String>,
    sequences: Vec<crate::db::SequenceMark>,
}

impl Before {
    fn read(target: &Db, tables: &[&str]) -> Result<Before> {
        Ok(Before {
            functions: target.fence_functions()?,
            sequences: target.sequence_marks(tables)?,
        })
    }
}

/// Proves a fence just committed: its row read back, a write from another
/// connection, as any other writer would come, refused on every table it
/// guards, and a copy of its record kept in the source. The row, the
/// refusals and what became of the copy.
fn stand(
    spec: &Spec,
    tables: &[String],
    images: &[String],
) -> Result<(FenceRow, Vec<String>, String)> {
    let other = Db::open(&spec.target, Access::Write, "target")?;
    let row = read(&other)?.context("the fence row just written is not there")?;
    let mut refused = Vec::new();
    for t in tables
        .iter()
        .chain(images)
        .map(String::as_str)
        .chain([FENCE_TABLE])
    {
        for (what, result) in other.probe_writes(t)? {
            match result {
                Err(msg) if msg.contains("cutover fence") => refused.push(msg),
                // An update or delete that matched no row proves nothing either way.
                Ok(0) if what != "insert" => {}
                Err(msg) => bail!(
                    "fence verification: an {what} on '{t}' from another connection failed, but not because of the fence ({msg}), so the fence could not be proven. Find what refused the write (a trigger of the table that runs before the fence's, a constraint or default that fails, a permission of the role), then run `cutover fence on` again"
                ),
                Ok(_) => bail!(
                    "fence verification FAILED: an {what} on '{t}' from another connection went through (it was rolled back): the fence does not hold there. Find what lets the write past the fence's triggers before fencing again"
                ),
            }
        }
    }
    // The copy outside the target, once the fence stands: a record
    // rewritten on the target no longer matches it.
    let copy = keep_copy(spec, &other, &row).map_err(|e| {
        e.context(format!(
            "the copy of the fence record could not be kept in the source, and replay refuses without it. When source {} can be written, run `cutover fence on --spec {}` again",
            spec.source.display(),
            spec.path.display()
        ))
    })?;
    Ok((row, refused, copy))
}

/// Takes a fence that could not stand off again, in one transaction: as
/// `fence off` does, and the functions this command created and the
/// sequences as they were. `why` is what stopped the fence, with what
/// became of the target.
fn take_off(target: &Db, tables: &[String], before: &Before, why: anyhow::Error) -> anyhow::Error {
    let undone = target.write(|| {
        unfence(target, tables)?;
        target.drop_fence_functions(&before.functions)?;
        target.restore_sequences(&before.sequences)?;
        Ok(())
    });
    match undone {
        Ok(()) => why.context(format!(
            "the fence was taken off again: target {} is as it was before `fence on`, and writers can change it",
            target.location()
        )),
        Err(e) => why.context(format!(
            "the fence could not be taken off again ({e:#}): target {} may still be fenced, unproven. Run `cutover fence status`; lift it with `cutover fence off --force` before fencing again",
            target.location()
        )),
    }
}

/// The journal's own tables, which the fence guards like the data: its
/// image tables, its identity and its column lists.
fn journal_tables(target: &Db) -> Result<Vec<String>> {
    let mut out = target.journal_image_tables()?;
    out.extend([
        "_cutover_journal_id".to_string(),
        "_cutover_journal_tables".to_string(),
    ]);
    Ok(out)
}

/// Whether the last replay of `journal` reconciled clean at `boundary`; if
/// not, what the source records instead.
pub fn replay_passed(source: &Db, journal: &str, boundary: i64) -> Result<Result<(), String>> {
    Ok(match source.last_replay_verdict(journal)? {
        Some(v) if v.passed && v.boundary == boundary => Ok(()),
        Some(v) if v.passed => Err(format!(
            "the last replay reconciled clean at boundary {}, not at this fence's {boundary}",
            v.boundary
        )),
        Some(v) => Err(format!("the last replay FAILED at {}: {}", v.at, v.detail)),
        None => Err("no replay has reconciled the source with the target yet".to_string()),
    })
}

pub fn off(spec: &Spec, force: bool) -> Result<FenceReport> {
    let (source, target, _) = schema::open(spec, Access::Write, Access::Write)?;
    let journal = crate::commands::journal::identity(&target)?.unwrap_or_default();
    let Some(existing) = read(&target)? else {
        let Some(what) = orphaned(&target, spec)? else {
            return Ok(FenceReport::of(Action::Off, None));
        };
        let mut rep = FenceReport::of(Action::Off, None);
        if force {
            let tables: Vec<String> = spec.tables.iter().map(|t| t.target_table.clone()).collect();
            lift(&source, &target, &journal, &tables)?;
            rep.changed = true;
        } else {
            rep.fenced = true;
            rep.intact = Some(false);
            rep.breach = Some(format!(
                "fence breached: {what}; the fence stays on. Find what wrote to the target, then re-plan the rollback (`cutover fence off --force` lifts the fence anyway)"
            ));
        }
        return Ok(rep);
    };
    if let Copy::Differs(what) = copy_of(&existing, &source, &target)?
        && !force
    {
        let mut rep = FenceReport::of(Action::Off, Some(existing));
        rep.intact = Some(false);
        rep.breach = Some(format!(
            "fence breached: {what}; the fence stays on. Find what rewrote it, then re-plan the rollback (`cutover fence off --force` lifts the fence anyway)"
        ));
        return Ok(rep);
    }
    let (applied, _) = source.applied_progress(&journal)?;
    let start = target.journal_start()?;
    let pending = target.journal_count_between(start, existing.boundary)? - applied;
    if pending > 0 && !force {
        bail!(
            "the replay is incomplete: {pending} journal entries at or below boundary {} are not applied to the source. Run `cutover replay` to finish it; `cutover fence off --force` lifts the fence anyway and lets writers change the target again",
            existing.boundary
        );
    }
    if let Err(why) = replay_passed(&source, &journal, existing.boundary)?
        && !force
    {
        bail!(
            "the rollback is not done: {why}. Run `cutover replay --spec {spec}` until it ends with `replay: done` (after a failure, fix the source as its report says; a rerun that applies nothing and reconciles clean records the pass); `cutover fence off --force` lifts the fence anyway",
            spec = spec.path.display()
        );
    }
    lift(&source, &target, &journal, &existing.tables)?;
    let mut rep = FenceReport::of(Action::Off, Some(existing));
    rep.fenced = false;
    rep.changed = true;
    rep.not_replayed = pending.max(0);
    Ok(rep)
}

/// Takes the fence off `tables`, the journal and the fence table, and its
/// row, and lifts the source's copy of its record.
fn lift(source: &Db, target: &Db, journal: &str, tables: &[String]) -> Result<()> {
    // The source's copy is lifted first: should lifting the target fail,
    // `fence on` keeps a new copy of the fence still standing.
    if !journal.is_empty() {
        source.write(|| source.lift_fence_copy(journal, &source.now()?))?;
    }
    target
        .write(|| unfence(target, tables))
        .map_err(|e| e.context("the fence is still on"))
}

/// Inside the caller's write transaction: the DDL guard first (it refuses
/// changes to cutover's tables), then the fence's triggers on `tables`, the
/// journal and the fence table, and the fence row.
fn unfence(target: &Db, tables: &[String]) -> Result<()> {
    target.remove_ddl_guard()?;
    for t in tables
        .iter()
        .chain(&journal_tables(target)?)
        .map(String::as_str)
        .chain([FENCE_TABLE])
    {
        target.remove_fence_triggers(t)?;
    }
    target.delete_fence_row()
}

pub fn status(spec: &Spec) -> Result<FenceReport> {
    let (source, target, _) = schema::open(spec, Access::Read, Access::Read)?;
    let Some(existing) = read(&target)? else {
        let mut rep = FenceReport::of(Action::Status, None);
        if let Some(what) = orphaned(&target, spec)? {
            rep.fenced = true;
            rep.intact = Some(false);
            rep.breach = Some(format!("fence breached: {what}"));
        }
        return Ok(rep);
    };
    let mut missing = Vec::new();
    for t in existing
        .tables
        .iter()
        .chain(&journal_tables(&target)?)
        .map(String::as_str)
    {
        if target.fence_triggers(t)? != 3 {
            missing.push(t.to_string());
        }
    }
    let copy = copy_of(&existing, &source, &target)?;
    let breach = match &copy {
        Copy::Differs(what) => Some(what.clone()),
        _ => existing.breach(&target, spec)?,
    }
    .map(|what| {
        if missing.is_empty() {
            format!("fence breached: {what}")
        } else {
            format!(
                "fence breached: fence triggers missing on {}; {what}",
                missing.join(", ")
            )
        }
    });
    let mut rep = FenceReport::of(Action::Status, Some(existing));
    rep.intact = Some(breach.is_none());
    rep.breach = breach;
    rep.copy = Some(match copy {
        Copy::Kept => "kept in the source".to_string(),
        Copy::Differs(_) => "DIFFERS from the target's record".to_string(),
        Copy::Missing => copy_missing(spec),
    });
    Ok(rep)
}

/// How a replay ended, as [`record_replay`] records it.
pub struct ReplayEnd<'a> {
    pub boundary: i64,
    /// Every entry applied and the source reconciled clean.
    pub passed: bool,
    pub conflict: Option<&'a crate::apply::Conflict>,
    pub breach: Option<&'a str>,
    pub foreign_keys: &'a [String],
    /// The reconciliation's summary line.
    pub summary: Option<&'a str>,
}

/// Records how a replay ended in the source (`_cutover_replays`): a pass
/// when every entry up to the boundary is applied and the source reconciled
/// clean, else what failed. `status` and `fence off` go by the last one.
pub fn record_replay(source: &Db, journal: &str, end: ReplayEnd<'_>) -> Result<()> {
    let detail = if end.passed {
        String::new()
    } else if let Some(c) = end.conflict {
        format!(
            "a conflict at seq {} in table '{}', key {}: {}",
            c.tag, c.table, c.key, c.reason
        )
    } else if let Some(b) = end.breach {
        b.to_string()
    } else if let Some(first) = end.foreign_keys.first() {
        format!(
            "{} source rows were left without their parent row ({first})",
            end.foreign_keys.len()
        )
    } else {
        format!(
            "the source does not reconcile with the target ({})",
            end.summary.unwrap_or_default()
        )
    };
    source
        .write(|| {
            source.record_replay_verdict(&crate::db::ReplayVerdict {
                journal: journal.to_string(),
                boundary: end.boundary,
                passed: end.passed,
                detail,
                at: source.now()?,
            })
        })
        .map_err(|e| {
            e.context(format!(
                "the replay ran to its end ({}), but its verdict could not be recorded in source {}; run `cutover replay` again to record it",
                if end.passed { "pass" } else { "FAIL" },
                source.location()
            ))
        })
}
