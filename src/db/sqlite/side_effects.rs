//! Side effects on SQLite: the triggers of a table and the foreign-key
//! actions that refer to it. SQLite cannot switch a trigger off for one
//! connection, so the triggers of a source fire on replay's writes; its
//! foreign-key actions never do, because cutover's connections run with
//! `foreign_keys=OFF`.

use anyhow::Result;

use super::*;

impl SideEffects for Sqlite {
    fn side_effects(&self, table: &str) -> Result<Vec<SideEffect>> {
        let mut out = Vec::new();
        for name in self.app_triggers(table)? {
            let sql: String = self.conn.query_row(
                "SELECT coalesce(sql, '') FROM sqlite_schema WHERE type = 'trigger' AND name = ?1",
                [&name],
                |r| r.get(0),
            )?;
            out.push(SideEffect {
                table: table.to_string(),
                kind: SideEffectKind::Trigger,
                name,
                when: trigger_when(&sql),
                writes: None,
                routes: false,
                enabled: true,
                clock: stamped(&sql, table),
                action: None,
            });
        }
        let mut st = self.conn.prepare(
            "SELECT m.name, f.id, f.\"from\", coalesce(f.\"to\", ''), f.on_update, f.on_delete
             FROM sqlite_schema m, pragma_foreign_key_list(m.name) f
             WHERE m.type = 'table' AND lower(f.\"table\") = lower(?1)
             ORDER BY m.name, f.id, f.seq",
        )?;
        let rows: Vec<(String, i64, String, String, String, String)> = st
            .query_map([table], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                ))
            })?
            .collect::<rusqlite::Result<_>>()?;
        let acts = |a: &str| matches!(a, "CASCADE" | "SET NULL" | "SET DEFAULT");
        let mut last: Option<(String, i64)> = None;
        for (child, id, from, to, on_update, on_delete) in rows {
            if !acts(&on_update) && !acts(&on_delete) {
                continue;
            }
            if last.as_ref() == Some(&(child.clone(), id))
                && let Some(SideEffect {
                    action: Some(a), ..
                }) = out.last_mut()
            {
                a.columns.push(from);
                a.parent_columns.push(to);
                continue;
            }
            last = Some((child.clone(), id));
            let mut when = Vec::new();
            if acts(&on_delete) {
                when.push(format!("ON DELETE {on_delete}"));
            }
            if acts(&on_update) {
                when.push(format!("ON UPDATE {on_update}"));
            }
            out.push(SideEffect {
                table: table.to_string(),
                kind: SideEffectKind::ForeignKeyAction,
                name: format!("{child}({from})"),
                when: format!("{} from {child}", when.join(" ")),
                writes: Some(Vec::new()),
                routes: false,
                enabled: true,
                clock: Vec::new(),
                action: Some(ForeignKeyAction {
                    child,
                    columns: vec![from],
                    parent_columns: vec![to],
                    on_delete: acts(&on_delete),
                    on_update: acts(&on_update),
                }),
            });
        }
        // The names of the parent's key, where the foreign key leaves them out.
        for e in &mut out {
            if let Some(a) = &mut e.action
                && a.parent_columns.iter().any(String::is_empty)
            {
                let pk: Vec<String> = self
                    .table_columns(table)?
                    .into_iter()
                    .filter(|c| c.pk > 0)
                    .map(|c| c.name)
                    .collect();
                a.parent_columns = pk;
            }
        }
        Ok(out)
    }

    /// Replay's connections never run a foreign-key action, and no
    /// connection can switch a trigger off.
    fn powers(&self, _tables: &[&str]) -> Result<Powers> {
        Ok(Powers {
            role: String::new(),
            session_off: false,
            owns: Vec::new(),
            triggers_always_fire: true,
            actions_off: false,
            triggers_fixed: false,
            clock_held: false,
        })
    }

    /// Nothing to hold: triggers fire (the policy says so for SQLite) and
    /// foreign-key actions are off on every connection cutover opens.
    fn hold_side_effects(
        &self,
        _decided: &[(SideEffect, Decision)],
        _powers: &Powers,
    ) -> Result<()> {
        Ok(())
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
        let cond = a
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{} = ?{}", quote_ident(c), i + 1))
            .collect::<Vec<_>>()
            .join(" AND ");
        let sql = format!(
            "SELECT rowid FROM {} WHERE {cond} LIMIT {limit}",
            quote_ident(&a.child)
        );
        let mut st = self.conn.prepare(&sql)?;
        let binds: Vec<Bind<'_>> = parent.iter().map(Bind).collect();
        let params: Vec<&dyn rusqlite::ToSql> =
            binds.iter().map(|b| b as &dyn rusqlite::ToSql).collect();
        let rows = st.query_map(params.as_slice(), |r| r.get::<_, i64>(0))?;
        Ok(rows
            .map(|r| r.map(|id| format!("rowid {id}")))
            .collect::<rusqlite::Result<_>>()?)
    }

    fn referencing_tables(&self, table: &str) -> Result<Vec<String>> {
        let mut st = self.conn.prepare(
            "SELECT DISTINCT m.name FROM sqlite_schema m, pragma_foreign_key_list(m.name) f
             WHERE m.type = 'table' AND lower(f.\"table\") = lower(?1) ORDER BY m.name",
        )?;
        let rows = st.query_map([table], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}

/// `BEFORE UPDATE`, `AFTER INSERT`, … as the trigger's text says.
/// The columns of `table` a trigger sets to the time, `UPDATE table SET
/// col = CURRENT_TIMESTAMP` (or `datetime('now')`, `strftime(…, 'now')`,
/// `unixepoch()`, …) in its body: on replay's writes it would write
/// replay's clock over the journal's value, and no SQLite connection can
/// switch it off or set its clock.
fn stamped(sql: &str, table: &str) -> Vec<String> {
    static UPDATE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let update = UPDATE.get_or_init(|| {
        regex::Regex::new(
            r#"(?is)\bUPDATE\s+(?:OR\s+\w+\s+)?("(?:[^"]|"")+"|`[^`]+`|\[[^\]]+\]|[\w$]+)\s+SET\s+(.*?)(?:\bWHERE\b|\bFROM\b|;|\bEND\b)"#,
        )
        .expect("a valid pattern")
    });
    static TIME: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let time = TIME.get_or_init(|| {
        regex::Regex::new(r"(?i)\bcurrent_(timestamp|time|date)\b|'now'|\bunixepoch\s*\(")
            .expect("a valid pattern")
    });
    let unquote = |n: &str| {
        let n = n.trim();
        match (n.chars().next(), n.chars().last()) {
            (Some('"'), Some('"')) => n[1..n.len() - 1].replace("\"\"", "\""),
            (Some('`'), Some('`')) | (Some('['), Some(']')) => n[1..n.len() - 1].to_string(),
            _ => n.to_string(),
        }
    };
    let mut out = Vec::new();
    for c in update.captures_iter(sql) {
        if !unquote(&c[1]).eq_ignore_ascii_case(table) {
            continue;
        }
        for part in crate::db::set_list(&c[2]) {
            if let Some((column, expr)) = part.split_once('=')
                && time.is_match(expr)
            {
                out.push(unquote(column));
            }
        }
    }
    out
}

fn trigger_when(sql: &str) -> String {
    let upper = sql.to_uppercase();
    let timing = ["INSTEAD OF", "BEFORE", "AFTER"]
        .into_iter()
        .find(|t| upper.contains(&format!(" {t} ")))
        .unwrap_or("BEFORE");
    let event = ["INSERT", "UPDATE", "DELETE"]
        .into_iter()
        .find(|e| upper.contains(&format!(" {e} ")) || upper.contains(&format!(" {e}\n")))
        .unwrap_or("");
    format!("{timing} {event}").trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::stamped;

    #[test]
    fn a_trigger_setting_its_tables_columns_to_the_time_stamps_them() {
        let sql = "CREATE TRIGGER t AFTER UPDATE ON orders BEGIN
            UPDATE \"Orders\" SET updated_at = datetime('now'), n = n + 1,
                seen = strftime('%Y-%m-%d %H:%M:%f', 'now') WHERE id = NEW.id;
            UPDATE other SET at = CURRENT_TIMESTAMP;
        END";
        assert_eq!(stamped(sql, "orders"), ["updated_at", "seen"]);
        assert_eq!(stamped(sql, "other"), ["at"]);
        let counter = "CREATE TRIGGER t AFTER UPDATE ON orders BEGIN
            UPDATE orders SET rev = OLD.rev + 1 WHERE id = NEW.id; END";
        assert!(stamped(counter, "orders").is_empty());
    }
}
