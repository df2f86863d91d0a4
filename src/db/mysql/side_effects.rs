//! Side effects on MySQL and MariaDB: the triggers of a table and the
//! foreign-key actions (`ON DELETE` / `ON UPDATE` `CASCADE`, `SET NULL`,
//! `SET DEFAULT`) of other tables that refer to it.
//!
//! MySQL cannot switch a trigger off for one session (there is no
//! `session_replication_role` and no `DISABLE TRIGGER`): a source's
//! triggers fire on replay's writes, as on SQLite, and where the policy
//! would suppress one, `check` names it before the switch and the
//! operator chooses (let it fire, or drop it for the rollback).
//! Foreign-key actions are InnoDB's own and stop with
//! `foreign_key_checks = 0` for a session.

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

fn trigger_effect(table: &str, t: Trigger) -> SideEffect {
    SideEffect {
        table: table.to_string(),
        kind: SideEffectKind::Trigger,
        when: format!("{} {}", t.timing, t.event),
        name: t.name,
        writes: None,
        routes: false,
        enabled: true,
        action: None,
    }
}

impl SideEffects for MySql {
    fn side_effects(&self, table: &str) -> Result<Vec<SideEffect>> {
        let mut out: Vec<SideEffect> = self
            .triggers(table)?
            .into_iter()
            .filter(|t| !t.name.starts_with("_cutover_"))
            .map(|t| trigger_effect(table, t))
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
    /// any session that sets `foreign_key_checks = 0`.
    fn powers(&self, _tables: &[&str]) -> Result<Powers> {
        let user: Option<String> = self
            .conn()?
            .query_first("SELECT CURRENT_USER()")
            .map_err(|e| self.failed("reading the current user", &e))?;
        Ok(Powers {
            role: user.unwrap_or_default(),
            session_off: false,
            owns: Vec::new(),
            triggers_always_fire: true,
        })
    }

    fn hold_side_effects(
        &self,
        _decided: &[(SideEffect, Decision)],
        _powers: &Powers,
    ) -> Result<()> {
        bail!("{}: {}", self.shown(), super::not_yet("replay into MySQL"))
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
}
