//! The write fence on MySQL and MariaDB: `BEFORE INSERT/UPDATE/DELETE`
//! triggers that `SIGNAL SQLSTATE '45000'` on every fenced table and the
//! journal's, ordered before the application's own BEFORE triggers
//! (`PRECEDES`), the fence row guarded alike, and probes that prove it
//! from another connection.
//!
//! MySQL commits every `CREATE TRIGGER` at once (`transactional_ddl:
//! false`): each trigger stands as soon as it is made, and `fence on`
//! takes them off again when it cannot finish (`crate::fence::set`).
//! Waiting for the writers in flight is each `CREATE TRIGGER`'s own
//! exclusive metadata lock on its table: it waits for every transaction
//! that used the table (a writer's lock lasts until its commit) and, once
//! it stands, every later write is refused, so by the time the last
//! trigger stands no transaction that wrote a guarded table is open, and
//! the boundary read after it holds every write committed before the
//! fence. Each wait is bounded (`lock_wait_timeout`, [`lock_timeout_ms`])
//! and tried three times, so the application's statements queued behind
//! the lock are never held for long; when it gives up, the error names
//! the connections that held the table (from the processlist).
//!
//! Nothing refuses a schema change (MySQL has no event triggers): the
//! fingerprint (which covers the trigger definitions, `Catalogue::schema_of`)
//! and the copy of the record kept in the source find it.

use anyhow::{Result, bail};
use mysql::prelude::Queryable;
use sha2::{Digest, Sha256};

use super::client::{code, said};
use super::{MySql, quote_ident};
use crate::db::{Fence, Probe};

const FENCE_TRIGGER: &str = include_str!("../../../sql/mysql/fence_triggers.sql");
const FENCE_GUARD: &str = include_str!("../../../sql/mysql/fence_guard.sql");

/// The table of the fence row, which the guard protects.
const FENCE_TABLE: &str = "_cutover_fence";

/// The events a fence refuses, with the short name each trigger bears.
const EVENTS: [(&str, &str); 3] = [("INSERT", "ins"), ("UPDATE", "upd"), ("DELETE", "del")];

/// How many times a table's lock is waited for before giving up.
const LOCK_ATTEMPTS: u32 = 3;

/// The most characters `MESSAGE_TEXT` holds.
const MESSAGE_MAX: usize = 128;

/// The longest identifier MySQL takes, in characters.
const NAME_MAX: usize = 64;

/// The server's error for a metadata lock (or row lock) not had in time.
const LOCK_WAIT_TIMEOUT: u16 = 1205;

/// How long one wait for a table's metadata lock lasts, in milliseconds:
/// 2 s, or `CUTOVER_LOCK_TIMEOUT_MS` (rounded up to whole seconds, the
/// unit of `lock_wait_timeout`).
pub fn lock_timeout_ms() -> u64 {
    std::env::var("CUTOVER_LOCK_TIMEOUT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000)
}

/// The name of the fence's trigger of one event on a table. Trigger names
/// are per database in MySQL, so each carries its table's name; one past
/// 64 characters is cut and made unique by a digest of the whole name.
pub fn trigger_name(short: &str, table: &str) -> String {
    let full = format!("_cutover_fence_{short}_{table}");
    if full.chars().count() <= NAME_MAX {
        return full;
    }
    let digest = hex::encode(Sha256::digest(table.as_bytes()));
    let head: String = full.chars().take(NAME_MAX - 17).collect();
    format!("{head}_{}", &digest[..16])
}

/// A string literal as the session parses it (`NO_BACKSLASH_ESCAPES`:
/// only a quote is doubled), cut to what `MESSAGE_TEXT` holds.
fn message_literal(message: &str) -> String {
    let cut: String = message.chars().take(MESSAGE_MAX).collect();
    format!("'{}'", cut.replace('\'', "''"))
}

/// A trigger body with the literal after `MESSAGE_TEXT = ` made `?`, so
/// that a body is compared with its template whatever its message.
fn without_message(body: &str) -> Option<String> {
    let marker = "MESSAGE_TEXT = '";
    let start = body.find(marker)? + marker.len();
    let rest = &body[start..];
    let mut end = None;
    let mut chars = rest.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c == '\'' {
            if chars.peek().map(|(_, n)| *n) == Some('\'') {
                chars.next();
                continue;
            }
            end = Some(i);
            break;
        }
    }
    let end = end?;
    Some(format!("{}?{}", &body[..start - 1], &rest[end + 1..]))
}

/// The body (what follows `FOR EACH ROW` and its order) of a template.
fn template_body(template: &str) -> String {
    let sql = strip_comments(template);
    let at = sql.find("{{order}}").map_or(0, |i| i + "{{order}}".len());
    sql[at..].trim().to_string()
}

fn strip_comments(template: &str) -> String {
    template
        .lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n")
}

impl Fence for MySql {
    /// Bounds this session's waits for a metadata lock
    /// ([`lock_timeout_ms`]). The wait itself is each `CREATE TRIGGER`'s
    /// exclusive metadata lock ([`Fence::install_fence_triggers`]), which
    /// waits for every transaction that used the table; `LOCK TABLES …
    /// WRITE` is not used: it would need every table the fence then reads
    /// (the journal, the control tables) in one statement, the `LOCK
    /// TABLES` privilege, and would hold readers out for the whole
    /// install, while a trigger keeps every later writer out by itself.
    ///
    /// First, one `fence on` at a time: the named lock
    /// [`MySql::fence_lock`], held by this session until it ends, so that a
    /// second `fence on` reads the fence row only once the first has
    /// written it (or given up and taken its triggers off), and never takes
    /// off, when it fails, a fence the first one set.
    fn drain_writers(&self, _tables: &[&str]) -> Result<()> {
        self.take_fence_lock()?;
        self.bound_lock_waits()
    }

    /// The server's counts of rows written (`SHOW GLOBAL STATUS`:
    /// `Handler_write`, `Handler_update`, `Handler_delete`, which a
    /// replica's row events move too, and MySQL 8's `Innodb_rows_*`;
    /// MariaDB 10.11 has none of the latter) and of the statements that
    /// write a table or change a schema (`Com_insert` … `Com_load`,
    /// `Com_truncate`, `Com_alter_table`, `Com_rename_table`,
    /// `Com_create_trigger`, `Com_drop_trigger`, …), with the database's
    /// tables (name, engine, creation time) and triggers (name, table,
    /// order, creation time to the centisecond, body), hashed. Any write,
    /// cascade, truncate or schema change by any session moves one of
    /// them; so do writes to any other database of the server (replay's
    /// own into a source there among them): then replay reads the
    /// fingerprint again, which is slower, never wrong.
    fn change_token(&self) -> Result<i64> {
        let mut conn = self.conn()?;
        let status: Vec<(String, String)> = conn
            .query(
                "SHOW GLOBAL STATUS WHERE Variable_name IN (
                   'Handler_write', 'Handler_update', 'Handler_delete',
                   'Innodb_rows_inserted', 'Innodb_rows_updated', 'Innodb_rows_deleted',
                   'Com_insert', 'Com_insert_select', 'Com_update', 'Com_update_multi',
                   'Com_delete', 'Com_delete_multi', 'Com_replace', 'Com_replace_select',
                   'Com_load', 'Com_truncate', 'Com_alter_table', 'Com_rename_table',
                   'Com_drop_table', 'Com_create_table', 'Com_create_index', 'Com_drop_index',
                   'Com_create_trigger', 'Com_drop_trigger', 'Com_call_procedure',
                   'Com_xa_commit', 'Com_alter_tablespace', 'Com_drop_db', 'Com_create_db')",
            )
            .map_err(|e| self.failed("reading the server's write counters", &e))?;
        let schema: Vec<(String, String)> = conn
            .exec(
                "SELECT CONCAT('t:', TABLE_NAME), CONCAT_WS(':', ENGINE, CREATE_TIME, TABLE_TYPE)
                   FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?
                 UNION ALL
                 SELECT CONCAT('g:', TRIGGER_NAME),
                        CONCAT_WS(':', EVENT_OBJECT_TABLE, ACTION_TIMING, EVENT_MANIPULATION,
                                  ACTION_ORDER, CREATED, MD5(ACTION_STATEMENT), DEFINER)
                   FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = ?",
                (self.database(), self.database()),
            )
            .map_err(|e| self.failed("reading the database's tables and triggers", &e))?;
        let mut parts: Vec<(String, String)> = status.into_iter().chain(schema).collect();
        parts.sort();
        let mut h = Sha256::new();
        for (k, v) in &parts {
            for s in [k, v] {
                h.update((s.len() as u64).to_le_bytes());
                h.update(s.as_bytes());
            }
        }
        let d = h.finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&d[..8]);
        Ok(i64::from_be_bytes(first))
    }

    /// Three triggers, each made once the transactions using the table
    /// have ended ([`Fence::drain_writers`]). Whatever already goes by
    /// their names is dropped first: a trigger planted under a fence
    /// trigger's name must not pass for the fence.
    fn install_fence_triggers(&self, table: &str, message: &str) -> Result<()> {
        self.fence_from(table, message, false)
    }

    /// Guards the fence row (`_cutover_fence`): once written it cannot be
    /// changed, deleted, replaced or joined by a second row. No trigger
    /// can refuse a schema change on MySQL: the report says what finds one.
    fn install_fence_guard(&self, row_message: &str, _ddl_message: &str) -> Result<Option<String>> {
        self.fence_from(FENCE_TABLE, row_message, true)?;
        Ok(Some(
            "nothing refuses a schema change to cutover's tables on MySQL, which has no event triggers (ALTER TABLE, DROP TRIGGER, TRUNCATE and RENAME TABLE go through): the fingerprint, which covers every table's and trigger's definition, and the copy of the fence record kept in the source find what they change".to_string(),
        ))
    }

    /// The fence's triggers off each table, the guard's off the fence
    /// table, then the row; each `DROP TRIGGER` commits at once, so the
    /// row goes last: a run stopped half-way leaves the row, which a rerun
    /// of `fence off` finds and lifts. The fence's triggers call no
    /// function: `keep_functions` has nothing to keep.
    fn remove_fence(&self, tables: &[&str], _keep_functions: Option<&[String]>) -> Result<()> {
        for t in tables.iter().copied().chain([FENCE_TABLE]) {
            self.remove_fence_triggers(t)?;
        }
        if self.has_table(FENCE_TABLE)? {
            self.execute(
                &format!("DELETE FROM {}", self.qualified(FENCE_TABLE)),
                Vec::new(),
            )
            .map_err(|e| e.context(format!("deleting the fence row in {}", self.shown())))?;
        }
        Ok(())
    }

    /// Tries an insert (a copy of a row the table holds, or a row of
    /// defaults), an update of one row to itself and a delete of one row,
    /// each inside a transaction that is always rolled back. A BEFORE
    /// trigger fires before a key or a foreign key is checked, so the
    /// fence refuses first; an update or delete on an empty table writes
    /// nothing and proves nothing (`Ok(0)`).
    fn probe_writes(&self, table: &str) -> Result<Vec<Probe>> {
        let t = self.qualified(table);
        let columns = self.columns(table)?;
        let writable: Vec<String> = columns
            .iter()
            .filter(|c| c.generated.is_none())
            .map(|c| quote_ident(&c.name))
            .collect();
        let has_row = !self
            .query_text(&format!("SELECT 1 FROM {t} LIMIT 1"), Vec::new())?
            .is_empty();
        let insert = if has_row && !writable.is_empty() {
            let cols = writable.join(", ");
            format!("INSERT INTO {t} ({cols}) SELECT {cols} FROM {t} LIMIT 1")
        } else {
            format!("INSERT INTO {t} () VALUES ()")
        };
        let set = match writable.first() {
            Some(c) => format!("{c} = {c}"),
            None => "`` = ``".to_string(),
        };
        let probes = [
            ("insert", insert),
            ("update", format!("UPDATE {t} SET {set} LIMIT 1")),
            ("delete", format!("DELETE FROM {t} LIMIT 1")),
        ];
        let mut out = Vec::new();
        let mut conn = self.conn()?;
        for (what, sql) in probes {
            conn.query_drop("START TRANSACTION READ WRITE")
                .map_err(|e| self.failed("starting a probe's transaction", &e))?;
            let r = conn.query_drop(&sql).map(|()| conn.affected_rows());
            let _ = conn.query_drop("ROLLBACK");
            out.push(Probe {
                write: what,
                outcome: match r {
                    Ok(n) => Ok(n as usize),
                    Err(mysql::Error::MySqlError(m)) => Err(m.message),
                    Err(e) => Err(said(&e)),
                },
            });
        }
        Ok(out)
    }
}

impl MySql {
    /// How many of the three fence triggers of a table refuse its writes:
    /// a trigger counts only if it bears the fence's name for the event,
    /// is BEFORE that event on this table, fires first among its BEFORE
    /// triggers, and its body is the template's (a plain `SIGNAL` of
    /// SQLSTATE 45000, or the guard's on the fence table) whatever its
    /// message. A trigger rewritten, moved behind another or made on
    /// another event does not count.
    pub(super) fn fence_triggers(&self, table: &str) -> Result<usize> {
        let triggers = self.triggers(table)?;
        let mut n = 0;
        for (event, short) in EVENTS {
            let name = trigger_name(short, table);
            let template = if table == FENCE_TABLE && event == "INSERT" {
                FENCE_GUARD
            } else {
                FENCE_TRIGGER
            };
            let want = template_body(template)
                .replace("{{table}}", &self.qualified(table))
                .replace("{{message}}", "?");
            let Some(t) = triggers.iter().find(|t| t.name == name) else {
                continue;
            };
            let first = !triggers
                .iter()
                .any(|o| o.timing == "BEFORE" && o.event == event && o.order < t.order);
            if t.timing == "BEFORE"
                && t.event == event
                && first
                && without_message(&t.statement).is_some_and(|b| b.trim() == want)
            {
                n += 1;
            }
        }
        Ok(n)
    }

    /// Drops the fence's triggers (or the guard's) of a table; nothing for
    /// a table that has none. Names are per database: none of another
    /// table can bear them.
    pub(super) fn remove_fence_triggers(&self, table: &str) -> Result<()> {
        self.bound_lock_waits()?;
        for (_, short) in EVENTS {
            let sql = format!(
                "DROP TRIGGER IF EXISTS {}.{}",
                quote_ident(self.database()),
                quote_ident(&trigger_name(short, table))
            );
            self.under_lock(&sql, table, "removing the fence from")?;
        }
        Ok(())
    }

    /// The three triggers of `table`, from the fence's template (or, for
    /// the fence row, the guard's insert), each first among the table's
    /// BEFORE triggers of its event.
    fn fence_from(&self, table: &str, message: &str, guard: bool) -> Result<()> {
        self.remove_fence_triggers(table)?;
        let qualified = self.qualified(table);
        for (event, short) in EVENTS {
            let template = if guard && event == "INSERT" {
                FENCE_GUARD
            } else {
                FENCE_TRIGGER
            };
            // The application's first BEFORE trigger of the event, which
            // the fence's goes before.
            let first = self
                .triggers(table)?
                .into_iter()
                .filter(|t| t.timing == "BEFORE" && t.event == event)
                .min_by_key(|t| t.order);
            let order = first.map_or(String::new(), |t| {
                format!("PRECEDES {}", quote_ident(&t.name))
            });
            let sql = strip_comments(template)
                .replace(
                    "{{name}}",
                    &format!(
                        "{}.{}",
                        quote_ident(self.database()),
                        quote_ident(&trigger_name(short, table))
                    ),
                )
                .replace("{{event}}", event)
                .replace("{{table}}", &qualified)
                .replace("{{order}}", &order)
                .replace("{{message}}", &message_literal(message));
            self.under_lock(&sql, table, "installing fence triggers on")?;
        }
        Ok(())
    }

    /// The name of the lock one `fence on` holds on this database
    /// (`cutover-fence:` and the database's name, or its digest when that
    /// is longer than a lock's name may be: 64 characters).
    pub fn fence_lock(&self) -> String {
        let name = format!("cutover-fence:{}", self.database());
        if name.chars().count() <= NAME_MAX {
            return name;
        }
        let digest = hex::encode(Sha256::digest(self.database().as_bytes()));
        format!("cutover-fence:{}", &digest[..48])
    }

    /// Takes [`MySql::fence_lock`] for this session, waiting at most
    /// `CUTOVER_BUSY_TIMEOUT_MS` (10 s) for another `fence on` to end.
    fn take_fence_lock(&self) -> Result<()> {
        let ms = std::env::var("CUTOVER_BUSY_TIMEOUT_MS")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(10_000);
        let name = self.fence_lock();
        let got: Option<Option<i64>> = self
            .conn()?
            .exec_first("SELECT GET_LOCK(?, ?)", (name.as_str(), ms as f64 / 1000.0))
            .map_err(|e| self.failed("taking the fence's lock on the database", &e))?;
        if got.flatten() == Some(1) {
            return Ok(());
        }
        let holder: Option<Option<i64>> = self
            .conn()?
            .exec_first("SELECT IS_USED_LOCK(?)", (name.as_str(),))
            .map_err(|e| self.failed("reading who holds the fence's lock", &e))?;
        let holder = holder
            .flatten()
            .map_or("a session that just ended".to_string(), |id| {
                format!("connection {id}")
            });
        bail!(
            "{}: another `cutover fence on` ({holder}, holding lock '{name}') is still installing the fence after {ms} ms (CUTOVER_BUSY_TIMEOUT_MS); let it finish, then run `cutover fence status`",
            self.shown()
        )
    }

    /// `SET SESSION lock_wait_timeout`, in whole seconds, at least one.
    fn bound_lock_waits(&self) -> Result<()> {
        let seconds = lock_timeout_ms().div_ceil(1000).max(1);
        self.execute(
            &format!("SET SESSION lock_wait_timeout = {seconds}"),
            Vec::new(),
        )
        .map(drop)
    }

    /// Runs a schema change of `table` that waits for its metadata lock:
    /// tried [`LOCK_ATTEMPTS`] times; when the lock cannot be had, the
    /// error names the connections that may hold it.
    fn under_lock(&self, sql: &str, table: &str, what: &str) -> Result<()> {
        let mut attempt = 1;
        loop {
            let r = self.conn()?.query_drop(sql);
            match r {
                Ok(()) => return Ok(()),
                Err(e) if code(&e) == Some(LOCK_WAIT_TIMEOUT) && attempt < LOCK_ATTEMPTS => {
                    attempt += 1;
                }
                Err(e) if code(&e) == Some(LOCK_WAIT_TIMEOUT) => {
                    let holders = self.lock_holders(table);
                    bail!(
                        "{what} '{table}' in {}: its metadata lock could not be had in {LOCK_ATTEMPTS} waits of {} ms (CUTOVER_LOCK_TIMEOUT_MS): {}. Let those transactions end (or KILL them), then run again",
                        self.shown(),
                        lock_timeout_ms(),
                        holders
                    );
                }
                Err(e) => return Err(self.failed(&format!("{what} '{table}'"), &e)),
            }
        }
    }

    /// The connections that may hold a table's metadata lock, in words:
    /// those MariaDB's `METADATA_LOCK_INFO` (a plugin) or MySQL's
    /// `performance_schema.metadata_locks` name when they name any, else every other
    /// connection in a transaction (`INNODB_TRX`) or waiting for a
    /// metadata lock, from the processlist (a user without `PROCESS` sees
    /// only its own).
    fn lock_holders(&self, table: &str) -> String {
        let db = self.database().to_string();
        let precise = [
            "SELECT DISTINCT THREAD_ID FROM information_schema.METADATA_LOCK_INFO
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND THREAD_ID <> CONNECTION_ID()",
            "SELECT DISTINCT t.PROCESSLIST_ID FROM performance_schema.metadata_locks m
               JOIN performance_schema.threads t ON t.THREAD_ID = m.OWNER_THREAD_ID
             WHERE m.OBJECT_SCHEMA = ? AND m.OBJECT_NAME = ? AND m.LOCK_STATUS = 'GRANTED'
               AND t.PROCESSLIST_ID <> CONNECTION_ID()",
        ];
        let mut ids: Option<Vec<String>> = None;
        for q in precise {
            // An empty answer says nothing: MariaDB's performance schema
            // is off by default, and its table then lists no lock.
            if let Ok(rows) = self.query_text(q, vec![db.clone().into(), table.into()])
                && !rows.is_empty()
            {
                ids = Some(rows.into_iter().filter_map(|r| r[0].clone()).collect());
                break;
            }
        }
        let listed = |with_trx: bool| -> Result<Vec<Vec<Option<String>>>> {
            let (join, cond) = if with_trx {
                (
                    "LEFT JOIN information_schema.INNODB_TRX x ON x.trx_mysql_thread_id = p.ID",
                    "x.trx_id IS NOT NULL OR p.STATE LIKE '%metadata lock%'",
                )
            } else {
                ("", "p.STATE LIKE '%metadata lock%' OR p.COMMAND = 'Sleep'")
            };
            let started = if with_trx {
                "CAST(x.trx_started AS CHAR)"
            } else {
                "NULL"
            };
            self.query_text(
                &format!(
                    "SELECT CAST(p.ID AS CHAR), p.USER, p.HOST, p.DB, p.COMMAND, CAST(p.TIME AS CHAR),
                            p.STATE, {started}, LEFT(p.INFO, 120)
                     FROM information_schema.PROCESSLIST p {join}
                     WHERE p.ID <> CONNECTION_ID() AND ({cond})
                     ORDER BY p.ID"
                ),
                Vec::new(),
            )
        };
        let rows = listed(true).or_else(|_| listed(false)).unwrap_or_default();
        let field = |r: &[Option<String>], i: usize| r[i].clone().unwrap_or_else(|| "-".into());
        let named: Vec<String> = rows
            .iter()
            .filter(|r| {
                ids.as_ref()
                    .is_none_or(|ids| ids.contains(&field(r, 0)))
            })
            .map(|r| {
                format!(
                    "connection {} (user '{}'@'{}', database {}, {} for {} s, state '{}', transaction started {}, statement '{}')",
                    field(r, 0),
                    field(r, 1),
                    field(r, 2),
                    field(r, 3),
                    field(r, 4),
                    field(r, 5),
                    field(r, 6),
                    field(r, 7),
                    field(r, 8)
                )
            })
            .collect();
        if named.is_empty() {
            "no connection this user may see holds it (SHOW PROCESSLIST as a user with PROCESS shows them all)".to_string()
        } else {
            format!("held by {}", named.join("; "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_and_stay_apart() {
        assert_eq!(trigger_name("ins", "orders"), "_cutover_fence_ins_orders");
        let a = trigger_name("ins", &"x".repeat(60));
        let b = trigger_name("ins", &format!("{}y", "x".repeat(59)));
        assert_eq!(a.chars().count(), NAME_MAX);
        assert_ne!(a, b);
    }

    #[test]
    fn a_body_is_compared_whatever_its_message() {
        let body = "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'it''s fenced'";
        assert_eq!(
            without_message(body).as_deref(),
            Some("SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = ?")
        );
        assert_eq!(
            template_body(FENCE_TRIGGER).replace("{{message}}", "?"),
            without_message(body).unwrap()
        );
        assert_eq!(message_literal("a'b"), "'a''b'");
        assert_eq!(message_literal(&"m".repeat(200)).len(), MESSAGE_MAX + 2);
    }
}
