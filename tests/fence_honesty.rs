//! The fence and the rollback's verdicts say what happened, and only that:
//! a failed replay is never "rolled back" and does not let the fence go; a
//! finished rollback (RUNBOOK D1) is reported finished; a rewritten fence
//! record is a breach; a breach lists only what changed; a fingerprint that
//! could not be computed (a query refused, a damaged file) is exit 2 naming
//! why, never "fence breached".

mod support;

use support::postgres::Client;
use support::{Dir, Layout, each_layout, python};

/// The last replay verdict the source records: `(passed, boundary)`.
fn last_verdict(d: &Dir) -> Option<(i64, i64)> {
    if !d.has_table("source.db", "_cutover_replays") {
        return None;
    }
    let rows = d.query(
        "source.db",
        "SELECT CAST(passed AS integer), boundary FROM _cutover_replays ORDER BY id DESC LIMIT 1",
    );
    rows.first().map(|r| match (&r[0], &r[1]) {
        (rusqlite::types::Value::Integer(p), rusqlite::types::Value::Integer(b)) => (*p, *b),
        other => panic!("a verdict row: {other:?}"),
    })
}

/// Whether the application can still write the target (the fence is gone).
fn target_writable(d: &Dir) -> bool {
    d.try_client(
        "target.db",
        "UPDATE orders SET cents = cents WHERE id = 102",
    )
    .is_ok()
}

/// A replay that applies every entry but does not reconcile (the source
/// changed by hand after the switch, in a row the journal does not touch):
/// exit 1 and nothing written (all or nothing), `status` says it failed
/// (exit 1), `fence off` refuses (exit 2) and the fence stays. Once the
/// source is put right, a replay that applies the journal and reconciles
/// clean records the pass: `status` says rolled back, and `fence off` goes
/// through.
fn a_failed_replay_is_not_a_rollback(layout: Layout) {
    let d = Dir::orders_fenced_on(layout, "failed-replay");
    d.exec(
        "source.db",
        "UPDATE orders SET dollars = '7.51' WHERE id = 102",
    );
    let boundary = d.int("target.db", "SELECT boundary FROM _cutover_fence");
    d.run(&["replay"], 1);
    assert_eq!(d.applied_entries("source.db"), 0, "{layout}");
    assert_eq!(last_verdict(&d), Some((0, boundary)), "{layout}");

    let st = d.json(&["status"], 1);
    let phase = st["phase"].as_str().unwrap_or_default();
    assert!(!phase.contains("rolled back"), "{layout}: {st}");
    assert!(phase.contains("replay FAILED"), "{layout}: {st}");
    assert!(
        st["next"]
            .as_str()
            .unwrap_or_default()
            .contains("cutover replay"),
        "{layout}: {st}"
    );
    // Nothing of the failed replay stayed: the replay is incomplete.
    let off = d.cutover(&["fence", "off"]).expect(2);
    assert!(off.stderr.contains("cutover replay"), "{layout}: {off}");
    assert!(
        !target_writable(&d),
        "{layout}: the fence went after a failed replay"
    );

    // The operator's way forward: fix the source, replay again.
    d.exec(
        "source.db",
        "UPDATE orders SET dollars = '7.50' WHERE id = 102",
    );
    let rep = d.json(&["replay"], 0);
    assert_eq!(rep["applied"], 3, "{layout}: {rep}");
    assert_eq!(last_verdict(&d), Some((1, boundary)), "{layout}");
    let st = d.json(&["status"], 0);
    assert!(
        st["phase"]
            .as_str()
            .unwrap_or_default()
            .starts_with("rolled back"),
        "{layout}: {st}"
    );
    d.run(&["fence", "off"], 0);
    assert!(target_writable(&d), "{layout}");
}
each_layout!(a_failed_replay_is_not_a_rollback);

/// `--force` still lifts the fence after a failed replay, as documented;
/// `status` then says the fence went after a failure (exit 1), not that the
/// rollback finished.
fn forcing_the_fence_off_after_a_failure_is_not_a_finish(layout: Layout) {
    let d = Dir::orders_fenced_on(layout, "forced-off");
    d.exec(
        "source.db",
        "UPDATE orders SET dollars = '7.51' WHERE id = 102",
    );
    d.run(&["replay"], 1);
    d.run(&["fence", "off", "--force"], 0);
    assert!(target_writable(&d), "{layout}");
    let st = d.json(&["status"], 1);
    let phase = st["phase"].as_str().unwrap_or_default();
    assert!(phase.contains("FAILED"), "{layout}: {st}");
    assert!(!phase.contains("finished"), "{layout}: {st}");
}
each_layout!(forcing_the_fence_off_after_a_failure_is_not_a_finish: [sqlite, pg_to_pg, my_to_my]);

/// RUNBOOK D1 after a clean rollback: `fence off`, `journal remove`, and
/// `status` reports the rollback finished, exit 0, with no alarm about the
/// journal triggers that D1 removed on purpose.
fn status_after_d1_is_finished(layout: Layout) {
    let d = Dir::orders_fenced_on(layout, "after-d1");
    d.run(&["replay"], 0);
    d.run(&["status"], 0);
    d.run(&["fence", "off"], 0);
    d.run(&["journal", "remove"], 0);
    let st = d.json(&["status"], 0);
    let phase = st["phase"].as_str().unwrap_or_default();
    assert!(
        phase.starts_with("rolled back and finished"),
        "{layout}: {st}"
    );
    assert!(st.get("drift").is_none(), "{layout}: {st}");
    assert_eq!(st["fenced"], false, "{layout}: {st}");
    assert_eq!(st["replayed"], 3, "{layout}: {st}");
}
each_layout!(status_after_d1_is_finished);

/// The copy of the fence record the source keeps: rewritten there (as a
/// record rewritten on the target would differ from it), `fence status`,
/// `status` and `replay` call it a breach (exit 1), replay writes nothing,
/// and `fence off` leaves the fence on.
fn a_record_that_differs_from_its_copy_is_a_breach(layout: Layout) {
    let d = Dir::orders_fenced_on(layout, "record-copy");
    assert_eq!(
        d.int(
            "source.db",
            "SELECT count(*) FROM _cutover_fences WHERE lifted_at IS NULL"
        ),
        1,
        "{layout}: fence on keeps a copy of its record in the source"
    );
    d.exec("source.db", "UPDATE _cutover_fences SET boundary = 1");
    let st = d.json(&["fence", "status"], 1);
    assert!(
        st["breach"]
            .as_str()
            .unwrap_or_default()
            .contains("(kept: 1)"),
        "{layout}: {st}"
    );
    d.run(&["status"], 1);
    let before = d.dump("source.db", "orders");
    d.run(&["replay"], 1);
    assert_eq!(d.dump("source.db", "orders"), before, "{layout}");
    assert_eq!(d.applied_entries("source.db"), 0, "{layout}");
    d.run(&["fence", "off"], 1);
    assert!(!target_writable(&d), "{layout}");
}
each_layout!(a_record_that_differs_from_its_copy_is_a_breach: [sqlite, sqlite_to_pg, pg_to_sqlite, sqlite_to_my]);

/// Rewriting the fence record on a SQLite target (its guard dropped, the
/// boundary lowered, the guard put back) changes the fingerprint, which
/// covers the record: `fence status`, `replay` and `status` call it a
/// breach and replay applies nothing.
#[test]
fn a_rewritten_fence_record_is_a_breach_on_sqlite() {
    let d = Dir::orders_fenced("record-rewritten");
    let (code, out) = python(
        d.path(),
        r#"
import sqlite3
con = sqlite3.connect("target.db", isolation_level=None)
guards = con.execute("SELECT name, sql FROM sqlite_schema WHERE type = 'trigger' AND tbl_name = '_cutover_fence'").fetchall()
assert len(guards) == 3, guards
con.execute("BEGIN")
for name, _ in guards:
    con.execute('DROP TRIGGER "%s"' % name.replace('"', '""'))
con.execute("UPDATE _cutover_fence SET boundary = 1")
for _, sql in guards:
    con.execute(sql)
con.execute("COMMIT")
print("ok")
"#,
        &[],
    );
    assert_eq!(code, 0, "{out}");
    d.run(&["fence", "status"], 1);
    d.run(&["status"], 1);
    d.run(&["replay"], 1);
    assert_eq!(d.applied_entries("source.db"), 0);
    d.run(&["fence", "off"], 1);
    assert!(!target_writable(&d));
}

/// A fence set in format 1 (by the previous version: no `version` in its
/// parts, the fingerprint over schema, rows and journal only, no copy in
/// the source) still verifies. Replay asks for the copy first; `fence on`
/// again keeps it without touching the target, and the replay goes through.
#[test]
fn a_format_1_fence_still_verifies() {
    let d = Dir::orders_fenced("format-1");
    let (code, out) = python(
        d.path(),
        r#"
import hashlib, json, sqlite3, struct
con = sqlite3.connect("target.db", isolation_level=None)
parts = json.loads(con.execute("SELECT parts FROM _cutover_fence").fetchone()[0])
assert parts.pop("version") == 3
h = hashlib.sha256()
def text(s):
    b = s.encode()
    h.update(struct.pack("<Q", len(b)))
    h.update(b)
for name, sql in parts["schema"]:
    text(name); text(sql)
for table, digest in parts["content"]:
    text(table); text(digest)
h.update(struct.pack("<q", parts["journal_rows"]))
h.update(struct.pack("<q", parts["max_seq"]))
h.update(parts["digest"].encode())
guards = con.execute("SELECT name, sql FROM sqlite_schema WHERE type = 'trigger' AND tbl_name = '_cutover_fence'").fetchall()
con.execute("BEGIN")
for name, _ in guards:
    con.execute('DROP TRIGGER "%s"' % name.replace('"', '""'))
con.execute("UPDATE _cutover_fence SET parts = ?, fingerprint = ?", (json.dumps(parts), h.hexdigest()))
for _, sql in guards:
    con.execute(sql)
con.execute("COMMIT")
src = sqlite3.connect("source.db", isolation_level=None)
src.execute("DELETE FROM _cutover_fences")
print("ok")
"#,
        &[],
    );
    assert_eq!(code, 0, "{out}");
    let st = d.json(&["fence", "status"], 0);
    assert_eq!(st["intact"], true, "{st}");
    assert_eq!(st["format"], 1, "{st}");
    let refused = d.cutover(&["replay"]).expect(2);
    assert!(refused.stderr.contains("fence on"), "{refused}");
    assert_eq!(d.applied_entries("source.db"), 0);
    let target = d.bytes("target.db");
    let on = d.json(&["fence", "on"], 0);
    assert_eq!(on["copy"], "kept in the source", "{on}");
    assert_eq!(
        d.bytes("target.db"),
        target,
        "fence on again changed the target"
    );
    d.run(&["replay"], 0);
    assert_eq!(d.applied_entries("source.db"), 3);
    d.run(&["fence", "off"], 0);
}

/// A write behind the fence that changes only rows: on PostgreSQL the fence
/// triggers are switched off and on again around it, leaving every trigger
/// as it was. The breach names the rows and nothing else (the fence's
/// triggers, one name on every table, were all reported "altered").
fn a_data_only_breach_names_only_the_rows(layout: Layout) {
    let d = Dir::orders_fenced_on(layout, "data-only-breach");
    d.client(
        "target.db",
        "ALTER TABLE orders DISABLE TRIGGER _cutover_fence_update, DISABLE TRIGGER _cutover_journal_update;
         UPDATE orders SET cents = 1 WHERE id = 102;
         ALTER TABLE orders ENABLE ALWAYS TRIGGER _cutover_fence_update, ENABLE ALWAYS TRIGGER _cutover_journal_update;",
    );
    let st = d.json(&["fence", "status"], 1);
    assert_eq!(
        st["breach"],
        "fence breached: the rows of table orders changed without going through its triggers",
        "{layout}: {st}"
    );
    let out = d.cutover(&["replay"]).expect(1);
    assert!(!out.stdout.contains("altered"), "{layout}: {out}");
    assert_eq!(d.applied_entries("source.db"), 0, "{layout}");
}
each_layout!(a_data_only_breach_names_only_the_rows: [sqlite_to_pg, pg_to_pg]);

/// The same on SQLite: the triggers dropped and created again from their
/// own text around the write.
#[test]
fn a_data_only_breach_names_only_the_rows_on_sqlite() {
    let d = Dir::orders_fenced("data-only-breach");
    let (code, out) = python(
        d.path(),
        r#"
import sqlite3
con = sqlite3.connect("target.db", isolation_level=None)
triggers = con.execute("SELECT name, sql FROM sqlite_schema WHERE type = 'trigger' AND tbl_name = 'orders'").fetchall()
con.execute("BEGIN")
for name, _ in triggers:
    con.execute('DROP TRIGGER "%s"' % name.replace('"', '""'))
con.execute("UPDATE orders SET cents = 1 WHERE id = 102")
for _, sql in triggers:
    con.execute(sql)
con.execute("COMMIT")
print("ok")
"#,
        &[],
    );
    assert_eq!(code, 0, "{out}");
    let st = d.json(&["fence", "status"], 1);
    assert_eq!(
        st["breach"],
        "fence breached: the rows of table orders changed without going through its triggers",
        "{st}"
    );
}

/// A damaged page of a SQLite target (two cells of the table's page
/// swapped: the rows come back out of key order; or a cell pointer
/// overwritten: "database disk image is malformed") is reported as damage
/// to that file with the next step, exit 2, by `fence status`, `status`,
/// `replay` and `gate`: never "fence breached", never a collation.
#[test]
fn a_damaged_sqlite_page_is_damage_not_a_breach() {
    for (how, patch) in [
        ("swapped cells", "p[8:10], p[10:12] = p[10:12], p[8:10]"),
        ("overwritten pointers", "p[8:12] = b'\\xff\\xff\\xff\\xff'"),
    ] {
        let d = Dir::orders_fenced("damaged");
        d.copy_db("target.db", "target-copy.db");
        let root = d.int(
            "target-copy.db",
            "SELECT rootpage FROM sqlite_schema WHERE name = 'orders'",
        );
        let page = d.int("target-copy.db", "PRAGMA page_size");
        let script = format!(
            "
import sys
f = open('target-copy.db', 'r+b')
f.seek({offset})
p = bytearray(f.read({page}))
{patch}
f.seek({offset})
f.write(p)
f.close()
print('ok')
",
            offset = (root - 1) * page,
        );
        let (code, out) = python(d.path(), &script, &[]);
        assert_eq!(code, 0, "{how}: {out}");
        std::fs::rename(d.join("target-copy.db"), d.join("target.db")).expect("the damaged copy");
        let source = d.bytes("source.db");
        for args in [
            &["fence", "status"][..],
            &["status"],
            &["replay"],
            &["gate"],
        ] {
            let out = d.cutover(args).expect(2);
            assert!(
                out.stderr.contains("target.db is damaged")
                    && out.stderr.contains("PRAGMA integrity_check"),
                "{how}: {args:?}\n{out}"
            );
            assert!(!out.all().contains("breached"), "{how}: {args:?}\n{out}");
            assert!(!out.stderr.contains("collation"), "{how}: {args:?}\n{out}");
        }
        assert_eq!(d.bytes("source.db"), source, "{how}: replay wrote");
    }
}

/// A role of its own for one test, dropped at the end (after the test's
/// database, which holds its grants).
struct Role {
    admin: String,
    name: String,
}

impl Role {
    fn new(kind: &str, attributes: &str, settings: &str) -> Role {
        let admin = support::postgres::server()
            .map(|s| s.admin_url().to_string())
            .expect("a PostgreSQL server");
        let name = format!("cutover_{kind}_{}", std::process::id());
        let mut c = Client::connect(&admin).expect("the server");
        c.batch_execute(&format!(
            "DROP ROLE IF EXISTS {name}; CREATE ROLE {name} LOGIN {attributes}; {}",
            settings.replace("{role}", &name)
        ))
        .unwrap_or_else(|e| panic!("creating role {name}: {}", support::postgres::message(&e)));
        Role { admin, name }
    }

    /// The folder's spec as this role: `as.toml`.
    fn spec(&self, d: &Dir) {
        let text = std::fs::read_to_string(d.join("spec.toml")).expect("the spec");
        let user = self.admin_user();
        let text = text.replace(&format!("//{user}@"), &format!("//{}@", self.name));
        assert!(
            text.contains(&self.name),
            "the spec names no PostgreSQL url:\n{text}"
        );
        d.write("as.toml", text);
    }

    fn admin_user(&self) -> String {
        let rest = self.admin.split("//").nth(1).expect("an admin url");
        rest.split(['@', ':']).next().expect("a user").to_string()
    }

    fn run(&self, d: &Dir, args: &[&str]) -> support::Output {
        let mut c = d.command(args);
        c.arg("--spec").arg("as.toml");
        c.output()
    }
}

impl Drop for Role {
    fn drop(&mut self) {
        if let Ok(mut c) = Client::connect(&self.admin) {
            let _ = c.batch_execute(&format!("DROP ROLE IF EXISTS {}", self.name));
        }
    }
}

/// A role whose `statement_timeout` is 50 ms (a routine setting on busy
/// servers): cutover's sessions set their own (none), so scanning a fenced
/// table that takes longer is no failure, and certainly no breach.
#[test]
fn a_role_statement_timeout_does_not_stop_the_fingerprint() {
    Layout::SqliteToPg.run("statement_timeout", |layout| {
        let role = Role::new(
            "slow",
            "SUPERUSER",
            "ALTER ROLE {role} SET statement_timeout = '50ms'",
        );
        {
            let d = Dir::orders_on(layout, "statement-timeout");
            d.run(&["load"], 0);
            d.run(&["journal", "install"], 0);
            // Enough rows that reading them takes longer than 50 ms.
            d.client(
                "target.db",
                "INSERT INTO orders (id, cents, status)
                 SELECT g, g, 'active' FROM generate_series(1000, 400999) g;",
            );
            d.run(&["fence", "on"], 0);
            role.spec(&d);
            let st = role.run(&d, &["--format", "json", "fence", "status"]);
            assert_eq!(st.code, Some(0), "{st}");
            assert_eq!(st.json()["intact"], true, "{st}");
            let st = role.run(&d, &["status"]);
            assert_eq!(st.code, Some(0), "{st}");
        }
    });
}

/// A role that may not read a fenced table: the fingerprint cannot be
/// computed, which is exit 2 naming the database's refusal, not a breach.
#[test]
fn a_refused_query_is_exit_2_not_a_breach() {
    Layout::SqliteToPg.run("refused_query", |layout| {
        let role = Role::new("reader", "", "");
        {
            let d = Dir::orders_fenced_on(layout, "refused-query");
            d.client(
                "target.db",
                &format!(
                    "GRANT USAGE ON SCHEMA target TO {r};
                     GRANT SELECT ON ALL TABLES IN SCHEMA target TO {r};
                     GRANT SELECT ON ALL SEQUENCES IN SCHEMA target TO {r};
                     REVOKE SELECT ON orders FROM {r};",
                    r = role.name
                ),
            );
            role.spec(&d);
            for args in [&["fence", "status"][..], &["status"], &["replay"]] {
                let out = role.run(&d, args);
                assert_eq!(out.code, Some(2), "{args:?}\n{out}");
                assert!(out.stderr.contains("permission denied"), "{args:?}\n{out}");
                assert!(!out.all().contains("breached"), "{args:?}\n{out}");
            }
            assert_eq!(d.applied_entries("source.db"), 0);
            d.client(
                "target.db",
                &format!(
                    "REVOKE ALL ON ALL TABLES IN SCHEMA target FROM {r};
                     REVOKE ALL ON ALL SEQUENCES IN SCHEMA target FROM {r};
                     REVOKE ALL ON SCHEMA target FROM {r};",
                    r = role.name
                ),
            );
        }
    });
}

/// On a PostgreSQL target fenced by a superuser, an event trigger refuses
/// schema changes to cutover's tables: the `ALTER TABLE … USING 4` that
/// lowered the boundary without firing a trigger. Should a superuser drop
/// the event triggers first, the fingerprint (which covers the record) and
/// the copy in the source find the rewrite: `fence status`, `replay` and
/// `status` exit 1, replay writes nothing, `fence off` leaves the fence on.
/// `fence off` after a clean replay is not stopped by the guard, and
/// removes it.
fn a_rewritten_fence_record_is_refused_or_found(layout: Layout) {
    let d = Dir::orders_fenced_on(layout, "record-ddl");
    let boundary = d.int("target.db", "SELECT boundary FROM _cutover_fence");
    let alter = "ALTER TABLE _cutover_fence ALTER COLUMN boundary TYPE bigint USING 1";
    let refused = d
        .try_client("target.db", alter)
        .expect_err("the guard refuses it");
    assert!(refused.contains("cutover fence"), "{layout}: {refused}");
    d.try_client("target.db", "DROP TABLE _cutover_journal_tables CASCADE")
        .expect_err("the guard refuses a drop");
    assert_eq!(
        d.int("target.db", "SELECT boundary FROM _cutover_fence"),
        boundary
    );

    d.client(
        "target.db",
        &format!(
            "DO $$ DECLARE e text; BEGIN
               FOR e IN SELECT evtname FROM pg_event_trigger WHERE evtname LIKE '\\_cutover\\_fence\\_%' LOOP
                 EXECUTE format('DROP EVENT TRIGGER %I', e);
               END LOOP;
             END $$;
             {alter};"
        ),
    );
    assert_eq!(d.int("target.db", "SELECT boundary FROM _cutover_fence"), 1);
    d.run(&["fence", "status"], 1);
    d.run(&["status"], 1);
    let source = d.dump("source.db", "orders");
    d.run(&["replay"], 1);
    assert_eq!(d.dump("source.db", "orders"), source, "{layout}");
    assert_eq!(d.applied_entries("source.db"), 0, "{layout}");
    d.run(&["fence", "off"], 1);
    assert!(!target_writable(&d), "{layout}");
}
each_layout!(a_rewritten_fence_record_is_refused_or_found: [sqlite_to_pg, pg_to_pg]);

/// The guard stops neither the rollback nor its end: replay, `fence off`
/// and `journal remove` go through, and no event trigger is left.
fn the_ddl_guard_lets_cutover_finish(layout: Layout) {
    let d = Dir::orders_fenced_on(layout, "ddl-guard-off");
    assert_eq!(
        d.int(
            "target.db",
            "SELECT count(*) FROM pg_event_trigger WHERE evtname LIKE '\\_cutover\\_fence\\_%'"
        ),
        2,
        "{layout}"
    );
    d.run(&["replay"], 0);
    d.run(&["fence", "off"], 0);
    d.run(&["journal", "remove"], 0);
    assert_eq!(
        d.int(
            "target.db",
            "SELECT count(*) FROM pg_event_trigger WHERE evtname LIKE '\\_cutover\\_fence\\_%'"
        ),
        0,
        "{layout}"
    );
    d.run(&["status"], 0);
}
each_layout!(the_ddl_guard_lets_cutover_finish: [sqlite_to_pg, pg_to_pg]);
