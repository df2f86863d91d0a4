//! The journal: triggers on every target table of the spec that record each
//! change, with its before- and after-image as native values, under one
//! global sequence (`_cutover_journal`), in commit order; and the journal's
//! identity, which the source's applied set is kept under. It is what a
//! rollback replays.

use anyhow::{Context, Result, bail};
use serde::Serialize;

use crate::db::{Access, Db};
use crate::report::{self, Report};
use crate::schema;
use crate::spec::Spec;

#[derive(Debug, Serialize)]
pub struct TableStatus {
    pub name: String,
    pub triggers: usize,
    /// How many journal triggers a table has on the target's engine.
    #[serde(skip)]
    pub triggers_per_table: usize,
    /// Journal triggers missing or out of date.
    pub stale: Vec<String>,
    pub insert: i64,
    pub update: i64,
    pub delete: i64,
}

/// Which journal command made a report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Install,
    Remove,
    Status,
}

/// The journal as `journal install`, `remove` or `status` leaves it.
#[derive(Debug, Serialize)]
pub struct JournalReport {
    pub action: Action,
    pub installed: bool,
    pub journal: Option<String>,
    pub entries: i64,
    pub last_seq: i64,
    pub fenced_at_boundary: Option<i64>,
    pub tables: Vec<TableStatus>,
    /// Install: triggers created or replaced (none: already up to date).
    #[serde(skip)]
    pub triggers_changed: usize,
    /// Install: the journal already replayed into the source, as
    /// (old identity, new identity, the last seq before the new attempt).
    #[serde(skip)]
    pub renewed: Option<(String, String, i64)>,
}

/// A journal command that returns a report did what it was asked; what
/// fails is an error.
impl Report for JournalReport {
    fn holds(&self) -> bool {
        true
    }
}

/// Whether every table of the spec has its journal triggers, as the spec
/// needs them now.
pub fn installed(spec: &Spec, target: &Db) -> Result<bool> {
    if !target.has_journal()? {
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
    target.stale_journal_triggers(&t.name, &t.target_table, &t.target_names(), t.key_len)
}

/// How the target differs from what the spec and the journal expect: each
/// table missing, with columns the spec does not map or maps but the table
/// lacks, or with journal triggers missing or out of date.
pub fn drift(spec: &Spec, target: &Db) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for t in &spec.tables {
        // Since when: the table's last journaled write.
        let since = match target.last_journaled(&t.name)? {
            Some(seq) => format!("writes after journal seq {seq}, the table's last entry,"),
            None => "writes since journal install".to_string(),
        };
        let cols = target.table_columns(&t.target_table)?;
        if cols.is_empty() {
            out.push(format!(
                "table {} is gone from the target; {since} may be unjournaled",
                t.target_table
            ));
            continue;
        }
        let extra: Vec<&str> = cols
            .iter()
            .map(|c| c.name.as_str())
            .filter(|c| {
                !t.columns.iter().any(|x| x.target == *c)
                    && !t.target_defaults.iter().any(|d| d == c)
            })
            .collect();
        let missing: Vec<&str> = t
            .columns
            .iter()
            .map(|c| c.target.as_str())
            .filter(|c| !cols.iter().any(|x| x.name == *c))
            .collect();
        // One column gone and one new is said once, below, as a rename.
        let renamed = missing.len() == 1 && extra.len() == 1;
        if !extra.is_empty() && !renamed {
            out.push(format!(
                "table {} has columns the spec does not map: {} (writes to them are not journaled; add them to the source, map them in the spec and run `cutover journal install` again: replay reports the values written before then as not journaled, by key)",
                t.target_table,
                extra.join(", ")
            ));
        }
        if !missing.is_empty() {
            // One column gone and one new: most likely a rename.
            let hint = match (&missing[..], &extra[..]) {
                ([from], [to]) => format!(
                    "if '{from}' was renamed to '{to}', set target = \"{to}\" and was = [\"{from}\"] in its [[tables.columns]] entry and run `cutover journal install` again; the entries before keep the name '{from}', which was = […] lets replay read"
                ),
                _ => "renamed or dropped after the switch: map the new name, or keep the journaled one, before the replay".to_string(),
            };
            out.push(format!(
                "table {} lacks columns the spec maps: {} ({hint})",
                t.target_table,
                missing.join(", ")
            ));
        }
        let stale = stale(t, target)?;
        if !stale.is_empty() {
            out.push(format!(
                "table {}: journal triggers missing or out of date ({}); {since} may be unjournaled or out of order. Run `cutover journal install` again",
                t.target_table,
                stale.join(", ")
            ));
        }
    }
    Ok(out)
}

/// The journal's identity, as the source's applied set names it.
pub fn identity(target: &Db) -> Result<Option<String>> {
    Ok(target.journal_id()?.map(|(id, _)| format!("journal-{id}")))
}

/// A fresh journal identity: 16 hex digits from the clock, the process and
/// the target's path, hashed.
fn new_identity(target: &Db) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    h.update(now.as_nanos().to_le_bytes());
    h.update(std::process::id().to_le_bytes());
    h.update(target.location().as_bytes());
    hex::encode(&h.finalize()[..8])
}

pub fn install(spec: &Spec) -> Result<JournalReport> {
    let (source, target, _) = schema::open(spec, Access::Read, Access::Write)?;
    let names: Vec<&str> = spec.tables.iter().map(|t| t.name.as_str()).collect();
    let mut renewed = None;
    let r = target.write(|| -> Result<usize> {
        target.ensure_control_tables()?;
        match target.journal_id()? {
            None => target.set_journal_id(&new_identity(&target), &names)?,
            Some((id, tables)) => {
                let other: Vec<&String> = tables
                    .iter()
                    .filter(|t| !names.contains(&t.as_str()))
                    .collect();
                if !other.is_empty() {
                    bail!(
                        "target {} already has a journal for tables {} that this spec does not list (another spec on the same file?). One journal per target file: list every table in one spec, or remove the other journal with its own spec first; nothing was changed",
                        target.location(),
                        other
                            .iter()
                            .map(|t| format!("'{t}'"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                }
                target.set_journal_tables(&names)?;
                // The source has taken entries of this journal back: that
                // attempt was rolled back, and an install on an unfenced
                // target (restored from a copy, say, whose seqs start over)
                // begins a new attempt, under a new identity, after the
                // entries already there.
                if target.fence_row()?.is_none()
                    && source.applied_progress(&format!("journal-{id}"))?.0 > 0
                {
                    let (_, last) = target.journal_extent()?;
                    let fresh = new_identity(&target);
                    target.renew_journal_id(&fresh, last)?;
                    renewed = Some((format!("journal-{id}"), format!("journal-{fresh}"), last));
                }
            }
        }
        // Every image table exists (and an earlier cutover's journal is on
        // the list of entries) before any trigger is written.
        for t in &spec.tables {
            target.image_for(&t.name, &t.target_table, &t.target_names())?;
        }
        let mut changed = 0;
        for t in &spec.tables {
            changed +=
                target.install_journal(&t.name, &t.target_table, &t.target_names(), t.key_len)?;
        }
        // Each table's triggers proved with writes that are rolled back: a
        // row taken out, put back and rewritten must journal exactly
        // itself, with `trusted_schema=OFF` as a hardened application runs.
        // An empty table has no row to write; its triggers are compiled
        // instead.
        let proofs: Vec<(&str, &str, Vec<&str>, usize)> = spec
            .tables
            .iter()
            .map(|t| {
                (
                    t.name.as_str(),
                    t.target_table.as_str(),
                    t.target_names(),
                    t.key_len,
                )
            })
            .collect();
        target.prove_journals(&proofs).map_err(|(i, e)| {
            e.context(format!(
                "proving the journal triggers of table '{}' with a write that was rolled back: an application write would fail the same way",
                spec.tables[i].target_table
            ))
        })?;
        Ok(changed)
    });
    let changed = r.map_err(|e| {
        e.context(format!(
            "the journal was not installed; {} is unchanged",
            target.location()
        ))
    })?;
    let mut rep = status_report(spec, &target, Action::Install)?;
    rep.triggers_changed = changed;
    rep.renewed = renewed;
    Ok(rep)
}

pub fn remove(spec: &Spec) -> Result<JournalReport> {
    let (_, target, _) = schema::open(spec, Access::Read, Access::Write)?;
    crate::schema::refuse_if_fenced(
        &target,
        "the journal is what the rollback replays. Finish the replay and run `cutover fence off` first",
    )?;
    target.write(|| {
        for t in &spec.tables {
            target.remove_journal(&t.target_table)?;
        }
        Ok(())
    })?;
    status_report(spec, &target, Action::Remove)
}

pub fn status(spec: &Spec) -> Result<JournalReport> {
    let (_, target, _) = schema::open(spec, Access::Read, Access::Read)?;
    status_report(spec, &target, Action::Status)
}

fn status_report(spec: &Spec, target: &Db, action: Action) -> Result<JournalReport> {
    let counts = target.journal_counts()?;
    let (entries, last_seq) = target.journal_extent()?;
    let mut tables = Vec::new();
    for t in &spec.tables {
        let get = |op: &str| {
            counts
                .iter()
                .find(|(n, o, _)| *n == t.name && o == op)
                .map_or(0, |c| c.2)
        };
        tables.push(TableStatus {
            name: t.name.clone(),
            triggers: target.journal_triggers(&t.target_table)?,
            triggers_per_table: target.journal_triggers_per_table(),
            stale: stale(t, target)?,
            insert: get("insert"),
            update: get("update"),
            delete: get("delete"),
        });
    }
    let installed = tables.iter().all(|t| t.stale.is_empty()) && target.has_journal()?;
    Ok(JournalReport {
        action,
        installed,
        journal: identity(target)?,
        entries,
        last_seq,
        fenced_at_boundary: target.fence_row()?.map(|f| f.boundary),
        tables,
        triggers_changed: 0,
        renewed: None,
    })
}

/// The report as text: what the command did, then triggers and entries
/// per table, and the journal's extent.
pub fn render(rep: &JournalReport) -> String {
    let mut text = String::new();
    match rep.action {
        Action::Install => {
            if let Some((old, new, after)) = &rep.renewed {
                text.push_str(&format!(
                    "journal: {old} was already replayed into the source; this is a new attempt, journaled as {new} from seq {}\n",
                    after + 1
                ));
            }
            text += &if rep.triggers_changed == 0 {
                "journal: already installed and up to date; nothing changed\n".to_string()
            } else {
                format!(
                    "journal: installed ({} triggers created or replaced); every insert, update and delete on the target is now recorded\n\
                     journal: its triggers name every column the spec maps. To drop one of them, take it out of the spec first (the source column in ignore, the target column default = true) and run `cutover journal install` again, then drop it: on SQLite ALTER TABLE … DROP COLUMN fails while the triggers name it, on PostgreSQL every write to the table fails after it until the journal is installed again (RUNBOOK B1a)\n",
                    rep.triggers_changed
                )
            };
        }
        Action::Remove => text.push_str(
            "journal: triggers removed; writes are no longer recorded. The entries already in _cutover_journal are kept\n",
        ),
        Action::Status => {}
    }
    text.push_str(&report::table(
        &["table", "triggers", "insert", "update", "delete"],
        rep.tables.iter().map(|t| {
            vec![
                t.name.clone(),
                if t.stale.is_empty() {
                    format!("{}/{}", t.triggers, t.triggers_per_table)
                } else {
                    format!(
                        "{}/{}, {} stale",
                        t.triggers,
                        t.triggers_per_table,
                        t.stale.len()
                    )
                },
                t.insert.to_string(),
                t.update.to_string(),
                t.delete.to_string(),
            ]
        }),
    ));
    text.push('\n');
    text.push_str(&report::pairs(&[
        ("journal_entries", rep.entries.to_string()),
        ("last_seq", rep.last_seq.to_string()),
        (
            "fence",
            rep.fenced_at_boundary
                .map_or("off".into(), |b| format!("on, journal_boundary={b}")),
        ),
    ]));
    text
}

/// Reads journal entries as changes of the spec's tables: each image put in
/// the spec's column order (key columns first), whatever order the journal
/// recorded its columns in.
pub struct Reader {
    /// Per image id: the spec table index, per spec column its position in
    /// the image (`None`: the image did not record it), and the spec columns
    /// it did not record.
    images: std::collections::HashMap<i64, Image>,
    /// Images that cannot be read under the spec (a key column missing, or
    /// columns the spec does not map): their entries are refused.
    refused: std::collections::HashSet<i64>,
    /// Spec columns, as (table index, target name), that some image did not
    /// record: the table gained them after the image's `journal install`.
    unjournaled: Vec<(usize, String)>,
    /// Per image id, the positions in the image of the spec's key columns.
    keys: std::collections::HashMap<i64, Vec<usize>>,
}

/// Whether a column an image recorded is spec column `c`: by its name now
/// or by a name it had before (`was`).
fn names(c: &crate::spec::Column, recorded: &str) -> bool {
    c.target == recorded || c.was.iter().any(|w| w == recorded)
}

/// How one image's entries read as rows of a spec table.
struct Image {
    table: usize,
    order: Vec<Option<usize>>,
    unrecorded: Vec<usize>,
}

/// One journal entry of a spec table, in canonical (target) form.
pub struct Entry {
    pub seq: i64,
    pub table: usize,
    pub op: String,
    pub before: Option<crate::value::Row>,
    pub after: Option<crate::value::Row>,
    /// The spec columns (by index) the entry's image did not record: the
    /// table gained them after that image's `journal install`. Their places
    /// in `before` and `after` hold NULL, which stands for no value at all
    /// (see [`crate::apply::Change::unrecorded`]).
    pub unrecorded: Vec<usize>,
}

impl Entry {
    /// Whether an image holds a large value whole ([`Value::Large`]).
    ///
    /// [`Value::Large`]: crate::value::Value::Large
    pub fn holds_large(&self) -> bool {
        [&self.before, &self.after]
            .into_iter()
            .flatten()
            .flatten()
            .any(|v| matches!(v, crate::value::Value::Large(_)))
    }
}

impl Reader {
    pub fn new(spec: &Spec, target: &Db) -> Result<Reader> {
        let mut images = std::collections::HashMap::new();
        let mut keys = std::collections::HashMap::new();
        let mut refused = std::collections::HashSet::new();
        let mut unjournaled: Vec<(usize, String)> = Vec::new();
        for jt in target.journal_tables()? {
            let Some(ti) = spec.tables.iter().position(|t| t.name == jt.tbl) else {
                continue;
            };
            let t = &spec.tables[ti];
            // Each spec column by its name now, else by a name it had.
            let order: Vec<Option<usize>> = t
                .columns
                .iter()
                .map(|c| {
                    jt.columns
                        .iter()
                        .position(|x| *x == c.target)
                        .or_else(|| jt.columns.iter().position(|x| names(c, x)))
                })
                .collect();
            // A recorded column the spec no longer maps is left out when the
            // table dropped it since, or the spec leaves it to the target
            // (`default = true`, as before a drop): it is carried back no
            // more than the target keeps it.
            let now = target.table_columns(&t.target_table)?;
            let unmapped: Vec<&String> = jt
                .columns
                .iter()
                .filter(|x| {
                    !t.columns.iter().any(|c| names(c, x)) && !t.target_defaults.contains(x)
                })
                .collect();
            let extra = unmapped.iter().any(|x| now.iter().any(|c| c.name == **x));
            // A column added to the table after this image was installed
            // has no value in its entries; a key column always has one. A
            // recorded column gone from the table while a spec column is
            // missing from the image is a rename the spec does not name
            // (`was`): never read as a drop and an add.
            let missing = order.iter().any(Option::is_none);
            if extra
                || (missing && !unmapped.is_empty())
                || order[..t.key_len].iter().any(Option::is_none)
            {
                // Entries of this image are refused when read, with the
                // columns that differ.
                refused.insert(jt.img);
            }
            for (c, at) in t.columns.iter().zip(&order) {
                let col = (ti, c.target.clone());
                if at.is_none() && !unjournaled.contains(&col) {
                    unjournaled.push(col);
                }
            }
            keys.insert(
                jt.img,
                order[..t.key_len].iter().flatten().copied().collect(),
            );
            let unrecorded = (0..order.len()).filter(|&i| order[i].is_none()).collect();
            images.insert(
                jt.img,
                Image {
                    table: ti,
                    order,
                    unrecorded,
                },
            );
        }
        Ok(Reader {
            images,
            refused,
            unjournaled,
            keys,
        })
    }

    /// Whether column `col` of image `img` is outside the key of a spec
    /// table: its values are only ever compared or written, never looked
    /// up by, so a reader that only compares them may take their large
    /// values as digests.
    pub fn outside_key(&self, img: i64, col: usize) -> bool {
        self.keys.get(&img).is_some_and(|k| !k.contains(&col))
    }

    /// Spec columns, as (table index, target column), that entries of some
    /// image of the journal carry no value for: the column was added to the
    /// table after that image's `journal install`. Replay leaves them as the
    /// source holds them (a row it inserts, to the column's default).
    pub fn unjournaled(&self) -> &[(usize, String)] {
        &self.unjournaled
    }

    /// The entry in the spec's terms.
    pub fn entry(&self, spec: &Spec, target: &Db, e: crate::db::JournalEntry) -> Result<Entry> {
        let Some(Image {
            table: ti,
            order,
            unrecorded,
        }) = self.images.get(&e.img)
        else {
            let name = target
                .journal_tables()?
                .into_iter()
                .find(|t| t.img == e.img)
                .map(|t| t.tbl);
            bail!(
                "journal entry seq {}: table '{}' is not in the spec; replay with the spec the journal was installed with",
                e.seq,
                name.unwrap_or_else(|| format!("image {}", e.img))
            );
        };
        let t = &spec.tables[*ti];
        if self.refused.contains(&e.img) {
            let jt = target
                .journal_tables()?
                .into_iter()
                .find(|x| x.img == e.img)
                .context("journal image vanished")?;
            let missing: Vec<&str> = t
                .columns
                .iter()
                .filter(|c| !jt.columns.iter().any(|x| names(c, x)))
                .map(|c| c.target.as_str())
                .collect();
            let now = target.table_columns(&t.target_table)?;
            let extra: Vec<&str> = jt
                .columns
                .iter()
                .map(String::as_str)
                .filter(|x| {
                    !t.columns.iter().any(|c| names(c, x))
                        && !t.target_defaults.iter().any(|d| d == x)
                        && (!missing.is_empty() || now.iter().any(|c| c.name == *x))
                })
                .collect();
            bail!(
                "journal entry seq {} of table '{}' recorded the columns {} but the spec maps {}{}{}; replay with a spec that maps the columns the journal recorded (a column renamed since: its new name as target, its old one in was = [\"…\"]; a column the spec no longer maps: drop it from the target, or keep it mapped until the rollback is done)",
                e.seq,
                t.name,
                jt.columns.join(", "),
                t.target_names().join(", "),
                if missing.is_empty() {
                    String::new()
                } else {
                    format!("; not journaled: {}", missing.join(", "))
                },
                if extra.is_empty() {
                    String::new()
                } else {
                    format!("; journaled but not in the spec: {}", extra.join(", "))
                },
            );
        }
        let arrange = |r: Option<crate::value::Row>| {
            r.map(|mut row| {
                order
                    .iter()
                    .map(|i| match i {
                        Some(i) => std::mem::replace(&mut row[*i], crate::value::Value::Null),
                        None => crate::value::Value::Null,
                    })
                    .collect::<crate::value::Row>()
            })
        };
        let (before, after) = (arrange(e.old), arrange(e.new));
        match (e.op.as_str(), &before, &after) {
            ("insert", None, Some(_))
            | ("update", Some(_), Some(_))
            | ("delete", Some(_), None) => {}
            _ => bail!(
                "journal entry seq {} (table '{}', op {}): the images do not fit the op; the journal is damaged",
                e.seq,
                t.name,
                e.op
            ),
        }
        Ok(Entry {
            seq: e.seq,
            table: *ti,
            op: e.op,
            before,
            after,
            unrecorded: unrecorded.clone(),
        })
    }
}

/// How [`next_run`] reads each entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reading {
    /// Every image whole, runs cut by count only (a feed's deliveries).
    Whole,
    /// For replay: runs cut by their images' bytes too ([`RUN_BYTES`]),
    /// and the large values of before-images outside the key read as
    /// their digests, since replay only compares them with the source.
    Replay,
}

/// The images' bytes after which replay's run of the journal ends: with
/// large values a run is a short one, so that the run being applied and
/// the one read ahead hold little beside them.
pub const RUN_BYTES: usize = 16 << 20;

/// The next run of journal entries after `after` (at most `boundary`), in
/// the order that replays them: at most about `limit`, always a whole prefix
/// of the journal in `seq` order, so that the applied set stays a prefix.
///
/// SQLite fires the newest trigger of an event first. When an application
/// trigger created after the journal's rewrites the row it fires on (a
/// "touch updated_at"), the nested write is journaled before the write that
/// fired it: `(B→C)` then `(A→B)`. Such a pair is put back in causal order —
/// only when the images prove it (the second ends where the first begins,
/// and the first does not end where the second begins).
pub fn next_run(
    spec: &Spec,
    target: &Db,
    reader: &Reader,
    after: i64,
    boundary: i64,
    limit: usize,
    reading: Reading,
) -> Result<Vec<Entry>> {
    let bytes = match reading {
        Reading::Whole => usize::MAX,
        Reading::Replay => RUN_BYTES,
    };
    run_within(spec, target, reader, after, boundary, limit, bytes, reading)
}

#[allow(clippy::too_many_arguments)]
fn run_within(
    spec: &Spec,
    target: &Db,
    reader: &Reader,
    after: i64,
    boundary: i64,
    limit: usize,
    bytes: usize,
    reading: Reading,
) -> Result<Vec<Entry>> {
    const LOOKAHEAD: usize = 8;
    let compared = |img: i64, col: usize, after_image: bool| {
        reading == Reading::Replay && !after_image && reader.outside_key(img, col)
    };
    let shape = crate::db::RunShape {
        limit: limit + LOOKAHEAD,
        bytes,
        digest: &compared,
    };
    let (mut page, more) = target.journal_run(after, boundary, &shape)?;
    // Entries read whole; any after them are only looked at.
    let within = page.len();
    if more && within < limit + LOOKAHEAD {
        // Cut by its bytes: the next few entries, every large value read
        // as its digest, show whether the last one is the first of a pair
        // to put in causal order.
        let last = page.last().map_or(after, |e| e.seq);
        let looked = |_: i64, _: usize, _: bool| true;
        let ahead = crate::db::RunShape {
            limit: LOOKAHEAD,
            bytes: usize::MAX,
            digest: &looked,
        };
        page.extend(target.journal_run(last, boundary, &ahead)?.0);
    }
    let complete = !more;
    let mut run: Vec<Entry> = page
        .into_iter()
        .map(|e| reader.entry(spec, target, e))
        .collect::<Result<_>>()?;
    let mut swapped = true;
    while swapped {
        swapped = false;
        for i in 0..run.len().saturating_sub(1) {
            let (a, b) = (&run[i], &run[i + 1]);
            if a.table == b.table
                && a.unrecorded == b.unrecorded
                && a.before.is_some()
                && b.after == a.before
                && a.after != b.before
            {
                run.swap(i, i + 1);
                swapped = true;
            }
        }
    }
    if complete && run.len() <= limit {
        return Ok(run);
    }
    // The longest cut of at most `limit` (and of the entries read whole)
    // whose seqs are the smallest ones; failing that, the shortest longer
    // one.
    let cap = limit.min(within);
    let mut sorted: Vec<i64> = run.iter().map(|e| e.seq).collect();
    sorted.sort_unstable();
    let mut max = i64::MIN;
    let mut best = None;
    for (k, e) in run.iter().enumerate() {
        max = max.max(e.seq);
        let valid = max == sorted[k];
        if valid && (k < cap || best.is_none()) {
            best = Some(k + 1);
        }
        if valid && k + 1 >= cap {
            break;
        }
    }
    let cut = best.unwrap_or(run.len());
    if cut > within {
        // A pair to put in causal order straddles the entries read whole:
        // those up to the end of the pair, read whole.
        return run_within(
            spec,
            target,
            reader,
            after,
            boundary,
            cut,
            usize::MAX,
            reading,
        );
    }
    run.truncate(cut);
    Ok(run)
}

/// The runs a [`RunsAhead`] thread reads, each entry with its seq.
type Runs<T> = std::sync::mpsc::Receiver<Result<Vec<(i64, T)>>>;

/// The runs of [`next_run`], read ahead on their own thread over a second
/// connection to the target, so that reading the journal overlaps with
/// applying the run before.
pub struct RunsAhead<'scope, 'env, T> {
    scope: &'scope std::thread::Scope<'scope, 'env>,
    spec: &'env Spec,
    boundary: i64,
    limit: usize,
    /// What the thread makes of each entry, beside its seq.
    map: fn(&Spec, Entry) -> T,
    /// The seq the next run from the thread comes after.
    from: i64,
    runs: Runs<T>,
    /// Runs handed back once applied, freed on the reading thread.
    spent: std::sync::mpsc::Sender<Vec<T>>,
}

impl<'scope, 'env, T: Send + 'scope> RunsAhead<'scope, 'env, T> {
    /// Starts reading the runs after `after`, each entry made into what
    /// `map` makes of it on the reading thread.
    pub fn start(
        scope: &'scope std::thread::Scope<'scope, 'env>,
        spec: &'env Spec,
        after: i64,
        boundary: i64,
        limit: usize,
        map: fn(&Spec, Entry) -> T,
    ) -> Self {
        let (runs, spent) = Self::spawn(scope, spec, after, boundary, limit, map);
        RunsAhead {
            scope,
            spec,
            boundary,
            limit,
            map,
            from: after,
            runs,
            spent,
        }
    }

    fn spawn(
        scope: &'scope std::thread::Scope<'scope, 'env>,
        spec: &'env Spec,
        mut after: i64,
        boundary: i64,
        limit: usize,
        map: fn(&Spec, Entry) -> T,
    ) -> (Runs<T>, std::sync::mpsc::Sender<Vec<T>>) {
        // Two runs ahead: one being applied, one waiting.
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let (spent_tx, spent) = std::sync::mpsc::channel::<Vec<T>>();
        scope.spawn(move || {
            let read = || -> Result<(Db, Reader)> {
                let target = Db::open(&spec.target, Access::Read, "target")?;
                let reader = Reader::new(spec, &target)?;
                Ok((target, reader))
            };
            let (target, reader) = match read() {
                Ok(r) => r,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            let (mut sent, mut back) = (0u64, 0u64);
            loop {
                let mut large = false;
                let run = next_run(
                    spec,
                    &target,
                    &reader,
                    after,
                    boundary,
                    limit,
                    Reading::Replay,
                )
                .map(|r| {
                    large = r.iter().any(Entry::holds_large);
                    r.into_iter()
                        .map(|e| (e.seq, map(spec, e)))
                        .collect::<Vec<_>>()
                });
                let end = match &run {
                    Ok(r) if !r.is_empty() => {
                        after = r.iter().map(|(seq, _)| *seq).max().unwrap_or(after);
                        false
                    }
                    _ => true,
                };
                // The applier hung up (it stopped, or starts again elsewhere).
                if tx.send(run).is_err() || end {
                    return;
                }
                sent += 1;
                // At most the run applied since the last send: each is freed
                // here, by the thread whose allocator made it.
                while let Ok(applied) = spent.try_recv() {
                    drop(applied);
                    back += 1;
                }
                // A run holding a large value is not read past until it is
                // applied and handed back, so that the applier's writes and
                // the next large value read are never in memory together.
                // The applier hands every run back, or hangs up.
                while large && back < sent {
                    match spent.recv() {
                        Ok(applied) => {
                            drop(applied);
                            back += 1;
                        }
                        Err(_) => return,
                    }
                }
            }
        });
        (rx, spent_tx)
    }

    /// Hands back a run once applied, to be freed on the reading thread:
    /// freeing a thousand changes made there took the applying thread about
    /// a seventh of its time (glibc returns each block to the arena of the
    /// thread that allocated it, under that arena's lock).
    pub fn give_back(&self, applied: Vec<T>) {
        // The thread has stopped: the run is freed here instead.
        let _ = self.spent.send(applied);
    }

    /// The run after `after`: the one read ahead when it follows the last
    /// run handed out; otherwise the thread starts again from `after` (a
    /// run to be read again, or another replay that committed first).
    pub fn next(&mut self, after: i64) -> Result<Vec<(i64, T)>> {
        if after != self.from {
            (self.runs, self.spent) = Self::spawn(
                self.scope,
                self.spec,
                after,
                self.boundary,
                self.limit,
                self.map,
            );
        }
        let run = self
            .runs
            .recv()
            .map_err(|_| anyhow::anyhow!("the journal reader stopped"))??;
        self.from = run.iter().map(|(seq, _)| *seq).max().unwrap_or(after);
        Ok(run)
    }
}
