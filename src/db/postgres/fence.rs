//! The write fence on PostgreSQL: BEFORE triggers that refuse every insert,
//! update, delete and truncate from any session (fired ALWAYS, so not even
//! `session_replication_role = replica` skips them), the guarded fence row,
//! and probes that prove it from another connection.
//!
//! Installing waits for the writers already in flight: `LOCK TABLE … IN
//! SHARE ROW EXCLUSIVE MODE` lets readers through but waits for every open
//! transaction that wrote the table, so their commits land before the
//! fence. Each wait is bounded (`lock_timeout`, [`lock_timeout_ms`]) and
//! retried a few times, so queued writers of the application are never
//! stalled for long; when the table cannot be had, the error names the
//! sessions holding it.

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};
use tokio_postgres::error::SqlState;

use super::{Postgres, quote_ident, quote_literal};
use crate::db::{Fence, Probe};

const FENCE_TRIGGERS: &str = include_str!("../../../sql/postgres/fence_triggers.sql");
const FENCE_GUARD: &str = include_str!("../../../sql/postgres/fence_guard.sql");
const DDL_GUARD: &str = include_str!("../../../sql/postgres/fence_ddl_guard.sql");

/// The table of the fence row, which the guard protects.
const FENCE_TABLE: &str = "_cutover_fence";

/// The fence's triggers on a table (trigger names are per table in
/// PostgreSQL) and the `pg_trigger.tgtype` each must have: BEFORE (2), ROW
/// (1) and its event (INSERT 4, DELETE 8, UPDATE 16; TRUNCATE 32, per
/// statement).
const TRIGGERS: [(&str, i16); 4] = [
    ("_cutover_fence_insert", 2 | 1 | 4),
    ("_cutover_fence_update", 2 | 1 | 16),
    ("_cutover_fence_delete", 2 | 1 | 8),
    ("_cutover_fence_truncate", 2 | 32),
];

/// How many times a lock is waited for before giving up.
const LOCK_ATTEMPTS: u32 = 3;

/// How long one wait for a table's lock lasts, in milliseconds: 2 s, or
/// `CUTOVER_LOCK_TIMEOUT_MS`.
pub fn lock_timeout_ms() -> u64 {
    std::env::var("CUTOVER_LOCK_TIMEOUT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000)
}

/// A lock mode and the modes others hold that it waits for.
struct LockMode {
    name: &'static str,
    conflicts: &'static [&'static str],
}

/// What installing the fence takes: writers wait, readers do not.
const SHARE_ROW_EXCLUSIVE: LockMode = LockMode {
    name: "SHARE ROW EXCLUSIVE",
    conflicts: &[
        "RowExclusiveLock",
        "ShareUpdateExclusiveLock",
        "ShareLock",
        "ShareRowExclusiveLock",
        "ExclusiveLock",
        "AccessExclusiveLock",
    ],
};

/// What dropping a trigger takes: everyone waits.
const ACCESS_EXCLUSIVE: LockMode = LockMode {
    name: "ACCESS EXCLUSIVE",
    conflicts: &[
        "AccessShareLock",
        "RowShareLock",
        "RowExclusiveLock",
        "ShareUpdateExclusiveLock",
        "ShareLock",
        "ShareRowExclusiveLock",
        "ExclusiveLock",
        "AccessExclusiveLock",
    ],
};

/// The refusal of a statement: the server's message when it has one.
fn refusal(e: &tokio_postgres::Error) -> String {
    e.as_db_error()
        .map_or_else(|| e.to_string(), |d| d.message().to_string())
}

impl Fence for Postgres {
    /// Locks every table the fence will guard, before the transaction's
    /// first query: a REPEATABLE READ transaction takes its snapshot at its
    /// first query, so reading only after the locks is what puts every
    /// write committed before the fence inside the boundary.
    /// The schema's catalogue, hashed: every table (and its storage), every
    /// trigger with its enabled state, every function and rule, each with
    /// the transaction that last wrote its catalogue row. While the fence's
    /// ALWAYS triggers stand no fenced table can be written, and nothing
    /// can take them down or route around them (disable, drop, replace the
    /// function, add a rule, truncate) without changing one of these rows.
    /// Commits elsewhere on the server — the replay's own, into a source in
    /// another schema — leave it still, so replay does not re-read the
    /// fingerprint for them.
    fn change_token(&self) -> Result<i64> {
        let text: String = self
            .client()?
            .query_one(
                "WITH ns AS (
                   SELECT to_regnamespace($1)::oid AS oid
                   UNION
                   -- Where the schema's tables have children (inheritance
                   -- or partitions) in another schema.
                   SELECT c.relnamespace FROM pg_inherits i
                     JOIN pg_class p ON p.oid = i.inhparent JOIN pg_class c ON c.oid = i.inhrelid
                    WHERE p.relnamespace = to_regnamespace($1)
                 )
                 SELECT coalesce(string_agg(x, ',' ORDER BY x), '') FROM (
                   SELECT 'c' || c.oid || ':' || c.xmin::text || ':' || c.relfilenode FROM pg_class c
                    WHERE c.relnamespace IN (SELECT oid FROM ns)
                   UNION ALL
                   SELECT 't' || t.oid || ':' || t.xmin::text || ':' || t.tgenabled::text FROM pg_trigger t
                     JOIN pg_class c ON c.oid = t.tgrelid WHERE c.relnamespace IN (SELECT oid FROM ns)
                   UNION ALL
                   SELECT 'p' || p.oid || ':' || p.xmin::text FROM pg_proc p
                    WHERE p.pronamespace = to_regnamespace($1)
                   UNION ALL
                   SELECT 'r' || r.oid || ':' || r.xmin::text FROM pg_rewrite r
                     JOIN pg_class c ON c.oid = r.ev_class WHERE c.relnamespace IN (SELECT oid FROM ns)
                 ) s(x)",
                &[&quote_ident(&self.schema)],
            )?
            .get(0);
        let h = Sha256::digest(text.as_bytes());
        let mut first = [0u8; 8];
        first.copy_from_slice(&h[..8]);
        Ok(i64::from_be_bytes(first))
    }

    fn drain_writers(&self, tables: &[&str]) -> Result<()> {
        for t in tables {
            self.lock_table(t, &SHARE_ROW_EXCLUSIVE)?;
        }
        Ok(())
    }

    /// Installs the fence triggers on one table, inside the caller's write
    /// transaction, once the writers in flight have finished. Whatever
    /// already goes by their names is replaced: a trigger planted under a
    /// fence trigger's name must not pass for the fence.
    /// A table's inheritance children are fenced alike: a write routed
    /// into one, or made to one directly, fires its triggers, not the
    /// table's.
    fn install_fence_triggers(&self, table: &str, message: &str) -> Result<()> {
        self.fence_from(FENCE_TRIGGERS, table, message)?;
        for m in self.family(table)?.iter().skip(1) {
            let sql = self
                .in_schema(FENCE_TRIGGERS)
                .replace("{{table}}", &m.sql)
                .replace("{{message}}", &quote_literal(message)?);
            self.client()?.batch_execute(&sql).with_context(|| {
                format!(
                    "installing fence triggers on '{}' (inheriting from '{table}') in {}",
                    m.shown, self.shown
                )
            })?;
        }
        Ok(())
    }

    /// Guards the fence row (`_cutover_fence`): once written it cannot be
    /// changed, deleted, truncated or joined by a second row.
    /// And the schema guard ([`Postgres::install_ddl_guard`]).
    fn install_fence_guard(&self, row_message: &str, ddl_message: &str) -> Result<Option<String>> {
        self.fence_from(FENCE_GUARD, FENCE_TABLE, row_message)?;
        self.install_ddl_guard(ddl_message)
    }

    fn remove_fence(&self, tables: &[&str], keep_functions: Option<&[String]>) -> Result<()> {
        self.remove_ddl_guard()?;
        for t in tables.iter().copied().chain([FENCE_TABLE]) {
            self.remove_fence_triggers(t)?;
        }
        if self.has_table(FENCE_TABLE)? {
            self.client()?
                .batch_execute(&self.in_schema("DELETE FROM {{schema}}._cutover_fence"))
                .with_context(|| format!("deleting the fence row in {}", self.shown))?;
        }
        if let Some(keep) = keep_functions {
            self.drop_fence_functions(keep)?;
        }
        Ok(())
    }

    /// Tries an insert, an update, a delete and a truncate on `table`
    /// through this connection, each inside a transaction that is always
    /// rolled back: `(statement, Ok(rows written) | Err(refusal))`. An
    /// update or delete on an empty table writes nothing and proves nothing
    /// (`Ok(0)`); a truncate that goes through counts as one write whatever
    /// the table held. The truncate cascades, so that a table other tables
    /// refer to reaches its trigger rather than the foreign key's refusal;
    /// its lock waits at most [`lock_timeout_ms`] for readers.
    fn probe_writes(&self, table: &str) -> Result<Vec<Probe>> {
        let t = self.qualified(table);
        let column = self.client()?.query_opt(
            "SELECT attname::text FROM pg_attribute
             WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped
               AND attgenerated = '' AND attidentity <> 'a'
             ORDER BY attnum LIMIT 1",
            &[&t],
        )?;
        let set = match column {
            Some(r) => {
                let c = quote_ident(&r.get::<_, String>(0));
                format!("{c} = {c}")
            }
            None => match self.columns_of(table)?.first() {
                Some(c) => format!("{} = DEFAULT", quote_ident(&c.name)),
                None => "\"\" = DEFAULT".to_string(),
            },
        };
        let one = format!("ctid = (SELECT ctid FROM {t} LIMIT 1)");
        // The insert copies a row the table holds, so that it fits a
        // partition of a partitioned table (a row of defaults fits none, and
        // is refused before any trigger runs); an empty table gets defaults.
        let writable: Vec<String> = self
            .client()?
            .query(
                "SELECT quote_ident(attname) FROM pg_attribute
                 WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped
                   AND attgenerated = '' AND attidentity <> 'a'
                 ORDER BY attnum",
                &[&t],
            )?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let has_row = self
            .client()?
            .query_opt(format!("SELECT 1 FROM {t} LIMIT 1").as_str(), &[])?
            .is_some();
        let insert = if has_row && !writable.is_empty() {
            let cols = writable.join(", ");
            format!("INSERT INTO {t} ({cols}) SELECT {cols} FROM {t} LIMIT 1")
        } else {
            format!("INSERT INTO {t} DEFAULT VALUES")
        };
        let probes = [
            ("insert", insert),
            ("update", format!("UPDATE {t} SET {set} WHERE {one}")),
            ("delete", format!("DELETE FROM {t} WHERE {one}")),
            ("truncate", format!("TRUNCATE {t} CASCADE")),
        ];
        let mut out = Vec::new();
        let mut c = self.client()?;
        for (what, sql) in probes {
            c.batch_execute(&format!(
                "BEGIN; SET LOCAL lock_timeout = {}",
                lock_timeout_ms()
            ))?;
            let r = c.execute(sql.as_str(), &[]);
            let _ = c.batch_execute("ROLLBACK");
            out.push(Probe {
                write: what,
                outcome: match r {
                    Ok(_) if what == "truncate" => Ok(1),
                    Ok(n) => Ok(n as usize),
                    Err(e) => Err(refusal(&e)),
                },
            });
        }
        Ok(out)
    }

    fn fence_functions(&self) -> Result<Vec<String>> {
        Ok(self
            .client()?
            .query(
                "SELECT proname::text FROM pg_proc
                 WHERE pronamespace = to_regnamespace($1) AND proname = ANY ($2)",
                &[&quote_ident(&self.schema), &FENCE_FUNCTIONS.to_vec()],
            )?
            .iter()
            .map(|r| r.get(0))
            .collect())
    }
}

/// The functions the fence's templates create (the DDL guard's goes with
/// the guard).
const FENCE_FUNCTIONS: [&str; 2] = ["_cutover_fence_refuse", "_cutover_fence_guard"];

impl Postgres {
    /// How many of the three writes (insert, update, delete) a table's
    /// fence refuses, the number SQLite's three triggers give: a trigger
    /// counts only if it is the fence's own (its event, no condition, the
    /// fence's function with the body cutover wrote) and enabled ALWAYS; a
    /// delete is fenced only when TRUNCATE is too. A trigger disabled by
    /// `ALTER TABLE … DISABLE TRIGGER`, or one that fires only in one
    /// replication role, does not count.
    pub(super) fn fence_triggers(&self, table: &str) -> Result<usize> {
        let (template, function) = if table == FENCE_TABLE {
            (FENCE_GUARD, "_cutover_fence_guard")
        } else {
            (FENCE_TRIGGERS, "_cutover_fence_refuse")
        };
        let body = self.function_body(template, table)?;
        let mut fewest = TRIGGERS.len() - 1;
        for m in self.family(table)? {
            fewest = fewest.min(self.fence_triggers_on(&m.sql, function, &body)?);
        }
        Ok(fewest)
    }

    /// Drops the fence's triggers (or the guard's) from a table; nothing
    /// for a table that is not there.
    pub(super) fn remove_fence_triggers(&self, table: &str) -> Result<()> {
        if !self.has_table(table)? {
            return Ok(());
        }
        self.lock_table(table, &ACCESS_EXCLUSIVE)?;
        let drops: String = self
            .family(table)?
            .iter()
            .flat_map(|m| {
                TRIGGERS.iter().map(move |(n, _)| {
                    format!("DROP TRIGGER IF EXISTS {} ON {};", quote_ident(n), m.sql)
                })
            })
            .collect();
        self.client()?
            .batch_execute(&drops)
            .with_context(|| format!("removing the fence from '{table}' in {}", self.shown))
    }

    /// Two event triggers (`ddl_command_end`, `sql_drop`) that refuse any
    /// schema change to cutover's tables in this schema while the fence
    /// stands (`sql/postgres/fence_ddl_guard.sql`). Only a superuser may
    /// create an event trigger: for another role, the report says so.
    fn install_ddl_guard(&self, message: &str) -> Result<Option<String>> {
        let (superuser, role): (bool, String) = {
            let r = self.client()?.query_one(
                "SELECT rolsuper, rolname::text FROM pg_roles WHERE rolname = current_user",
                &[],
            )?;
            (r.get(0), r.get(1))
        };
        if !superuser {
            return Ok(Some(format!(
                "no event trigger refuses schema changes to cutover's tables: role {role} is not a superuser, and only a superuser can create one (the fingerprint and the copy of the fence record in the source still find a rewritten record)"
            )));
        }
        let (ddl, drop, function) = self.ddl_guard_names()?;
        let sql = DDL_GUARD
            .replace("{{function}}", &function)
            .replace("{{ddl}}", &quote_ident(&ddl))
            .replace("{{drop}}", &quote_ident(&drop))
            .replace("{{schema_literal}}", &quote_literal(&self.schema)?)
            .replace(
                "{{schema_reg}}",
                &quote_literal(&quote_ident(&self.schema))?,
            )
            .replace("{{message}}", &quote_literal(message)?);
        self.client()?
            .batch_execute(&sql)
            .with_context(|| format!("installing the fence's event triggers in {}", self.shown))?;
        Ok(Some(format!(
            "event triggers {ddl} and {drop} refuse schema changes to cutover's tables until `cutover fence off`"
        )))
    }

    fn remove_ddl_guard(&self) -> Result<()> {
        let (ddl, drop, function) = self.ddl_guard_names()?;
        let present: bool = self
            .client()?
            .query_one(
                "SELECT count(*) > 0 FROM pg_event_trigger WHERE evtname IN ($1, $2)",
                &[&ddl, &drop],
            )?
            .get(0);
        if !present {
            return Ok(());
        }
        self.client()?
            .batch_execute(&format!(
                "DROP EVENT TRIGGER IF EXISTS {}; DROP EVENT TRIGGER IF EXISTS {}; DROP FUNCTION IF EXISTS {function}()",
                quote_ident(&ddl),
                quote_ident(&drop)
            ))
            .with_context(|| format!("removing the fence's event triggers in {}", self.shown))
    }

    /// `RESTRICT`: a function a trigger still calls is no leftover.
    fn drop_fence_functions(&self, keep: &[String]) -> Result<()> {
        for f in FENCE_FUNCTIONS
            .iter()
            .filter(|f| !keep.iter().any(|k| k == *f))
        {
            self.client()?
                .batch_execute(&format!("DROP FUNCTION IF EXISTS {}()", self.qualified(f)))
                .with_context(|| format!("dropping the fence's function {f} in {}", self.shown))?;
        }
        Ok(())
    }

    /// How many of the three writes the fence's own triggers refuse on one
    /// relation (see `fence_triggers`).
    fn fence_triggers_on(&self, relation: &str, function: &str, body: &str) -> Result<usize> {
        let rows = self.client()?.query(
            "SELECT g.tgname::text, g.tgtype
             FROM pg_trigger g
             JOIN pg_proc p ON p.oid = g.tgfoid
             JOIN pg_namespace n ON n.oid = p.pronamespace
             WHERE g.tgrelid = to_regclass($1) AND g.tgname LIKE '\\_cutover\\_fence\\_%'
               AND g.tgenabled = 'A' AND g.tgqual IS NULL AND g.tgnargs = 1
               AND cardinality(g.tgattr::int2[]) = 0
               AND n.nspname = $2 AND p.proname = $3 AND p.prosrc = $4",
            &[&relation, &self.schema, &function, &body],
        )?;
        let holds = |i: usize| {
            rows.iter().any(|r| {
                r.get::<_, String>(0) == TRIGGERS[i].0 && r.get::<_, i16>(1) == TRIGGERS[i].1
            })
        };
        Ok(usize::from(holds(0)) + usize::from(holds(1)) + usize::from(holds(2) && holds(3)))
    }

    /// The names of the fence's event triggers for this schema (event
    /// triggers belong to the database, so they carry the schema's oid) and
    /// of their function, qualified.
    fn ddl_guard_names(&self) -> Result<(String, String, String)> {
        let oid: u32 = self
            .client()?
            .query_one(
                "SELECT oid FROM pg_namespace WHERE nspname = $1",
                &[&self.schema],
            )?
            .get(0);
        Ok((
            format!("_cutover_fence_ddl_{oid}"),
            format!("_cutover_fence_drop_{oid}"),
            self.qualified("_cutover_fence_ddl"),
        ))
    }

    /// The fence's triggers on `table` from `template`, once the table's
    /// writers in flight have finished.
    fn fence_from(&self, template: &str, table: &str, message: &str) -> Result<()> {
        if !self.has_table(table)? {
            bail!("{}: no table '{table}' to fence", self.shown);
        }
        self.lock_table(table, &SHARE_ROW_EXCLUSIVE)?;
        let sql = self
            .in_schema(template)
            .replace("{{table}}", &self.qualified(table))
            .replace("{{message}}", &quote_literal(message)?);
        self.client()?
            .batch_execute(&sql)
            .with_context(|| format!("installing fence triggers on '{table}' in {}", self.shown))
    }

    /// The body of the fence's function as `template` writes it for
    /// `table`, as `pg_proc.prosrc` keeps it.
    fn function_body(&self, template: &str, table: &str) -> Result<String> {
        let sql = self
            .in_schema(template)
            .replace("{{table}}", &self.qualified(table));
        sql.split("$body$")
            .nth(1)
            .map(str::to_string)
            .context("a fence template without its function's $body$")
    }

    /// Takes `mode` on `table` in the open transaction, waiting at most
    /// [`lock_timeout_ms`] at a time, [`LOCK_ATTEMPTS`] times. Between
    /// attempts the queue moves: writers queued behind the wait get their
    /// turn. When every attempt timed out, the error names the sessions
    /// holding (or queued for) a conflicting lock.
    fn lock_table(&self, table: &str, mode: &LockMode) -> Result<()> {
        let ms = lock_timeout_ms();
        let lock = format!("LOCK TABLE {} IN {} MODE", self.qualified(table), mode.name);
        let mut c = self.client()?;
        // No query before the lock: it would take the transaction's snapshot
        // (see `drain_writers`).
        for _ in 0..LOCK_ATTEMPTS {
            c.batch_execute("SAVEPOINT cutover_fence_lock")
                .with_context(|| {
                    format!(
                        "{}: the fence is installed inside a write transaction, and none is open",
                        self.shown
                    )
                })?;
            // A wait that times out rolls back to the savepoint, which undoes
            // this SET LOCAL too; one that succeeds restores it below.
            c.batch_execute(&format!("SET LOCAL lock_timeout = {ms}"))?;
            match c.batch_execute(&lock) {
                Ok(()) => {
                    c.batch_execute(
                        "RELEASE cutover_fence_lock; SET LOCAL lock_timeout TO DEFAULT",
                    )?;
                    return Ok(());
                }
                Err(e) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => {
                    c.batch_execute("ROLLBACK TO cutover_fence_lock; RELEASE cutover_fence_lock")?;
                }
                Err(e) => {
                    let _ = c.batch_execute(
                        "ROLLBACK TO cutover_fence_lock; RELEASE cutover_fence_lock",
                    );
                    return Err(e).with_context(|| {
                        format!("locking '{table}' for the fence in {}", self.shown)
                    });
                }
            }
        }
        drop(c);
        let holders = self.lock_holders(table, mode)?;
        bail!(
            "{}: table '{table}' could not be locked ({} mode) for the fence: {LOCK_ATTEMPTS} waits of {ms} ms each timed out; the sessions in the way are {}. Let them commit or roll back (or end one with SELECT pg_terminate_backend(pid)), or wait longer with CUTOVER_LOCK_TIMEOUT_MS",
            self.shown,
            mode.name,
            if holders.is_empty() {
                "gone now (try again)".to_string()
            } else {
                holders.join("; ")
            }
        )
    }

    /// The sessions holding, or queued for, a lock on `table` that `mode`
    /// waits for, each with what `pg_stat_activity` says of it. Asked after
    /// the wait ended, when `pg_blocking_pids` of this session would be
    /// empty; `pg_locks` gives the same sessions.
    fn lock_holders(&self, table: &str, mode: &LockMode) -> Result<Vec<String>> {
        let mut c = self.client()?;
        // pg_stat_activity is read once per transaction unless cleared.
        c.batch_execute("SELECT pg_stat_clear_snapshot()")?;
        let conflicts: Vec<&str> = mode.conflicts.to_vec();
        let params: &[&(dyn tokio_postgres::types::ToSql + Sync)] =
            &[&self.qualified(table), &conflicts];
        let rows = c.query(
            "SELECT l.pid, string_agg(DISTINCT l.mode, ', '), bool_and(l.granted),
                    a.application_name, a.state,
                    to_char(a.xact_start AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'),
                    to_char(a.query_start AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'),
                    min(l.virtualtransaction)
             FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
             WHERE l.locktype = 'relation' AND l.relation = to_regclass($1)
               AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
               AND l.pid IS DISTINCT FROM pg_backend_pid() AND l.mode = ANY ($2)
             GROUP BY l.pid, a.application_name, a.state, a.xact_start, a.query_start
             ORDER BY l.pid",
            params,
        )?;
        Ok(rows
            .iter()
            .map(|r| {
                let pid: Option<i32> = r.get(0);
                let modes: String = r.get(1);
                let held = if r.get::<_, bool>(2) {
                    "holds"
                } else {
                    "is queued for"
                };
                match pid {
                    None => format!(
                        "a prepared transaction ({}) that {held} {modes} (COMMIT PREPARED or ROLLBACK PREPARED it)",
                        r.get::<_, String>(7)
                    ),
                    Some(pid) => format!(
                        "pid {pid} (application_name '{}', state '{}', transaction started {}, last query started {}) {held} {modes}",
                        r.get::<_, Option<String>>(3).unwrap_or_default(),
                        r.get::<_, Option<String>>(4).unwrap_or_default(),
                        r.get::<_, Option<String>>(5).unwrap_or_else(|| "-".into()),
                        r.get::<_, Option<String>>(6).unwrap_or_else(|| "-".into()),
                    ),
                }
            })
            .collect())
    }
}
