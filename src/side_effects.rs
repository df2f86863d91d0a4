//! Replay's policy on what a source does by itself: its triggers, rules and
//! foreign-key actions. The rollback's promise is that the source ends
//! equal to the target reverse-transformed, changing exactly the rows the
//! journal names, so by default:
//!
//! - a foreign-key action (`CASCADE`, `SET NULL`, `SET DEFAULT`) never acts:
//!   the journal already holds what the application's own delete did to the
//!   children, and replay checks foreign keys itself at the end;
//! - a trigger that sets only columns the spec carries is suppressed (their
//!   values come from the journal); one that sets a column the spec does not
//!   carry (a `tsvector` kept from carried text, a column the target lacks)
//!   fires, since nothing else keeps that column; one whose writes cannot be
//!   told is suppressed;
//! - a rule that routes an insert into another table (a partition) fires,
//!   and the row is read back through its table; any other rule is
//!   suppressed. So does a trigger that does the write elsewhere (an
//!   `INSTEAD OF` trigger of a view, a `BEFORE INSERT` trigger inserting
//!   into a partition and returning NULL).
//!
//! The spec's `replay_policy` overrides a trigger's or rule's decision. An
//! engine that cannot switch triggers off for a session and whose triggers
//! are its own business (SQLite) lets every trigger fire; one that cannot
//! switch them off yet holds application triggers as PostgreSQL does
//! (MySQL) decides each as above, and a trigger to suppress there cannot be
//! held. Where the role cannot hold what the policy says, `check` says so
//! before the switch and replay refuses before writing.

use anyhow::{Result, bail};
use serde::Serialize;

use crate::db::{Decision, Powers, SideEffect, SideEffectKind};
use crate::spec::{Spec, Table};

/// One side effect with replay's decision and why.
#[derive(Clone, Debug, Serialize)]
pub struct Decided {
    #[serde(flatten)]
    pub effect: SideEffect,
    pub decision: Decision,
    pub why: String,
    /// The spec's `replay_policy` made the decision.
    pub from_spec: bool,
    /// Why the role cannot hold the decision; `None` when it can.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cannot: Option<String>,
}

/// A trigger that sets carried columns to the statement's time, on a spec
/// table: replay writes under a session clock set to the row's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Clock {
    pub trigger: String,
    /// It fires on an insert, on an update.
    pub insert: bool,
    pub update: bool,
    /// The spec columns it sets.
    pub columns: Vec<usize>,
}

/// The source's side effects on every spec table, decided.
#[derive(Debug, Default, Serialize)]
pub struct Policy {
    pub role: String,
    pub decided: Vec<Decided>,
    #[serde(skip)]
    pub powers: Powers,
}

impl Policy {
    /// Reads the source's side effects and decides each one. A name in a
    /// table's `replay_policy` that is neither a trigger nor a rule of the
    /// table is a spec error.
    pub fn read(spec: &Spec, source: &crate::db::Db) -> Result<Policy> {
        let tables: Vec<&str> = spec
            .tables
            .iter()
            .map(|t| t.source_table.as_str())
            .collect();
        let powers = source.side_effects().powers(&tables)?;
        let mut decided = Vec::new();
        for t in &spec.tables {
            let effects = source.side_effects().side_effects(&t.source_table)?;
            for name in t.replay_policy.keys() {
                if !effects
                    .iter()
                    .any(|e| e.kind != SideEffectKind::ForeignKeyAction && &e.name == name)
                {
                    let known: Vec<&str> = effects
                        .iter()
                        .filter(|e| e.kind != SideEffectKind::ForeignKeyAction)
                        .map(|e| e.name.as_str())
                        .collect();
                    bail!(
                        "table '{}': replay_policy names '{name}', which is no trigger or rule of source table '{}' (it has: {}); correct the name or remove the line",
                        t.name,
                        t.source_table,
                        if known.is_empty() {
                            "none".to_string()
                        } else {
                            known.join(", ")
                        }
                    );
                }
            }
            for e in effects {
                decided.push(decide(t, e, &powers));
            }
        }
        Ok(Policy {
            role: powers.role.clone(),
            decided,
            powers,
        })
    }

    /// The side effects the role cannot hold as decided.
    pub fn unheld(&self) -> impl Iterator<Item = &Decided> {
        self.decided.iter().filter(|d| d.cannot.is_some())
    }

    /// The foreign-key actions that will act on replay's writes because the
    /// role cannot stop them: replay must prove no pending entry sets one off.
    pub fn live_actions(&self) -> impl Iterator<Item = &Decided> {
        self.unheld()
            .filter(|d| d.effect.kind == SideEffectKind::ForeignKeyAction)
    }

    /// The triggers and rules that cannot be held: replay refuses.
    pub fn unheld_triggers(&self) -> impl Iterator<Item = &Decided> {
        self.unheld()
            .filter(|d| d.effect.kind != SideEffectKind::ForeignKeyAction)
    }

    /// The side effects that fire on replay's writes to `table` and set
    /// `column` (or whose writes cannot be told): the causes a closing
    /// reconciliation can name.
    pub fn writers_of(&self, table: &str, column: &str) -> Vec<&Decided> {
        self.decided
            .iter()
            .filter(|d| {
                d.effect.table == table
                    && d.effect.enabled
                    && (d.decision == Decision::Fire || d.cannot.is_some())
                    && d.effect
                        .writes
                        .as_ref()
                        .is_none_or(|w| w.iter().any(|c| c == column))
            })
            .collect()
    }

    /// The triggers and rules of source table `table` that fire on
    /// replay's writes.
    fn firing<'s>(&'s self, table: &'s str) -> impl Iterator<Item = &'s Decided> {
        self.decided.iter().filter(move |d| {
            d.effect.table == table
                && d.effect.enabled
                && d.effect.kind != SideEffectKind::ForeignKeyAction
                && d.decision == Decision::Fire
        })
    }

    /// The columns of source table `table` that a trigger left to fire on
    /// replay's inserts sets itself (a `tsvector` kept from carried text):
    /// an insert need not carry them.
    pub fn filled_on_insert(&self, table: &str) -> Vec<String> {
        self.firing(table)
            .filter(|d| {
                d.effect.kind == SideEffectKind::Trigger
                    && d.cannot.is_none()
                    && d.effect.when.to_ascii_uppercase().contains("INSERT")
            })
            .flat_map(|d| d.effect.writes.iter().flatten().cloned())
            .collect()
    }

    /// Per spec table, the triggers and rules that act on replay's writes,
    /// as a swallowed write's conflict names them.
    pub fn acting(&self, spec: &Spec) -> Vec<Vec<String>> {
        spec.tables
            .iter()
            .map(|t| {
                self.firing(&t.source_table)
                    .map(|d| format!("{} '{}' ({})", d.effect.kind, d.effect.name, d.effect.when))
                    .collect()
            })
            .collect()
    }

    /// Per spec table, the triggers that fire on replay's writes and set
    /// carried columns to the statement's time, which replay holds by
    /// setting its session's clock to the row's journaled value.
    pub fn clocks(&self, spec: &Spec) -> Vec<Vec<Clock>> {
        spec.tables
            .iter()
            .map(|t| {
                self.firing(&t.source_table)
                    .filter(|_| self.powers.clock_held)
                    .filter_map(|d| {
                        let columns = d
                            .effect
                            .clock
                            .iter()
                            .map(|c| t.columns.iter().position(|x| x.source == *c))
                            .collect::<Option<Vec<usize>>>()?;
                        let when = d.effect.when.to_ascii_uppercase();
                        (!columns.is_empty()).then(|| Clock {
                            trigger: d.effect.name.clone(),
                            insert: when.contains("INSERT"),
                            update: when.contains("UPDATE"),
                            columns,
                        })
                    })
                    .collect()
            })
            .collect()
    }

    /// Holds the decisions on `source`'s write transactions from now on.
    pub fn hold(&self, source: &crate::db::Db) -> Result<()> {
        let pairs: Vec<(SideEffect, Decision)> = self
            .decided
            .iter()
            .filter(|d| d.effect.enabled && d.cannot.is_none())
            .map(|d| (d.effect.clone(), d.decision))
            .collect();
        source
            .side_effects()
            .hold_side_effects(&pairs, &self.powers)
    }
}

fn decide(t: &Table, e: SideEffect, powers: &Powers) -> Decided {
    let (decision, why, from_spec) = if e.kind == SideEffectKind::ForeignKeyAction {
        (
            Decision::Suppress,
            "the journal holds what it did on the target; replay checks foreign keys itself"
                .to_string(),
            false,
        )
    } else if let Some(d) = t.replay_policy.get(&e.name) {
        (*d, "the spec's replay_policy says so".to_string(), true)
    } else if powers.triggers_always_fire && e.kind == SideEffectKind::Trigger {
        (
            Decision::Fire,
            "this engine cannot switch a trigger off for one connection".to_string(),
            false,
        )
    } else if e.kind == SideEffectKind::Trigger && e.routes {
        (
            Decision::Fire,
            "it does the write in another table (a partition, or the table under a view); the row is read back through this one".to_string(),
            false,
        )
    } else if e.kind == SideEffectKind::Rule {
        if e.routes {
            (
                Decision::Fire,
                "it routes inserts into another table (a partition); the row is read back through its table".to_string(),
                false,
            )
        } else {
            (
                Decision::Suppress,
                "replay changes only the rows the journal names".to_string(),
                false,
            )
        }
    } else {
        match &e.writes {
            None => (
                Decision::Suppress,
                "which columns it sets cannot be told; say fire in the table's replay_policy to let it run".to_string(),
                false,
            ),
            Some(cols) => {
                let kept: Vec<&String> = cols.iter().filter(|c| !carries(t, c)).collect();
                if kept.is_empty() && powers.clock_held && !e.clock.is_empty() {
                    (
                        Decision::Fire,
                        format!(
                            "it sets only columns the spec carries ({}), to the statement's time: replay sets its session's clock to each row's journaled value, so the trigger writes the journal's value",
                            cols.join(", ")
                        ),
                        false,
                    )
                } else if kept.is_empty() {
                    (
                        Decision::Suppress,
                        if cols.is_empty() {
                            "it sets no column of the row; replay changes only the rows the journal names".to_string()
                        } else {
                            format!(
                                "it sets only columns the spec carries ({}); their values come from the journal",
                                cols.join(", ")
                            )
                        },
                        false,
                    )
                } else {
                    (
                        Decision::Fire,
                        format!(
                            "it keeps {}, which the spec does not carry",
                            kept.iter().map(|c| format!("'{c}'")).collect::<Vec<_>>().join(", ")
                        ),
                        false,
                    )
                }
            }
        }
    };
    let cannot = if !e.enabled {
        None
    } else if let Some(why) = stamps_unheld(t, &e, powers, from_spec) {
        Some(why)
    } else {
        cannot_hold(&e, decision, powers)
    };
    Decided {
        effect: e,
        decision,
        why,
        from_spec,
        cannot,
    }
}

/// Why a trigger that sets carried columns to the time cannot be held on
/// an engine whose triggers always fire and whose sessions have no clock
/// to set (SQLite): replay would write its own time over the journal's.
fn stamps_unheld(t: &Table, e: &SideEffect, powers: &Powers, from_spec: bool) -> Option<String> {
    let stamped: Vec<String> = e
        .clock
        .iter()
        .filter(|c| carries(t, c))
        .map(|c| format!("'{c}'"))
        .collect();
    (powers.triggers_always_fire && !from_spec && !stamped.is_empty()).then(|| {
        format!(
            "this engine cannot switch a trigger off for one connection nor set its clock, and this trigger sets carried column(s) {} to the time: on replay's writes it would write the time of the replay over the journal's values. Drop it for the rollback (keep its CREATE TRIGGER statement) and create it again once replay is done",
            stamped.join(", ")
        )
    })
}

/// Whether the spec carries a source column of the table.
fn carries(t: &Table, column: &str) -> bool {
    t.columns.iter().any(|c| c.source == column)
}

/// Why the role cannot hold a decision, if it cannot.
fn cannot_hold(e: &SideEffect, d: Decision, p: &Powers) -> Option<String> {
    let role = if p.role.is_empty() {
        "this connection".to_string()
    } else {
        format!("role '{}'", p.role)
    };
    let owns = p.owns.contains(&e.table);
    match (e.kind, d) {
        (_, Decision::Fire) if p.triggers_always_fire => None,
        (SideEffectKind::Trigger, Decision::Suppress) if p.triggers_always_fire => Some(
            "this engine cannot switch a trigger off for one connection; drop the trigger for the rollback or say fire in the table's replay_policy".to_string(),
        ),
        (SideEffectKind::ForeignKeyAction, _)
            if p.triggers_always_fire || p.session_off || p.actions_off =>
        {
            None
        }
        (SideEffectKind::ForeignKeyAction, _) => Some(format!(
            "{role} may not switch foreign-key actions off (only a superuser, or a role granted SET on session_replication_role, may): replay stops before writing if an entry would set it off; grant it with GRANT SET ON PARAMETER session_replication_role TO {}",
            if p.role.is_empty() { "ROLE" } else { &p.role }
        )),
        (_, Decision::Suppress) if p.triggers_fixed => Some(format!(
            "this engine cannot switch a trigger off for one connection, and the policy suppresses this {} ({}): choose before the switch, either let it fire on replay's writes (say fire for '{}' in the table's replay_policy) or drop it for the rollback and create it again once replay is done (RUNBOOK.md, \"A MySQL source\"); a trigger that only sets carried columns to NOW() or CURRENT_TIMESTAMP needs neither, replay holds it with its session's clock (SYSDATE() reads the wall clock, which no session sets: write NOW() there)",
            e.kind, e.when, e.name
        )),
        (_, Decision::Fire) if p.triggers_fixed => None,
        // Held by the replica session alone (suppress), or by switching it
        // on or off inside replay's transactions, which needs the table.
        (_, Decision::Suppress) if p.session_off || owns => None,
        (_, Decision::Fire) if !p.session_off || owns => None,
        (_, Decision::Suppress) => Some(format!(
            "{role} neither owns table '{}' nor may set session_replication_role, so it cannot keep this {} from acting on replay's writes; run replay as the table's owner or a role granted SET on session_replication_role, or say fire in the table's replay_policy",
            e.table, e.kind
        )),
        (_, Decision::Fire) => Some(format!(
            "{role} runs replay as a replica session, which switches this {} off, and does not own table '{}' to switch it back on; run replay as the table's owner, or say suppress in the table's replay_policy",
            e.kind, e.table
        )),
    }
}

/// The policy as `check` and replay print it: one line per side effect.
pub fn render(policy: &Policy) -> String {
    let mut text = String::new();
    for d in &policy.decided {
        let e = &d.effect;
        let verdict = if !e.enabled {
            "disabled in the source; replay leaves it so".to_string()
        } else {
            match d.decision {
                Decision::Fire => format!("replay lets it fire ({})", d.why),
                Decision::Suppress => format!("replay suppresses it ({})", d.why),
            }
        };
        text.push_str(&format!(
            "source {} '{}' on '{}' ({}): {verdict}\n",
            e.kind, e.name, e.table, e.when
        ));
        if let Some(c) = &d.cannot {
            text.push_str(&format!("  CANNOT HOLD: {c}\n"));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::{Decided, decide};
    use crate::db::{Decision, Powers, SideEffect, SideEffectKind};
    use crate::spec::{Spec, Table};

    /// `orders(id, total, updated)` carried, `search` not; a trigger
    /// `touch` the spec lets fire.
    fn spec() -> (tempfile::TempDir, Spec) {
        crate::spec::in_folder(
            "[[tables]]\nname = \"orders\"\nkey = [\"id\"]\nreplay_policy = { touch = \"fire\" }\n\
             [[tables.columns]]\nsource = \"total\"\ntarget = \"total\"\n\
             [[tables.columns]]\nsource = \"updated\"\ntarget = \"updated\"\n",
        )
    }

    fn trigger(name: &str, writes: Option<&[&str]>) -> SideEffect {
        SideEffect {
            table: "orders".into(),
            kind: SideEffectKind::Trigger,
            name: name.into(),
            when: "BEFORE UPDATE FOR EACH ROW".into(),
            writes: writes.map(|w| w.iter().map(|c| c.to_string()).collect()),
            routes: false,
            enabled: true,
            clock: Vec::new(),
            action: None,
        }
    }

    /// A role that owns the table and may switch side effects off for its
    /// session (PostgreSQL's replica session).
    fn owner() -> Powers {
        Powers {
            role: "app".into(),
            session_off: true,
            owns: vec!["orders".into()],
            ..Powers::default()
        }
    }

    /// MySQL's: triggers cannot be switched off, foreign-key actions can,
    /// and the session's clock can be set.
    fn fixed() -> Powers {
        Powers {
            role: "app".into(),
            actions_off: true,
            triggers_fixed: true,
            clock_held: true,
            ..Powers::default()
        }
    }

    fn decided(t: &Table, e: SideEffect, p: &Powers) -> (Decision, bool, bool) {
        let d: Decided = decide(t, e, p);
        (d.decision, d.from_spec, d.cannot.is_some())
    }

    #[test]
    fn a_trigger_is_suppressed_when_it_sets_only_carried_columns_and_fires_when_it_keeps_another() {
        let (_dir, spec) = spec();
        let t = &spec.tables[0];
        let carried = trigger("stamp", Some(&["updated"]));
        assert_eq!(
            decided(t, carried, &owner()),
            (Decision::Suppress, false, false)
        );
        let keeps = trigger("index", Some(&["updated", "search"]));
        let d = decide(t, keeps, &owner());
        assert_eq!(d.decision, Decision::Fire);
        assert!(d.why.contains("'search'"), "{}", d.why);
        // Writes that cannot be told are suppressed, and the spec's policy
        // wins over every default.
        assert_eq!(
            decided(t, trigger("c_func", None), &owner()).0,
            Decision::Suppress
        );
        assert_eq!(
            decided(t, trigger("touch", Some(&["updated"])), &owner()),
            (Decision::Fire, true, false)
        );
    }

    #[test]
    fn a_foreign_key_action_never_acts_and_a_role_that_cannot_stop_it_is_named() {
        let (_dir, spec) = spec();
        let mut action = trigger("orders_customer_fkey", None);
        action.kind = SideEffectKind::ForeignKeyAction;
        assert_eq!(
            decided(&spec.tables[0], action.clone(), &owner()),
            (Decision::Suppress, false, false)
        );
        let plain = Powers {
            role: "app".into(),
            ..Powers::default()
        };
        let d = decide(&spec.tables[0], action, &plain);
        assert_eq!(d.decision, Decision::Suppress);
        let why = d.cannot.expect("a role that cannot switch actions off");
        assert!(why.contains("role 'app'"), "{why}");
    }

    #[test]
    fn a_rule_fires_only_when_it_routes_into_a_partition() {
        let (_dir, spec) = spec();
        let mut rule = trigger("archive", None);
        rule.kind = SideEffectKind::Rule;
        assert_eq!(
            decided(&spec.tables[0], rule.clone(), &owner()).0,
            Decision::Suppress
        );
        rule.routes = true;
        assert_eq!(decided(&spec.tables[0], rule, &owner()).0, Decision::Fire);
    }

    #[test]
    fn where_triggers_cannot_be_switched_off_a_stamp_fires_under_the_clock_and_a_suppression_cannot_hold()
     {
        let (_dir, spec) = spec();
        let t = &spec.tables[0];
        let mut stamp = trigger("stamp", Some(&["updated"]));
        stamp.clock = vec!["updated".into()];
        assert_eq!(decided(t, stamp, &fixed()), (Decision::Fire, false, false));
        // Carried columns set to something else than the time: the
        // decision is to suppress, which this engine cannot hold.
        assert_eq!(
            decided(t, trigger("copy", Some(&["total"])), &fixed()),
            (Decision::Suppress, false, true)
        );
        // A disabled trigger never acts: nothing to hold.
        let mut off = trigger("copy", Some(&["total"]));
        off.enabled = false;
        assert_eq!(
            decided(t, off, &fixed()),
            (Decision::Suppress, false, false)
        );
    }

    #[test]
    fn a_role_that_neither_owns_the_table_nor_runs_a_replica_session_cannot_suppress() {
        let (_dir, spec) = spec();
        let stranger = Powers {
            role: "guest".into(),
            ..Powers::default()
        };
        let d = decide(
            &spec.tables[0],
            trigger("stamp", Some(&["updated"])),
            &stranger,
        );
        assert_eq!(d.decision, Decision::Suppress);
        let why = d.cannot.expect("a role that cannot hold it");
        assert!(why.contains("neither owns table 'orders'"), "{why}");
    }
}
