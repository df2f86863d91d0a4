//! `sqlite_schema` read once and looked up in memory.
//!
//! SQLite keeps no index on `sqlite_schema`: every `WHERE name = ?` or
//! `WHERE tbl_name = ?` on it reads the whole table. Asked once per table of
//! a spec (a table's triggers, whether one exists), those reads made
//! `journal install`, `journal status` and `fence on` grow with the square of
//! the number of tables (BENCHMARKS.md, "Journal and fence by number of
//! tables"). Here the catalogue is read in one pass and kept for as long as
//! `PRAGMA schema_version`, which every schema change moves, says it holds.

use std::collections::{BTreeMap, HashMap};

use anyhow::Result;

use super::*;

/// One row of `sqlite_schema`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Object {
    pub kind: String,
    pub name: String,
    pub tbl_name: String,
    /// Kept for triggers and views, whose text is looked up; `None` for the
    /// other kinds (and a row without text).
    pub sql: Option<String>,
}

/// `sqlite_schema` as this connection saw it at one `schema_version`.
#[derive(Debug, Default)]
pub(super) struct Schema {
    version: i64,
    /// Changed in memory by this connection's own DDL ([`Sqlite::own_ddl`])
    /// rather than read: it holds only inside the transaction that made the
    /// changes, which no other connection can interleave with.
    patched: bool,
    /// Every object by rowid: rowid order is creation order, which says
    /// which trigger SQLite fires first.
    rows: BTreeMap<i64, Object>,
    /// Rowids by name folded to ASCII lower case (SQLite's own rule for
    /// object names); each look-up still compares the name exactly, as the
    /// queries it replaces did.
    by_name: HashMap<String, Vec<i64>>,
    /// Rowids of the triggers on each table, by `tbl_name` as stored.
    triggers: HashMap<String, Vec<i64>>,
}

impl Schema {
    fn insert(&mut self, rowid: i64, o: Object) {
        self.by_name
            .entry(o.name.to_ascii_lowercase())
            .or_default()
            .push(rowid);
        if o.kind == "trigger" {
            let on = self.triggers.entry(o.tbl_name.clone()).or_default();
            on.push(rowid);
            on.sort_unstable();
        }
        self.rows.insert(rowid, o);
    }

    /// The objects named `name` in any ASCII case, in rowid order (their
    /// rowids are listed as read, then as created).
    fn folded(&self, name: &str) -> impl Iterator<Item = &Object> {
        self.by_name
            .get(&name.to_ascii_lowercase())
            .map(|ids| ids.as_slice())
            .unwrap_or_default()
            .iter()
            .filter_map(|id| self.rows.get(id))
    }

    /// The objects named exactly `name` of kind `kind`, in rowid order.
    fn named<'a>(&'a self, name: &'a str, kind: &'a str) -> impl Iterator<Item = &'a Object> {
        self.folded(name)
            .filter(move |o| o.name == name && o.kind == kind)
    }

    pub fn has(&self, kind: &str, name: &str) -> bool {
        self.named(name, kind).next().is_some()
    }

    /// The text of the first object named `name` of kind `kind`.
    pub fn sql<'a>(&'a self, kind: &'a str, name: &'a str) -> Option<&'a str> {
        self.named(name, kind).next().and_then(|o| o.sql.as_deref())
    }

    /// The kind of the first object named exactly `name`, of any kind.
    pub fn kind_of(&self, name: &str) -> Option<&str> {
        self.folded(name)
            .find(|o| o.name == name)
            .map(|o| o.kind.as_str())
    }

    /// The triggers whose `tbl_name` is exactly `table`, in rowid order.
    pub fn triggers_on<'a>(&'a self, table: &str) -> impl Iterator<Item = (i64, &'a Object)> {
        self.triggers
            .get(table)
            .map(|ids| ids.as_slice())
            .unwrap_or_default()
            .iter()
            .filter_map(|id| self.rows.get(id).map(|o| (*id, o)))
    }

    /// A trigger this connection just created: SQLite gives its row the
    /// rowid after the largest.
    pub fn created_trigger(&mut self, name: &str, table: &str, sql: &str) {
        let rowid = self.rows.last_key_value().map_or(1, |(id, _)| id + 1);
        let o = Object {
            kind: "trigger".into(),
            name: name.into(),
            tbl_name: table.into(),
            sql: Some(sql.into()),
        };
        self.insert(rowid, o);
    }

    /// A table this connection just created (its text is not kept).
    pub fn created_table(&mut self, name: &str) {
        let rowid = self.rows.last_key_value().map_or(1, |(id, _)| id + 1);
        let o = Object {
            kind: "table".into(),
            name: name.into(),
            tbl_name: name.into(),
            sql: None,
        };
        self.insert(rowid, o);
    }

    /// `DROP TRIGGER IF EXISTS name`: SQLite matches the name without
    /// regard to ASCII case.
    pub fn dropped_trigger(&mut self, name: &str) {
        let key = name.to_ascii_lowercase();
        let Some(ids) = self.by_name.get_mut(&key) else {
            return;
        };
        let gone: Vec<i64> = ids
            .iter()
            .copied()
            .filter(|id| self.rows.get(id).is_some_and(|o| o.kind == "trigger"))
            .collect();
        ids.retain(|id| !gone.contains(id));
        if ids.is_empty() {
            self.by_name.remove(&key);
        }
        for id in gone {
            if let Some(o) = self.rows.remove(&id)
                && let Some(on) = self.triggers.get_mut(&o.tbl_name)
            {
                on.retain(|x| *x != id);
            }
        }
    }

    /// The rows as they compare with a fresh read: kind, names and the text
    /// kept, in rowid order (the rowids themselves are SQLite's to choose).
    #[cfg(any(test, debug_assertions))]
    fn comparable(&self) -> Vec<&Object> {
        self.rows
            .values()
            .filter(|o| matches!(o.kind.as_str(), "table" | "trigger" | "view"))
            .collect()
    }
}

/// Roughly what a row takes in `sqlite_schema`'s pages, with its text.
fn row_bytes(o: &Object, sql: &str) -> usize {
    sql.len() + o.name.len() + o.tbl_name.len() + 32
}

impl Sqlite {
    pub(super) fn schema_version(&self) -> Result<i64> {
        Ok(self
            .conn
            .prepare_cached("PRAGMA schema_version")?
            .query_row([], |r| r.get(0))?)
    }

    /// Reads `sqlite_schema` in one pass, and whether the schema stayed at
    /// the version it was read at until the end of the read.
    fn read_schema(&self) -> Result<(Schema, bool)> {
        let before = self.schema_version()?;
        let mut s = Schema {
            version: before,
            ..Schema::default()
        };
        let mut bytes = 0;
        {
            let mut st = self
                .conn
                .prepare_cached("SELECT rowid, type, name, tbl_name, sql FROM sqlite_schema")?;
            let mut rows = st.query([])?;
            while let Some(r) = rows.next()? {
                let kind: String = r.get(1)?;
                let keep = kind == "trigger" || kind == "view";
                let sql: Option<String> = r.get(4)?;
                let o = Object {
                    kind,
                    name: r.get(2)?,
                    tbl_name: r.get(3)?,
                    sql: None,
                };
                bytes += row_bytes(&o, sql.as_deref().unwrap_or_default());
                let sql = sql.filter(|_| keep);
                s.insert(r.get(0)?, Object { sql, ..o });
            }
        }
        self.schema_bytes.set(bytes);
        let same = self.schema_version()? == before;
        Ok((s, same))
    }

    /// The catalogue now: the one kept when `schema_version` has not moved
    /// since, else read again. `f` reads it.
    pub(super) fn with_schema<T>(&self, f: impl FnOnce(&Schema) -> T) -> Result<T> {
        let version = self.schema_version()?;
        {
            let mut kept = self.schema.borrow_mut();
            // A patched copy holds only inside the transaction that patched
            // it; once it ends (committed or rolled back) it is read again.
            let holds = kept
                .as_ref()
                .is_some_and(|s| s.version == version && !(s.patched && self.conn.is_autocommit()));
            if !holds {
                *kept = None;
            }
            if let Some(s) = kept.as_ref() {
                return Ok(f(s));
            }
        }
        let (s, same) = self.read_schema()?;
        let out = f(&s);
        if same {
            *self.schema.borrow_mut() = Some(s);
        }
        Ok(out)
    }

    /// Forgets the catalogue kept, before a rollback that may undo changes
    /// it was patched with.
    pub(super) fn forget_schema(&self) {
        #[cfg(debug_assertions)]
        if !self.conn.is_autocommit() {
            self.check_patched_schema();
        }
        self.schema.borrow_mut().take();
    }

    /// Runs DDL of cutover's own and, when the catalogue kept was current
    /// before it inside a transaction, applies `patch` to it instead of
    /// reading it again: inside one transaction no other connection changes
    /// the schema, so what the DDL did is all that changed. Creating a
    /// table's triggers one table after another then costs no read of the
    /// whole catalogue per table.
    pub(super) fn own_ddl(&self, sql: &str, patch: impl FnOnce(&mut Schema)) -> Result<()> {
        let before = if self.conn.is_autocommit() {
            None
        } else {
            Some(self.schema_version()?)
        };
        self.grow_cache(sql)?;
        let r = self.conn.execute_batch(sql);
        let after = match (&r, before) {
            (Ok(()), Some(_)) => Some(self.schema_version()?),
            _ => None,
        };
        let mut kept = self.schema.borrow_mut();
        match (kept.as_mut(), before, after) {
            (Some(s), Some(b), Some(a)) if s.version == b => {
                patch(s);
                s.version = a;
                s.patched = true;
            }
            _ => *kept = None,
        }
        Ok(r?)
    }

    /// Checks a patched catalogue against `sqlite_schema` (debug builds,
    /// before a commit or a rollback): the patches must be exactly what
    /// SQLite did.
    #[cfg(debug_assertions)]
    pub(super) fn check_patched_schema(&self) {
        let kept = self.schema.borrow();
        let Some(s) = kept.as_ref().filter(|s| s.patched) else {
            return;
        };
        if let Ok((fresh, true)) = self.read_schema() {
            assert_eq!(
                s.comparable(),
                fresh.comparable(),
                "the catalogue patched by cutover's own DDL differs from sqlite_schema"
            );
        }
    }

    /// Grows the page cache, before cutover runs `ddl`, to hold
    /// `sqlite_schema` beside SQLite's default 2,000 KiB. SQLite reads the
    /// whole of `sqlite_schema` for every object it creates (to load the new
    /// one); once that table outgrows the cache, each of those reads goes
    /// back to the file: at 1,000 tables `fence on` spent 2.6 s of system
    /// time in them (BENCHMARKS.md). Only this connection's cache grows,
    /// only on a connection that creates objects, and with the schema: the
    /// size is the last full read of `sqlite_schema` plus the DDL run since.
    pub(super) fn grow_cache(&self, ddl: &str) -> Result<()> {
        const OTHER_KIB: i64 = 2000;
        let bytes = self.schema_bytes.get() + ddl.len() + 32;
        self.schema_bytes.set(bytes);
        // The table's pages are not full: it takes about a fifth more
        // than its rows.
        let want = OTHER_KIB + (bytes as i64 * 3 / 2) / 1024;
        let now: i64 = self
            .conn
            .prepare_cached("PRAGMA cache_size")?
            .query_row([], |r| r.get(0))?;
        // Negative: KiB (positive, pages, was set on purpose: left alone). A
        // quarter more than needed, so that a schema growing object by
        // object does not set it again each time.
        if now < 0 && -now < want {
            self.conn
                .pragma_update(None, "cache_size", -(want + want / 4))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::transaction::Transaction;
    use crate::spec::Side;

    fn db() -> (tempfile::TempDir, Sqlite) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.db");
        Sqlite::create(
            &p,
            "CREATE TABLE t (id INTEGER PRIMARY KEY, v);
             CREATE TABLE \"We ird\" (id INTEGER PRIMARY KEY, v);
             CREATE TRIGGER app_t AFTER UPDATE ON t BEGIN SELECT 1; END;",
        )
        .unwrap();
        let db = Sqlite::open(&p, Access::Write, Side::Target).unwrap();
        (dir, db)
    }

    fn fresh(db: &Sqlite) -> Vec<Object> {
        let (s, same) = db.read_schema().unwrap();
        assert!(same);
        s.comparable().into_iter().cloned().collect()
    }

    #[test]
    fn own_ddl_patches_what_sqlite_does() {
        let (_d, db) = db();
        let tx = Transaction::begin(&db, true).unwrap();
        assert!(db.has_table("t").unwrap());
        for (name, table) in [("_cutover_x_t", "t"), ("_cutover_x_we", "We ird")] {
            let sql = format!(
                "CREATE TRIGGER {} AFTER INSERT ON {} BEGIN SELECT 1; END",
                quote_ident(name),
                quote_ident(table)
            );
            db.own_ddl(&sql, |s| s.created_trigger(name, table, &sql))
                .unwrap();
        }
        let sql = "CREATE TABLE \"_cutover_y\" (c1)";
        db.own_ddl(sql, |s| s.created_table("_cutover_y")).unwrap();
        // Dropped by another case of its name, as SQLite matches it.
        db.own_ddl("DROP TRIGGER IF EXISTS \"_CUTOVER_X_T\"", |s| {
            s.dropped_trigger("_CUTOVER_X_T")
        })
        .unwrap();
        let kept: Vec<Object> = db
            .schema
            .borrow()
            .as_ref()
            .map(|s| {
                assert!(s.patched);
                s.comparable().into_iter().cloned().collect()
            })
            .unwrap();
        assert_eq!(kept, fresh(&db));
        assert_eq!(
            db.trigger_sql("_cutover_x_we").unwrap().as_deref(),
            Some("CREATE TRIGGER \"_cutover_x_we\" AFTER INSERT ON \"We ird\" BEGIN SELECT 1; END")
        );
        assert!(db.trigger_sql("_cutover_x_t").unwrap().is_none());
        tx.commit().unwrap();
    }

    #[test]
    fn a_change_by_another_connection_is_seen() {
        let (d, db) = db();
        assert!(!db.has_table("u").unwrap());
        let other = rusqlite::Connection::open(d.path().join("t.db")).unwrap();
        other.execute_batch("CREATE TABLE u (x)").unwrap();
        assert!(db.has_table("u").unwrap());
    }

    #[test]
    fn a_rollback_forgets_the_patched_catalogue() {
        let (_d, db) = db();
        let tx = Transaction::begin(&db, true).unwrap();
        assert!(!db.has_table("u").unwrap());
        db.own_ddl("CREATE TABLE u (x)", |s| s.created_table("u"))
            .unwrap();
        assert!(db.has_table("u").unwrap());
        tx.rollback();
        assert!(!db.has_table("u").unwrap());
        // Another change that brings the schema back to the same version.
        let tx = Transaction::begin(&db, true).unwrap();
        db.own_ddl("CREATE TABLE v (x)", |s| s.created_table("v"))
            .unwrap();
        assert!(!db.has_table("u").unwrap());
        assert!(db.has_table("v").unwrap());
        tx.commit().unwrap();
    }
}
