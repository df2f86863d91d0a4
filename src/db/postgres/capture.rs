//! Change capture, installing side: the journal's image tables, its
//! PL/pgSQL row triggers (enabled ALWAYS), its identity, the lock-bounded
//! install and the rolled-back proof that a write is journaled.
//!
//! Each journaled table and column list has an image id (`img`, a row of
//! `_cutover_journal_tables`) and a journal table
//! `_cutover_journal_<img> (seq, xid, op, o1, …, oN, n1, …, nN)` whose image
//! columns have the table's own column types (domains as their base type),
//! so a value is journaled exactly as stored. `seq` comes from one sequence,
//! `_cutover_journal_seq`; `xid` is `pg_current_xact_id()`. The template is
//! `sql/postgres/journal_triggers.sql`.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio_postgres::error::SqlState;

use super::journal_log::image_table;
use super::{Postgres, quote_ident, quote_literal};
use crate::db::journal_proof::{self, ProofWrites};
use crate::db::{Capture, JournalEntry, Journaled, Unproven};

const CONTROL: &str = include_str!("../../../sql/postgres/journal_control.sql");
const TRIGGERS: &str = include_str!("../../../sql/postgres/journal_triggers.sql");

/// The journal's triggers on every table, by op, in the template's order.
pub const TRIGGER_NAMES: [&str; 4] = [
    "_cutover_journal_insert",
    "_cutover_journal_update",
    "_cutover_journal_delete",
    "_cutover_journal_truncate",
];

/// `pg_trigger.tgtype` of each: ROW (1) | INSERT (4), ROW | UPDATE (16),
/// ROW | DELETE (8) fired AFTER, and BEFORE (2) TRUNCATE (32) per statement.
const TRIGGER_TYPES: [i16; 4] = [5, 17, 9, 34];

const OPS: [&str; 4] = ["insert", "update", "delete", "truncate"];

/// A PostgreSQL table has at most 1,600 columns; an image table holds
/// `seq`, `xid`, `op` and two images.
pub const MAX_JOURNALED_COLUMNS: usize = 798;

/// How long `journal install` waits for a lock on a table before it tries
/// again, unless `CUTOVER_LOCK_TIMEOUT_MS` says otherwise.
const LOCK_TIMEOUT_MS: u64 = 2000;
const LOCK_ATTEMPTS: usize = 3;

/// The trigger function of image `img` for one op (unqualified).
fn function_name(img: i64, op: &str) -> String {
    format!("_cutover_journal_{img}_{op}")
}

/// What `journal install` puts on one table for one image.
struct Wanted {
    /// The whole template, filled in: functions, triggers, ENABLE ALWAYS.
    sql: String,
    /// Each function's body as `pg_proc.prosrc` keeps it, in op order.
    bodies: Vec<String>,
}

/// One relation of a table's inheritance family: the table itself, or a
/// table inheriting from it (directly or not).
pub(super) struct Member {
    /// Quoted and schema-qualified, for SQL.
    pub sql: String,
    /// As messages name it: the table's name, in its schema's terms when
    /// that is not the spec's.
    pub shown: String,
}

/// The one statement of the template's TRUNCATE function that reads the
/// table's rows; a family's function reads only the relation whose
/// trigger fired (see `journal_trigger_sql`).
const TRUNCATE_ROWS: &str = "INSERT INTO {{image}} (seq, xid, op, {{o_cols}})
    SELECT pg_catalog.nextval({{seq}}::pg_catalog.regclass), pg_catalog.pg_current_xact_id(), 'delete', {{rows}} FROM {{table}} AS t;";

/// The SQLSTATE of the first PostgreSQL error in an error's chain.
pub(super) fn sql_state(e: &anyhow::Error) -> Option<SqlState> {
    e.chain()
        .find_map(|c| c.downcast_ref::<tokio_postgres::Error>())
        .and_then(|p| p.code().cloned())
}

impl Postgres {
    /// `table` and every table inheriting from it, directly or through
    /// another (partitions by inheritance, routed by rules or triggers):
    /// their rows are the table's rows as a query reads them, but a write
    /// to one fires that relation's own row triggers, so the journal and
    /// the fence stand on each. A declaratively partitioned table is one
    /// member: PostgreSQL clones its row triggers onto its partitions.
    pub(super) fn family(&self, table: &str) -> Result<Vec<Member>> {
        let rows = self.client()?.query(
            "WITH RECURSIVE d(oid) AS (
               SELECT i.inhrelid FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent
               WHERE i.inhparent = to_regclass($1) AND p.relkind = 'r'
               UNION
               SELECT i.inhrelid FROM pg_inherits i JOIN d ON i.inhparent = d.oid
               JOIN pg_class p ON p.oid = i.inhparent WHERE p.relkind = 'r'
             )
             SELECT quote_ident(n.nspname) || '.' || quote_ident(c.relname),
                    CASE WHEN n.nspname = $2 THEN c.relname::text
                         ELSE n.nspname || '.' || c.relname END
             FROM d JOIN pg_class c ON c.oid = d.oid JOIN pg_namespace n ON n.oid = c.relnamespace
             ORDER BY 2",
            &[&self.qualified(table), &self.schema],
        )?;
        let mut out = vec![Member {
            sql: self.qualified(table),
            shown: table.to_string(),
        }];
        out.extend(rows.iter().map(|r| Member {
            sql: r.get(0),
            shown: r.get(1),
        }));
        Ok(out)
    }

    /// Creates the journal's identity tables (with the target's other
    /// control tables) and its sequence if they are not there yet.
    pub(super) fn ensure_journal_control(&self) -> Result<()> {
        let control =
            crate::db::control::Control::new(self, self, &super::control::DIALECT, &self.shown);
        crate::db::Progress(control).ensure_control_tables()?;
        self.client()?
            .batch_execute(CONTROL)
            .with_context(|| format!("creating the journal's control tables in {}", self.shown))
    }

    /// The column types of a table as `(name, type)`, domains resolved to
    /// their base type (with the domain's modifier when the column has none).
    fn base_types(&self, table: &str) -> Result<Vec<(String, String)>> {
        let rows = self.client()?.query(
            "WITH RECURSIVE base(num, name, oid, typtype, typmod) AS (
               SELECT a.attnum, a.attname::text, t.oid, t.typtype::text, a.atttypmod
               FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
               WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
               UNION ALL
               SELECT b.num, b.name, bt.oid, bt.typtype::text,
                      CASE WHEN b.typmod = -1 THEN d.typtypmod ELSE b.typmod END
               FROM base b JOIN pg_type d ON d.oid = b.oid JOIN pg_type bt ON bt.oid = d.typbasetype
               WHERE b.typtype = 'd'
             )
             SELECT name, format_type(oid, typmod) FROM base WHERE typtype <> 'd' ORDER BY num",
            &[&self.qualified(table)],
        )?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// The types of `columns` of `table`, in that order, as image columns
    /// take them.
    fn image_types(&self, table: &str, columns: &[&str]) -> Result<Vec<String>> {
        let known = self.base_types(table)?;
        if known.is_empty() {
            bail!("schema '{}' has no table '{table}'", self.schema);
        }
        columns
            .iter()
            .map(|c| match known.iter().find(|k| k.0 == *c) {
                Some((_, t)) => Ok(t.clone()),
                None => bail!(
                    "table '{table}' has no column '{c}' (it has: {})",
                    known
                        .iter()
                        .map(|k| k.0.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            })
            .collect()
    }

    /// The image id already recorded for these columns of `table`.
    fn find_image(&self, name: &str, table: &str, columns: &[&str]) -> Result<Option<i64>> {
        if !self.has_table("_cutover_journal_tables")? {
            return Ok(None);
        }
        let list = serde_json::to_string(columns)?;
        let row = self.client()?.query_opt(
            "SELECT img FROM _cutover_journal_tables WHERE tbl = $1 AND target_table = $2 AND columns = $3",
            &[&name, &table, &list],
        )?;
        Ok(row.map(|r| r.get(0)))
    }

    /// The view `_cutover_journal (seq, img, xid, op)` over every journal
    /// table.
    fn create_journal_view(&self) -> Result<()> {
        let arms = self
            .journal_tables()?
            .iter()
            .map(|t| {
                format!(
                    "SELECT seq, {}::bigint AS img, xid, op FROM {}",
                    t.img,
                    self.qualified(&image_table(t.img))
                )
            })
            .collect::<Vec<_>>()
            .join(" UNION ALL ");
        self.client()?.batch_execute(&format!(
            "CREATE OR REPLACE VIEW {} AS {arms}",
            self.qualified("_cutover_journal")
        ))?;
        Ok(())
    }

    /// The functions and triggers of image `img` on `table`.
    fn journal_trigger_sql(&self, img: i64, table: &str, columns: &[&str]) -> Result<Wanted> {
        let q: Vec<String> = columns.iter().map(|c| quote_ident(c)).collect();
        let list = |prefix: &str| {
            (1..=columns.len())
                .map(|i| format!("{prefix}{i}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let row = |of: &str| {
            q.iter()
                .map(|c| format!("{of}.{c}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let seq = quote_literal(&self.qualified("_cutover_journal_seq"))?;
        let family = self.family(table)?;
        // The functions once, then the triggers on each member.
        let split = TRIGGERS
            .find("CREATE OR REPLACE TRIGGER")
            .context("journal trigger template without its triggers")?;
        let (functions, triggers) = TRIGGERS.split_at(split);
        let mut template = functions.to_string();
        if family.len() > 1 {
            // TRUNCATE of a parent fires the BEFORE TRUNCATE trigger of
            // every member it empties: each journals its own rows only.
            if !template.contains(TRUNCATE_ROWS) {
                bail!("journal trigger template: the TRUNCATE statement changed");
            }
            let only = TRUNCATE_ROWS
                .replace("{{table}}", "ONLY {{relation}}")
                .replace("{{rows}}", &row("t"))
                .replace("{{image}}", &self.qualified(&image_table(img)))
                .replace("{{seq}}", &seq)
                .replace("{{o_cols}}", &list("o"))
                .replace('%', "%%")
                .replace("{{relation}}", "%s");
            template = template.replace(
                TRUNCATE_ROWS,
                &format!(
                    "EXECUTE pg_catalog.format({}, TG_RELID::pg_catalog.regclass);",
                    quote_literal(&only)?
                ),
            );
        }
        for m in &family {
            template.push_str(&triggers.replace("{{table}}", &m.sql));
        }
        let mut sql = template
            .replace("{{image}}", &self.qualified(&image_table(img)))
            .replace("{{seq}}", &seq)
            .replace("{{table}}", &self.qualified(table))
            .replace("{{o_cols}}", &list("o"))
            .replace("{{n_cols}}", &list("n"))
            .replace("{{old}}", &row("OLD"))
            .replace("{{new}}", &row("NEW"))
            .replace("{{rows}}", &row("t"));
        for (op, trigger) in OPS.iter().zip(TRIGGER_NAMES) {
            sql = sql
                .replace(
                    &format!("{{{{fn_{op}}}}}"),
                    &self.qualified(&function_name(img, op)),
                )
                .replace(&format!("{{{{trg_{op}}}}}"), &quote_ident(trigger));
        }
        let bodies: Vec<String> = sql
            .split("$cutover$")
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect();
        if bodies.len() != OPS.len() {
            bail!("journal trigger template: {} function bodies", bodies.len());
        }
        Ok(Wanted { sql, bodies })
    }

    /// What is wrong with the journal triggers of image `img` on `table`:
    /// each trigger missing, calling another function, restricted (`WHEN`,
    /// `UPDATE OF`, arguments), of another event, whose function's body
    /// differs, or not enabled ALWAYS; and image columns whose type is no
    /// longer the table column's.
    fn stale_of(&self, img: i64, table: &str, columns: &[&str]) -> Result<Vec<String>> {
        let want = self.journal_trigger_sql(img, table, columns)?;
        let mut stale = Vec::new();
        for (m, member) in self.family(table)?.iter().enumerate() {
            self.stale_on(&want, img, member, m == 0, &mut stale)?;
        }
        let image = image_table(img);
        let held = self.base_types(&image)?;
        let now = self.base_types(table)?;
        for (i, c) in columns.iter().enumerate() {
            let was = held
                .iter()
                .find(|h| h.0 == format!("o{}", i + 1))
                .map(|h| h.1.as_str());
            let is = now.iter().find(|k| k.0 == *c).map(|k| k.1.as_str());
            if was != is {
                stale.push(format!(
                    "(column {c} is {} but its journal image holds {})",
                    is.unwrap_or("gone"),
                    was.unwrap_or("nothing")
                ));
            }
        }
        Ok(stale)
    }

    /// What is wrong with the journal triggers of image `img` on one
    /// member of the table's family (named in each line but the table's
    /// own).
    fn stale_on(
        &self,
        want: &Wanted,
        img: i64,
        member: &Member,
        own: bool,
        stale: &mut Vec<String>,
    ) -> Result<()> {
        let on = if own {
            String::new()
        } else {
            format!(" on {}", member.shown)
        };
        let rows = self.client()?.query(
            "SELECT g.tgname::text, g.tgtype, g.tgenabled::text,
                    g.tgqual IS NULL AND g.tgnargs = 0 AND g.tgattr::text = '',
                    p.proname::text, n.nspname::text, p.prosrc, l.lanname::text, p.prosecdef
             FROM pg_trigger g
             JOIN pg_proc p ON p.oid = g.tgfoid
             JOIN pg_namespace n ON n.oid = p.pronamespace
             JOIN pg_language l ON l.oid = p.prolang
             WHERE g.tgrelid = to_regclass($1) AND g.tgname = ANY ($2)",
            &[&member.sql, &TRIGGER_NAMES.to_vec()],
        )?;
        for (i, name) in TRIGGER_NAMES.iter().enumerate() {
            let Some(r) = rows.iter().find(|r| r.get::<_, String>(0) == *name) else {
                stale.push(format!("{name}{on} (missing)"));
                continue;
            };
            let enabled: String = r.get(2);
            let plain: bool = r.get(3);
            let body: String = r.get(6);
            let same = r.get::<_, i16>(1) == TRIGGER_TYPES[i]
                && plain
                && r.get::<_, String>(4) == function_name(img, OPS[i])
                && r.get::<_, String>(5) == self.schema
                && body == want.bodies[i]
                && r.get::<_, String>(7) == "plpgsql"
                && r.get::<_, bool>(8);
            if !same {
                stale.push(format!("{name}{on} (differs from what the spec needs)"));
            } else if enabled != "A" {
                let state = match enabled.as_str() {
                    "D" => "disabled",
                    "O" => "enabled only outside replica sessions",
                    "R" => "enabled only in replica sessions",
                    _ => "not enabled ALWAYS",
                };
                stale.push(format!("{name}{on} ({state})"));
            }
        }
        Ok(())
    }

    /// Runs `f` in a savepoint of the open transaction (or in a transaction
    /// of its own when none is open); keeps its work when `keep` and `f`
    /// succeeds, else undoes it.
    pub(super) fn nested<T>(
        &self,
        name: &str,
        keep: bool,
        f: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        let opened = self.client()?.batch_execute(&format!("SAVEPOINT {name}"));
        let own = match opened {
            Ok(()) => false,
            Err(e) if e.code() == Some(&SqlState::NO_ACTIVE_SQL_TRANSACTION) => {
                self.client()?
                    .batch_execute(&format!("BEGIN; SAVEPOINT {name}"))?;
                true
            }
            Err(e) => return Err(e.into()),
        };
        let r = f();
        let end = match (&r, keep, own) {
            (Ok(_), true, false) => format!("RELEASE {name}"),
            (Ok(_), true, true) => "COMMIT".to_string(),
            (_, _, false) => format!("ROLLBACK TO {name}; RELEASE {name}"),
            (_, _, true) => "ROLLBACK".to_string(),
        };
        let ended = self.client()?.batch_execute(&end);
        let v = r?;
        ended.with_context(|| format!("ending a nested transaction on {}", self.shown))?;
        Ok(v)
    }

    /// Runs `f`, which locks `table`, with `lock_timeout` set (2 s, or
    /// `CUTOVER_LOCK_TIMEOUT_MS`), trying again a few times when the lock
    /// is not granted in time. Waiting in the lock queue holds up every
    /// writer behind it, so it never waits long; when it gives up, the error
    /// names the sessions that held or queued for the table.
    fn with_lock_timeout(&self, table: &str, what: &str, f: impl Fn() -> Result<()>) -> Result<()> {
        let ms = std::env::var("CUTOVER_LOCK_TIMEOUT_MS")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(LOCK_TIMEOUT_MS);
        let before: String = self
            .client()?
            .query_one("SELECT current_setting('lock_timeout')", &[])?
            .get(0);
        let mut blockers = Vec::new();
        for attempt in 1..=LOCK_ATTEMPTS {
            let r = self.nested("cutover_lock", true, || {
                self.client()?
                    .batch_execute(&format!("SET LOCAL lock_timeout = {ms}"))?;
                f()
            });
            match r {
                Ok(()) => {
                    // SET LOCAL outlived the savepoint: the rest of the
                    // transaction waits as long as it did before.
                    self.client()?.batch_execute(&format!(
                        "SET LOCAL lock_timeout = {}",
                        quote_literal(&before)?
                    ))?;
                    return Ok(());
                }
                Err(e)
                    if matches!(
                        sql_state(&e),
                        Some(SqlState::LOCK_NOT_AVAILABLE | SqlState::T_R_DEADLOCK_DETECTED)
                    ) =>
                {
                    blockers = self.lock_blockers(table)?;
                    if attempt < LOCK_ATTEMPTS {
                        std::thread::sleep(Duration::from_millis(100 * attempt as u64));
                    }
                }
                Err(e) => {
                    return Err(e.context(format!("{what} '{table}' in {}", self.shown)));
                }
            }
        }
        bail!(
            "{what} '{table}' in {}: the table stayed locked by other sessions for {LOCK_ATTEMPTS} tries of {ms} ms (CUTOVER_LOCK_TIMEOUT_MS); {}. Let them finish (or end them with pg_terminate_backend) and run it again",
            self.shown,
            if blockers.is_empty() {
                "they were gone when asked".to_string()
            } else {
                format!("blocking: {}", blockers.join("; "))
            }
        )
    }

    /// The other sessions holding or waiting for a lock on `table` that
    /// conflicts with the SHARE ROW EXCLUSIVE lock trigger DDL takes — the
    /// sessions `pg_blocking_pids` would name while the install waited.
    fn lock_blockers(&self, table: &str) -> Result<Vec<String>> {
        let rows = self.client()?.query(
            "SELECT a.pid, coalesce(a.usename::text, ''), coalesce(a.application_name, ''),
                    coalesce(a.state, ''), string_agg(DISTINCT l.mode || CASE WHEN l.granted THEN '' ELSE ' (waiting)' END, ', '),
                    coalesce(to_char(a.xact_start AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), ''),
                    left(regexp_replace(coalesce(a.query, ''), '\\s+', ' ', 'g'), 100)
             FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
             WHERE l.locktype = 'relation' AND l.relation = to_regclass($1) AND l.pid <> pg_backend_pid()
               AND l.mode IN ('RowExclusiveLock', 'ShareUpdateExclusiveLock', 'ShareLock',
                              'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock')
             GROUP BY a.pid, a.usename, a.application_name, a.state, a.xact_start, a.query
             ORDER BY a.pid",
            &[&self.qualified(table)],
        )?;
        Ok(rows
            .iter()
            .map(|r| {
                let pid: i32 = r.get(0);
                let user: String = r.get(1);
                let app: String = r.get(2);
                let state: String = r.get(3);
                let modes: String = r.get(4);
                let since: String = r.get(5);
                let query: String = r.get(6);
                format!(
                    "pid {pid} (user {user}{}, {state}, holding {modes}, transaction since {since}, last query: {query})",
                    if app.is_empty() {
                        String::new()
                    } else {
                        format!(", application {app}")
                    }
                )
            })
            .collect())
    }

    /// Whether the fence's triggers are on `table`: then a write is refused
    /// and the proof only compiles.
    fn is_fenced(&self, table: &str) -> Result<bool> {
        let row = self.client()?.query_one(
            "SELECT count(*) FROM pg_trigger WHERE tgrelid = to_regclass($1) AND tgname LIKE '\\_cutover\\_fence%'",
            &[&self.qualified(table)],
        )?;
        Ok(row.get::<_, i64>(0) > 0)
    }

    /// Runs each statement the journal's functions run, over no row of
    /// the table: the image table, its column types and the sequence must
    /// take the table's rows.
    fn compile_journal(&self, img: i64, table: &str, columns: &[&str]) -> Result<()> {
        let q: Vec<String> = columns
            .iter()
            .map(|c| format!("t.{}", quote_ident(c)))
            .collect();
        let n = columns.len();
        let list = |p: &str| {
            (1..=n)
                .map(|i| format!("{p}{i}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let seq = quote_literal(&self.qualified("_cutover_journal_seq"))?;
        let head = format!(
            "INSERT INTO {} (seq, xid, op, ",
            self.qualified(&image_table(img))
        );
        let from = format!("FROM {} AS t WHERE false", self.qualified(table));
        let values = format!(
            "pg_catalog.nextval({seq}::pg_catalog.regclass), pg_catalog.pg_current_xact_id()"
        );
        let row = q.join(", ");
        for sql in [
            format!(
                "{head}{}) SELECT {values}, 'insert', {row} {from}",
                list("n")
            ),
            format!(
                "{head}{}, {}) SELECT {values}, 'update', {row}, {row} {from}",
                list("o"),
                list("n")
            ),
            format!(
                "{head}{}) SELECT {values}, 'delete', {row} {from}",
                list("o")
            ),
        ] {
            self.client()?.batch_execute(&sql)?;
        }
        Ok(())
    }

    /// The functions of the images of `table` other than `keep`, which no
    /// trigger calls once the table's triggers call `keep`'s.
    fn drop_other_functions(&self, table: &str, keep: Option<i64>) -> Result<()> {
        for t in self.journal_tables()? {
            if t.target_table != table || Some(t.img) == keep {
                continue;
            }
            for op in OPS {
                self.client()?.batch_execute(&format!(
                    "DROP FUNCTION IF EXISTS {}()",
                    self.qualified(&function_name(t.img, op))
                ))?;
            }
        }
        Ok(())
    }
}

impl Capture for Postgres {
    /// The image id for `name` with these columns: the existing one when
    /// the columns are the same, else a new one with its journal table,
    /// whose image columns take the table columns' types.
    fn image_for(&self, name: &str, table: &str, columns: &[&str]) -> Result<i64> {
        self.ensure_journal_control()?;
        if let Some(img) = self.find_image(name, table, columns)? {
            return Ok(img);
        }
        if columns.is_empty() || columns.len() > MAX_JOURNALED_COLUMNS {
            bail!(
                "table '{table}': {} columns to journal; PostgreSQL journals 1 to {MAX_JOURNALED_COLUMNS} (an image table holds two images of the row in at most 1,600 columns)",
                columns.len()
            );
        }
        let types = self.image_types(table, columns)?;
        let list = serde_json::to_string(columns)?;
        let img: i64 = self
            .client()?
            .query_one(
                "INSERT INTO _cutover_journal_tables (tbl, target_table, columns) VALUES ($1, $2, $3) RETURNING img",
                &[&name, &table, &list],
            )?
            .get(0);
        let images = ["o", "n"]
            .iter()
            .flat_map(|p| {
                types
                    .iter()
                    .enumerate()
                    .map(move |(i, t)| format!("{p}{} {t}", i + 1))
            })
            .collect::<Vec<_>>()
            .join(", ");
        self.client()?
            .batch_execute(&format!(
                "CREATE TABLE {} (seq bigint PRIMARY KEY, xid xid8 NOT NULL, op text NOT NULL, {images})",
                self.qualified(&image_table(img))
            ))
            .with_context(|| format!("creating the journal table of '{table}' in {}", self.shown))?;
        self.create_journal_view()?;
        Ok(img)
    }

    /// Installs (or replaces, when anything about them is stale) the
    /// journal's functions and triggers on one table, enabled ALWAYS, under
    /// a short `lock_timeout`. Returns how many triggers were stale.
    fn install_journal(&self, t: &Journaled<'_>) -> Result<usize> {
        let (name, table, columns) = (t.name, t.table, t.columns);
        self.refuse_unseen_writes(table)?;
        let img = self.image_for(name, table, columns)?;
        let stale = self.stale_of(img, table, columns)?;
        if stale.is_empty() {
            return Ok(0);
        }
        if stale.iter().any(|s| s.starts_with("(column")) {
            bail!(
                "table '{table}': {}; the journal's image columns were made for the old types. Name the spec's columns again (or remove the journal and install it anew) so a new image is made",
                stale.join(", ")
            );
        }
        let want = self.journal_trigger_sql(img, table, columns)?;
        self.with_lock_timeout(table, "installing the journal triggers on", || {
            self.client()?.batch_execute(&want.sql)?;
            self.drop_other_functions(table, Some(img))
        })?;
        Ok(stale.len())
    }

    /// Writes through each table's journal triggers inside a savepoint
    /// that is always rolled back (see `prove_writes`), one table at a
    /// time. An empty or fenced table is not written: the statements the
    /// functions run are run over no row.
    fn prove_journals(&self, tables: &[Journaled<'_>]) -> Result<(), Unproven> {
        for (i, t) in tables.iter().enumerate() {
            self.prove_journal(t)
                .map_err(|error| Unproven { table: i, error })?;
        }
        Ok(())
    }

    /// The journal triggers of one table that are missing, differ from the
    /// ones the spec needs now, or are not enabled ALWAYS (each with why),
    /// and image columns whose type changed.
    fn stale_journal_triggers(&self, t: &Journaled<'_>) -> Result<Vec<String>> {
        let (name, table, columns) = (t.name, t.table, t.columns);
        let Some(img) = self.find_image(name, table, columns)? else {
            let list = serde_json::to_string(columns)?;
            let present = self.journal_triggers(table)?;
            let mut out: Vec<String> = TRIGGER_NAMES
                .iter()
                .take(present)
                .map(|n| n.to_string())
                .collect();
            out.push(format!("(no journal image for columns {list})"));
            return Ok(out);
        };
        self.stale_of(img, table, columns)
    }

    /// Drops the journal's triggers on a table and their functions; the
    /// entries stay.
    fn remove_journal(&self, table: &str) -> Result<()> {
        if self.has_table(table)? {
            let family = self.family(table)?;
            self.with_lock_timeout(table, "removing the journal triggers from", || {
                for m in &family {
                    for n in TRIGGER_NAMES {
                        self.client()?.batch_execute(&format!(
                            "DROP TRIGGER IF EXISTS {} ON {}",
                            quote_ident(n),
                            m.sql
                        ))?;
                    }
                }
                Ok(())
            })?;
        }
        self.drop_other_functions(table, None)
    }

    /// The journal tables, which the fence guards like the journal itself.
    fn journal_image_tables(&self) -> Result<Vec<String>> {
        Ok(self
            .journal_tables()?
            .into_iter()
            .map(|t| image_table(t.img))
            .collect())
    }
}

impl Postgres {
    /// How many of a table's journal triggers exist.
    pub(super) fn journal_triggers(&self, table: &str) -> Result<usize> {
        let row = self.client()?.query_one(
            "SELECT count(*) FROM pg_trigger WHERE tgrelid = to_regclass($1) AND tgname = ANY ($2)",
            &[&self.qualified(table), &TRIGGER_NAMES.to_vec()],
        )?;
        Ok(row.get::<_, i64>(0) as usize)
    }

    /// Writes through one table's journal triggers inside a savepoint that
    /// is always rolled back ([`journal_proof::prove_writes`]), once the
    /// statements its triggers run compile; nothing on a fenced table,
    /// which refuses every write.
    fn prove_journal(&self, t: &Journaled<'_>) -> Result<()> {
        let Some(img) = self.find_image(t.name, t.table, t.columns)? else {
            bail!(
                "table '{}' has no journal image for these columns; install the journal first",
                t.table
            );
        };
        self.nested("cutover_prove", false, || {
            self.compile_journal(img, t.table, t.columns)?;
            if self.is_fenced(t.table)? {
                return Ok(());
            }
            journal_proof::prove_writes(self, t.name, img, t.table, t.columns, t.key_len)
        })
    }
}

impl ProofWrites for Postgres {
    /// The sequence's last value as this session can know it (0 when it
    /// has handed out none).
    fn last_seq(&self) -> Result<i64> {
        let row = self.client()?.query_one(
            "SELECT coalesce(last_value, 0) FROM pg_sequences WHERE schemaname = $1 AND sequencename = '_cutover_journal_seq'",
            &[&self.schema],
        )?;
        Ok(row.get(0))
    }

    fn entries_written_here(&self, img: i64, after: i64) -> Result<Vec<JournalEntry>> {
        crate::db::image_journal::written_here(self, img, after)
    }

    /// A row other rows refer to, or a key the table generates ALWAYS.
    fn cannot_write_back(&self, e: &anyhow::Error) -> bool {
        matches!(
            sql_state(e),
            Some(
                SqlState::FOREIGN_KEY_VIOLATION
                    | SqlState::RESTRICT_VIOLATION
                    | SqlState::GENERATED_ALWAYS
            )
        )
    }
}

impl Postgres {
    /// Refuses a table whose writes can land where no journal trigger
    /// fires: a rule acting instead of a write that sends it to a table
    /// outside the table's family (its inheritance children are journaled
    /// like the table, so a rule routing an insert into one of them is
    /// seen), or a member whose writes go the same way.
    fn refuse_unseen_writes(&self, table: &str) -> Result<()> {
        let family = self.family(table)?;
        let members: Vec<&str> = family.iter().map(|m| m.sql.as_str()).collect();
        let rows = self.client()?.query(
            "SELECT c.relname::text, r.rulename::text,
                    coalesce(string_agg(DISTINCT d.refobjid::regclass::text, ', ')
                      FILTER (WHERE d.refobjid <> ALL (
                        SELECT to_regclass(m)::oid FROM unnest($1::text[]) m)), '')
             FROM unnest($1::text[]) m
             JOIN pg_rewrite r ON r.ev_class = to_regclass(m)
             JOIN pg_class c ON c.oid = r.ev_class
             LEFT JOIN pg_depend d ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid
                  AND d.refclassid = 'pg_class'::regclass AND d.deptype = 'n'
             WHERE r.rulename <> '_RETURN' AND r.is_instead AND r.ev_type <> '1'
             GROUP BY 1, 2 ORDER BY 1, 2",
            &[&members],
        )?;
        let outside: Vec<String> = rows
            .iter()
            .filter(|r| !r.get::<_, String>(2).is_empty())
            .map(|r| {
                format!(
                    "{} on {} (writes {})",
                    r.get::<_, String>(1),
                    r.get::<_, String>(0),
                    r.get::<_, String>(2)
                )
            })
            .collect();
        if !outside.is_empty() {
            bail!(
                "table '{table}' has rules that act instead of a write and send it outside the table and the tables inheriting from it ({}): the write they replace never reaches the journal's triggers, so a rollback would lose it. Drop the rules on the target, route into tables inheriting from '{table}', or use triggers",
                outside.join("; ")
            );
        }
        Ok(())
    }
}
