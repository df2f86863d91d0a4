//! Side effects: the triggers, rules and foreign-key actions that a write
//! to a source table sets off, what the role may switch off, and the hold
//! replay keeps on them in every write transaction.
//!
//! The hold is done inside each transaction and undone before it commits,
//! so no other session ever sees a trigger's state change: with the right
//! to set `session_replication_role` the session runs as a replica (every
//! ordinary trigger, rule and foreign-key action is off) and the side
//! effects replay lets fire are switched to `ENABLE ALWAYS`; a table's
//! owner without that right switches off, one by one, those it suppresses.
//! Foreign-key actions are internal triggers, which only the replica
//! session (or a superuser) can stop.

use anyhow::{Context, Result};
use regex::Regex;

use super::{Postgres, quote_ident};
use crate::db::interfaces::SideEffects;
use crate::db::types::{Decision, ForeignKeyAction, Powers, SideEffect, SideEffectKind};
use crate::value::Value;

/// `tgtype` bits (PostgreSQL's `pg_trigger.h`).
const ROW: i16 = 1;
const BEFORE: i16 = 2;
const INSERT: i16 = 4;
const DELETE: i16 = 8;
const UPDATE: i16 = 16;
const TRUNCATE: i16 = 32;
const INSTEAD: i16 = 64;

/// The events and timing of a trigger, as `CREATE TRIGGER` spells them.
fn trigger_when(tgtype: i16) -> String {
    let timing = if tgtype & INSTEAD != 0 {
        "INSTEAD OF"
    } else if tgtype & BEFORE != 0 {
        "BEFORE"
    } else {
        "AFTER"
    };
    let events: Vec<&str> = [
        (INSERT, "INSERT"),
        (UPDATE, "UPDATE"),
        (DELETE, "DELETE"),
        (TRUNCATE, "TRUNCATE"),
    ]
    .iter()
    .filter(|(bit, _)| tgtype & bit != 0)
    .map(|(_, name)| *name)
    .collect();
    let each = if tgtype & ROW != 0 {
        "FOR EACH ROW"
    } else {
        "FOR EACH STATEMENT"
    };
    format!("{timing} {} {each}", events.join(" OR "))
}

/// The columns of the new row a PL/pgSQL trigger function assigns
/// (`NEW.col := …` anywhere, or `NEW.col = …` as a statement of its own).
/// Only a BEFORE row trigger's assignments reach the row.
fn plpgsql_writes(body: &str) -> Vec<String> {
    static ASSIGN: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    let re = ASSIGN.get_or_init(|| {
        Regex::new(
            r#"(?is)(?:^|;|\bthen|\belse|\bloop|\bbegin)\s*new\s*\.\s*("(?:[^"]|"")+"|[a-z_][a-z0-9_$]*)\s*:?=|new\s*\.\s*("(?:[^"]|"")+"|[a-z_][a-z0-9_$]*)\s*:="#,
        )
        .expect("a valid pattern")
    });
    // Comments and string literals say nothing about what is assigned.
    static NOISE: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    let noise = NOISE.get_or_init(|| {
        Regex::new(r"(?s)--[^\n]*|/\*.*?\*/|'(?:[^']|'')*'").expect("a valid pattern")
    });
    let clean = noise.replace_all(body, " ");
    let mut out: Vec<String> = Vec::new();
    for c in re.captures_iter(&clean) {
        let Some(m) = c.get(1).or_else(|| c.get(2)) else {
            continue;
        };
        let name = match m
            .as_str()
            .strip_prefix('"')
            .and_then(|s| s.strip_suffix('"'))
        {
            Some(q) => q.replace("\"\"", "\""),
            None => m.as_str().to_lowercase(),
        };
        if !out.contains(&name) {
            out.push(name);
        }
    }
    out
}

/// Whether a trigger is the write itself, done elsewhere: an `INSTEAD OF`
/// row trigger (a view's), or a `BEFORE INSERT` row trigger in PL/pgSQL
/// that inserts into one of `children`, the tables inheriting from its
/// own (a partition by inheritance routed by a trigger returning NULL).
fn trigger_routes(tgtype: i16, language: &str, body: &str, children: &[String]) -> bool {
    if tgtype & ROW == 0 {
        return false;
    }
    if tgtype & INSTEAD != 0 {
        return true;
    }
    if tgtype & BEFORE == 0 || tgtype & INSERT == 0 || language != "plpgsql" {
        return false;
    }
    static INTO: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    let re = INTO.get_or_init(|| {
        Regex::new(
            r#"(?is)\binsert\s+into\s+(?:(?:"(?:[^"]|"")+"|[a-z_][a-z0-9_$]*)\s*\.\s*)?("(?:[^"]|"")+"|[a-z_][a-z0-9_$]*)"#,
        )
        .expect("a valid pattern")
    });
    static NOISE: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    let noise = NOISE.get_or_init(|| {
        Regex::new(r"(?s)--[^\n]*|/\*.*?\*/|'(?:[^']|'')*'").expect("a valid pattern")
    });
    let clean = noise.replace_all(body, " ");
    re.captures_iter(&clean).any(|c| {
        let m = c[1].to_string();
        let name = match m.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
            Some(q) => q.replace("\"\"", "\""),
            None => m.to_lowercase(),
        };
        children.contains(&name)
    })
}

/// The columns a trigger sets in the row it fires on: `None` when that
/// cannot be told from its function.
fn trigger_writes(
    tgtype: i16,
    function: &str,
    language: &str,
    body: &str,
    args: &[String],
) -> Option<Vec<String>> {
    if tgtype & ROW == 0 || tgtype & BEFORE == 0 || tgtype & (INSERT | UPDATE) == 0 {
        // Only a BEFORE row trigger on insert or update can change the row.
        return Some(Vec::new());
    }
    match (function, language) {
        // PostgreSQL's own full-text trigger: its first argument is the
        // tsvector column it fills.
        ("tsvector_update_trigger" | "tsvector_update_trigger_column", _) => {
            Some(args.first().cloned().into_iter().collect())
        }
        (_, "plpgsql") => Some(plpgsql_writes(body)),
        _ => None,
    }
}

impl Postgres {
    fn triggers_of(&self, table: &str) -> Result<Vec<SideEffect>> {
        let rows = self.client()?.query(
            "SELECT t.tgname::text, t.tgenabled::text, t.tgtype, p.proname::text, l.lanname::text,
                    coalesce(p.prosrc, ''), t.tgargs
             FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid
             JOIN pg_language l ON l.oid = p.prolang
             WHERE t.tgrelid = to_regclass($1) AND NOT t.tgisinternal
               AND t.tgname NOT LIKE '\\_cutover\\_%'
             ORDER BY t.tgname COLLATE \"C\"",
            &[&self.qualified(table)],
        )?;
        let children: Vec<String> = self
            .client()?
            .query(
                "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                 WHERE i.inhparent = to_regclass($1)",
                &[&self.qualified(table)],
            )?
            .iter()
            .map(|r| r.get(0))
            .collect();
        Ok(rows
            .iter()
            .map(|r| {
                let tgtype: i16 = r.get(2);
                let raw: Vec<u8> = r.get(6);
                let args: Vec<String> = raw
                    .split(|b| *b == 0)
                    .filter(|a| !a.is_empty())
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect();
                let state: String = r.get(1);
                let function: String = r.get(3);
                SideEffect {
                    table: table.to_string(),
                    kind: SideEffectKind::Trigger,
                    name: r.get(0),
                    when: format!("{}, calls {function}()", trigger_when(tgtype)),
                    writes: trigger_writes(tgtype, &function, r.get(4), r.get(5), &args),
                    routes: trigger_routes(tgtype, r.get(4), r.get(5), &children),
                    enabled: state != "D",
                    clock: Vec::new(),
                    action: None,
                }
            })
            .collect())
    }

    fn rules_of(&self, table: &str) -> Result<Vec<SideEffect>> {
        // A rule routes when it acts instead of an insert and writes a
        // table that inherits from this one (a partition by inheritance).
        let rows = self.client()?.query(
            "SELECT r.rulename::text, r.ev_type::text, r.is_instead, r.ev_enabled::text,
                    EXISTS (SELECT 1 FROM pg_depend d JOIN pg_inherits i ON i.inhrelid = d.refobjid
                            WHERE d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid
                              AND d.refclassid = 'pg_class'::regclass AND i.inhparent = r.ev_class)
             FROM pg_rewrite r
             WHERE r.ev_class = to_regclass($1) AND r.rulename <> '_RETURN'
             ORDER BY r.rulename COLLATE \"C\"",
            &[&self.qualified(table)],
        )?;
        Ok(rows
            .iter()
            .map(|r| {
                let event = match r.get::<_, String>(1).as_str() {
                    "2" => "UPDATE",
                    "3" => "INSERT",
                    "4" => "DELETE",
                    _ => "SELECT",
                };
                let instead: bool = r.get(2);
                let state: String = r.get(3);
                let routes = instead && event == "INSERT" && r.get::<_, bool>(4);
                SideEffect {
                    table: table.to_string(),
                    kind: SideEffectKind::Rule,
                    name: r.get(0),
                    when: format!("ON {event} DO {}", if instead { "INSTEAD" } else { "ALSO" }),
                    writes: Some(Vec::new()),
                    routes,
                    enabled: state != "D",
                    clock: Vec::new(),
                    action: None,
                }
            })
            .collect())
    }

    fn actions_on(&self, table: &str) -> Result<Vec<SideEffect>> {
        let rows = self.client()?.query(
            "SELECT c.conname::text,
                    CASE WHEN cn.nspname = $2 THEN cc.relname::text
                         ELSE cn.nspname || '.' || cc.relname END,
                    c.confdeltype::text, c.confupdtype::text,
                    ARRAY(SELECT a.attname::text FROM unnest(c.conkey) WITH ORDINALITY k(n, i)
                          JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n ORDER BY k.i),
                    ARRAY(SELECT a.attname::text FROM unnest(c.confkey) WITH ORDINALITY k(n, i)
                          JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.n ORDER BY k.i)
             FROM pg_constraint c JOIN pg_class cc ON cc.oid = c.conrelid
             JOIN pg_namespace cn ON cn.oid = cc.relnamespace
             WHERE c.contype = 'f' AND c.confrelid = to_regclass($1)
               AND (c.confdeltype IN ('c', 'n', 'd') OR c.confupdtype IN ('c', 'n', 'd'))
             ORDER BY c.conname COLLATE \"C\"",
            &[&self.qualified(table), &self.schema],
        )?;
        let word = |t: &str| match t {
            "c" => Some("CASCADE"),
            "n" => Some("SET NULL"),
            "d" => Some("SET DEFAULT"),
            _ => None,
        };
        Ok(rows
            .iter()
            .map(|r| {
                let child: String = r.get(1);
                let columns: Vec<String> = r.get(4);
                let del: String = r.get(2);
                let upd: String = r.get(3);
                let mut when = Vec::new();
                if let Some(w) = word(&del) {
                    when.push(format!("ON DELETE {w}"));
                }
                if let Some(w) = word(&upd) {
                    when.push(format!("ON UPDATE {w}"));
                }
                SideEffect {
                    table: table.to_string(),
                    kind: SideEffectKind::ForeignKeyAction,
                    name: r.get(0),
                    when: format!("{} from {child} ({})", when.join(" "), columns.join(", ")),
                    writes: Some(Vec::new()),
                    routes: false,
                    enabled: true,
                    clock: Vec::new(),
                    action: Some(ForeignKeyAction {
                        child,
                        columns,
                        parent_columns: r.get(5),
                        on_delete: word(&del).is_some(),
                        on_update: word(&upd).is_some(),
                    }),
                }
            })
            .collect())
    }

    /// A table named as `foreign_keys` names it: bare in this schema,
    /// `schema.table` elsewhere.
    fn qualified_other(&self, table: &str) -> String {
        match table.split_once('.') {
            Some((s, t)) if !self.has_table(table).unwrap_or(false) => {
                format!("{}.{}", quote_ident(s), quote_ident(t))
            }
            _ => self.qualified(table),
        }
    }
}

/// The statements that switch one side effect to `state` (`ENABLE`,
/// `ENABLE ALWAYS`, `ENABLE REPLICA`, `DISABLE`).
fn alter(p: &Postgres, e: &SideEffect, state: &str) -> String {
    let what = match e.kind {
        SideEffectKind::Rule => "RULE",
        _ => "TRIGGER",
    };
    format!(
        "ALTER TABLE {} {state} {what} {};",
        p.qualified(&e.table),
        quote_ident(&e.name)
    )
}

/// A key value as PostgreSQL's text form compares it (`col::text = $1`);
/// none for a value that has no such form here.
fn text_of(v: &Value) -> Option<String> {
    match v {
        Value::Integer(i) => Some(i.to_string()),
        Value::Text(t) => Some(t.clone()),
        _ => None,
    }
}

impl SideEffects for Postgres {
    fn side_effects(&self, table: &str) -> Result<Vec<SideEffect>> {
        let mut out = self.triggers_of(table)?;
        out.extend(self.rules_of(table)?);
        out.extend(self.actions_on(table)?);
        Ok(out)
    }

    fn powers(&self, tables: &[&str]) -> Result<Powers> {
        let mut c = self.client()?;
        let row = c.query_one(
            "SELECT current_user::text, r.rolsuper,
                    current_setting('server_version_num')::int >= 150000
                      AND has_parameter_privilege('session_replication_role', 'SET')
             FROM pg_roles r WHERE r.rolname = current_user",
            &[],
        );
        // has_parameter_privilege is new in PostgreSQL 15: an older server
        // answers only for a superuser.
        let (role, superuser, set): (String, bool, bool) = match row {
            Ok(r) => (r.get(0), r.get(1), r.get(2)),
            Err(_) => {
                let r = c.query_one(
                    "SELECT current_user::text, rolsuper FROM pg_roles WHERE rolname = current_user",
                    &[],
                )?;
                (r.get(0), r.get(1), false)
            }
        };
        // A view's triggers cannot be switched (`ALTER TABLE … ENABLE
        // ALWAYS TRIGGER` is refused on a view), so a view is owned by no
        // one here: a replica session cannot keep its INSTEAD OF trigger on.
        let mut owns = Vec::new();
        for t in tables {
            let r = c.query_one(
                "SELECT coalesce((SELECT pg_has_role(relowner, 'USAGE') FROM pg_class
                                  WHERE oid = to_regclass($1)), false),
                        coalesce((SELECT relkind = 'v' FROM pg_class WHERE oid = to_regclass($1)), false)",
                &[&self.qualified(t)],
            )?;
            if (superuser || r.get::<_, bool>(0)) && !r.get::<_, bool>(1) {
                owns.push(t.to_string());
            }
        }
        Ok(Powers {
            role,
            session_off: superuser || set,
            owns,
            triggers_always_fire: false,
            actions_off: false,
            triggers_fixed: false,
            clock_held: false,
        })
    }

    fn hold_side_effects(&self, decided: &[(SideEffect, Decision)], powers: &Powers) -> Result<()> {
        let mut setup = String::new();
        let mut restore = String::new();
        let states = self.side_effect_states(decided)?;
        if powers.session_off {
            setup.push_str("SET LOCAL session_replication_role = replica;");
        }
        for ((e, d), state) in decided.iter().zip(states) {
            if e.kind == SideEffectKind::ForeignKeyAction || state == "D" {
                continue;
            }
            // Whether it fires in this session as the catalogue stands.
            let fires = match state.as_str() {
                "A" => true,
                "R" => powers.session_off,
                _ => !powers.session_off,
            };
            let back = match state.as_str() {
                "A" => "ENABLE ALWAYS",
                "R" => "ENABLE REPLICA",
                _ => "ENABLE",
            };
            match (d, fires) {
                (Decision::Fire, false) => {
                    setup.push_str(&alter(self, e, "ENABLE ALWAYS"));
                    restore.push_str(&alter(self, e, back));
                }
                (Decision::Suppress, true) => {
                    setup.push_str(&alter(self, e, "DISABLE"));
                    restore.push_str(&alter(self, e, back));
                }
                _ => {}
            }
        }
        if !restore.is_empty() {
            // A deferred constraint's check still queued would stop the
            // ALTER that undoes the hold: run it first.
            restore.insert_str(0, "SET CONSTRAINTS ALL IMMEDIATE;");
        }
        *self.hold.borrow_mut() = (!setup.is_empty()).then_some((setup, restore));
        Ok(())
    }

    fn referencing_rows(
        &self,
        e: &SideEffect,
        parent: &[Value],
        limit: usize,
    ) -> Result<Vec<String>> {
        let Some(a) = &e.action else {
            return Ok(Vec::new());
        };
        let cond = a
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{}::text = ${}", quote_ident(c), i + 1))
            .collect::<Vec<_>>()
            .join(" AND ");
        let texts: Vec<Option<String>> = parent.iter().map(text_of).collect();
        if texts.iter().any(Option::is_none) {
            return Ok(Vec::new());
        }
        let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = texts
            .iter()
            .map(|t| t as &(dyn tokio_postgres::types::ToSql + Sync))
            .collect();
        let text = format!(
            "SELECT row_to_json(c)::text FROM (SELECT {} FROM {} WHERE {cond} LIMIT {limit}) c",
            a.columns
                .iter()
                .map(|c| quote_ident(c))
                .chain(std::iter::once("ctid::text AS ctid".to_string()))
                .collect::<Vec<_>>()
                .join(", "),
            self.qualified_other(&a.child)
        );
        let rows = self
            .client()?
            .query(text.as_str(), &params)
            .with_context(|| {
                format!(
                    "reading the rows of '{}' that refer to '{}'",
                    a.child, e.table
                )
            })?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    fn referencing_tables(&self, table: &str) -> Result<Vec<String>> {
        let rows = self.client()?.query(
            "SELECT DISTINCT CASE WHEN cn.nspname = $2 THEN cc.relname::text
                                  ELSE cn.nspname || '.' || cc.relname END
             FROM pg_constraint c JOIN pg_class cc ON cc.oid = c.conrelid
             JOIN pg_namespace cn ON cn.oid = cc.relnamespace
             WHERE c.contype = 'f' AND c.confrelid = to_regclass($1) ORDER BY 1",
            &[&self.qualified(table), &self.schema],
        )?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }
}

impl Postgres {
    /// Each side effect's `tgenabled` / `ev_enabled` as the catalogue has it now.
    fn side_effect_states(&self, decided: &[(SideEffect, Decision)]) -> Result<Vec<String>> {
        let mut c = self.client()?;
        decided
            .iter()
            .map(|(e, _)| {
                let sql = match e.kind {
                    SideEffectKind::Trigger => {
                        "SELECT tgenabled::text FROM pg_trigger WHERE tgrelid = to_regclass($1) AND tgname = $2"
                    }
                    SideEffectKind::Rule => {
                        "SELECT ev_enabled::text FROM pg_rewrite WHERE ev_class = to_regclass($1) AND rulename = $2"
                    }
                    SideEffectKind::ForeignKeyAction => return Ok("O".to_string()),
                };
                Ok(c.query_opt(sql, &[&self.qualified(&e.table), &e.name])?
                    .map_or_else(|| "D".to_string(), |r| r.get(0)))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plpgsql_touch_trigger_writes_the_column_it_assigns() {
        let body = "\nBEGIN\n    NEW.last_update = CURRENT_TIMESTAMP;\n    RETURN NEW;\nEND ";
        assert_eq!(plpgsql_writes(body), vec!["last_update"]);
        let body = "begin new.\"Total\" := new.qty * 2; if NEW.a = OLD.a then return new; end if; -- NEW.x := 1\n return new; end";
        assert_eq!(plpgsql_writes(body), vec!["Total"]);
        assert!(
            plpgsql_writes("BEGIN INSERT INTO log VALUES (NEW.id); RETURN NEW; END").is_empty()
        );
    }

    #[test]
    fn only_a_before_row_trigger_on_insert_or_update_writes_the_row() {
        let body = "BEGIN NEW.a := 1; RETURN NEW; END";
        assert_eq!(
            trigger_writes(ROW | BEFORE | UPDATE, "f", "plpgsql", body, &[]),
            Some(vec!["a".to_string()])
        );
        assert_eq!(
            trigger_writes(ROW | UPDATE, "f", "plpgsql", body, &[]),
            Some(vec![])
        );
        assert_eq!(
            trigger_writes(ROW | BEFORE | UPDATE, "f", "c", "", &[]),
            None
        );
        assert_eq!(
            trigger_writes(
                ROW | BEFORE | INSERT | UPDATE,
                "tsvector_update_trigger",
                "internal",
                "",
                &["fulltext".into(), "pg_catalog.english".into()]
            ),
            Some(vec!["fulltext".to_string()])
        );
        assert_eq!(
            trigger_when(ROW | BEFORE | INSERT | UPDATE),
            "BEFORE INSERT OR UPDATE FOR EACH ROW"
        );
    }
}
