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

use crate::db::{Access, Db};
use crate::report::{self, Report};
use crate::schema;
use crate::spec::Spec;

const FENCE_TABLE: &str = "_cutover_fence";

/// What the fence protects, as found now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Fingerprint {
    schema: Vec<(String, String)>,
    /// Digest of each fenced table's rows: a write made with triggers
    /// disabled changes it.
    content: Vec<(String, String)>,
    journal_rows: i64,
    max_seq: i64,
    digest: String,
}

impl Fingerprint {
    /// Reads the fingerprint of a spec's fenced tables now: a scan of each.
    pub fn read(db: &Db, spec: &Spec) -> Result<Fingerprint> {
        Fingerprint::with_content(db, spec, Fingerprint::content(db, spec))
    }

    /// [`Fingerprint::read`] of the spec's target, with the journal digested
    /// over a second connection on its own thread while this one reads the
    /// tables. For a target outside any transaction of this process: a
    /// write between the two reads shows as a difference, as any other.
    pub fn read_beside(db: &Db, spec: &Spec) -> Result<Fingerprint> {
        std::thread::scope(|scope| {
            let journal = scope.spawn(|| -> Result<String> {
                let other = Db::open(&spec.target, crate::db::Access::Read, "target")?;
                Ok(Fingerprint::journal_digest(&other))
            });
            let content = Fingerprint::content(db, spec);
            let digest = journal
                .join()
                .map_err(|_| anyhow::anyhow!("the journal digest panicked"))??;
            Fingerprint::with_digests(db, spec, content, digest)
        })
    }

    fn content(db: &Db, spec: &Spec) -> Vec<(String, String)> {
        spec.tables
            .iter()
            // A table dropped or altered behind the fence cannot be read as
            // the spec says: that is a difference, not an error.
            .map(|t| {
                let d = db
                    .digest_rows(&db.target_sql(t))
                    .unwrap_or_else(|e| format!("unreadable: {e:#}"));
                (t.target_table.clone(), d)
            })
            .collect()
    }

    fn journal_digest(db: &Db) -> String {
        db.journal_digest()
            .unwrap_or_else(|e| format!("unreadable: {e:#}"))
    }

    /// The same, with the rows' digests already computed (by a reconcile
    /// that read the tables anyway).
    pub fn with_content(
        db: &Db,
        spec: &Spec,
        content: Vec<(String, String)>,
    ) -> Result<Fingerprint> {
        Fingerprint::with_digests(db, spec, content, Fingerprint::journal_digest(db))
    }

    fn with_digests(
        db: &Db,
        spec: &Spec,
        content: Vec<(String, String)>,
        digest: String,
    ) -> Result<Fingerprint> {
        let names: Vec<&str> = spec
            .tables
            .iter()
            .map(|t| t.target_table.as_str())
            .collect();
        // A journal table dropped behind the fence leaves the journal
        // unreadable: that is a difference (the schema part names it), not an
        // error.
        let (journal_rows, max_seq) = db.journal_extent().unwrap_or((-1, -1));
        Ok(Fingerprint {
            schema: db.schema_of(&names)?,
            content,
            journal_rows,
            max_seq,
            digest,
        })
    }

    pub fn hash(&self) -> String {
        let mut h = Sha256::new();
        for (name, sql) in &self.schema {
            for part in [name, sql] {
                h.update((part.len() as u64).to_le_bytes());
                h.update(part.as_bytes());
            }
        }
        for (table, digest) in &self.content {
            for part in [table, digest] {
                h.update((part.len() as u64).to_le_bytes());
                h.update(part.as_bytes());
            }
        }
        h.update(self.journal_rows.to_le_bytes());
        h.update(self.max_seq.to_le_bytes());
        h.update(self.digest.as_bytes());
        hex::encode(h.finalize())
    }

    /// What differs from `earlier`, in words an operator can act on.
    pub fn describe_change(&self, earlier: &Fingerprint) -> String {
        let mut what = Vec::new();
        for (name, sql) in &earlier.schema {
            match self.schema.iter().find(|(n, _)| n == name) {
                None => what.push(format!("{name} was dropped")),
                Some((_, now)) if now != sql => what.push(format!("{name} was altered")),
                _ => {}
            }
        }
        for (name, _) in &self.schema {
            if !earlier.schema.iter().any(|(n, _)| n == name) {
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
    /// What the fingerprint was made of when the fence went on.
    #[serde(skip)]
    pub parts: Option<Fingerprint>,
}

impl FenceRow {
    /// Whether `now` still matches the fence; if not, what changed.
    pub fn breach_in(&self, now: &Fingerprint) -> Option<String> {
        if now.hash() == self.fingerprint {
            return None;
        }
        let what = self
            .parts
            .as_ref()
            .map(|p| now.describe_change(p))
            .unwrap_or_default();
        Some(if what.is_empty() {
            "the fingerprint no longer matches (schema, rows or journal changed since fence on)"
                .to_string()
        } else {
            what
        })
    }

    /// Whether the target still matches the fence (a scan of the fenced
    /// tables); if not, what changed.
    pub fn breach(&self, target: &Db, spec: &Spec) -> Result<Option<String>> {
        Ok(self.breach_in(&Fingerprint::read(target, spec)?))
    }
}

pub fn read(target: &Db) -> Result<Option<FenceRow>> {
    Ok(match target.fence_row()? {
        None => None,
        Some(f) => Some(FenceRow {
            boundary: f.boundary,
            journal_rows: f.journal_rows,
            fingerprint: f.fingerprint,
            tables: serde_json::from_str(&f.tables)?,
            fenced_at: f.fenced_at,
            parts: serde_json::from_str(&f.parts).ok(),
        }),
    })
}

/// Watches a fence from a reader's connection during a replay.
pub struct Watch {
    fence: FenceRow,
    at_start: Fingerprint,
    change_token: i64,
}

impl Watch {
    /// Verifies the fence now; `Err` when there is none, `Ok(Err(why))` when
    /// it was breached.
    pub fn start(target: &Db, spec: &Spec) -> Result<Result<Watch, String>> {
        let fence = read(target)?;
        if fence.is_none() {
            // Fence triggers without a fence row: the row (or its table) was
            // removed behind cutover's back.
            for t in spec
                .tables
                .iter()
                .map(|t| t.target_table.clone())
                .chain(journal_tables(target)?)
            {
                if target.fence_triggers(&t)? > 0 {
                    return Ok(Err(format!(
                        "fence breached: table {t} still has fence triggers but the fence row is gone (was _cutover_fence deleted or dropped?); nothing was replayed. Find what wrote to the target, then re-plan the rollback"
                    )));
                }
            }
        }
        let Some(fence) = fence else {
            bail!(
                "target {} is not fenced; run `cutover fence on` first so that nothing writes to it while the source is rolled back",
                target.location()
            );
        };
        let change_token = target.change_token()?;
        let now = Fingerprint::read_beside(target, spec)?;
        if let Some(what) = fence.breach_in(&now) {
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
        let now = Fingerprint::read(target, spec)?;
        if now.hash() == self.fence.fingerprint {
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
        let now = Fingerprint::with_content(target, spec, content)?;
        if now.hash() == self.fence.fingerprint {
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
    /// Whether this command put the fence on or took it off (rather than
    /// finding it so).
    #[serde(skip)]
    pub changed: bool,
    /// `fence off --force`: journal entries left unreplayed.
    #[serde(skip)]
    pub not_replayed: i64,
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
        (Action::Off, Some(_)) if rep.not_replayed > 0 => format!(
            "fence: off (forced, with {} entries not replayed); writers can change the target again",
            rep.not_replayed
        ),
        (Action::Off, Some(_)) => "fence: off; writers can change the target again".to_string(),
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
    if let Some(b) = &rep.breach {
        text.push_str(&format!("{b}\n"));
    }
    text
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
        let breach = existing.breach(&target, spec)?;
        let intact = breach.is_none();
        return Ok(FenceReport {
            action: Action::On,
            fenced: true,
            intact: Some(intact),
            breach: breach.map(|what| format!("fence breached: {what}; the fence stays as it was. Find what changed, then re-plan: `cutover fence off --force` and `cutover fence on` set a new boundary")),
            drift,
            fence: Some(existing),
            verification: None,
            changed: false,
            not_replayed: 0,
        });
    }
    let r = (|| -> Result<FenceRow> {
        for t in tables.iter().chain(&images) {
            target.install_fence_triggers(t, &fence_message(t))?;
        }
        target.install_fence_guard(&fence_message(FENCE_TABLE))?;
        let fp = Fingerprint::read(&target, spec)?;
        let hash = fp.hash();
        target.set_fence_row(
            fp.max_seq,
            fp.journal_rows,
            &hash,
            &serde_json::to_string(&tables)?,
            &serde_json::to_string(&fp)?,
        )?;
        target.commit()?;
        read(&target)?.context("the fence row just written is not there")
    })();
    let row = match r {
        Ok(row) => row,
        Err(e) => {
            target.rollback();
            return Err(e.context("the fence was not installed; the target is unchanged"));
        }
    };
    drop(target);
    // Verify from a separate connection, as any other writer would come.
    let other = Db::open(&spec.target, Access::Write, "target")?;
    let mut refused = Vec::new();
    for t in tables
        .iter()
        .chain(&images)
        .map(String::as_str)
        .chain([FENCE_TABLE])
    {
        for (what, result) in other.probe_writes(t)? {
            match result {
                Err(msg) if msg.contains("cutover fence") => refused.push(msg),
                // An update or delete that matched no row proves nothing either way.
                Ok(0) if what != "insert" => {}
                Err(msg) => bail!(
                    "fence verification: an {what} on '{t}' failed, but not because of the fence ({msg}); the fence is in place but unproven"
                ),
                Ok(_) => bail!(
                    "fence verification FAILED: an {what} on '{t}' from another connection went through (it was rolled back); do not trust this fence"
                ),
            }
        }
    }
    Ok(FenceReport {
        action: Action::On,
        fenced: true,
        intact: Some(true),
        breach: None,
        drift,
        fence: Some(row),
        verification: Some(format!(
            "a write from another connection to each of the {} fenced tables and to the journal was refused: {}",
            tables.len(),
            refused.first().cloned().unwrap_or_default()
        )),
        changed: true,
        not_replayed: 0,
    })
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

pub fn off(spec: &Spec, force: bool) -> Result<FenceReport> {
    let (source, target, _) = schema::open(spec, Access::Read, Access::Write)?;
    let Some(existing) = read(&target)? else {
        return Ok(FenceReport {
            action: Action::Off,
            fenced: false,
            intact: None,
            breach: None,
            drift: Vec::new(),
            fence: None,
            verification: None,
            changed: false,
            not_replayed: 0,
        });
    };
    let journal = crate::commands::journal::identity(&target)?.unwrap_or_default();
    let (applied, _) = source.applied_progress(&journal)?;
    let start = target.journal_start()?;
    let pending = target.journal_count_between(start, existing.boundary)? - applied;
    if pending > 0 && !force {
        bail!(
            "the replay is incomplete: {pending} journal entries at or below boundary {} are not applied to the source. Run `cutover replay` to finish it; `cutover fence off --force` lifts the fence anyway and lets writers change the target again",
            existing.boundary
        );
    }
    target
        .write(|| {
            for t in existing
                .tables
                .iter()
                .chain(&journal_tables(&target)?)
                .map(String::as_str)
                .chain([FENCE_TABLE])
            {
                target.remove_fence_triggers(t)?;
            }
            target.delete_fence_row()
        })
        .map_err(|e| e.context("the fence is still on"))?;
    Ok(FenceReport {
        action: Action::Off,
        fenced: false,
        intact: None,
        breach: None,
        drift: Vec::new(),
        fence: Some(existing),
        verification: None,
        changed: true,
        not_replayed: pending.max(0),
    })
}

pub fn status(spec: &Spec) -> Result<FenceReport> {
    let (_, target, _) = schema::open(spec, Access::Read, Access::Read)?;
    let Some(existing) = read(&target)? else {
        return Ok(FenceReport {
            action: Action::Status,
            fenced: false,
            intact: None,
            breach: None,
            drift: Vec::new(),
            fence: None,
            verification: None,
            changed: false,
            not_replayed: 0,
        });
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
    let breach = existing.breach(&target, spec)?.map(|what| {
        if missing.is_empty() {
            format!("fence breached: {what}")
        } else {
            format!(
                "fence breached: fence triggers missing on {}; {what}",
                missing.join(", ")
            )
        }
    });
    Ok(FenceReport {
        action: Action::Status,
        fenced: true,
        intact: Some(breach.is_none()),
        breach,
        drift: Vec::new(),
        fence: Some(existing),
        verification: None,
        changed: false,
        not_replayed: 0,
    })
}
