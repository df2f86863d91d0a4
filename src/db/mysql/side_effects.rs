//! Side effects on MySQL and MariaDB: the triggers of a table and the
//! foreign-key actions (`ON DELETE` / `ON UPDATE` `CASCADE`, `SET NULL`,
//! `SET DEFAULT`) of other tables that refer to it, and replay's hold on
//! them.
//!
//! MySQL cannot switch a trigger off for one session (there is no
//! `session_replication_role` and no `DISABLE TRIGGER`), yet its triggers
//! are the application's, as on PostgreSQL: the policy decides each from
//! the columns it sets (a `BEFORE` trigger's `SET NEW.col = …`), and where
//! it would suppress one, `check` names it before the switch and replay
//! refuses before writing, for the operator to choose (let it fire, or drop
//! it for the rollback). Foreign-key actions are InnoDB's own and stop, with
//! the checks, for a session that sets `foreign_key_checks = 0`: replay's
//! does, and checks the foreign keys itself once every entry is applied.

use anyhow::{Result, bail};
use mysql::prelude::Queryable;

use super::catalogue::Trigger;
use super::{MySql, quote_ident};
use crate::db::{Decision, ForeignKeyAction, Powers, SideEffect, SideEffectKind, SideEffects};
use crate::value::{CellRef, Value};

/// Whether a foreign key's rule changes the child's rows.
fn acts(rule: &str) -> bool {
    matches!(rule, "CASCADE" | "SET NULL" | "SET DEFAULT")
}

fn trigger_effect(table: &str, t: Trigger, columns: &[String]) -> SideEffect {
    // Column names are not case-sensitive: each as the table declares it.
    let declared = |c: String| {
        columns
            .iter()
            .find(|k| k.eq_ignore_ascii_case(&c))
            .cloned()
            .unwrap_or(c)
    };
    let sets = trigger_writes(&t.timing, &t.event, &t.statement);
    let writes = sets.as_ref().map(|sets| {
        let mut out: Vec<String> = Vec::new();
        for (c, _) in sets {
            if !out.iter().any(|o| o.eq_ignore_ascii_case(c)) {
                out.push(declared(c.clone()));
            }
        }
        out
    });
    // Every assignment the statement's time: the session clock holds it.
    let clock = match &sets {
        Some(sets) if !sets.is_empty() && sets.iter().all(|(_, e)| is_clock(e)) => {
            writes.clone().unwrap_or_default()
        }
        _ => Vec::new(),
    };
    SideEffect {
        table: table.to_string(),
        kind: SideEffectKind::Trigger,
        when: format!("{} {} FOR EACH ROW", t.timing, t.event),
        name: t.name,
        writes,
        routes: false,
        enabled: true,
        clock,
        action: None,
    }
}

/// Whether an expression is the statement's time, which the session's
/// `timestamp` sets: `NOW()`, `CURRENT_TIMESTAMP`, `LOCALTIME`,
/// `LOCALTIMESTAMP` and `UTC_TIMESTAMP`, with or without a precision
/// (`UTC_TIMESTAMP` is the same in replay's `+00:00` session). Not
/// `SYSDATE()`, which reads the wall clock whatever the session says.
fn is_clock(expr: &str) -> bool {
    static CLOCK: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    CLOCK
        .get_or_init(|| {
            regex::Regex::new(
                r"(?i)^\s*(now|current_timestamp|localtime|localtimestamp|utc_timestamp)\s*(\(\s*[0-6]?\s*\))?\s*$",
            )
            .expect("a valid pattern")
        })
        .is_match(expr)
}

/// The columns of the row a trigger sets, each with the expression it
/// sets it to: only a `BEFORE INSERT` or `BEFORE UPDATE` trigger can (`SET
/// NEW.col = …`, each assignment of a `SET` list); `None` when that cannot
/// be told from its body (a value `SELECT … INTO` or a procedure's `OUT`
/// parameter could set one).
fn trigger_writes(timing: &str, event: &str, body: &str) -> Option<Vec<(String, String)>> {
    if !timing.eq_ignore_ascii_case("BEFORE") || event.eq_ignore_ascii_case("DELETE") {
        return Some(Vec::new());
    }
    static NOISE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let noise = NOISE.get_or_init(|| {
        regex::Regex::new(r"(?s)--[^\n]*|#[^\n]*|/\*.*?\*/|'(?:[^'\\]|''|\\.)*'")
            .expect("a valid pattern")
    });
    let clean = noise.replace_all(body, " ");
    static OPAQUE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let opaque = OPAQUE
        .get_or_init(|| regex::Regex::new(r"(?i)\bINTO\b|\bCALL\b").expect("a valid pattern"));
    if opaque.is_match(&clean) {
        return None;
    }
    static SET: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let set = SET.get_or_init(|| regex::Regex::new(r"(?i)\bSET\b").expect("a valid pattern"));
    static TARGET: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let target = TARGET.get_or_init(|| {
        regex::Regex::new(
            r#"(?is)^\s*new\s*\.\s*(`(?:[^`]|``)+`|"(?:[^"]|"")+"|[a-z0-9_$]+)\s*:?="#,
        )
        .expect("a valid pattern")
    });
    let mut out: Vec<(String, String)> = Vec::new();
    for m in set.find_iter(&clean) {
        // The assignments of one SET: up to the `;` (or the end) that ends
        // it, split at the commas outside parentheses.
        for part in crate::db::set_list(&clean[m.end()..]) {
            let Some(c) = target.captures(part) else {
                continue;
            };
            let raw = c.get(1).map_or("", |m| m.as_str());
            let name = if let Some(q) = raw.strip_prefix('`').and_then(|s| s.strip_suffix('`')) {
                q.replace("``", "`")
            } else if let Some(q) = raw.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
                q.replace("\"\"", "\"")
            } else {
                raw.to_string()
            };
            let expr = part[c.get(0).map_or(0, |m| m.end())..].trim().to_string();
            out.push((name, expr));
        }
    }
    Some(out)
}

impl SideEffects for MySql {
    fn side_effects(&self, table: &str) -> Result<Vec<SideEffect>> {
        let columns: Vec<String> = self.columns(table)?.into_iter().map(|c| c.name).collect();
        let mut out: Vec<SideEffect> = self
            .triggers(table)?
            .into_iter()
            .filter(|t| !t.name.starts_with("_cutover_"))
            .map(|t| trigger_effect(table, t, &columns))
            .collect();
        for fk in self.foreign_keys(table)?.referring {
            if !acts(&fk.on_delete) && !acts(&fk.on_update) {
                continue;
            }
            let mut when = Vec::new();
            if acts(&fk.on_delete) {
                when.push(format!("ON DELETE {}", fk.on_delete));
            }
            if acts(&fk.on_update) {
                when.push(format!("ON UPDATE {}", fk.on_update));
            }
            let child = if fk.database == self.database() {
                fk.table.clone()
            } else {
                format!("{}.{}", fk.database, fk.table)
            };
            out.push(SideEffect {
                table: table.to_string(),
                kind: SideEffectKind::ForeignKeyAction,
                name: fk.name.clone(),
                when: format!("{} from {child}", when.join(" ")),
                writes: Some(Vec::new()),
                routes: false,
                enabled: true,
                clock: Vec::new(),
                action: Some(ForeignKeyAction {
                    child,
                    columns: fk.columns,
                    parent_columns: fk.parent_columns,
                    on_delete: acts(&fk.on_delete),
                    on_update: acts(&fk.on_update),
                }),
            });
        }
        Ok(out)
    }

    /// No session can switch a trigger off; foreign-key actions stop for
    /// any session that sets `foreign_key_checks = 0`, which every user may.
    fn powers(&self, _tables: &[&str]) -> Result<Powers> {
        let user: Option<String> = self
            .conn()?
            .query_first("SELECT CURRENT_USER()")
            .map_err(|e| self.failed("reading the current user", &e))?;
        Ok(Powers {
            role: user.unwrap_or_default(),
            session_off: false,
            owns: Vec::new(),
            triggers_always_fire: false,
            actions_off: true,
            triggers_fixed: true,
            clock_held: true,
        })
    }

    /// `foreign_key_checks = 0` for this session, from now until it ends:
    /// no foreign-key action of any table acts on replay's writes, and no
    /// write is refused half-way by a foreign key (batches do not follow the
    /// application's transactions); replay checks every foreign key of the
    /// tables it wrote and of their children at the end. Only this session
    /// is changed, so no other sees it. Triggers fire: one decided
    /// suppressed is refused here too, before anything is written, as is a
    /// session whose `sql_mode` is no longer the strict one it was opened
    /// with.
    fn hold_side_effects(
        &self,
        decided: &[(SideEffect, Decision)],
        _powers: &Powers,
    ) -> Result<()> {
        if let Some((e, _)) = decided
            .iter()
            .find(|(e, d)| e.kind != SideEffectKind::ForeignKeyAction && *d == Decision::Suppress)
        {
            bail!(
                "{}: {} '{}' on '{}' cannot be switched off for one connection; let it fire (say fire in the table's replay_policy) or drop it for the rollback. Nothing was written",
                self.shown(),
                e.kind,
                e.name,
                e.table
            );
        }
        // Replay's writes are exact only under the strict `sql_mode` the
        // session was opened with: checked before the first.
        let mode: Option<String> = self
            .conn()?
            .query_first("SELECT @@SESSION.sql_mode")
            .map_err(|e| self.failed("reading the session's sql_mode", &e))?;
        let mode = mode.unwrap_or_default();
        let missing: Vec<&str> = super::client::SQL_MODE
            .split(',')
            .filter(|m| !mode.split(',').any(|have| have == *m))
            .collect();
        if !missing.is_empty() {
            bail!(
                "{}: replay's session lacks sql_mode {} (it has '{mode}'), so a value could be truncated or coerced; find what changed it (a proxy that resets sessions, say), then run again. Nothing was written",
                self.shown(),
                missing.join(",")
            );
        }
        self.execute("SET SESSION foreign_key_checks = 0", Vec::new())
            .map(drop)
    }

    fn referencing_rows(
        &self,
        effect: &SideEffect,
        parent: &[Value],
        limit: usize,
    ) -> Result<Vec<String>> {
        let Some(a) = &effect.action else {
            return Ok(Vec::new());
        };
        let child = match a.child.split_once('.') {
            Some((d, t)) => format!("{}.{}", quote_ident(d), quote_ident(t)),
            None => self.qualified(&a.child),
        };
        let cond = a
            .columns
            .iter()
            .map(|c| format!("{} = ?", quote_ident(c)))
            .collect::<Vec<_>>()
            .join(" AND ");
        let object = a
            .columns
            .iter()
            .map(|c| format!("'{}', {}", c.replace('\'', "''"), quote_ident(c)))
            .collect::<Vec<_>>()
            .join(", ");
        let params: Vec<mysql::Value> = parent
            .iter()
            .map(|v| match v.as_cell() {
                CellRef::Integer(i) => mysql::Value::Int(i),
                CellRef::Real(r) => mysql::Value::Double(r),
                CellRef::Text(b) | CellRef::Blob(b) => mysql::Value::Bytes(b.to_vec()),
                CellRef::Null | CellRef::Digested(_) => mysql::Value::NULL,
            })
            .collect();
        let text = format!("SELECT JSON_OBJECT({object}) FROM {child} WHERE {cond} LIMIT {limit}");
        let rows: Vec<String> = self.conn()?.exec(&text, params).map_err(|e| {
            self.failed(&format!("reading the rows of '{}' referring", a.child), &e)
        })?;
        Ok(rows)
    }

    fn referencing_tables(&self, table: &str) -> Result<Vec<String>> {
        let mut out: Vec<String> = self
            .foreign_keys(table)?
            .referring
            .into_iter()
            .filter(|fk| fk.database == self.database())
            .map(|fk| fk.table)
            .collect();
        out.sort();
        out.dedup();
        Ok(out)
    }

    /// `SET timestamp`: `NOW()`, `CURRENT_TIMESTAMP` and their kin return
    /// `at` in this session (whose `time_zone` is `+00:00`, so a DATETIME's
    /// text and a TIMESTAMP's UTC are read alike) until it is set back to
    /// `DEFAULT`. MySQL's clock runs from 1970-01-01 00:00:01 to
    /// 2038-01-19 03:14:07, and `0` would mean the server's clock.
    fn hold_clock(&self, at: Option<&Value>) -> Result<bool> {
        let statement = match at {
            None => "SET timestamp = DEFAULT".to_string(),
            Some(Value::Text(t)) => {
                let text = t.strip_suffix("+00").unwrap_or(t);
                let Ok(time) = chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f")
                else {
                    return Ok(false);
                };
                let utc = time.and_utc();
                let seconds = utc.timestamp();
                if !(1..=i64::from(i32::MAX)).contains(&seconds) {
                    return Ok(false);
                }
                format!(
                    "SET timestamp = {seconds}.{:06}",
                    utc.timestamp_subsec_micros()
                )
            }
            Some(_) => return Ok(false),
        };
        self.conn()?
            .query_drop(&statement)
            .map_err(|e| self.failed("setting the session's clock", &e))?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::{is_clock, trigger_writes};

    #[test]
    fn a_before_trigger_sets_the_columns_its_set_lists_assign() {
        let w = |t, e, b| {
            trigger_writes(t, e, b).map(|s| s.into_iter().map(|(c, _)| c).collect::<Vec<_>>())
        };
        assert_eq!(
            w(
                "BEFORE",
                "UPDATE",
                "SET NEW.updated_at = CURRENT_TIMESTAMP(6)"
            ),
            Some(vec!["updated_at".to_string()])
        );
        assert_eq!(
            w(
                "BEFORE",
                "INSERT",
                "BEGIN IF NEW.a = 1 THEN SET @x = 1, NEW.`b c` := IF(NEW.a = 2, 1, 2), new . \"d\" = 'SET NEW.e = 1'; END IF; END"
            ),
            Some(vec!["b c".to_string(), "d".to_string()])
        );
        assert_eq!(w("AFTER", "INSERT", "SET NEW.x = 1"), Some(vec![]));
        assert_eq!(w("BEFORE", "DELETE", "SET @n = OLD.id"), Some(vec![]));
        assert_eq!(w("BEFORE", "UPDATE", "SELECT 1 INTO NEW.x"), None);
        assert_eq!(w("BEFORE", "UPDATE", "CALL touch(NEW.x)"), None);
    }

    #[test]
    fn the_statement_time_is_a_clock_the_session_sets_and_sysdate_is_not() {
        let sets = trigger_writes(
            "BEFORE",
            "INSERT",
            "BEGIN SET NEW.created = NOW(), NEW.`updated` := current_timestamp(6); END",
        )
        .unwrap();
        assert_eq!(
            sets,
            [
                ("created".to_string(), "NOW()".to_string()),
                ("updated".to_string(), "current_timestamp(6)".to_string())
            ]
        );
        for clock in [
            "NOW()",
            "now( 3 )",
            "CURRENT_TIMESTAMP",
            "LocalTimestamp()",
            "UTC_TIMESTAMP(6)",
        ] {
            assert!(is_clock(clock), "{clock}");
        }
        for not in [
            "SYSDATE()",
            "NOW() + INTERVAL 1 DAY",
            "NEW.created",
            "'2024-01-01'",
            "COALESCE(NEW.c, NOW())",
        ] {
            assert!(!is_clock(not), "{not}");
        }
    }
}
