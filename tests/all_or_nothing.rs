//! A replay that will not reconcile writes nothing: on every exit of
//! `cutover replay` other than 0 (and on every `replay --dry-run`), the
//! source's user tables, its id sequences (PostgreSQL), its
//! `AUTO_INCREMENT` counters (MySQL) and `_cutover_applied` are exactly as
//! they were before the replay started, and `_cutover_replays` holds at
//! most one new row, the failed verdict (docs/journal.md, "The replay").
//!
//! Each case is one users met: a swap of a UNIQUE value through a
//! temporary one, a source trigger that counts writes, a value the source
//! column rounds, a `TRUNCATE` on a MySQL target, rows left without their
//! parent in a table outside the spec, a damaged SQLite source, a replay
//! crashed before its commit. The application writes through its engine's
//! own client (Python's `sqlite3`, `psql` as a role with ordinary grants,
//! `mariadb` as a user with ordinary grants), after `journal install` as
//! RUNBOOK.md, B1 says; the oracle is the source read by the test's own
//! connection before the replay, or the target's rows turned back into
//! source form by the test.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::ops::Deref;
use std::process::{Command, Stdio};

use rusqlite::types::Value;
use support::{Dir, FAULT_EXIT, Layout, Output, Rows, Spec, Table, each_layout, python};

// --- the source's state, read by the test -----------------------------------------------

/// What a replay that writes nothing leaves exactly as it was: every table
/// of the source not named `_cutover_*` (SQLite's `sqlite_sequence` among
/// them) in key order, `_cutover_applied`, and the id counters the engine
/// keeps outside the tables (each sequence's `last_value` and `is_called`
/// on PostgreSQL, each table's `AUTO_INCREMENT` on MySQL).
#[derive(Clone, Debug, PartialEq)]
struct SourceState {
    tables: BTreeMap<String, Rows>,
    counters: Rows,
}

fn source_state(d: &Dir) -> SourceState {
    source_state_but(d, &[])
}

/// [`source_state`] without the tables named in `skip` (a damaged one).
fn source_state_but(d: &Dir, skip: &[&str]) -> SourceState {
    let db = "source.db";
    let mut tables = BTreeMap::new();
    for t in d.engine().tables(db) {
        if (t.starts_with("_cutover_") && t != "_cutover_applied") || skip.contains(&t.as_str()) {
            continue;
        }
        let rows = d.dump(db, &t);
        tables.insert(t, rows);
    }
    // An applied set made empty holds what an absent one holds: nothing.
    tables.entry("_cutover_applied".into()).or_default();
    let counters = d.counters(db);
    SourceState { tables, counters }
}

/// The verdicts the source records (`_cutover_replays`; 0 before the
/// first).
fn verdicts(d: &Dir) -> i64 {
    d.count("source.db", "_cutover_replays")
}

/// The source as a replay found it.
struct Before {
    state: SourceState,
    verdicts: i64,
}

fn before(d: &Dir) -> Before {
    Before {
        state: source_state(d),
        verdicts: verdicts(d),
    }
}

/// Names every table and counter of `after` that differs from `before`.
fn differences(before: &SourceState, after: &SourceState) -> Vec<String> {
    let mut out = Vec::new();
    let names: std::collections::BTreeSet<&String> =
        before.tables.keys().chain(after.tables.keys()).collect();
    for n in names {
        let (b, a) = (before.tables.get(n), after.tables.get(n));
        if b != a {
            // Each side's row count and the first rows the other side lacks.
            let shown = |rows: Option<&Rows>, other: Option<&Rows>| match rows {
                None => "(no table)".to_string(),
                Some(r) => {
                    let only_here: Vec<&Vec<Value>> = r
                        .iter()
                        .filter(|row| !other.is_some_and(|o| o.contains(row)))
                        .take(5)
                        .collect();
                    format!("{} rows, among them {only_here:?}", r.len())
                }
            };
            out.push(format!("table {n}: {} became {}", shown(b, a), shown(a, b)));
        }
    }
    if before.counters != after.counters {
        out.push(format!(
            "id counters {:?} became {:?}",
            before.counters, after.counters
        ));
    }
    out
}

/// Panics unless the source is as `before` found it and holds at most one
/// verdict more.
#[track_caller]
fn assert_wrote_nothing(d: &Dir, before: &Before, what: &str) {
    let after = source_state(d);
    let changed = differences(&before.state, &after);
    assert!(
        changed.is_empty(),
        "{what}: the source was to be left exactly as it was, but\n{}",
        changed.join("\n")
    );
    let v = verdicts(d);
    assert!(
        v <= before.verdicts + 1,
        "{what}: _cutover_replays went from {} to {v} rows",
        before.verdicts
    );
}

/// `cutover ARGS` in the folder, which must exit with `code`; what it printed.
#[track_caller]
fn run(d: &Dir, args: &[&str], code: i32) -> Output {
    let mut c = d.cutover(args);
    c.env("CUTOVER_BUSY_TIMEOUT_MS", "10000")
        .env("CUTOVER_LOCK_TIMEOUT_MS", "10000");
    c.expect(code)
}

/// The same with `--format json`: its one document.
#[track_caller]
fn json(d: &Dir, args: &[&str], code: i32) -> serde_json::Value {
    let mut c = d.cutover_json(args);
    c.env("CUTOVER_BUSY_TIMEOUT_MS", "10000")
        .env("CUTOVER_LOCK_TIMEOUT_MS", "10000");
    c.expect(code).json()
}

/// `replay ARGS`, which must exit with `code`, then the source checked
/// unchanged.
#[track_caller]
fn replay_writes_nothing(d: &Dir, args: &[&str], code: i32, what: &str) -> Output {
    let b = before(d);
    let mut all = vec!["replay"];
    all.extend_from_slice(args);
    let out = run(d, &all, code);
    assert_wrote_nothing(d, &b, &format!("{what} ({})", out.command));
    out
}

// --- the application ----------------------------------------------------------------

/// A migration's folder, and on a PostgreSQL target the application's role
/// (ordinary grants on the target's tables), dropped after the folder's
/// database.
struct Case {
    d: Dir,
    role: Option<PgRole>,
}

impl Deref for Case {
    type Target = Dir;

    fn deref(&self) -> &Dir {
        &self.d
    }
}

/// A PostgreSQL role of the test's, dropped once its database is gone.
struct PgRole {
    name: String,
    /// The target database's URL as this role, without a schema.
    url: String,
}

impl Drop for PgRole {
    fn drop(&mut self) {
        if let Ok(server) = support::postgres::server()
            && let Ok(mut c) = support::postgres::Client::connect(server.admin_url())
        {
            let _ = c.batch_execute(&format!("DROP ROLE IF EXISTS {}", self.name));
        }
    }
}

impl Case {
    /// `spec`, the source and the target made from their scripts in
    /// `layout`; on a PostgreSQL target, the application's role granted
    /// `SELECT, INSERT, UPDATE, DELETE` on the target's tables and the use
    /// of its sequences, nothing more.
    fn new(layout: Layout, name: &str, spec: &Spec, source: &str, target: &str) -> Case {
        let d = Dir::with_on(layout, name, spec, source, target);
        let role = (d.engine_of("target.db") == "postgres").then(|| {
            let url = d.engine().url("target.db");
            let (base, _) = url.split_once('?').expect("a URL with a schema");
            let (scheme, rest) = base.split_once("://").expect("a URL");
            let (_, at) = rest.split_once('@').expect("a URL with a user");
            let database = at.rsplit('/').next().expect("a database");
            let role = format!("app_{}", database.trim_start_matches("cutover_t_"));
            d.exec(
                "target.db",
                &format!(
                    "CREATE ROLE {role} LOGIN; GRANT USAGE ON SCHEMA target TO {role};
                     GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA target TO {role};
                     GRANT USAGE ON ALL SEQUENCES IN SCHEMA target TO {role};"
                ),
            );
            PgRole {
                url: format!("{scheme}://{role}@{at}"),
                name: role,
            }
        });
        Case { d, role }
    }

    /// `load`, then `journal install` (RUNBOOK.md, A2 and B1).
    fn switched(self) -> Case {
        run(&self, &["load"], 0);
        run(&self, &["journal", "install"], 0);
        self
    }

    /// Runs `sql` on the target as the application: Python's `sqlite3`,
    /// `psql` as the application's role, `mariadb` as the application's
    /// user (the harness's).
    #[track_caller]
    fn application(&self, sql: &str) {
        match &self.role {
            None => self.d.client("target.db", sql),
            Some(role) => {
                let mut child = Command::new("psql")
                    .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", &role.url])
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("starting psql");
                child
                    .stdin
                    .take()
                    .expect("psql's stdin")
                    .write_all(format!("SET search_path = target;\n{sql}\n").as_bytes())
                    .expect("writing to psql");
                let out = child.wait_with_output().expect("running psql");
                assert!(
                    out.status.success(),
                    "the application's psql as {} failed: {}{}\n{sql}",
                    role.name,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }

    /// `fence on` (RUNBOOK.md, C1).
    fn fenced(&self) {
        run(self, &["fence", "on"], 0);
    }
}

/// The entries the target's journal holds, as `journal status` counts them.
fn journal_entries(d: &Dir) -> i64 {
    json(d, &["journal", "status"], 0)["entries"]
        .as_i64()
        .expect("journal status gives its entries")
}

/// `(a), (b), …` of `rows`.
fn values(rows: impl Iterator<Item = String>) -> String {
    rows.collect::<Vec<_>>().join(", ")
}

fn int(v: &Value) -> i64 {
    match v {
        Value::Integer(i) => *i,
        Value::Text(t) => t
            .parse()
            .unwrap_or_else(|_| panic!("{t:?} is not an integer")),
        other => panic!("{other:?} is not an integer"),
    }
}

// --- 1. a swap through a temporary value ----------------------------------------------

/// How many ordinary entries come before the swap (past two default
/// batches), and after it.
const BEFORE_SWAP: i64 = 2_020;
const AFTER_SWAP: i64 = 20;

/// `customers(id, email UNIQUE, n)` on both sides, `before_swap +
/// AFTER_SWAP + 2` rows (1 holds `a@x`, 2 holds `b@x`); loaded and
/// journaled; the application bumps `n` of every other row, then in one
/// transaction swaps the two addresses through `tmp`, then bumps a few more;
/// fenced.
fn swapped(layout: Layout, name: &str, before_swap: i64) -> Case {
    let ddl = "CREATE TABLE customers (id INTEGER PRIMARY KEY, email TEXT NOT NULL UNIQUE, n INTEGER NOT NULL);";
    let total = before_swap + AFTER_SWAP + 2;
    let rows = format!(
        "INSERT INTO customers (id, email, n) VALUES (1, 'a@x', 0), (2, 'b@x', 0), {};",
        values((3..=total).map(|i| format!("({i}, 'u{i}@x', 0)")))
    );
    let c = Case::new(
        layout,
        name,
        &Spec::new().table(Table::new("customers").key(["id"]).copy("email").copy("n")),
        &format!("{ddl}\n{rows}"),
        ddl,
    )
    .switched();
    c.application(&format!(
        "UPDATE customers SET n = n + 1 WHERE id > 2 AND id <= {};",
        before_swap + 2
    ));
    c.application(
        "BEGIN;
         UPDATE customers SET email = 'tmp' WHERE id = 1;
         UPDATE customers SET email = 'a@x' WHERE id = 2;
         UPDATE customers SET email = 'b@x' WHERE id = 1;
         COMMIT;",
    );
    c.application(&format!(
        "UPDATE customers SET n = n + 1 WHERE id > {};",
        before_swap + 2
    ));
    c.fenced();
    c
}

/// The source's `customers` as `(id, email, n)`, read by the test.
fn customers(d: &Dir) -> Vec<(i64, String, i64)> {
    d.dump("source.db", "customers")
        .iter()
        .map(|r| {
            let email = match &r[1] {
                Value::Text(t) => t.clone(),
                other => panic!("an email read as {other:?}"),
            };
            (int(&r[0]), email, int(&r[2]))
        })
        .collect()
}

/// The swap's entries, replayed in journal order, never hold one address
/// twice: at `--batch 1`, at the default batch and with a batch boundary
/// between the swap's first and second entry, the dry run and the replay
/// exit 0 and the source ends as the application's statements would have
/// left it (the oracle: the source as the test read it before the replay,
/// with those statements' effects computed by the test).
fn a_swap_through_a_temporary_value_replays_in_journal_order_at_any_batch(layout: Layout) {
    // One entry a batch over a short journal; the default batch, the swap
    // in its third; a boundary after the swap's first entry.
    let inside = (BEFORE_SWAP + 1).to_string();
    for (batch, before_swap) in [
        (Some("1"), 20),
        (None, BEFORE_SWAP),
        (Some(inside.as_str()), BEFORE_SWAP),
    ] {
        let c = swapped(layout, "swap", before_swap);
        let total = before_swap + AFTER_SWAP + 3;
        assert_eq!(journal_entries(&c), total, "the journal holds every entry");
        let oracle: Vec<(i64, String, i64)> = customers(&c)
            .into_iter()
            .map(|(id, email, n)| match id {
                1 => (id, "b@x".to_string(), n),
                2 => (id, "a@x".to_string(), n),
                _ => (id, email, n + 1),
            })
            .collect();
        let mut args = vec!["replay"];
        if let Some(b) = batch {
            args.extend(["--batch", b]);
        }
        let mut dry = args.clone();
        dry.push("--dry-run");
        let b = before(&c);
        run(&c, &dry, 0);
        assert_wrote_nothing(&c, &b, "the dry run");
        let j = json(&c, &args, 0);
        assert_eq!(j["applied"], total, "batch {batch:?}: {j:#}");
        assert_eq!(
            customers(&c),
            oracle,
            "batch {batch:?}: the source's customers"
        );
        assert_eq!(
            c.applied_entries("source.db"),
            total,
            "entries recorded as applied"
        );
    }
}
each_layout!(a_swap_through_a_temporary_value_replays_in_journal_order_at_any_batch: [pg_to_pg, sqlite, my_to_my]);

// --- 2. a source trigger that counts writes ---------------------------------------------

/// A SQLite source whose `orders` counts its updates in `rev`, a column the
/// spec carries; the application inserts 30 orders, then updates order 101
/// twice. Replay's first update of 101 fires the trigger (SQLite cannot
/// switch one off), so the second finds `rev` moved: exit 1, and the
/// batches of inserts before it are not left in the source.
fn a_source_trigger_that_counts_writes_makes_a_replay_that_writes_nothing(layout: Layout) {
    let c = Case::new(
        layout,
        "trigger-rev",
        &Spec::new().table(Table::orders().copy("rev")),
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, dollars TEXT NOT NULL, status TEXT NOT NULL, rev INTEGER NOT NULL);
         INSERT INTO orders VALUES (101, '12.50', 'A', 0), (102, '7.50', 'C', 0), (103, '20.00', 'A', 0);
         CREATE TRIGGER orders_rev AFTER UPDATE ON orders BEGIN
             UPDATE orders SET rev = OLD.rev + 1 WHERE id = NEW.id;
         END;",
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, cents INTEGER NOT NULL, status TEXT NOT NULL, rev INTEGER NOT NULL);",
    )
    .switched();
    c.application(&format!(
        "INSERT INTO orders (id, cents, status, rev) VALUES {};",
        values((200..230).map(|i| format!("({i}, {i}, 'active', 0)")))
    ));
    c.application("UPDATE orders SET cents = 1300 WHERE id = 101;");
    c.application("UPDATE orders SET cents = 1400 WHERE id = 101;");
    c.fenced();
    replay_writes_nothing(&c, &["--dry-run", "--batch", "10"], 1, "the dry run");
    replay_writes_nothing(&c, &["--batch", "10"], 1, "the replay");
    assert_eq!(c.count("source.db", "orders"), 3, "orders in the source");
}
each_layout!(a_source_trigger_that_counts_writes_makes_a_replay_that_writes_nothing: [sqlite, sqlite_to_pg, sqlite_to_my]);

/// The same trigger on a column the source alone keeps (`rev`, which the
/// spec ignores), `AFTER UPDATE OF dollars, status`: replay writes each
/// journaled update on its own, in journal order, setting the columns it
/// changed, so the trigger fires once per update the application made of
/// those columns — at `--batch 1`, at the default batch, and with a batch
/// boundary between the two updates of 101 — and not for the update of
/// `note` between them; `rev` ends where the old application's statements
/// would have left it (the oracle: 101 at 2, every other order at 0; the 30
/// inserts never fire the update trigger).
fn a_source_trigger_that_counts_writes_fires_once_per_journaled_write(layout: Layout) {
    // The inserts are entries 1..=30, the updates 31 to 33.
    for batch in [Some("1"), None, Some("31")] {
        let c = Case::new(
            layout,
            "trigger-count",
            &Spec::new().table(Table::orders().copy("note").ignore(["rev"])),
            "CREATE TABLE orders (id INTEGER PRIMARY KEY, dollars TEXT NOT NULL, status TEXT NOT NULL, note TEXT NOT NULL DEFAULT '', rev INTEGER NOT NULL DEFAULT 0);
             INSERT INTO orders VALUES (101, '12.50', 'A', '', 0), (102, '7.50', 'C', '', 0), (103, '20.00', 'A', '', 0);
             CREATE TRIGGER orders_rev AFTER UPDATE OF dollars, status ON orders BEGIN
                 UPDATE orders SET rev = OLD.rev + 1 WHERE id = NEW.id;
             END;",
            "CREATE TABLE orders (id INTEGER PRIMARY KEY, cents INTEGER NOT NULL, status TEXT NOT NULL, note TEXT NOT NULL DEFAULT '');",
        )
        .switched();
        three_updates_of_101_replayed(&c, batch, 2);
        let row = c.query(
            "source.db",
            "SELECT dollars, status FROM orders WHERE id = 101",
        );
        assert_eq!(
            row,
            vec![vec![Value::Text("14.00".into()), Value::Text("C".into())]],
            "batch {batch:?}: order 101"
        );
    }
}
each_layout!(a_source_trigger_that_counts_writes_fires_once_per_journaled_write: [sqlite, sqlite_to_pg, sqlite_to_my]);

/// A PostgreSQL or MySQL source whose `BEFORE UPDATE` trigger counts every
/// update of a row in `rev`, a column the spec ignores (a trigger that sets
/// a column the spec does not carry fires on replay's writes): each
/// journaled update is written on its own, so the trigger fires once per
/// update the application made — at `--batch 1`, at the default batch, and
/// with a batch boundary between the updates of 101 — and `rev` ends where
/// the old application's statements would have left it (the oracle: 101 at
/// 3, every other order at 0; inserts never fire an update trigger).
fn a_source_trigger_on_a_server_counts_each_journaled_update(layout: Layout) {
    let trigger = match layout.sides().0 {
        support::layout::On::Pg => {
            "CREATE FUNCTION orders_rev() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN NEW.rev := OLD.rev + 1; RETURN NEW; END $$;
             CREATE TRIGGER orders_rev BEFORE UPDATE ON orders FOR EACH ROW EXECUTE FUNCTION orders_rev();"
        }
        _ => "CREATE TRIGGER orders_rev BEFORE UPDATE ON orders FOR EACH ROW SET NEW.rev = OLD.rev + 1;",
    };
    for batch in [Some("1"), None, Some("31")] {
        let c = Case::new(
            layout,
            "trigger-server",
            &Spec::new().table(Table::orders().copy("note").ignore(["rev"])),
            &format!(
                "CREATE TABLE orders (id INTEGER PRIMARY KEY, dollars DECIMAL(12,2) NOT NULL, status VARCHAR(1) NOT NULL,
                                      note VARCHAR(20) NOT NULL DEFAULT '', rev INTEGER NOT NULL DEFAULT 0);
                 INSERT INTO orders VALUES (101, 12.50, 'A', '', 0), (102, 7.50, 'C', '', 0), (103, 20.00, 'A', '', 0);
                 {trigger}"
            ),
            "CREATE TABLE orders (id INTEGER PRIMARY KEY, cents INTEGER NOT NULL, status VARCHAR(10) NOT NULL,
                                  note VARCHAR(20) NOT NULL DEFAULT '');",
        )
        .switched();
        three_updates_of_101_replayed(&c, batch, 3);
        let row: Vec<String> = c
            .query(
                "source.db",
                "SELECT CAST(dollars AS CHAR(20)), status, note FROM orders WHERE id = 101",
            )
            .concat()
            .iter()
            .map(|v| match v {
                Value::Text(t) => t.trim().to_string(),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(row, ["14.00", "C", "called"], "batch {batch:?}: order 101");
    }
}
each_layout!(a_source_trigger_on_a_server_counts_each_journaled_update: [pg_to_pg, my_to_my, pg_to_my, my_to_pg]);

/// The application inserts orders 200–229, then updates 101 three times
/// (its cents, its note, its cents and status): 33 entries. After `fence
/// on`, the replay at `batch` applies them all, and `rev` in the source is
/// `revs` for 101 and 0 for every other order (the oracle the caller's
/// trigger gives).
#[track_caller]
fn three_updates_of_101_replayed(c: &Case, batch: Option<&str>, revs: i64) {
    c.application(&format!(
        "INSERT INTO orders (id, cents, status) VALUES {};",
        values((200..230).map(|i| format!("({i}, {i}, 'active')")))
    ));
    c.application("UPDATE orders SET cents = 1300 WHERE id = 101;");
    c.application("UPDATE orders SET note = 'called' WHERE id = 101;");
    c.application("UPDATE orders SET cents = 1400, status = 'closed' WHERE id = 101;");
    c.fenced();
    let mut args = vec!["replay"];
    if let Some(b) = batch {
        args.extend(["--batch", b]);
    }
    let j = json(c, &args, 0);
    assert_eq!(j["applied"], 33, "batch {batch:?}: {j:#}");
    let found: Vec<(i64, i64)> = c
        .query("source.db", "SELECT id, rev FROM orders ORDER BY id")
        .iter()
        .map(|r| (int(&r[0]), int(&r[1])))
        .collect();
    let oracle: Vec<(i64, i64)> = [101, 102, 103]
        .into_iter()
        .chain(200..230)
        .map(|id| (id, i64::from(id == 101) * revs))
        .collect();
    assert_eq!(found, oracle, "batch {batch:?}: rev in the source");
}

// --- 3. a value the source column rounds ------------------------------------------------

/// A PostgreSQL source whose `events.at` is `timestamp(0)` and whose id is
/// a sequence; the target keeps fractions of a second. The application
/// inserts 30 events at whole seconds (their ids from the target's
/// counter), then one at `23:59:59.7`, which the source would round to the
/// next day. Exit 1; no event, no sequence step, no applied run is left.
fn a_value_the_source_column_rounds_makes_a_replay_that_writes_nothing(layout: Layout) {
    let target = match layout.sides().1 {
        support::layout::On::Pg => {
            "CREATE TABLE events (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, at timestamp NOT NULL, note text NOT NULL);"
        }
        support::layout::On::My => {
            "CREATE TABLE events (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, at DATETIME(6) NOT NULL, note VARCHAR(50) NOT NULL);"
        }
        support::layout::On::Sqlite => panic!("a layout with a SQLite target"),
    };
    let c = Case::new(
        layout,
        "rounds",
        &Spec::new().table(
            Table::new("events")
                .key(["id"])
                .copy("at")
                .copy("note")
                .watch(["at"]),
        ),
        "CREATE TABLE events (id bigserial PRIMARY KEY, at timestamp(0) NOT NULL, note text NOT NULL);
         INSERT INTO events (at, note) VALUES ('2025-01-01 10:00:00', 'one'), ('2025-01-02 10:00:00', 'two');",
        target,
    )
    .switched();
    c.application(&format!(
        "INSERT INTO events (at, note) VALUES {};",
        values((0..30).map(|i| format!("('2025-06-01 10:00:{i:02}', 'whole {i}')")))
    ));
    c.application("INSERT INTO events (at, note) VALUES ('2025-12-31 23:59:59.7', 'fraction');");
    c.fenced();
    let b = before(&c);
    assert!(
        !b.state.counters.is_empty(),
        "the source's sequence is read"
    );
    replay_writes_nothing(&c, &["--dry-run", "--batch", "10"], 1, "the dry run");
    replay_writes_nothing(&c, &["--batch", "10"], 1, "the replay");
    assert_eq!(source_state(&c).counters, b.state.counters, "the sequences");
}
each_layout!(a_value_the_source_column_rounds_makes_a_replay_that_writes_nothing: [pg_to_pg, pg_to_my]);

// --- 3b. every value the source column would change -----------------------------------

/// Ids of the rows the application writes that the source's columns would
/// change, and the column of each: a fraction of a second under
/// `timestamp(0)`/`DATETIME(0)`, trailing spaces past `varchar(5)`, digits
/// past `numeric(6,2)` before the point and after it, an integer past
/// `smallint`/`TINYINT`, a `char(4)` that PostgreSQL would pad (MySQL:
/// that drops its trailing spaces), and on MySQL a label its `ENUM` lacks.
fn unfit_rows(source_on_my: bool) -> Vec<(i64, &'static str)> {
    let mut rows = vec![
        (101, "at"),
        (102, "code"),
        (103, "amount"),
        (104, "amount"),
        (105, "small"),
        (106, "tag"),
    ];
    if source_on_my {
        rows.push((107, "kind"));
    }
    rows
}

/// `vals` as the test reads it on either engine, every value as text: the
/// oracle the replay's result is compared with.
fn vals_as_text(d: &Dir, db: &str) -> Rows {
    let sql = match d.engine_of(db) {
        "postgres" => {
            "SELECT id::text, to_char(at, 'YYYY-MM-DD HH24:MI:SS.US'), code::text, tag::text,
                    amount::numeric(20,4)::text, small::text, kind::text
             FROM vals ORDER BY id"
        }
        _ => {
            "SELECT CAST(id AS CHAR), DATE_FORMAT(at, '%Y-%m-%d %H:%i:%s.%f'), code, tag,
                    CAST(CAST(amount AS DECIMAL(20,4)) AS CHAR), CAST(small AS CHAR), CAST(kind AS CHAR)
             FROM vals ORDER BY id"
        }
    };
    let mut rows = d.query(db, sql);
    rows.sort_by_key(|r| int(&r[0]));
    rows
}

/// A source whose columns are narrower than the target's, the application
/// writing 30 rows that fit and one row per value the source column would
/// round, cut, pad or refuse ([`unfit_rows`]). Before the fence the
/// rehearsal and `watch` name each of them (table, key, column, value, the
/// source column's type), with nothing written; after it the dry run
/// names the same conflicts beside its plan, and the replay refuses
/// (exit 1) with the source exactly as it was. Once the operator widens
/// the source's columns, `watch` passes and the replay goes through, the
/// source equal, value for value, to the target as the test reads both.
fn a_value_the_source_column_would_change_is_a_conflict_before_writing(layout: Layout) {
    let source_on_my = layout.sides().0 == support::layout::On::My;
    let (source, widen) = if source_on_my {
        (
            "CREATE TABLE vals (id INT PRIMARY KEY, at DATETIME(0) NOT NULL, code VARCHAR(5) NOT NULL,
                                tag CHAR(4) NOT NULL, amount DECIMAL(6,2) NOT NULL, small TINYINT NOT NULL,
                                kind ENUM('a','b') NOT NULL);
             INSERT INTO vals VALUES (1, '2025-01-01 10:00:00', 'abc', 'abcd', 12.50, 7, 'a');",
            "ALTER TABLE vals MODIFY at DATETIME(6) NOT NULL, MODIFY code VARCHAR(50) NOT NULL,
                 MODIFY tag VARCHAR(50) NOT NULL, MODIFY amount DECIMAL(20,4) NOT NULL,
                 MODIFY small INT NOT NULL, MODIFY kind VARCHAR(10) NOT NULL;",
        )
    } else {
        (
            "CREATE TABLE vals (id integer PRIMARY KEY, at timestamp(0) NOT NULL, code varchar(5) NOT NULL,
                                tag char(4) NOT NULL, amount numeric(6,2) NOT NULL, small smallint NOT NULL,
                                kind text NOT NULL);
             INSERT INTO vals VALUES (1, '2025-01-01 10:00:00', 'abc', 'abcd', 12.50, 7, 'a');",
            "ALTER TABLE vals ALTER at TYPE timestamp, ALTER code TYPE text, ALTER tag TYPE text,
                 ALTER amount TYPE numeric(20,4), ALTER small TYPE integer;",
        )
    };
    let target = match layout.sides().1 {
        support::layout::On::Pg => {
            "CREATE TABLE vals (id integer PRIMARY KEY, at timestamp NOT NULL, code text NOT NULL,
                                tag text NOT NULL, amount numeric(20,4) NOT NULL, small integer NOT NULL,
                                kind text NOT NULL);"
        }
        _ => {
            "CREATE TABLE vals (id INT PRIMARY KEY, at DATETIME(6) NOT NULL, code VARCHAR(50) NOT NULL,
                                tag VARCHAR(50) NOT NULL, amount DECIMAL(20,4) NOT NULL, small INT NOT NULL,
                                kind VARCHAR(10) NOT NULL);"
        }
    };
    let c = Case::new(
        layout,
        "fit",
        &Spec::new().table(
            Table::new("vals")
                .key(["id"])
                .copy("at")
                .copy("code")
                .copy("tag")
                .copy("amount")
                .copy("small")
                .copy("kind")
                .watch(["at", "code", "tag", "amount", "small", "kind"]),
        ),
        source,
        target,
    )
    .switched();
    c.application(&format!(
        "INSERT INTO vals (id, at, code, tag, amount, small, kind) VALUES {};",
        values(
            (10..40).map(|i| format!(
                "({i}, '2025-06-01 10:00:{i:02}', 'x{i}', 'wxyz', 1.25, {i}, 'b')"
            ))
        )
    ));
    let tag = if source_on_my { "ab  " } else { "ab" };
    c.application(&format!(
        "INSERT INTO vals (id, at, code, tag, amount, small, kind) VALUES
           (101, '2025-12-31 23:59:59.7', 'ok', 'wxyz', 1.00, 1, 'a'),
           (102, '2025-06-02 10:00:00', 'abc   ', 'wxyz', 1.00, 1, 'a'),
           (103, '2025-06-02 10:00:00', 'ok', 'wxyz', 12345.5, 1, 'a'),
           (104, '2025-06-02 10:00:00', 'ok', 'wxyz', 1.234, 1, 'a'),
           (105, '2025-06-02 10:00:00', 'ok', 'wxyz', 1.00, 40000, 'a'),
           (106, '2025-06-02 10:00:00', 'ok', '{tag}', 1.00, 1, 'a'),
           (107, '2025-06-02 10:00:00', 'ok', 'wxyz', 1.00, 1, 'c');"
    ));
    let mut expected: Vec<(i64, String)> = unfit_rows(source_on_my)
        .into_iter()
        .map(|(k, col)| (k, col.to_string()))
        .collect();
    expected.sort();
    let named = |list: &serde_json::Value, column: &str| -> Vec<(i64, String)> {
        let mut out: Vec<(i64, String)> = list
            .as_array()
            .unwrap_or_else(|| panic!("a list in {list:#}"))
            .iter()
            .map(|f| {
                (
                    f["key"][0]
                        .as_i64()
                        .unwrap_or_else(|| panic!("a key in {f:#}")),
                    f[column].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect();
        out.sort();
        out.dedup();
        out
    };
    let source_type = |column: &str| -> &'static str {
        match (source_on_my, column) {
            (false, "at") => "timestamp(0)",
            (false, "code") => "character varying(5)",
            (false, "amount") => "numeric(6,2)",
            (false, "small") => "smallint",
            (false, "tag") => "character(4)",
            (true, "at") => "datetime",
            (true, "code") => "varchar(5)",
            (true, "amount") => "decimal(6,2)",
            (true, "small") => "tinyint",
            (true, "tag") => "char(4)",
            (true, "kind") => "enum(",
            _ => panic!("no column {column}"),
        }
    };
    // Before the fence: the rehearsal and watch.
    let b = before(&c);
    let rehearsal = json(&c, &["replay", "--rehearse"], 1);
    assert_wrote_nothing(&c, &b, "the rehearsal");
    assert_eq!(
        named(&rehearsal["conflicts"], "column"),
        expected,
        "the rehearsal's conflicts\n{rehearsal:#}"
    );
    assert!(
        rehearsal["applied"].is_i64(),
        "the rehearsal reports what it applied\n{rehearsal:#}"
    );
    for conflict in rehearsal["conflicts"].as_array().expect("conflicts") {
        let column = conflict["column"].as_str().expect("a column");
        let reason = conflict["reason"]
            .as_str()
            .expect("a reason")
            .to_lowercase();
        assert!(
            reason.contains(source_type(column)) && reason.contains("vals"),
            "the conflict names neither the table nor the source column's type: {conflict:#}"
        );
    }
    let watch = json(&c, &["watch"], 1);
    let findings = serde_json::Value::Array(
        watch["findings"]
            .as_array()
            .expect("findings")
            .iter()
            .filter(|f| f["kind"] == "source_column")
            .cloned()
            .collect(),
    );
    assert_eq!(
        named(&findings, "column"),
        expected,
        "watch's findings\n{watch:#}"
    );
    // After it: the dry run with its plan, and the replay.
    c.fenced();
    let b = before(&c);
    let dry = json(&c, &["replay", "--dry-run", "--batch", "10"], 1);
    assert_wrote_nothing(&c, &b, "the dry run");
    assert_eq!(
        named(&dry["conflicts"], "column"),
        expected,
        "the dry run's conflicts\n{dry:#}"
    );
    assert_eq!(dry["pending"], 37, "the dry run's plan\n{dry:#}");
    let out = replay_writes_nothing(&c, &["--batch", "10"], 1, "the replay");
    out.assert_mentions(&["vals", "101", "at"]);
    // The operator widens the source's columns: every entry can go back.
    c.exec("source.db", widen);
    json(&c, &["watch"], 0);
    run(&c, &["replay", "--batch", "10"], 0);
    assert_eq!(
        vals_as_text(&c, "source.db"),
        vals_as_text(&c, "target.db"),
        "the source after the replay against the target"
    );
}
each_layout!(a_value_the_source_column_would_change_is_a_conflict_before_writing: [pg_to_pg, pg_to_my, my_to_pg, my_to_my]);

// --- 3c. a row the application set right ------------------------------------------------

/// `orders(id, amount, status)` in the source; the target adds `currency`,
/// which the spec holds constant at `USD`. The application inserts orders
/// 200–202, sets 202's currency to `EUR` and straight back, and 201's to
/// `EUR`, then inserts 2,400 orders more (past two default batches).
/// `watch` names 201's write (it cannot go back) and not 202's, which the
/// next write set right. The application then puts 201 back to `USD` (with
/// a new amount): the next `watch` passes, and the rehearsal and the
/// replay merge each wrong row into the write that set it right — more
/// than a batch away for 201 — and go through, the source equal to the
/// target's rows as the test reads them.
fn a_row_the_application_set_right_goes_back_and_clears_watch(layout: Layout) {
    let c = Case::new(
        layout,
        "setright",
        &Spec::new().table(
            Table::new("orders")
                .key(["id"])
                .copy("amount")
                .copy("status")
                .constant("currency", "USD"),
        ),
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, amount INTEGER NOT NULL, status VARCHAR(20) NOT NULL);
         INSERT INTO orders VALUES (1, 10, 'A'), (2, 20, 'C'), (3, 30, 'A');",
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, amount INTEGER NOT NULL, status VARCHAR(20) NOT NULL,
                              currency VARCHAR(3) NOT NULL DEFAULT 'USD');",
    )
    .switched();
    c.application(
        "INSERT INTO orders (id, amount, status) VALUES (200, 1, 'A'), (201, 2, 'A'), (202, 3, 'A');
         UPDATE orders SET currency = 'EUR' WHERE id = 202;
         UPDATE orders SET currency = 'USD' WHERE id = 202;
         UPDATE orders SET currency = 'EUR', amount = 4 WHERE id = 201;",
    );
    c.application(&format!(
        "INSERT INTO orders (id, amount, status) VALUES {};",
        values((1_200..3_600).map(|i| format!("({i}, {i}, 'A')")))
    ));
    let seqs = |pass: &serde_json::Value| -> BTreeMap<i64, String> {
        pass["findings"]
            .as_array()
            .expect("findings")
            .iter()
            .map(|f| {
                (
                    f["key"][0].as_i64().expect("a key"),
                    f["kind"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    };
    let pass = json(&c, &["watch"], 1);
    assert_eq!(
        seqs(&pass),
        [(201, "transform".to_string())].into(),
        "watch names the write that cannot go back, and only it\n{pass:#}"
    );
    c.application("UPDATE orders SET currency = 'USD', amount = 5 WHERE id = 201;");
    let pass = json(&c, &["watch"], 0);
    assert_eq!(pass["irreversible"], 0, "{pass:#}");
    let b = before(&c);
    run(&c, &["replay", "--rehearse"], 0);
    assert_wrote_nothing(&c, &b, "the rehearsal");
    c.fenced();
    run(&c, &["replay"], 0);
    let read = |db: &str| c.query(db, "SELECT id, amount, status FROM orders ORDER BY id");
    let source = read("source.db");
    assert_eq!(source, read("target.db"), "the source after the replay");
    assert_eq!(source.len(), 3 + 3 + 2_400);
}
each_layout!(a_row_the_application_set_right_goes_back_and_clears_watch: [sqlite, pg_to_pg, my_to_my, sqlite_to_pg]);

// --- 3d. watch and the rehearsal agree --------------------------------------------------

/// `customers` and `orders` (a foreign key to `customers`, `note
/// varchar(5)`) in the source; the target's `orders` adds `currency`, which
/// the spec holds constant at `USD`. After the switch, one write of each
/// kind watch can judge without writing: order 10's currency set to `EUR`
/// (the spec cannot carry it back), order 20 with a note longer than the
/// source's column, order 21 inserted in both databases, order 11 changed in
/// both, order 22 for a customer the source has since deleted; and writes
/// that go back as they are. `watch` and `replay --rehearse` name the same
/// keys. Once the operator makes the fixes watch lists (in the source: the
/// stray order 21 deleted, order 11 put back, customer 3 restored; in the
/// application: order 10's currency and order 20's note set right),
/// `watch` passes on its next pass, the rehearsal passes, and the replay
/// leaves the source equal to the target as the test reads both.
fn watch_and_the_rehearsal_find_the_same_writes(layout: Layout) {
    let customers = "CREATE TABLE customers (id INTEGER PRIMARY KEY, name VARCHAR(50) NOT NULL);
         INSERT INTO customers VALUES (1, 'ann'), (2, 'bob'), (3, 'cy');";
    let c = Case::new(
        layout,
        "agree",
        &Spec::new()
            .table(Table::new("customers").key(["id"]).copy("name"))
            .table(
                Table::new("orders")
                    .key(["id"])
                    .copy("customer_id")
                    .copy("amount")
                    .copy("note")
                    .constant("currency", "USD")
                    .watch(["note"]),
            ),
        &format!(
            "{customers}
             CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL, amount INTEGER NOT NULL,
                                  note VARCHAR(5) NOT NULL, FOREIGN KEY (customer_id) REFERENCES customers (id),
                                  CONSTRAINT amount_positive CHECK (amount >= 0));
             INSERT INTO orders VALUES (10, 1, 100, 'a'), (11, 1, 110, 'b'), (12, 2, 120, 'c');"
        ),
        "CREATE TABLE customers (id INTEGER PRIMARY KEY, name VARCHAR(50) NOT NULL);
         CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL, amount INTEGER NOT NULL,
                              note VARCHAR(50) NOT NULL, currency VARCHAR(3) NOT NULL DEFAULT 'USD',
                              FOREIGN KEY (customer_id) REFERENCES customers (id));",
    )
    .switched();
    // Written in the source after the switch, by hand.
    c.exec(
        "source.db",
        "INSERT INTO orders VALUES (21, 2, 210, 'src');
         UPDATE orders SET amount = 999 WHERE id = 11;
         DELETE FROM customers WHERE id = 3;",
    );
    c.application(
        "INSERT INTO customers (id, name) VALUES (4, 'dee'), (5, 'eve');
         UPDATE orders SET currency = 'EUR' WHERE id = 10;
         INSERT INTO orders (id, customer_id, amount, note) VALUES (20, 1, 200, 'toolong');
         INSERT INTO orders (id, customer_id, amount, note) VALUES (21, 2, 211, 'app');
         UPDATE orders SET amount = 111 WHERE id = 11;
         INSERT INTO orders (id, customer_id, amount, note) VALUES (22, 3, 220, 'cy');
         INSERT INTO orders (id, customer_id, amount, note) VALUES (30, 4, 300, 'd'), (31, 5, 310, 'e');
         UPDATE orders SET note = 'cc' WHERE id = 12;",
    );
    let keys = |list: &serde_json::Value| -> BTreeSet<(String, i64)> {
        list.as_array()
            .unwrap_or_else(|| panic!("a list: {list:#}"))
            .iter()
            .map(|f| {
                (
                    f["table"].as_str().expect("a table").to_string(),
                    f["key"][0].as_i64().expect("a key"),
                )
            })
            .collect()
    };
    let expected: BTreeSet<(String, i64)> = [10, 11, 20, 21, 22]
        .into_iter()
        .map(|k| ("orders".to_string(), k))
        .collect();
    let pass = json(&c, &["watch"], 1);
    assert_eq!(keys(&pass["findings"]), expected, "watch\n{pass:#}");
    // The CHECK only a write judges is listed, with no rehearsal yet.
    let unjudged = pass["unjudged"].as_array().expect("unjudged");
    assert!(
        unjudged.iter().any(|u| u["table"] == "orders"
            && u["what"]
                .as_str()
                .unwrap_or_default()
                .contains("amount_positive")),
        "{pass:#}"
    );
    assert!(pass.get("rehearsed").is_none(), "{pass:#}");
    let b = before(&c);
    let rehearsal = json(&c, &["replay", "--rehearse"], 1);
    assert_wrote_nothing(&c, &b, "the rehearsal");
    // The rehearsal meets the missing parent as a row left without it,
    // every other finding as a conflict.
    let orphans = rehearsal["foreign_keys"].as_array().expect("foreign_keys");
    assert!(
        orphans.len() == 1
            && orphans[0]
                .as_str()
                .is_some_and(|o| o.contains("orders") && o.contains("22")),
        "the rehearsal\n{rehearsal:#}"
    );
    let mut met = keys(&rehearsal["conflicts"]);
    met.insert(("orders".to_string(), 22));
    assert_eq!(met, expected, "the rehearsal\n{rehearsal:#}");
    // The fixes watch lists.
    c.exec(
        "source.db",
        "DELETE FROM orders WHERE id = 21;
         UPDATE orders SET amount = 110 WHERE id = 11;
         INSERT INTO customers VALUES (3, 'cy');",
    );
    c.application(
        "UPDATE orders SET currency = 'USD' WHERE id = 10;
         UPDATE orders SET note = 'ok' WHERE id = 20;",
    );
    let pass = json(&c, &["watch"], 0);
    assert_eq!(pass["irreversible"], 0, "{pass:#}");
    let rehearsal = json(&c, &["replay", "--rehearse"], 0);
    assert_eq!(
        rehearsal["conflicts"],
        serde_json::json!([]),
        "{rehearsal:#}"
    );
    let pass = json(&c, &["watch"], 0);
    assert_eq!(pass["rehearsed"]["verdict"], "pass", "{pass:#}");
    assert_eq!(pass["rehearsed"]["entries_since"], 0, "{pass:#}");
    c.fenced();
    run(&c, &["replay"], 0);
    for (table, columns) in [
        ("customers", "id, name"),
        ("orders", "id, customer_id, amount, note"),
    ] {
        let sql = format!("SELECT {columns} FROM {table} ORDER BY id");
        assert_eq!(
            c.query("source.db", &sql),
            c.query("target.db", &sql),
            "{table} after the replay"
        );
    }
}
each_layout!(watch_and_the_rehearsal_find_the_same_writes: [pg_to_pg, my_to_my, pg_to_my]);

// --- 4. TRUNCATE on a MySQL target --------------------------------------------------------

/// The running example on a MySQL target: the application writes (RUNBOOK's
/// writes, then 40 more orders), then empties the table with `TRUNCATE`,
/// which fires no trigger. The dry run says the replay would not reconcile
/// (exit 1) and the replay fails (exit 1); neither leaves anything of the
/// journaled writes in the source.
fn a_truncate_on_a_mysql_target_makes_a_replay_that_writes_nothing(layout: Layout) {
    let c = Case::new(
        layout,
        "truncate",
        &Spec::orders(),
        support::ORDERS_SOURCE,
        support::ORDERS_TARGET,
    )
    .switched();
    c.application(support::ORDERS_APP_WRITES);
    c.application(&format!(
        "INSERT INTO orders (id, cents, status) VALUES {};",
        values((200..240).map(|i| format!("({i}, {i}, 'active')")))
    ));
    c.application("TRUNCATE TABLE orders;");
    let fence = run(&c, &["fence", "on"], 0);
    assert!(
        fence.all().contains("TRUNCATE"),
        "fence on says nothing of the TRUNCATE\n{fence}"
    );
    replay_writes_nothing(&c, &["--dry-run", "--batch", "10"], 1, "the dry run");
    replay_writes_nothing(&c, &["--batch", "10"], 1, "the replay");
    assert_eq!(c.count("source.db", "orders"), 3, "orders in the source");
}
each_layout!(a_truncate_on_a_mysql_target_makes_a_replay_that_writes_nothing: [sqlite_to_my, pg_to_my, my_to_my]);

// --- 5. rows left without their parent ------------------------------------------------

/// `orders(id, amount, status)` in the spec, `notes(id, order_id → orders)`
/// in the source only; order 102 has a note. The application inserts 30
/// orders, deletes 102 and updates 101. Replay's delete of 102 leaves note
/// 1 without its parent: exit 1, nothing written, and so again on a rerun
/// with nothing fixed; `status` says the replay FAILED (exit 1) and `fence
/// off` refuses (exit 2). `replay --accept-findings` then commits past the
/// orphan (exit 0), `status` passes and names the accepted finding, and the
/// source holds the target's orders, the note still there.
fn rows_left_without_their_parent_fail_every_replay_until_accepted(layout: Layout) {
    let ddl_orders = "CREATE TABLE orders (id INTEGER PRIMARY KEY, amount INTEGER NOT NULL, status TEXT NOT NULL);";
    let c = Case::new(
        layout,
        "orphans",
        &Spec::new().table(Table::new("orders").key(["id"]).copy("amount").copy("status")),
        &format!(
            "{ddl_orders}
             CREATE TABLE notes (id INTEGER PRIMARY KEY, order_id INTEGER NOT NULL, body TEXT NOT NULL,
                                 CONSTRAINT notes_order FOREIGN KEY (order_id) REFERENCES orders (id));
             INSERT INTO orders VALUES (101, 1250, 'A'), (102, 750, 'C'), (103, 2000, 'A');
             INSERT INTO notes VALUES (1, 102, 'call first'), (2, 103, 'fragile');"
        ),
        ddl_orders,
    )
    .switched();
    c.application(&format!(
        "INSERT INTO orders (id, amount, status) VALUES {};",
        values((200..230).map(|i| format!("({i}, {i}, 'A')")))
    ));
    c.application("DELETE FROM orders WHERE id = 102;");
    c.application("UPDATE orders SET amount = 1400 WHERE id = 101;");
    c.fenced();
    let notes = c.dump("source.db", "notes");

    let first = replay_writes_nothing(&c, &["--batch", "10"], 1, "the replay");
    first.assert_mentions(&["FOREIGN KEYS", "notes"]);
    let again = replay_writes_nothing(&c, &["--batch", "10"], 1, "the replay run again");
    again.assert_mentions(&["FOREIGN KEYS", "notes"]);
    let b = before(&c);
    let status = run(&c, &["status"], 1);
    assert!(status.all().contains("FAILED"), "{status}");
    run(&c, &["fence", "off"], 2);
    assert_wrote_nothing(&c, &b, "status and fence off");

    let accepted = json(&c, &["replay", "--batch", "10", "--accept-findings"], 0);
    let list = accepted["accepted"]
        .as_array()
        .unwrap_or_else(|| panic!("no accepted findings listed: {accepted:#}"));
    assert!(
        list.iter().any(|f| f.to_string().contains("notes")),
        "the accepted findings do not name notes: {accepted:#}"
    );
    let status = run(&c, &["status"], 0);
    assert!(
        status.all().to_lowercase().contains("accepted"),
        "status does not mention the accepted finding\n{status}"
    );
    assert_eq!(
        c.dump("source.db", "orders"),
        c.dump("target.db", "orders"),
        "the source's orders after the accepted replay"
    );
    assert_eq!(c.dump("source.db", "notes"), notes, "the notes");
}
each_layout!(rows_left_without_their_parent_fail_every_replay_until_accepted: [sqlite, pg_to_pg, my_to_my]);

// --- 7. a damaged SQLite source ------------------------------------------------------------

/// A SQLite source with `orders` and `items` in the spec; the application
/// writes 40 orders, then updates an item. After `fence on`, a page of
/// `items` in the source is overwritten. The replay exits 2 naming the
/// damage; the orders, every other table and `_cutover_applied` are as
/// they were.
#[test]
fn a_replay_into_a_damaged_sqlite_source_exits_2_and_writes_nothing() {
    let c = Case::new(
        Layout::Sqlite,
        "damaged-source",
        &Spec::orders().table(Table::new("items").key(["id"]).copy("name")),
        &format!(
            "{}
             CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL);
             INSERT INTO items VALUES (1, 'bolt'), (2, 'nut'), (3, 'washer');",
            support::ORDERS_SOURCE
        ),
        &format!(
            "{}
             CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL);",
            support::ORDERS_TARGET
        ),
    )
    .switched();
    c.application(&format!(
        "INSERT INTO orders (id, cents, status) VALUES {};",
        values((200..240).map(|i| format!("({i}, {i}, 'active')")))
    ));
    c.application("UPDATE items SET name = 'hex nut' WHERE id = 2;");
    c.fenced();
    assert!(
        !c.exists("source.db-wal"),
        "the source is in WAL mode: its pages may not all be in source.db"
    );
    let b = source_state_but(&c, &["items"]);
    let root = c.int(
        "source.db",
        "SELECT rootpage FROM sqlite_schema WHERE name = 'items'",
    );
    let page = c.int("source.db", "PRAGMA page_size");
    let (code, out) = python(
        c.path(),
        &format!(
            "
f = open('source.db', 'r+b')
f.seek({offset})
p = bytearray(f.read({page}))
p[8:12] = b'\\xff\\xff\\xff\\xff'
f.seek({offset})
f.write(p)
f.close()
print('ok')
",
            offset = (root - 1) * page,
        ),
        &[],
    );
    assert_eq!(code, 0, "{out}");
    // SQLite itself calls the file damaged now.
    let (code, out) = python(
        c.path(),
        "
import sqlite3
try:
    print(sqlite3.connect('source.db').execute('PRAGMA quick_check').fetchall())
except sqlite3.DatabaseError as e:
    print('error:', e)
",
        &[],
    );
    assert!(
        code == 0 && !out.contains("[('ok',)]"),
        "the page written over left source.db whole: {out}"
    );
    let out = run(&c, &["replay", "--batch", "10"], 2);
    assert!(
        out.stderr.contains("source.db is damaged"),
        "the replay does not name the damage\n{out}"
    );
    let changed = differences(&b, &source_state_but(&c, &["items"]));
    assert!(
        changed.is_empty(),
        "a replay into a damaged source wrote:\n{}",
        changed.join("\n")
    );
}

// --- 8. a crash before the commit ----------------------------------------------------

/// The running example after RUNBOOK's writes and 200 more orders, replayed
/// in batches of 20 with `CUTOVER_FAULT=before-commit`: the crash (exit 73)
/// leaves the source exactly as it was; the rerun applies every entry
/// (exit 0) and the source then holds the target's orders in source form.
fn a_replay_crashed_before_its_commit_leaves_nothing_and_the_rerun_applies_everything(
    layout: Layout,
) {
    let c = Case::new(
        layout,
        "before-commit",
        &Spec::orders(),
        support::ORDERS_SOURCE,
        support::ORDERS_TARGET,
    )
    .switched();
    c.application(support::ORDERS_APP_WRITES);
    c.application(&format!(
        "INSERT INTO orders (id, cents, status) VALUES {};",
        values((1000..1200).map(|i| format!(
            "({i}, {}, '{}')",
            i * 7,
            if i % 3 == 0 { "closed" } else { "active" }
        )))
    ));
    c.application("UPDATE orders SET cents = cents + 1 WHERE id % 2 = 0;");
    c.fenced();
    // The oracle: the target's orders in source form, by arithmetic here.
    let expected: Rows = c
        .dump("target.db", "orders")
        .iter()
        .map(|r| {
            let status = match &r[2] {
                Value::Text(s) if s == "active" => "A",
                Value::Text(s) if s == "closed" => "C",
                other => panic!("a status the map does not know: {other:?}"),
            };
            vec![
                Value::Integer(int(&r[0])),
                Value::Text(support::dollars(int(&r[1]))),
                Value::Text(status.into()),
            ]
        })
        .collect();
    let b = before(&c);
    let mut crash = c.cutover(&["replay", "--batch", "20"]);
    crash
        .env("CUTOVER_FAULT", "before-commit")
        .env("CUTOVER_BUSY_TIMEOUT_MS", "10000");
    let out = crash.expect(FAULT_EXIT);
    assert_wrote_nothing(
        &c,
        &b,
        &format!("a replay crashed before its commit\n{out}"),
    );
    let rerun = json(&c, &["replay", "--batch", "20"], 0);
    assert_eq!(rerun["verdict"], "pass", "{rerun:#}");
    let entries = journal_entries(&c);
    assert_eq!(
        rerun["applied"].as_i64().unwrap_or(-1) + rerun["already_in_place"].as_i64().unwrap_or(0),
        entries,
        "{rerun:#}"
    );
    let source: Rows = c
        .dump("source.db", "orders")
        .iter()
        .map(|r| vec![Value::Integer(int(&r[0])), r[1].clone(), r[2].clone()])
        .collect();
    assert_eq!(source, expected, "the source after the rerun");
}
each_layout!(a_replay_crashed_before_its_commit_leaves_nothing_and_the_rerun_applies_everything);
