//! [`Capture`] on MySQL and MariaDB: the journal's image tables, its
//! `AFTER` row triggers, the install that a rerun completes, and the
//! rolled-back proof that a write is journaled.
//!
//! Each journaled table and column list has an image id (`img`, a row of
//! `_cutover_journal_tables`) and an image table
//! `_cutover_journal_<img> (seq, conn, op, o1, …, oN, n1, …, nN)` whose
//! image columns have the table's own column types, but `CHAR`/`VARCHAR`
//! as `LONGTEXT` of the same character set and collation and
//! `BINARY`/`VARBINARY` as `LONGBLOB` (stored off the row, so two images
//! of a wide row fit MySQL's 65,535-byte row limit): a value is journaled
//! exactly as a scan of the table reads it. `seq` comes from the
//! `AUTO_INCREMENT` of one counter table, `_cutover_journal_seq`
//! (`sql/mysql/journal_control.sql`), allocated when the trigger fires;
//! `conn` is `CONNECTION_ID()`. The triggers' template is
//! `sql/mysql/journal_triggers.sql`; they are named after the table's
//! first image (trigger names are unique per database; a later image of the
//! table replaces them in place) and ordered first among the table's
//! `AFTER` triggers of their event.
//!
//! Refused at the first step of `journal install`, before any trigger is
//! written: a table that is the child of a foreign key with an `ON DELETE`
//! or `ON UPDATE` action of `CASCADE`, `SET NULL` or `SET DEFAULT` (InnoDB
//! fires no trigger for the rows it changes), and a table that is not
//! InnoDB or whose name is not ASCII. Detected: `TRUNCATE`, which fires no
//! trigger either, by the table's InnoDB table id recorded at install
//! (`stale_journal_triggers` reports a change). MySQL commits every schema
//! change at once: each step here can be run again and completes what a
//! run stopped half-way left. Known limitation: MariaDB refuses a write
//! under `LOCK TABLES … WRITE` to a journaled table once the journal's
//! tables are in its table cache (error 1442; docs/journal.md, "MySQL and
//! MariaDB").

use std::time::Duration;

use anyhow::{Context, Result, bail};
use mysql::Value as My;
use mysql::prelude::Queryable;

use super::catalogue::Column;
use super::client::{Flavor, code};
use super::journal_log::image_table;
use super::{MySql, quote_ident};
use crate::db::journal_proof::{self, ProofWrites};
use crate::db::{Capture, JournalEntry, Journaled, Unproven};

const CONTROL: &str = include_str!("../../../sql/mysql/journal_control.sql");
const TRIGGERS: &str = include_str!("../../../sql/mysql/journal_triggers.sql");

/// The journal's ops, in the template's order, with the event each fires on.
const OPS: [(&str, &str); 3] = [
    ("insert", "INSERT"),
    ("update", "UPDATE"),
    ("delete", "DELETE"),
];

/// How many journal triggers a table has.
pub const JOURNAL_TRIGGERS: usize = OPS.len();

/// A MySQL table has at most 4,096 columns (InnoDB 1,017); an image table
/// holds `seq`, `conn`, `op` and two images.
pub const MAX_JOURNALED_COLUMNS: usize = 507;

/// How long `journal install` waits for the metadata lock on a table
/// before it tries again, unless `CUTOVER_LOCK_TIMEOUT_MS` says otherwise
/// (MySQL counts `lock_wait_timeout` in whole seconds).
const LOCK_TIMEOUT_MS: u64 = 2000;
const LOCK_ATTEMPTS: usize = 3;

/// The journal trigger for one op on the table whose first image is `img`
/// (`naming_image`).
pub(super) fn trigger_name(img: i64, op: &str) -> String {
    format!("_cutover_journal_{img}_{op}")
}

/// Whether a trigger is one of the journal's (`_cutover_journal_<img>_<op>`).
pub(super) fn is_journal_trigger(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("_cutover_journal_") else {
        return false;
    };
    let Some((img, op)) = rest.split_once('_') else {
        return false;
    };
    !img.is_empty() && img.bytes().all(|b| b.is_ascii_digit()) && OPS.iter().any(|(o, _)| *o == op)
}

/// The type of an image column for a table column: the column's own, but
/// `CHAR`/`VARCHAR` as `LONGTEXT` and `BINARY`/`VARBINARY` as `LONGBLOB`,
/// texts with their character set and collation. Applied to an image
/// column it gives the same type again.
pub(super) fn image_type(c: &Column) -> String {
    let charset = || match (&c.charset, &c.collation) {
        (Some(cs), Some(co)) => format!(" CHARACTER SET {cs} COLLATE {co}"),
        (Some(cs), None) => format!(" CHARACTER SET {cs}"),
        _ => String::new(),
    };
    match c.data_type.as_str() {
        "char" | "varchar" => format!("longtext{}", charset()),
        "binary" | "varbinary" => "longblob".to_string(),
        "tinytext" | "text" | "mediumtext" | "longtext" => {
            format!("{}{}", c.data_type, charset())
        }
        "enum" | "set" => format!("{}{}", c.declared, charset()),
        _ => c.declared.clone(),
    }
}

/// One journal trigger as the template makes it.
struct Wanted {
    name: String,
    op: &'static str,
    event: &'static str,
    /// `CREATE TRIGGER … FOR EACH ROW {{order}}BEGIN … END`.
    create: String,
    /// `BEGIN … END`, as information_schema.TRIGGERS keeps it.
    body: String,
}

impl MySql {
    /// Creates the journal's control tables (with the target's other
    /// control tables) if they are not there yet.
    fn ensure_journal_control(&self) -> Result<()> {
        let control =
            crate::db::control::Control::new(self, self, &super::control::DIALECT, self.shown());
        crate::db::Progress(control).ensure_control_tables()?;
        use crate::db::Fixtures;
        self.execute_script(&self.in_schema(CONTROL))
            .with_context(|| format!("creating the journal's control tables in {}", self.shown()))
    }

    /// The image id already recorded for these columns of `table`, the
    /// names compared by their bytes (the control table's collation may
    /// fold case or pad).
    fn find_image(&self, name: &str, table: &str, columns: &[&str]) -> Result<Option<i64>> {
        if !self.has_table("_cutover_journal_tables")? {
            return Ok(None);
        }
        let list = serde_json::to_string(columns)?;
        let img: Option<i64> = self
            .conn()?
            .exec_first(
                format!(
                    "SELECT img FROM {} WHERE CAST(tbl AS BINARY) = CAST(? AS BINARY)
                     AND CAST(target_table AS BINARY) = CAST(? AS BINARY)
                     AND CAST(columns AS BINARY) = CAST(? AS BINARY) ORDER BY img LIMIT 1",
                    self.qualified("_cutover_journal_tables")
                ),
                (name, table, list),
            )
            .map_err(|e| self.failed("reading the journal's images", &e))?;
        Ok(img)
    }

    /// The view `_cutover_journal (seq, img, conn, op)` over every image
    /// table (what tells that a journal is installed), made again after
    /// each new image.
    fn create_journal_view(&self) -> Result<()> {
        let mut arms = Vec::new();
        for t in self.journal_tables()? {
            let table = image_table(t.img);
            if self.has_table(&table)? {
                arms.push(format!(
                    "SELECT seq, CAST({} AS SIGNED) AS img, conn, op FROM {}",
                    t.img,
                    self.qualified(&table)
                ));
            }
        }
        if arms.is_empty() {
            return Ok(());
        }
        self.execute(
            &format!(
                "CREATE OR REPLACE SQL SECURITY INVOKER VIEW {} AS {}",
                self.qualified("_cutover_journal"),
                arms.join(" UNION ALL ")
            ),
            Vec::new(),
        )
        .with_context(|| format!("creating the journal's view in {}", self.shown()))
        .map(drop)
    }

    /// The catalogue's columns of `table` named by `columns`, in that order.
    fn picked_columns(&self, table: &str, columns: &[&str]) -> Result<Vec<Column>> {
        let known = self.columns(table)?;
        columns
            .iter()
            .map(|c| {
                known
                    .iter()
                    .find(|k| k.name == *c)
                    .cloned()
                    .with_context(|| {
                        format!(
                            "table '{table}' has no column '{c}' (it has: {})",
                            known
                                .iter()
                                .map(|k| k.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    })
            })
            .collect()
    }

    /// Refuses a table whose rows a foreign key's action changes: InnoDB
    /// fires no trigger for a row it deletes or rewrites by `CASCADE`,
    /// `SET NULL` or `SET DEFAULT`, so the journal would never see it.
    fn refuse_cascades(&self, table: &str) -> Result<()> {
        let acting = |rule: &str| matches!(rule, "CASCADE" | "SET NULL" | "SET DEFAULT");
        let found: Vec<String> = self
            .foreign_keys(table)?
            .declared
            .into_iter()
            .filter(|fk| acting(&fk.on_delete) || acting(&fk.on_update))
            .map(|fk| {
                let mut actions = Vec::new();
                if acting(&fk.on_delete) {
                    actions.push(format!("ON DELETE {}", fk.on_delete));
                }
                if acting(&fk.on_update) {
                    actions.push(format!("ON UPDATE {}", fk.on_update));
                }
                let parent = if fk.parent_database == self.database() {
                    fk.parent_table.clone()
                } else {
                    format!("{}.{}", fk.parent_database, fk.parent_table)
                };
                format!(
                    "constraint '{}' of child table '{}' on parent table '{parent}' ({})",
                    fk.name,
                    fk.table,
                    actions.join(", ")
                )
            })
            .collect();
        if !found.is_empty() {
            bail!(
                "table '{table}' cannot be journaled on MySQL: {}. InnoDB changes the child's rows for these actions without firing any trigger, so the journal would miss them and a rollback would lose them. Redefine the constraint on the target without the action (ALTER TABLE `{table}` DROP FOREIGN KEY <name>, ADD CONSTRAINT <name> FOREIGN KEY … ON DELETE RESTRICT ON UPDATE RESTRICT) and let the application delete the child rows itself, then run journal install again; nothing was installed",
                found.join("; ")
            );
        }
        Ok(())
    }

    /// The InnoDB table id of `table` (a new one after `TRUNCATE` or a
    /// rebuild): `INNODB_SYS_TABLES` on MariaDB, `INNODB_TABLES` on MySQL
    /// 8, both readable with the `PROCESS` privilege only.
    fn innodb_table_id(&self, table: &str) -> Result<u64> {
        let view = match self.server().flavor {
            Flavor::MariaDb => "information_schema.INNODB_SYS_TABLES",
            Flavor::MySql => "information_schema.INNODB_TABLES",
        };
        let name = format!("{}/{}", innodb_name(self.database())?, innodb_name(table)?);
        let id: Option<u64> = self
            .conn()?
            .exec_first(
                format!("SELECT TABLE_ID FROM {view} WHERE NAME = ?"),
                (name,),
            )
            .map_err(|e| {
                self.failed(
                    &format!(
                        "reading the InnoDB table id of '{table}', which tells a TRUNCATE (the user needs the PROCESS privilege)"
                    ),
                    &e,
                )
            })?;
        id.with_context(|| {
            format!(
                "table '{table}' has no InnoDB table id in {view} of {}: only an InnoDB table can be journaled (and the user needs the PROCESS privilege to read it)",
                self.shown()
            )
        })
    }

    /// The table id recorded when the journal was installed on `table`.
    fn recorded_table_id(&self, table: &str) -> Result<Option<u64>> {
        if !self.has_table("_cutover_journal_table_ids")? {
            return Ok(None);
        }
        self.conn()?
            .exec_first(
                format!(
                    "SELECT table_id FROM {} WHERE target_table = ?",
                    self.qualified("_cutover_journal_table_ids")
                ),
                (table.as_bytes(),),
            )
            .map_err(|e| self.failed("reading the journal's table ids", &e))
    }

    /// When an `AFTER UPDATE` trigger's row was really written. MariaDB
    /// fires the trigger for a row that `UPDATE IGNORE` skipped on a
    /// duplicate key, with the NEW it would have written: such a row did not
    /// change, and the journal must not record a key move or a UNIQUE value
    /// that never happened. A row whose key and UNIQUE columns keep their
    /// values cannot have been skipped on a duplicate key; otherwise it was
    /// written when the table holds NEW under NEW's key (every recorded
    /// column equal) and, where the key moved, nothing is left under OLD's
    /// key (which this row held until now). Only such updates pay the two
    /// keyed reads.
    fn update_happened(&self, table: &str, columns: &[&str]) -> Result<String> {
        let keys = self.keys(table)?;
        // A key with an expression part cannot be read back by column.
        let Some(id) = keys.first().map(|k| {
            k.parts
                .iter()
                .map(|p| p.column.as_deref())
                .collect::<Option<Vec<&str>>>()
        }) else {
            return Ok("TRUE".into());
        };
        let Some(id) = id else {
            return Ok("TRUE".into());
        };
        // `a = b OR (a IS NULL AND b IS NULL)`, not `a <=> b`: MariaDB
        // 10.11 answers `t.col <=> NEW.col` false for a TIMESTAMP(6) with a
        // fraction when the row is read by its key inside the trigger, and
        // the journal would lose the update.
        let eq = |a: String, b: String| format!("({a} = {b} OR ({a} IS NULL AND {b} IS NULL))");
        let same = |c: &str| {
            let q = quote_ident(c);
            eq(format!("OLD.{q}"), format!("NEW.{q}"))
        };
        let mut unique: Vec<&str> = keys
            .iter()
            .flat_map(|k| k.parts.iter().filter_map(|p| p.column.as_deref()))
            .collect();
        unique.sort_unstable();
        unique.dedup();
        let all = |parts: Vec<String>| parts.join(" AND ");
        let unchanged = all(unique.iter().map(|c| same(c)).collect());
        let holds_new = all(columns
            .iter()
            .map(|c| {
                let q = quote_ident(c);
                eq(q.clone(), format!("NEW.{q}"))
            })
            .collect());
        let key_kept = all(id.iter().map(|c| same(c)).collect());
        let under_old = all(id
            .iter()
            .map(|c| {
                let q = quote_ident(c);
                eq(q.clone(), format!("OLD.{q}"))
            })
            .collect());
        let t = self.qualified(table);
        Ok(format!(
            "({unchanged}) OR (EXISTS (SELECT 1 FROM {t} WHERE {holds_new}) AND (({key_kept}) OR NOT EXISTS (SELECT 1 FROM {t} WHERE {under_old})))"
        ))
    }

    /// The journal's triggers of image `img` on `table`, in op order.
    fn wanted(&self, img: i64, table: &str, columns: &[&str]) -> Result<Vec<Wanted>> {
        let list = |prefix: &str| {
            (1..=columns.len())
                .map(|i| format!("{prefix}{i}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let row = |of: &str| {
            columns
                .iter()
                .map(|c| format!("{of}.{}", quote_ident(c)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let triggers = self.triggers(table)?;
        let naming = self.naming_image(table, img)?;
        let happened = self.update_happened(table, columns)?;
        let mut out = Vec::with_capacity(OPS.len());
        let mut rest = TRIGGERS;
        for (op, event) in OPS {
            let start = rest
                .find("CREATE TRIGGER")
                .context("journal trigger template: a trigger is missing")?;
            let end = rest[start..]
                .find("\nEND;")
                .context("journal trigger template: a trigger without END")?
                + start;
            let statement = &rest[start..end + "\nEND".len()];
            rest = &rest[end + "\nEND;".len()..];
            // First among the AFTER triggers of its event: before the
            // application's first one, if it has one.
            let first_app = triggers
                .iter()
                .filter(|t| t.timing == "AFTER" && t.event == event)
                .filter(|t| !is_journal_trigger(&t.name))
                .min_by_key(|t| t.order);
            let order = match first_app {
                Some(t) => format!("PRECEDES {} ", quote_ident(&t.name)),
                None => String::new(),
            };
            let name = trigger_name(naming, op);
            let fill = |s: &str| {
                s.replace("{{table}}", &self.qualified(table))
                    .replace("{{image}}", &self.qualified(&image_table(img)))
                    .replace("{{seq}}", &self.qualified("_cutover_journal_seq"))
                    .replace("{{o_cols}}", &list("o"))
                    .replace("{{n_cols}}", &list("n"))
                    .replace("{{old}}", &row("OLD"))
                    .replace("{{new}}", &row("NEW"))
                    .replace("{{happened}}", &happened)
                    .replace(&format!("{{{{trg_{op}}}}}"), &quote_ident(&name))
            };
            let marker = format!("{{{{order_{op}}}}}");
            let Some(at) = statement.find(&marker) else {
                bail!("journal trigger template: {op} has no {marker}");
            };
            let body = fill(&statement[at + marker.len()..]);
            let create = fill(&statement.replace(&marker, &order));
            out.push(Wanted {
                name,
                op,
                event,
                create,
                body,
            });
        }
        Ok(out)
    }

    /// What is wrong with the journal of image `img` on `table`: each
    /// trigger missing, of another timing or event, whose statement differs
    /// from the template's, or not first among the table's `AFTER`
    /// triggers of its event; image columns whose type is no longer the
    /// table column's; and a table emptied by `TRUNCATE` (or rebuilt)
    /// since the journal was installed.
    fn stale_of(&self, img: i64, table: &str, columns: &[&str]) -> Result<Vec<String>> {
        let want = self.wanted(img, table, columns)?;
        let triggers = self.triggers(table)?;
        let mut stale = Vec::new();
        for w in &want {
            let Some(t) = triggers.iter().find(|t| t.name == w.name) else {
                stale.push(format!("{} (missing)", w.name));
                continue;
            };
            if t.timing != "AFTER" || t.event != w.event || t.statement != w.body {
                stale.push(format!("{} (differs from what the spec needs)", w.name));
            } else if t.order != 1 {
                stale.push(format!(
                    "{} (fires after another AFTER {} trigger: it must be the first)",
                    w.name, w.event
                ));
            }
        }
        for (what, t) in [
            ("journal table", image_table(img)),
            ("seq counter", "_cutover_journal_seq".to_string()),
        ] {
            if !self.has_table(&t)? {
                stale.push(format!(
                    "(the journal's {what} {t} is missing: every write to the table fails until the journal is installed again)"
                ));
                return Ok(stale);
            }
        }
        for t in &triggers {
            if is_journal_trigger(&t.name) && !want.iter().any(|w| w.name == t.name) {
                stale.push(format!(
                    "{} (a journal trigger under another name: the table's writes would be journaled twice)",
                    t.name
                ));
            }
        }
        let held = self.columns(&image_table(img))?;
        let known = self.columns(table)?;
        for (i, c) in columns.iter().enumerate() {
            // A column renamed or dropped since the install is gone: the
            // drift report names it, and says how to name it in the spec.
            let is = known.iter().find(|k| k.name == *c).map(image_type);
            let was = held
                .iter()
                .find(|h| h.name == format!("o{}", i + 1))
                .map(image_type);
            if was != is {
                stale.push(format!(
                    "(column {c} is {} but its journal image holds {})",
                    is.as_deref().unwrap_or("gone"),
                    was.as_deref().unwrap_or("nothing")
                ));
            }
        }
        if let Some(recorded) = self.recorded_table_id(table)? {
            let now = self.innodb_table_id(table)?;
            if now != recorded {
                stale.push(format!(
                    "(table emptied by TRUNCATE or rebuilt since the journal was installed: InnoDB table id {recorded}, now {now}; TRUNCATE fires no trigger, so the rows it removed are not in the journal)"
                ));
            }
        }
        Ok(stale)
    }

    /// Runs `f`, which takes the metadata lock of `table`, with
    /// `lock_wait_timeout` short (2 s, or `CUTOVER_LOCK_TIMEOUT_MS`), a few
    /// times when the lock is not granted in time: a waiting DDL holds up
    /// every writer queued behind it. When it gives up, the error names
    /// the sessions with an open transaction.
    fn with_lock_wait(&self, table: &str, what: &str, f: impl Fn() -> Result<()>) -> Result<()> {
        let ms = std::env::var("CUTOVER_LOCK_TIMEOUT_MS")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(LOCK_TIMEOUT_MS);
        let seconds = ms.div_ceil(1000).max(1);
        let before: Option<u64> = self
            .conn()?
            .query_first("SELECT @@SESSION.lock_wait_timeout")
            .map_err(|e| self.failed("reading lock_wait_timeout", &e))?;
        self.execute(
            &format!("SET SESSION lock_wait_timeout = {seconds}"),
            Vec::new(),
        )?;
        let mut r = Ok(());
        for attempt in 1..=LOCK_ATTEMPTS {
            r = f();
            match &r {
                Err(e) if lock_timed_out(e) && attempt < LOCK_ATTEMPTS => {
                    std::thread::sleep(Duration::from_millis(100 * attempt as u64));
                }
                _ => break,
            }
        }
        if let Some(b) = before {
            self.execute(&format!("SET SESSION lock_wait_timeout = {b}"), Vec::new())?;
        }
        match r {
            Ok(()) => Ok(()),
            Err(e) if lock_timed_out(&e) => {
                let blockers = self.open_transactions().unwrap_or_default();
                bail!(
                    "{what} '{table}' in {}: the table's metadata lock stayed held by other sessions for {LOCK_ATTEMPTS} tries of {seconds} s (CUTOVER_LOCK_TIMEOUT_MS); {}. Let them finish (or end them with KILL) and run it again",
                    self.shown(),
                    if blockers.is_empty() {
                        "no open transaction was seen (the user may lack the PROCESS privilege to see them)".to_string()
                    } else {
                        format!("open transactions: {}", blockers.join("; "))
                    }
                )
            }
            Err(e) => Err(e.context(format!("{what} '{table}' in {}", self.shown()))),
        }
    }

    /// The other sessions with an open InnoDB transaction, as messages name
    /// them.
    fn open_transactions(&self) -> Result<Vec<String>> {
        let rows = self.query_text(
            "SELECT p.ID, p.USER, p.HOST, COALESCE(p.DB, ''), t.trx_started,
                    LEFT(COALESCE(p.INFO, ''), 100)
             FROM information_schema.INNODB_TRX t
             JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id
             WHERE p.ID <> CONNECTION_ID() ORDER BY p.ID",
            Vec::new(),
        )?;
        Ok(rows
            .into_iter()
            .map(|r| {
                let f = |i: usize| r.get(i).cloned().flatten().unwrap_or_default();
                format!(
                    "connection {} (user {}@{}, database {}, transaction since {}, running: {})",
                    f(0),
                    f(1),
                    f(2),
                    f(3),
                    f(4),
                    f(5)
                )
            })
            .collect())
    }

    /// Creates one journal trigger, or replaces the one of its name: on
    /// MariaDB in one statement (`CREATE OR REPLACE TRIGGER`, under the
    /// table's exclusive metadata lock, so no write falls between); on
    /// MySQL 8, which has no `OR REPLACE` for triggers, dropped and
    /// created again under `LOCK TABLES … WRITE`.
    fn put_trigger(&self, table: &str, w: &Wanted, exists: bool) -> Result<()> {
        if !exists {
            return self.execute(&w.create, Vec::new()).map(drop);
        }
        match self.server().flavor {
            Flavor::MariaDb => self
                .execute(
                    &w.create
                        .replacen("CREATE TRIGGER", "CREATE OR REPLACE TRIGGER", 1),
                    Vec::new(),
                )
                .map(drop),
            Flavor::MySql => {
                self.execute(
                    &format!("LOCK TABLES {} WRITE", self.qualified(table)),
                    Vec::new(),
                )?;
                let r = self
                    .execute(
                        &format!("DROP TRIGGER IF EXISTS {}", self.qualified(&w.name)),
                        Vec::new(),
                    )
                    .and_then(|_| self.execute(&w.create, Vec::new()));
                let unlocked = self.execute("UNLOCK TABLES", Vec::new());
                r?;
                unlocked.map(drop)
            }
        }
    }

    /// Drops the journal's triggers on `table` but those named in `keep`
    /// (every trigger of the journal's names, whatever image it writes).
    fn drop_journal_triggers(&self, table: &str, keep: &[String]) -> Result<()> {
        for name in self
            .triggers(table)?
            .into_iter()
            .map(|t| t.name)
            .filter(|n| is_journal_trigger(n) && !keep.contains(n))
        {
            self.execute(
                &format!("DROP TRIGGER IF EXISTS {}", self.qualified(&name)),
                Vec::new(),
            )?;
        }
        Ok(())
    }

    /// The image whose id names `table`'s journal triggers: its first. A
    /// later image of the table (another column list) keeps the names, so
    /// its triggers replace the earlier image's in place (`CREATE OR
    /// REPLACE`): no write falls between them, and none is journaled twice.
    fn naming_image(&self, table: &str, img: i64) -> Result<i64> {
        Ok(self
            .journal_tables()?
            .iter()
            .filter(|t| t.target_table == table)
            .map(|t| t.img)
            .min()
            .unwrap_or(img))
    }

    /// Whether the fence's triggers are on `table`: then a write is refused
    /// and the proof only compiles.
    fn is_fenced(&self, table: &str) -> Result<bool> {
        Ok(self
            .triggers(table)?
            .iter()
            .any(|t| t.name.starts_with("_cutover_fence")))
    }

    /// Runs each statement the journal's triggers run, over no row of the
    /// table: the image table and its column types must take the table's
    /// rows.
    fn compile_journal(&self, img: i64, table: &str, columns: &[&str]) -> Result<()> {
        let row = columns
            .iter()
            .map(|c| format!("t.{}", quote_ident(c)))
            .collect::<Vec<_>>()
            .join(", ");
        let list = |p: &str| {
            (1..=columns.len())
                .map(|i| format!("{p}{i}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let head = format!(
            "INSERT INTO {} (seq, conn, op, ",
            self.qualified(&image_table(img))
        );
        let from = format!("FROM {} AS t WHERE FALSE", self.qualified(table));
        for sql in [
            format!("{head}{}) SELECT 0, 0, 'insert', {row} {from}", list("n")),
            format!(
                "{head}{}, {}) SELECT 0, 0, 'update', {row}, {row} {from}",
                list("o"),
                list("n")
            ),
            format!("{head}{}) SELECT 0, 0, 'delete', {row} {from}", list("o")),
        ] {
            self.execute(&sql, Vec::new())?;
        }
        Ok(())
    }

    /// Runs `f` in a savepoint that is always rolled back, in the open
    /// transaction, or in a transaction of its own when none is open (a
    /// schema change before it committed the caller's).
    fn rolled_back_savepoint<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        // MariaDB says so; MySQL 8 has no such variable, and a transaction
        // that has written is in INNODB_TRX (one that has not holds nothing
        // a transaction of our own would commit).
        let ask = match self.server().flavor {
            Flavor::MariaDb => "SELECT @@SESSION.in_transaction",
            Flavor::MySql => {
                "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = CONNECTION_ID()"
            }
        };
        let open: Option<i64> = self
            .conn()?
            .query_first(ask)
            .map_err(|e| self.failed("asking whether a transaction is open", &e))?;
        let own = open.unwrap_or(0) == 0;
        if own {
            self.execute("START TRANSACTION READ WRITE", Vec::new())?;
        }
        self.execute("SAVEPOINT cutover_prove", Vec::new())?;
        let r = f();
        if own {
            self.rollback();
        } else {
            // A deadlock rolls the whole transaction back, savepoint and all.
            let _ = self.execute("ROLLBACK TO SAVEPOINT cutover_prove", Vec::new());
            let _ = self.execute("RELEASE SAVEPOINT cutover_prove", Vec::new());
        }
        r
    }

    /// Writes through one table's journal triggers inside a savepoint that
    /// is always rolled back (see `prove_writes`).
    fn prove_journal(&self, t: &Journaled<'_>) -> Result<()> {
        let Some(img) = self.find_image(t.name, t.table, t.columns)? else {
            bail!(
                "table '{}' has no journal image for these columns; install the journal first",
                t.table
            );
        };
        self.rolled_back_savepoint(|| {
            self.compile_journal(img, t.table, t.columns)?;
            if self.is_fenced(t.table)? {
                return Ok(());
            }
            journal_proof::prove_writes(self, t.name, img, t.table, t.columns, t.key_len)
        })
    }

    /// How many of a table's journal triggers exist.
    fn journal_trigger_count(&self, table: &str) -> Result<usize> {
        Ok(self
            .triggers(table)?
            .iter()
            .filter(|t| is_journal_trigger(&t.name))
            .count())
    }
}

/// A database or table name as InnoDB spells it in its dictionary (the
/// server's file-name encoding): ASCII letters, digits and `_` as they
/// are, any other ASCII character as `@` and four hex digits. A name with
/// other characters (which the encoding maps through tables of its own)
/// is refused: its table id cannot be found, so a `TRUNCATE` could not be
/// told.
fn innodb_name(name: &str) -> Result<String> {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '_' => out.push(c),
            c if c.is_ascii() => out.push_str(&format!("@{:04x}", c as u32)),
            _ => bail!(
                "'{name}' is not an ASCII name: the journal on MySQL finds a table's InnoDB id (which tells a TRUNCATE) only for names of ASCII characters; rename the database or table, or journal it on another target"
            ),
        }
    }
    Ok(out)
}

/// Whether the server refused a statement because its metadata lock was
/// not granted in time (error 1205).
fn lock_timed_out(e: &anyhow::Error) -> bool {
    e.chain()
        .filter_map(|c| c.downcast_ref::<mysql::Error>())
        .any(|m| code(m) == Some(1205))
        || e.to_string().contains("(error 1205)")
}

/// Whether a delete was refused because other rows refer to the row.
fn referenced(e: &anyhow::Error) -> bool {
    let s = e.to_string();
    s.contains("(error 1451)") || s.contains("(error 1217)")
}

impl ProofWrites for MySql {
    /// The largest seq this session can see handed out (0 when none).
    fn last_seq(&self) -> Result<i64> {
        let n: Option<i64> = self
            .conn()?
            .query_first(format!(
                "SELECT COALESCE(MAX(seq), 0) FROM {}",
                self.qualified("_cutover_journal_seq")
            ))
            .map_err(|e| self.failed("reading the journal's last seq", &e))?;
        Ok(n.unwrap_or(0))
    }

    fn entries_written_here(&self, img: i64, after: i64) -> Result<Vec<JournalEntry>> {
        crate::db::image_journal::written_here(self, img, after)
    }

    /// A row other rows refer to (errors 1451, 1217).
    fn cannot_write_back(&self, e: &anyhow::Error) -> bool {
        referenced(e)
    }
}

impl Capture for MySql {
    /// The image id for `name` with these columns: the existing one when
    /// the columns are the same, else a new one; in both cases its image
    /// table is created if it is not there (a run stopped between the
    /// two). A table that a foreign key's action changes, or that is not
    /// InnoDB, is refused here, before any trigger of any table is written.
    fn image_for(&self, name: &str, table: &str, columns: &[&str]) -> Result<i64> {
        self.refuse_cascades(table)?;
        // An InnoDB table whose id can be read (a MyISAM table's writes are
        // not undone with a transaction its journal rows are).
        self.innodb_table_id(table)?;
        if columns.is_empty() || columns.len() > MAX_JOURNALED_COLUMNS {
            bail!(
                "table '{table}': {} columns to journal; MySQL journals 1 to {MAX_JOURNALED_COLUMNS} (an image table holds two images of the row in at most 1,017 InnoDB columns)",
                columns.len()
            );
        }
        let picked = self.picked_columns(table, columns)?;
        self.ensure_journal_control()?;
        let img = match self.find_image(name, table, columns)? {
            Some(img) => img,
            None => {
                let list = serde_json::to_string(columns)?;
                self.execute(
                    &format!(
                        "INSERT INTO {} (tbl, target_table, columns) VALUES (?, ?, ?)",
                        self.qualified("_cutover_journal_tables")
                    ),
                    vec![name.into(), table.into(), list.into()],
                )?;
                let id: Option<i64> = self
                    .conn()?
                    .query_first("SELECT LAST_INSERT_ID()")
                    .map_err(|e| self.failed("reading the journal image's id", &e))?;
                id.context("no id for the journal's new image")?
            }
        };
        let images = ["o", "n"]
            .iter()
            .flat_map(|p| {
                picked.iter().enumerate().map(move |(i, c)| {
                    format!(
                        "{} {} NULL DEFAULT NULL",
                        quote_ident(&format!("{p}{}", i + 1)),
                        image_type(c)
                    )
                })
            })
            .collect::<Vec<_>>()
            .join(", ");
        self.execute(
            &format!(
                "CREATE TABLE IF NOT EXISTS {} (seq BIGINT NOT NULL PRIMARY KEY, conn BIGINT UNSIGNED NOT NULL, op VARCHAR(6) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, {images}) ENGINE = InnoDB ROW_FORMAT = DYNAMIC",
                self.qualified(&image_table(img))
            ),
            Vec::new(),
        )
        .with_context(|| format!("creating the journal table of '{table}' in {}", self.shown()))?;
        self.create_journal_view()?;
        Ok(img)
    }

    /// Installs (or replaces, when anything about them is stale) the
    /// journal's triggers on one table under a short `lock_wait_timeout`,
    /// after recording the table's InnoDB id (once: a changed id is a
    /// `TRUNCATE` the journal missed, refused). Returns how many triggers
    /// were created or replaced.
    fn install_journal(&self, t: &Journaled<'_>) -> Result<usize> {
        let (name, table, columns) = (t.name, t.table, t.columns);
        self.refuse_cascades(table)?;
        let img = self.image_for(name, table, columns)?;
        if self.recorded_table_id(table)?.is_none() {
            let id = self.innodb_table_id(table)?;
            self.execute(
                &format!(
                    "INSERT INTO {} (target_table, table_id) VALUES (?, ?) ON DUPLICATE KEY UPDATE table_id = table_id",
                    self.qualified("_cutover_journal_table_ids")
                ),
                vec![My::Bytes(table.as_bytes().to_vec()), My::UInt(id)],
            )?;
        }
        let stale = self.stale_of(img, table, columns)?;
        if stale.is_empty() {
            return Ok(0);
        }
        if let Some(s) = stale.iter().find(|s| s.starts_with("(table emptied")) {
            bail!(
                "table '{table}': {s}. The journal cannot be completed: remove it (cutover journal remove), load the table again and install the journal anew"
            );
        }
        if stale.iter().any(|s| s.starts_with("(column")) {
            bail!(
                "table '{table}': {}; the journal's image columns were made for the old types. Name the spec's columns again (or remove the journal and install it anew) so a new image is made",
                stale.join(", ")
            );
        }
        let want = self.wanted(img, table, columns)?;
        let present: Vec<String> = self.triggers(table)?.into_iter().map(|t| t.name).collect();
        let mut changed = 0;
        for w in &want {
            if !stale
                .iter()
                .any(|s| s.starts_with(&format!("{} (", w.name)))
            {
                continue;
            }
            let exists = present.contains(&w.name);
            self.with_lock_wait(table, "installing the journal triggers on", || {
                self.put_trigger(table, w, exists)
            })
            .with_context(|| format!("the {} trigger", w.op))?;
            changed += 1;
        }
        let keep: Vec<String> = want.iter().map(|w| w.name.clone()).collect();
        if self
            .triggers(table)?
            .iter()
            .any(|t| is_journal_trigger(&t.name) && !keep.contains(&t.name))
        {
            self.with_lock_wait(table, "removing older journal triggers from", || {
                self.drop_journal_triggers(table, &keep)
            })?;
        }
        Ok(changed)
    }

    /// Writes through each table's journal triggers inside a savepoint
    /// that is always rolled back (see `prove_writes`), one table at a
    /// time. An empty or fenced table is not written: the statements the
    /// triggers run are run over no row.
    fn prove_journals(&self, tables: &[Journaled<'_>]) -> Result<(), Unproven> {
        for (i, t) in tables.iter().enumerate() {
            self.prove_journal(t)
                .map_err(|error| Unproven { table: i, error })?;
        }
        Ok(())
    }

    /// The journal triggers of one table that are missing, differ from the
    /// template, or do not fire first (each with why), image columns whose
    /// type changed, and a `TRUNCATE` since the install.
    fn stale_journal_triggers(&self, t: &Journaled<'_>) -> Result<Vec<String>> {
        let (name, table, columns) = (t.name, t.table, t.columns);
        let Some(img) = self.find_image(name, table, columns)? else {
            let list = serde_json::to_string(columns)?;
            let mut out: Vec<String> = self
                .triggers(table)?
                .into_iter()
                .map(|t| t.name)
                .filter(|n| is_journal_trigger(n))
                .collect();
            out.push(format!("(no journal image for columns {list})"));
            return Ok(out);
        };
        self.stale_of(img, table, columns)
    }

    /// Drops the journal's triggers on a table and forgets its table id;
    /// the entries stay.
    fn remove_journal(&self, table: &str) -> Result<()> {
        if self.has_table(table)? && self.journal_trigger_count(table)? > 0 {
            self.with_lock_wait(table, "removing the journal triggers from", || {
                self.drop_journal_triggers(table, &[])
            })?;
        }
        if self.has_table("_cutover_journal_table_ids")? {
            self.execute(
                &format!(
                    "DELETE FROM {} WHERE target_table = ?",
                    self.qualified("_cutover_journal_table_ids")
                ),
                vec![My::Bytes(table.as_bytes().to_vec())],
            )?;
        }
        Ok(())
    }

    /// The image tables, the seq counter and the table ids, which the
    /// fence guards like the journal itself.
    fn journal_image_tables(&self) -> Result<Vec<String>> {
        let mut out: Vec<String> = self
            .journal_tables()?
            .into_iter()
            .map(|t| image_table(t.img))
            .collect();
        if !out.is_empty() {
            out.push("_cutover_journal_seq".to_string());
            out.push("_cutover_journal_table_ids".to_string());
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_journals_triggers_are_told_by_name() {
        assert_eq!(trigger_name(12, "update"), "_cutover_journal_12_update");
        assert!(is_journal_trigger("_cutover_journal_12_update"));
        for other in [
            "_cutover_journal_12_fence",
            "_cutover_journal__insert",
            "_cutover_journal_x_insert",
            "_cutover_fence_insert",
            "orders_audit",
        ] {
            assert!(!is_journal_trigger(other), "{other}");
        }
    }

    #[test]
    fn innodb_spells_names_as_their_files() -> Result<()> {
        assert_eq!(innodb_name("orders_2")?, "orders_2");
        assert_eq!(innodb_name("my-table")?, "my@002dtable");
        assert_eq!(innodb_name("a b$")?, "a@0020b@0024");
        assert!(innodb_name("café").is_err());
        Ok(())
    }

    #[test]
    fn wide_text_and_binary_columns_become_large_objects() {
        let column = |data_type: &str, declared: &str| Column {
            name: "c".into(),
            position: 1,
            data_type: data_type.into(),
            declared: declared.into(),
            nullable: true,
            default: None,
            generated: None,
            auto_increment: false,
            key_position: 0,
            charset: Some("utf8mb4".into()),
            collation: Some("utf8mb4_bin".into()),
            numeric_precision: None,
            numeric_scale: None,
            datetime_precision: None,
            max_length: None,
        };
        let varchar = column("varchar", "varchar(5000)");
        assert_eq!(
            image_type(&varchar),
            "longtext CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
        );
        // An image column's type gives itself again.
        let image = column("longtext", "longtext");
        assert_eq!(image_type(&image), image_type(&varchar));
        let mut binary = column("binary", "binary(4)");
        binary.charset = None;
        binary.collation = None;
        assert_eq!(image_type(&binary), "longblob");
        let mut decimal = column("decimal", "decimal(12,2) unsigned");
        decimal.charset = None;
        assert_eq!(image_type(&decimal), "decimal(12,2) unsigned");
    }
}
