//! The fence's fingerprint: what the fence protects (the schema of the
//! fenced tables and their triggers, each table's rows, the journal's extent
//! and digest), read from the target and hashed in each format a fence may
//! have been set in (docs/journal.md gives each byte), and said in words
//! when it differs.

use anyhow::Result;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::db::{Catalogue, Db, Extent, FenceRecord};
use crate::spec::{Side, Spec};

fn format_one() -> u32 {
    1
}

/// What the fence protects, as found now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Fingerprint {
    /// The format the fence was set in (1 when its parts do not say).
    #[serde(default = "format_one")]
    pub(super) version: u32,
    pub(super) schema: Vec<(String, String)>,
    /// Digest of each fenced table's rows: a write made with triggers
    /// disabled changes it.
    pub(super) content: Vec<(String, String)>,
    pub(super) journal_rows: i64,
    pub(super) max_seq: i64,
    pub(super) digest: String,
    /// A query that failed on a table that is there as the fence saw it: the
    /// fingerprint was not computed, which says nothing of a breach.
    #[serde(skip)]
    pub(super) failed: Option<String>,
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
fn table_gone(db: &dyn Catalogue, t: &crate::spec::Table) -> Result<bool> {
    let cols = db.table_columns(&t.target_table)?;
    Ok(cols.is_empty()
        || t.target_names()
            .iter()
            .filter(|n| !n.is_empty())
            .any(|n| !cols.iter().any(|c| c.name == *n)))
}

/// Whether a table of the journal is gone (or its list of tables).
fn journal_gone(db: &Db) -> Result<bool> {
    let tables = match db.capture().journal_image_tables() {
        Ok(t) => t,
        Err(_) => {
            return Ok(db
                .catalogue()
                .table_columns("_cutover_journal_tables")?
                .is_empty());
        }
    };
    for t in tables {
        if db.catalogue().table_columns(&t)?.is_empty() {
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
                let other = Db::open(&spec.target, crate::db::Access::Read, Side::Target)?;
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
                    db.catalogue()
                        .table_columns(&t.target_table)
                        .and_then(|cols| {
                            let key: Vec<&str> = t.target_names()[..t.key_len].to_vec();
                            let mut names = key.clone();
                            names.extend(
                                cols.iter()
                                    .map(|c| c.name.as_str())
                                    .filter(|c| !key.contains(c)),
                            );
                            db.digest_rows(&db.rows().table_sql(
                                &t.target_table,
                                &names,
                                t.key_len,
                                None,
                            ))
                        })
                } else {
                    db.digest_rows(&db.target_sql(t))
                };
                let d = match rows {
                    Ok(d) => d,
                    Err(e) => {
                        let p = Part::unreadable(
                            format!("unreadable: {e:#}"),
                            &e,
                            table_gone(db.catalogue(), t),
                        );
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
        match db.journal().journal_digest() {
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
        let extent = match db.journal().journal_extent() {
            Ok(e) => Part {
                value: e,
                failed: None,
            },
            Err(e) => {
                let unread = Extent {
                    entries: -1,
                    last: -1,
                };
                let mut p = Part::unreadable(unread, &e, journal_gone(db));
                p.failed = p
                    .failed
                    .map(|f| format!("counting the journal of target {}: {f}", db.location()));
                p
            }
        };
        let (journal_rows, max_seq) = (extent.value.entries, extent.value.last);
        Ok(Fingerprint {
            version: format,
            // The catalogue's answer: a query that fails here fails the command.
            schema: db
                .catalogue()
                .schema_of(&names)?
                .into_iter()
                .map(|p| (p.name, p.definition))
                .collect(),
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
        text(&mut h, &record.tables_json());
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
