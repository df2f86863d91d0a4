//! The journal on a MySQL (MariaDB here) target, through the binary: a
//! SQLite source loaded into MySQL (`cutover load`), `journal install`,
//! `journal status`, then the application writing through the `mariadb`
//! command-line client as a user with ordinary grants (`SELECT, INSERT,
//! UPDATE, DELETE`), and every entry read back through the `JournalLog`
//! interface compared with an oracle the test computes from the writes it
//! made: `REPLACE`, `INSERT … ON DUPLICATE KEY UPDATE`, `INSERT IGNORE`,
//! multi-table `UPDATE` and `DELETE`, a transaction, a rollback, on a row
//! wider than MySQL's 65,535-byte row limit would hold twice; rows that
//! `INSERT IGNORE` and `UPDATE IGNORE` skipped, through `fence on` and
//! `replay`, the SQLite source then compared with the target read by the
//! test's own client and turned into source form. Also: two
//! writers interleaving their commits through two client sessions; the
//! journal's triggers kept first among the table's `AFTER` triggers;
//! `TRUNCATE` detected; a cascading foreign key refused before any
//! trigger is written.

mod support;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use cutover::db::{Access, Db, JournalEntry, Op};
use cutover::spec::Location;
use cutover::value::Value;
use support::mysql::{TestDb, orders_spec};
use support::run::cutover_in;
use support::seam::Seam;

/// Three `VARCHAR(5000)` utf8mb4 columns: 60,000 bytes of the row limit
/// for one image; two images of them would not fit in `VARCHAR`s.
const TARGET: &str = "
CREATE TABLE orders (
    id BIGINT NOT NULL PRIMARY KEY,
    cents BIGINT NOT NULL,
    status VARCHAR(10) NOT NULL,
    note VARCHAR(5000) CHARACTER SET utf8mb4 NULL,
    n2 VARCHAR(5000) CHARACTER SET utf8mb4 NULL,
    n3 VARCHAR(5000) CHARACTER SET utf8mb4 NULL,
    code VARBINARY(64) NULL,
    tag CHAR(4) NULL,
    price DECIMAL(10,2) NULL
) ENGINE = InnoDB;
CREATE TABLE bumps (id BIGINT NOT NULL PRIMARY KEY, bump BIGINT NOT NULL) ENGINE = InnoDB;
INSERT INTO bumps VALUES (1, 1000), (10, 2000), (3, 7);
CREATE TABLE audit (id INT NOT NULL AUTO_INCREMENT PRIMARY KEY, what VARCHAR(40) NOT NULL) ENGINE = InnoDB;
";

const SOURCE: &str = "
CREATE TABLE orders (id INTEGER PRIMARY KEY, dollars TEXT NOT NULL, status TEXT NOT NULL,
    note TEXT, n2 TEXT, n3 TEXT, code BLOB, tag TEXT, price TEXT);
INSERT INTO orders VALUES
    (1, '1.50', 'A', 'one', NULL, NULL, x'0102', 't1', '12.50'),
    (2, '2.00', 'C', NULL, 'two', NULL, NULL, NULL, NULL),
    (3, '0.01', 'A', 'three', NULL, 'x', x'', 'abc', '0.00');
";

const COPIES: [&str; 6] = ["note", "n2", "n3", "code", "tag", "price"];

/// A SQLite source, a MariaDB target, and the spec between them.
struct Setup {
    my: TestDb,
    dir: tempfile::TempDir,
}

impl Setup {
    fn new(test: &str, target: &str, more: &str) -> Option<Setup> {
        let my = TestDb::new(test)?;
        my.exec(target);
        let dir = tempfile::tempdir().expect("a folder");
        rusqlite::Connection::open(dir.path().join("source.db"))
            .expect("the source")
            .execute_batch(SOURCE)
            .expect("the source's rows");
        std::fs::write(
            dir.path().join("spec.toml"),
            orders_spec("sqlite://source.db", &my.url, &COPIES, more),
        )
        .expect("the spec");
        Some(Setup { my, dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Load, then the journal installed: the state after the switch.
    fn switched(test: &str) -> Option<Setup> {
        let s = Setup::new(test, TARGET, "")?;
        cutover_in(s.path(), &["load"]).expect(0);
        cutover_in(s.path(), &["journal", "install"]).expect(0);
        Some(s)
    }

    /// The tool's connection to the target, to read the journal.
    fn target(&self) -> Db {
        Db::open(
            &Location::Server(self.my.url.clone()),
            Access::Read,
            cutover::spec::Side::Target,
        )
        .expect("opening the target")
    }

    /// `journal status --format json`, its one table.
    fn status(&self) -> serde_json::Value {
        let j = cutover_in(self.path(), &["journal", "status", "--format", "json"])
            .expect(0)
            .json();
        j["tables"][0].clone()
    }
}

/// The images' columns, as the journal records them.
fn image_columns(db: &Db) -> Vec<String> {
    let tables = db.journal_tables().expect("the journal's images");
    assert_eq!(tables.len(), 1, "{tables:?}");
    tables[0].columns.clone()
}

/// A row of `orders` as the journal's images hold it (its columns in
/// `columns` order), from the values by name.
fn image(columns: &[String], values: &[(&str, Value)]) -> Vec<Value> {
    columns
        .iter()
        .map(|c| {
            values
                .iter()
                .find(|(n, _)| n == c)
                .map(|(_, v)| v.clone())
                .unwrap_or(Value::Null)
        })
        .collect()
}

fn int(i: i64) -> Value {
    Value::Integer(i)
}

fn text(t: &str) -> Value {
    Value::Text(t.to_string())
}

/// What an entry must be: its op and images.
#[derive(Clone, Debug, PartialEq)]
struct Want {
    op: Op,
    old: Option<Vec<Value>>,
    new: Option<Vec<Value>>,
}

/// The oracle: the table as the test's writes leave it, by key, and the
/// entries each write must journal.
struct Oracle {
    columns: Vec<String>,
    rows: BTreeMap<i64, Vec<Value>>,
}

impl Oracle {
    fn key(row: &[Value]) -> i64 {
        match row[0] {
            Value::Integer(i) => i,
            ref other => panic!("a key of {other:?}"),
        }
    }

    fn insert(&mut self, row: Vec<Value>) -> Want {
        assert!(self.rows.insert(Oracle::key(&row), row.clone()).is_none());
        Want {
            op: Op::Insert,
            old: None,
            new: Some(row),
        }
    }

    fn delete(&mut self, id: i64) -> Want {
        let old = self.rows.remove(&id).expect("a row to delete");
        Want {
            op: Op::Delete,
            old: Some(old),
            new: None,
        }
    }

    /// The row under `id` with `set` (column, value) changed.
    fn update(&mut self, id: i64, set: &[(&str, Value)]) -> Want {
        let old = self.rows.remove(&id).expect("a row to update");
        let mut new = old.clone();
        for (c, v) in set {
            let i = self
                .columns
                .iter()
                .position(|n| n == c)
                .expect("a journaled column");
            new[i] = v.clone();
        }
        self.rows.insert(Oracle::key(&new), new.clone());
        Want {
            op: Op::Update,
            old: Some(old),
            new: Some(new),
        }
    }

    fn get(&self, id: i64, column: &str) -> Value {
        let i = self.columns.iter().position(|n| n == column).unwrap();
        self.rows[&id][i].clone()
    }
}

/// The key an entry is about (its new image's, else its old one's).
fn entry_key(e: &JournalEntry) -> i64 {
    Oracle::key(e.new.as_ref().or(e.old.as_ref()).expect("an image"))
}

fn want_key(w: &Want) -> i64 {
    Oracle::key(w.new.as_ref().or(w.old.as_ref()).expect("an image"))
}

/// The journal's entries after `after`, in seq order.
fn entries(db: &Db, after: i64) -> Vec<JournalEntry> {
    db.journal_page(after, i64::MAX, 10_000)
        .expect("reading the journal")
}

/// Each entry as the oracle's `Want`.
fn as_want(e: &JournalEntry) -> Want {
    Want {
        op: e.op,
        old: e.old.clone(),
        new: e.new.clone(),
    }
}

/// The entries one statement journaled must be `want`: the same entries,
/// each key's in the order given (a multi-table statement visits rows in
/// an order of its own, so entries of different keys may come in either).
#[track_caller]
fn assert_journaled(what: &str, got: &[JournalEntry], want: &[Want]) {
    let group = |v: Vec<(i64, Want)>| {
        let mut m: BTreeMap<i64, Vec<Want>> = BTreeMap::new();
        for (k, w) in v {
            m.entry(k).or_default().push(w);
        }
        m
    };
    let got_by_key = group(got.iter().map(|e| (entry_key(e), as_want(e))).collect());
    let want_by_key = group(want.iter().map(|w| (want_key(w), w.clone())).collect());
    assert_eq!(got_by_key, want_by_key, "{what}: the entries journaled");
    let seqs: Vec<i64> = got.iter().map(|e| e.seq).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{what}: {seqs:?}");
}

#[test]
fn every_write_of_the_application_is_journaled_exactly() {
    let Some(s) = Setup::switched("mysql_journal_exact") else {
        return;
    };
    let status = s.status();
    assert_eq!(status["triggers"], 3, "{status}");
    assert_eq!(status["stale"], serde_json::json!([]), "{status}");
    // Three triggers, each the first of its event, and nothing in the
    // journal yet (the proof's writes were rolled back).
    assert_eq!(
        s.my.rows(
            "SELECT EVENT_MANIPULATION, ACTION_TIMING, ACTION_ORDER FROM information_schema.TRIGGERS
             WHERE TRIGGER_SCHEMA = DATABASE() AND EVENT_OBJECT_TABLE = 'orders' ORDER BY 1"
        ),
        [["DELETE", "AFTER", "1"], ["INSERT", "AFTER", "1"], ["UPDATE", "AFTER", "1"]]
    );
    let db = s.target();
    assert_eq!(db.journal().journal_extent().unwrap().entries, 0);
    let columns = image_columns(&db);
    let row = |values: &[(&str, Value)]| image(&columns, values);
    let mut oracle = Oracle {
        columns: columns.clone(),
        rows: BTreeMap::new(),
    };
    // The rows as loaded (dollars to cents, the status mapped).
    for r in [
        row(&[
            ("id", int(1)),
            ("cents", int(150)),
            ("status", text("active")),
            ("note", text("one")),
            ("code", Value::Blob(vec![1, 2])),
            ("tag", text("t1")),
            ("price", text("12.50")),
        ]),
        row(&[
            ("id", int(2)),
            ("cents", int(200)),
            ("status", text("closed")),
            ("n2", text("two")),
        ]),
        row(&[
            ("id", int(3)),
            ("cents", int(1)),
            ("status", text("active")),
            ("note", text("three")),
            ("n3", text("x")),
            ("code", Value::Blob(vec![])),
            ("tag", text("abc")),
            ("price", text("0.00")),
        ]),
    ] {
        oracle.insert(r);
    }

    let app = s.my.app_user();
    let wide = |c: &str| c.repeat(5000);
    let mut after = 0;
    let mut step = |what: &str, sql: &str, want: Vec<Want>| {
        app.exec(sql)
            .unwrap_or_else(|e| panic!("{what}: the application's write: {e}"));
        let got = entries(&db, after);
        assert_journaled(what, &got, &want);
        if let Some(last) = got.last() {
            after = last.seq;
        }
    };

    // A wide row: three 5,000-character columns of 4-, 2- and 1-byte
    // characters, both images of it in the journal.
    let w = oracle.insert(row(&[
        ("id", int(10)),
        ("cents", int(700)),
        ("status", text("active")),
        ("note", text(&wide("𝄞"))),
        ("n2", text(&wide("é"))),
        ("n3", text(&wide("x"))),
        ("code", Value::Blob(vec![0, 255, 16])),
        ("tag", text("ab")),
        ("price", text("1.50")),
    ]));
    step(
        "a wide insert",
        "INSERT INTO orders (id, cents, status, note, n2, n3, code, tag, price)
         VALUES (10, 700, 'active', REPEAT('𝄞', 5000), REPEAT('é', 5000), REPEAT('x', 5000), X'00FF10', 'ab  ', 1.5)",
        vec![w],
    );
    // REPLACE of a row there: its delete, then the new row's insert.
    let d = oracle.delete(1);
    let i = oracle.insert(row(&[
        ("id", int(1)),
        ("cents", int(151)),
        ("status", text("closed")),
        ("note", text("r")),
        ("tag", text("r")),
        ("price", text("0.00")),
    ]));
    step(
        "REPLACE",
        "REPLACE INTO orders (id, cents, status, note, n2, n3, code, tag, price)
         VALUES (1, 151, 'closed', 'r', NULL, NULL, NULL, 'r', 0)",
        vec![d, i],
    );
    // ON DUPLICATE KEY UPDATE: an update of the row there, never an insert.
    let u = oracle.update(2, &[("cents", int(205)), ("note", text("dup"))]);
    step(
        "INSERT … ON DUPLICATE KEY UPDATE",
        "INSERT INTO orders (id, cents, status) VALUES (2, 0, 'active')
         ON DUPLICATE KEY UPDATE cents = cents + 5, note = 'dup'",
        vec![u],
    );
    // INSERT IGNORE: the row that collides is not journaled, the other is.
    let i = oracle.insert(row(&[
        ("id", int(11)),
        ("cents", int(1)),
        ("status", text("active")),
    ]));
    step(
        "INSERT IGNORE",
        "INSERT IGNORE INTO orders (id, cents, status) VALUES (2, 1, 'active'), (11, 1, 'active')",
        vec![i],
    );
    // UPDATE IGNORE of a key onto one taken: MariaDB fires the update
    // trigger for the row it skips, with the NEW it would have written;
    // nothing happened to the row, and nothing is journaled.
    step(
        "UPDATE IGNORE onto a taken key",
        "UPDATE IGNORE orders SET id = 2, cents = 9 WHERE id = 11",
        vec![],
    );
    // The same statement over two rows: the one that could move did, and
    // only it is journaled; then it moves back.
    let there = oracle.update(11, &[("id", int(13))]);
    step(
        "UPDATE IGNORE, one row skipped and one moved",
        "UPDATE IGNORE orders SET id = id + 2 WHERE id IN (1, 11)",
        vec![there],
    );
    let back = oracle.update(13, &[("id", int(11))]);
    step(
        "a key moved back",
        "UPDATE orders SET id = 11 WHERE id = 13",
        vec![back],
    );
    // A multi-table UPDATE: each row of orders it changes (bumps is not
    // journaled).
    let mut bumped = Vec::new();
    for (id, bump) in [(1, 1000), (3, 7), (10, 2000)] {
        let Value::Integer(c) = oracle.get(id, "cents") else {
            panic!()
        };
        bumped.push(oracle.update(id, &[("cents", int(c + bump))]));
    }
    step(
        "a multi-table UPDATE",
        "UPDATE orders o JOIN bumps b ON b.id = o.id SET o.cents = o.cents + b.bump, b.bump = 0",
        bumped,
    );
    // A multi-table DELETE: the rows of orders it deletes.
    let d = oracle.delete(10);
    step(
        "a multi-table DELETE",
        "DELETE o, b FROM orders o JOIN bumps b ON b.id = o.id WHERE o.id = 10",
        vec![d],
    );
    // A transaction: a key moved, the moved row changed, a delete; each
    // in the order it ran.
    let moved = oracle.update(11, &[("id", int(12))]);
    let changed = oracle.update(12, &[("status", text("closed"))]);
    let gone = oracle.delete(2);
    step(
        "a transaction",
        "START TRANSACTION;
         UPDATE orders SET id = 12 WHERE id = 11;
         UPDATE orders SET status = 'closed' WHERE id = 12;
         DELETE FROM orders WHERE id = 2;
         COMMIT;",
        vec![moved, changed, gone],
    );
    // Rolled back: nothing.
    step(
        "a rollback",
        "START TRANSACTION; INSERT INTO orders (id, cents, status) VALUES (99, 1, 'active');
         UPDATE orders SET cents = 0; ROLLBACK;",
        vec![],
    );

    // Every value read back from the journal is what a scan of the table
    // reads now: the last image of each key is its row, and a key whose
    // last entry is a delete is gone.
    let all = entries(&db, 0);
    let mut last: BTreeMap<i64, Option<Vec<Value>>> = BTreeMap::new();
    for e in &all {
        if let Some(old) = &e.old {
            last.entry(Oracle::key(old)).or_insert(None);
        }
        match &e.new {
            Some(new) => {
                if let Some(old) = &e.old
                    && Oracle::key(old) != Oracle::key(new)
                {
                    last.insert(Oracle::key(old), None);
                }
                last.insert(Oracle::key(new), Some(new.clone()));
            }
            None => {
                last.insert(entry_key(e), None);
            }
        }
    }
    let names: Vec<&str> = columns.iter().map(String::as_str).collect();
    let sql = db.rows().table_sql("orders", &names, 1, None);
    for (id, image) in &last {
        let stored = db.rows().get_row(&sql, &[int(*id)]).expect("reading a row");
        assert_eq!(stored.as_ref(), image.as_ref(), "key {id}");
        assert_eq!(stored.as_ref(), oracle.rows.get(id), "key {id}");
    }
    // And the counts journal status reports are those entries.
    let status = s.status();
    let count = |op: Op| all.iter().filter(|e| e.op == op).count() as i64;
    assert_eq!(status["insert"], count(Op::Insert), "{status}");
    assert_eq!(status["update"], count(Op::Update), "{status}");
    assert_eq!(status["delete"], count(Op::Delete), "{status}");
    assert_eq!(all.len(), 14);
    // watch reads the same entries from the MySQL journal, and finds each
    // one able to go back to the SQLite source.
    let watch = cutover_in(s.path(), &["watch", "--format", "json"])
        .expect(0)
        .json();
    assert_eq!(
        (&watch["entries"], &watch["checked"], &watch["verdict"]),
        (
            &serde_json::json!(14),
            &serde_json::json!(14),
            &serde_json::json!("pass")
        ),
        "{watch}"
    );
    // A status the spec's map cannot take back is what watch finds.
    app.exec("UPDATE orders SET status = 'pending' WHERE id = 3")
        .unwrap();
    let watch = cutover_in(s.path(), &["watch", "--format", "json"])
        .output()
        .json();
    assert_eq!(watch["irreversible"], 1, "{watch}");
}

/// The target's orders as the test's own client reads them, each in the
/// source's form: the spec's reverse by the test's own arithmetic (cents
/// to two-decimal text, the status word to its code) and the copies as
/// they are, byte for byte (text as text, `code` as a blob); in key order.
fn target_in_source_form(my: &TestDb) -> Vec<Vec<rusqlite::types::Value>> {
    use rusqlite::types::Value as V;
    let nullable = |c: &str, shown: &str| format!("IF({c} IS NULL, 'N', CONCAT('V', {shown}))");
    let sql = format!(
        "SELECT id, cents, status, {}, {}, {}, {}, {}, {} FROM orders ORDER BY id",
        nullable("note", "HEX(note)"),
        nullable("n2", "HEX(n2)"),
        nullable("n3", "HEX(n3)"),
        nullable("code", "HEX(code)"),
        nullable("tag", "HEX(tag)"),
        nullable("price", "price"),
    );
    let bytes = |hex: &str| -> Vec<u8> {
        (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
            .collect()
    };
    let field = |f: &str, as_value: &dyn Fn(&str) -> V| match f.strip_prefix('V') {
        Some(v) => as_value(v),
        None => {
            assert_eq!(f, "N", "a field of the oracle's query");
            V::Null
        }
    };
    let text = |hex: &str| V::Text(String::from_utf8(bytes(hex)).expect("UTF-8 text"));
    my.rows(&sql)
        .into_iter()
        .map(|r| {
            let cents: i64 = r[1].parse().expect("cents");
            let dollars = format!(
                "{}{}.{:02}",
                if cents < 0 { "-" } else { "" },
                cents.abs() / 100,
                cents.abs() % 100
            );
            let status = match r[2].as_str() {
                "active" => "A",
                "closed" => "C",
                other => panic!("a status the spec's map does not take back: {other}"),
            };
            vec![
                V::Integer(r[0].parse().expect("a key")),
                V::Text(dollars),
                V::Text(status.into()),
                field(&r[3], &text),
                field(&r[4], &text),
                field(&r[5], &text),
                field(&r[6], &|h| V::Blob(bytes(h))),
                field(&r[7], &text),
                field(&r[8], &|p| V::Text(p.into())),
            ]
        })
        .collect()
}

/// Rows that `INSERT IGNORE` and `UPDATE IGNORE` skipped (MariaDB fires
/// `AFTER UPDATE` for a skipped update all the same) leave nothing a
/// replay would apply: once fenced and replayed, every table of the SQLite
/// source is the target as the test's own client reads it, in source form.
#[test]
fn rows_skipped_by_ignore_replay_to_a_source_equal_to_the_target() {
    let Some(s) = Setup::switched("mysql_journal_ignore_replay") else {
        return;
    };
    let app = s.my.app_user();
    for (what, sql) in [
        // 2 is there (skipped); 11, 20 and 21 are new.
        (
            "INSERT IGNORE",
            "INSERT IGNORE INTO orders (id, cents, status) VALUES
                 (2, 1, 'active'), (11, 200, 'closed'), (20, 5, 'active'), (21, 6, 'active')",
        ),
        // Skipped onto a row equal to NEW in every column: the table holds
        // NEW, yet nothing moved.
        (
            "UPDATE IGNORE onto a row like NEW",
            "UPDATE IGNORE orders SET id = 2, n2 = 'two' WHERE id = 11",
        ),
        // 1 onto 3 is skipped; 11 moves to 13.
        (
            "UPDATE IGNORE, one row skipped and one moved",
            "UPDATE IGNORE orders SET id = id + 2, cents = cents + 1 WHERE id IN (1, 11)",
        ),
        // 20 onto 21 is skipped; 21 moves to 22.
        (
            "UPDATE IGNORE in key order",
            "UPDATE IGNORE orders SET id = id + 1 WHERE id IN (20, 21) ORDER BY id",
        ),
        // 22 moves to 24, then 20 onto the 22 it left.
        (
            "UPDATE IGNORE onto a key the same statement freed",
            "UPDATE IGNORE orders SET id = id + 2 WHERE id IN (20, 22) ORDER BY id DESC",
        ),
        (
            "a transaction with a skipped move",
            "START TRANSACTION;
             UPDATE IGNORE orders SET id = 3 WHERE id = 13;
             DELETE FROM orders WHERE id = 24;
             UPDATE orders SET status = 'closed', tag = 'z' WHERE id = 1;
             COMMIT",
        ),
        // 11 and 20 are free again, 13 is taken (skipped).
        (
            "INSERT IGNORE … SELECT",
            "INSERT IGNORE INTO orders (id, cents, status, code)
             SELECT id + 10, bump, 'active', X'FF00' FROM bumps",
        ),
    ] {
        app.exec(sql)
            .unwrap_or_else(|e| panic!("{what}: the application's write: {e}"));
    }
    // The statements did what they are here for: the skipped rows are
    // where they were, the moved ones where they went.
    let keys: Vec<String> =
        s.my.rows("SELECT id FROM orders ORDER BY id")
            .into_iter()
            .map(|r| r[0].clone())
            .collect();
    assert_eq!(keys, ["1", "2", "3", "11", "13", "20", "22"]);
    let status = s.status();
    assert_eq!(
        (&status["insert"], &status["update"], &status["delete"]),
        (
            &serde_json::json!(5),
            &serde_json::json!(5),
            &serde_json::json!(1)
        ),
        "only what happened is journaled: {status}"
    );

    cutover_in(s.path(), &["fence", "on"]).expect(0);
    let replay = cutover_in(s.path(), &["--format", "json", "replay"])
        .expect(0)
        .json();
    assert_eq!(replay["verdict"], "pass", "{replay:#}");

    let source = rusqlite::Connection::open(s.path().join("source.db")).expect("the source");
    let mut tables = source
        .prepare(
            "SELECT name FROM sqlite_master WHERE type = 'table'
             AND name NOT LIKE '\\_cutover\\_%' ESCAPE '\\' ORDER BY name",
        )
        .unwrap();
    let tables: Vec<String> = tables
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(tables, ["orders"], "the source's tables");
    let mut read = source
        .prepare(
            "SELECT id, dollars, status, note, n2, n3, code, tag, price FROM orders ORDER BY id",
        )
        .unwrap();
    let rows: Vec<Vec<rusqlite::types::Value>> = read
        .query_map([], |r| (0..9).map(|i| r.get(i)).collect())
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        rows,
        target_in_source_form(&s.my),
        "the source is the target"
    );
}

/// A `mariadb` session kept open, fed one statement at a time.
struct Session {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    marks: u32,
}

impl Session {
    fn open(s: &Setup, user: &support::mysql::AppUser<'_>) -> Session {
        let mut child =
            s.my.server()
                .client(&user.name, Some(&user.password), Some(&s.my.name))
                .arg("--unbuffered")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("starting the client");
        let stdin = child.stdin.take().unwrap();
        let stdout: ChildStdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Session {
            child,
            stdin,
            lines,
            marks: 0,
        }
    }

    /// Sends `sql` without waiting for it (it may wait for a lock).
    fn send(&mut self, sql: &str) -> String {
        self.marks += 1;
        let mark = format!("mark-{}", self.marks);
        writeln!(self.stdin, "{sql};\nSELECT '{mark}';").expect("writing to the client");
        self.stdin.flush().unwrap();
        mark
    }

    /// Waits until the statements before `mark` have run.
    fn wait(&mut self, mark: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l == mark => return,
                Ok(_) => {}
                Err(e) => panic!("the session did not reach {mark}: {e}"),
            }
        }
    }

    /// Runs `sql` and waits for it.
    fn run(&mut self, sql: &str) {
        let mark = self.send(sql);
        self.wait(&mark);
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "ROLLBACK;");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Two writers whose transactions overlap: each entry's seq is taken when
/// its write runs (not when it commits), and a write waiting for another
/// transaction's row lock takes its seq after that transaction's entries
/// for the row, so each row's entries are in the order its writes
/// happened.
#[test]
fn two_writers_interleaving_commits_keep_each_rows_order() {
    let Some(s) = Setup::switched("mysql_journal_writers") else {
        return;
    };
    let db = s.target();
    let app = s.my.app_user();
    let mut a = Session::open(&s, &app);
    let mut b = Session::open(&s, &app);
    a.run("START TRANSACTION; UPDATE orders SET cents = 1001 WHERE id = 1");
    b.run("START TRANSACTION; UPDATE orders SET cents = 2002 WHERE id = 2");
    // B commits first, its seq after A's first write.
    b.run("COMMIT");
    a.run("UPDATE orders SET cents = 2003 WHERE id = 2");
    // B writes row 1, which A holds: it waits until A commits.
    b.run("START TRANSACTION");
    let waiting = b.send("UPDATE orders SET cents = 1004 WHERE id = 1");
    let deadline = Instant::now() + Duration::from_secs(30);
    while s.my.value(
        "SELECT COUNT(*) FROM information_schema.INNODB_TRX t
                 JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id
                 WHERE t.trx_state = 'LOCK WAIT' AND p.DB = DATABASE()",
    ) == "0"
    {
        assert!(Instant::now() < deadline, "B never waited for A's lock");
        std::thread::sleep(Duration::from_millis(20));
    }
    a.run("UPDATE orders SET cents = 1005 WHERE id = 1");
    a.run("COMMIT");
    b.wait(&waiting);
    b.run("COMMIT");

    let all = entries(&db, 0);
    let cents = |img: &Option<Vec<Value>>| {
        let columns = image_columns(&db);
        let i = columns.iter().position(|c| c == "cents").unwrap();
        img.as_ref().map(|r| r[i].clone())
    };
    let got: Vec<(i64, Option<Value>, Option<Value>)> = all
        .iter()
        .map(|e| (entry_key(e), cents(&e.old), cents(&e.new)))
        .collect();
    // In seq order: A's first write, B's (committed first), A's second,
    // A's third (before its commit), then B's that waited for it.
    assert_eq!(
        got,
        [
            (1, Some(int(150)), Some(int(1001))),
            (2, Some(int(200)), Some(int(2002))),
            (2, Some(int(2002)), Some(int(2003))),
            (1, Some(int(1001)), Some(int(1005))),
            (1, Some(int(1005)), Some(int(1004))),
        ]
    );
    assert_eq!(s.my.value("SELECT cents FROM orders WHERE id = 1"), "1004");
}

/// The journal's triggers fire before the application's `AFTER` triggers
/// of their event; one put before them makes them stale, and `journal
/// install` puts them first again.
#[test]
fn the_journals_triggers_stay_first_among_the_after_triggers() {
    let Some(s) = Setup::switched("mysql_journal_order") else {
        return;
    };
    // Created after the journal's: it fires after them; nothing stale.
    s.my.exec(
        "CREATE TRIGGER orders_audit AFTER UPDATE ON orders FOR EACH ROW
             INSERT INTO audit (what) VALUES (CONCAT('update ', NEW.id))",
    );
    assert_eq!(s.status()["stale"], serde_json::json!([]));
    let journal_update = s.my.value(
        "SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE()
         AND EVENT_OBJECT_TABLE = 'orders' AND EVENT_MANIPULATION = 'UPDATE' AND TRIGGER_NAME LIKE '\\_cutover%'",
    );
    // One put before the journal's: stale until installed again.
    s.my.exec(&format!(
        "CREATE TRIGGER orders_first AFTER UPDATE ON orders FOR EACH ROW PRECEDES `{journal_update}`
             INSERT INTO audit (what) VALUES (CONCAT('first ', NEW.id))"
    ));
    let stale = s.status()["stale"].clone();
    assert_eq!(
        stale.as_array().map(Vec::len),
        Some(1),
        "the update trigger is not first: {stale}"
    );
    assert!(
        stale[0].as_str().unwrap().starts_with(&journal_update),
        "{stale}"
    );
    cutover_in(s.path(), &["journal", "install"]).expect(0);
    assert_eq!(s.status()["stale"], serde_json::json!([]));
    assert_eq!(
        s.my.rows(
            "SELECT TRIGGER_NAME, ACTION_ORDER FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE()
             AND EVENT_OBJECT_TABLE = 'orders' AND EVENT_MANIPULATION = 'UPDATE' ORDER BY ACTION_ORDER"
        ),
        [
            [journal_update.as_str(), "1"],
            ["orders_first", "2"],
            ["orders_audit", "3"]
        ]
    );
    // The application's write goes through all three, journaled once.
    let app = s.my.app_user();
    app.exec("UPDATE orders SET cents = 9 WHERE id = 3")
        .unwrap();
    let db = s.target();
    let all = entries(&db, 0);
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!((all[0].op, entry_key(&all[0])), (Op::Update, 3));
    assert_eq!(
        s.my.rows("SELECT what FROM audit ORDER BY id"),
        [["first 3"], ["update 3"]]
    );
}

/// `TRUNCATE` fires no trigger: the journal reports it stale (so `fence
/// on` refuses), and `journal install` refuses to pass over it.
#[test]
fn a_truncate_is_detected() {
    let Some(s) = Setup::switched("mysql_journal_truncate") else {
        return;
    };
    s.my.app_user()
        .exec("DELETE FROM orders WHERE id = 3")
        .unwrap();
    let db = s.target();
    let before = entries(&db, 0);
    assert_eq!(before.len(), 1);
    s.my.exec("TRUNCATE TABLE orders");
    assert_eq!(s.my.value("SELECT COUNT(*) FROM orders"), "0");
    let stale = s.status()["stale"].clone();
    assert!(
        stale
            .as_array()
            .is_some_and(|v| v.iter().any(|l| l.as_str().unwrap().contains("TRUNCATE"))),
        "{stale}"
    );
    cutover_in(s.path(), &["journal", "install"])
        .expect(2)
        .assert_mentions(&["TRUNCATE", "journal remove"]);
    // The journal is as it was: nothing pretends the rows' deletes.
    assert_eq!(entries(&db, 0).len(), before.len());
    assert_eq!(
        db.journal().journal_extent().unwrap().entries,
        before.len() as i64
    );
}

/// A foreign key that changes the journaled table's rows by itself (`ON
/// DELETE SET NULL` here) is refused at `journal install`, naming the
/// constraint, the child and the parent, before any trigger is written.
#[test]
fn a_cascading_foreign_key_is_refused_before_any_trigger() {
    let target = format!(
        "CREATE TABLE customers (id BIGINT NOT NULL PRIMARY KEY) ENGINE = InnoDB;
         INSERT INTO customers VALUES (7);
         {}
         ALTER TABLE orders ADD COLUMN customer_id BIGINT NULL,
             ADD CONSTRAINT orders_customer FOREIGN KEY (customer_id) REFERENCES customers (id) ON DELETE SET NULL;",
        TARGET
    );
    let Some(s) = Setup::new(
        "mysql_journal_cascade",
        &target,
        "\n[[tables.columns]]\ntarget = \"customer_id\"\ndefault = true\n",
    ) else {
        return;
    };
    cutover_in(s.path(), &["load"]).expect(0);
    cutover_in(s.path(), &["journal", "install"])
        .expect(2)
        .assert_mentions(&[
            "orders_customer",
            "'orders'",
            "'customers'",
            "ON DELETE SET NULL",
        ]);
    assert_eq!(
        s.my.value(
            "SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE()"
        ),
        "0"
    );
    assert_eq!(
        s.my.value(
            "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()
             AND TABLE_NAME LIKE '\\_cutover\\_journal\\_%' AND TABLE_NAME NOT IN ('_cutover_journal_id', '_cutover_journal_tables')"
        ),
        "0",
        "no image table either"
    );
}

/// An install stopped half-way (MySQL commits each schema change at once)
/// is completed by the next: a trigger and the view gone, `journal
/// status` names what is missing, and `journal install` puts back exactly
/// that.
#[test]
fn an_install_stopped_half_way_is_completed_by_the_next() {
    let Some(s) = Setup::switched("mysql_journal_rerun") else {
        return;
    };
    let delete = s.my.value(
        "SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE()
         AND EVENT_MANIPULATION = 'DELETE' AND TRIGGER_NAME LIKE '\\_cutover%'",
    );
    s.my.exec(&format!(
        "DROP TRIGGER `{delete}`; DROP VIEW _cutover_journal"
    ));
    assert_eq!(
        s.status()["stale"],
        serde_json::json!([format!("{delete} (missing)")])
    );
    cutover_in(s.path(), &["journal", "install"])
        .expect(0)
        .assert_mentions(&["1 trigger"]);
    assert_eq!(s.status()["stale"], serde_json::json!([]));
    s.my.app_user()
        .exec("DELETE FROM orders WHERE id = 2")
        .unwrap();
    let all = entries(&s.target(), 0);
    assert_eq!(
        all.iter().map(|e| (e.op, entry_key(e))).collect::<Vec<_>>(),
        [(Op::Delete, 2)]
    );
    assert_eq!(s.my.value("SELECT COUNT(*) FROM _cutover_journal"), "1");
    // A trigger of the journal's name rewritten to journal nothing differs
    // from the template: stale, and replaced by the next install.
    let update = delete.replace("_delete", "_update");
    s.my.exec(&format!(
        "CREATE OR REPLACE TRIGGER `{update}` AFTER UPDATE ON orders FOR EACH ROW SET @ignored = 1"
    ));
    assert_eq!(
        s.status()["stale"],
        serde_json::json!([format!("{update} (differs from what the spec needs)")])
    );
    cutover_in(s.path(), &["journal", "install"]).expect(0);
    assert_eq!(s.status()["stale"], serde_json::json!([]));
    s.my.app_user()
        .exec("UPDATE orders SET cents = 3 WHERE id = 3")
        .unwrap();
    let all = entries(&s.target(), 0);
    assert_eq!(
        all.iter().map(|e| (e.op, entry_key(e))).collect::<Vec<_>>(),
        [(Op::Delete, 2), (Op::Update, 3)]
    );
}

/// A user of the target's own for cutover, dropped with the test.
struct CutoverUser<'a> {
    my: &'a TestDb,
    name: String,
}

impl Drop for CutoverUser<'_> {
    fn drop(&mut self) {
        let _ = self.my.server().admin(
            None,
            &format!(
                "DROP USER IF EXISTS '{0}'@'%'; DROP USER IF EXISTS '{0}'@'localhost';",
                self.name
            ),
        );
    }
}

/// cutover as a user with only the grants docs/engines.md lists for a
/// MySQL target's journal: load, install, the application's writes
/// journaled, status, remove.
#[test]
fn the_documented_grants_are_enough_for_the_journal() {
    let Some(s) = Setup::new("mysql_journal_grants", TARGET, "") else {
        return;
    };
    let user = CutoverUser {
        my: &s.my,
        name: format!("cut_{}", std::process::id()),
    };
    let mut grants = String::new();
    for host in ["%", "localhost"] {
        grants.push_str(&format!(
            "CREATE USER '{u}'@'{host}' IDENTIFIED BY 'pw-cut';
             GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, CREATE VIEW, TRIGGER ON `{db}`.* TO '{u}'@'{host}';
             GRANT PROCESS ON *.* TO '{u}'@'{host}';",
            u = user.name,
            db = s.my.name
        ));
    }
    s.my.server()
        .admin(None, &grants)
        .expect("the cutover user");
    let url =
        s.my.server()
            .url_for(&user.name, Some("pw-cut"), &s.my.name);
    std::fs::write(
        s.path().join("spec.toml"),
        orders_spec("sqlite://source.db", &url, &COPIES, ""),
    )
    .unwrap();
    cutover_in(s.path(), &["load"]).expect(0);
    cutover_in(s.path(), &["journal", "install"]).expect(0);
    assert_eq!(
        s.my.value(
            "SELECT DISTINCT DEFINER FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE()"
        )
        .split('@')
        .next(),
        Some(user.name.as_str()),
        "the triggers run as cutover's user"
    );
    let app = s.my.app_user();
    app.exec("UPDATE orders SET cents = cents + 1 WHERE id = 1; INSERT INTO orders (id, cents, status) VALUES (5, 5, 'active')")
        .unwrap();
    let status = s.status();
    assert_eq!(
        (
            &status["triggers"],
            &status["insert"],
            &status["update"],
            &status["stale"]
        ),
        (
            &serde_json::json!(3),
            &serde_json::json!(1),
            &serde_json::json!(1),
            &serde_json::json!([])
        ),
        "{status}"
    );
    cutover_in(s.path(), &["journal", "remove"]).expect(0);
    assert_eq!(
        s.my.value(
            "SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE()"
        ),
        "0"
    );
    // Unjournaled now; the entries stay.
    app.exec("DELETE FROM orders WHERE id = 5").unwrap();
    let db = s.target();
    assert_eq!(db.journal().journal_extent().unwrap().entries, 2);
}

/// A transaction of the application holding the table keeps the install
/// out (its DDL needs the table's metadata lock): the install waits a
/// short `lock_wait_timeout` a few times, then refuses naming the
/// connection; once it commits, the install goes through.
#[test]
fn an_install_waits_briefly_for_the_metadata_lock_and_names_who_holds_it() {
    let Some(s) = Setup::new("mysql_journal_mdl", TARGET, "") else {
        return;
    };
    cutover_in(s.path(), &["load"]).expect(0);
    let app = s.my.app_user();
    let mut a = Session::open(&s, &app);
    a.run("START TRANSACTION; UPDATE orders SET cents = 5 WHERE id = 1");
    let started = Instant::now();
    cutover_in(s.path(), &["journal", "install"])
        .env("CUTOVER_LOCK_TIMEOUT_MS", "1000")
        .expect(2)
        .assert_mentions(&["metadata lock", &app.name, "KILL"]);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        s.my.value(
            "SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE()"
        ),
        "0"
    );
    a.run("COMMIT");
    cutover_in(s.path(), &["journal", "install"]).expect(0);
    assert_eq!(s.status()["stale"], serde_json::json!([]));
}

/// Every column type the engine reads, journaled: each image read back
/// through the `JournalLog` interface is exactly what a scan of the table
/// reads around that write (the same `Value` kinds and bytes), the
/// application writing through `mariadb` as its own user.
#[test]
fn every_type_is_journaled_as_a_scan_reads_it() {
    let Some(my) = TestDb::new("mysql_journal_types") else {
        return;
    };
    my.exec(
        "CREATE TABLE kinds (
            id INT NOT NULL PRIMARY KEY,
            ti TINYINT, flag TINYINT(1), mi MEDIUMINT UNSIGNED, bi BIGINT UNSIGNED,
            dec6 DECIMAL(20,6), fl FLOAT, db DOUBLE,
            ch CHAR(5), vc VARCHAR(20) CHARACTER SET latin1, tx TEXT, js JSON,
            en ENUM('a','B','c d'), st SET('x','y','z'),
            bn BINARY(4), vb VARBINARY(10), bl BLOB,
            d DATE, dt DATETIME(6), ts TIMESTAMP(6) NULL, tm TIME(3), yr YEAR, bt BIT(5)
        ) ENGINE = InnoDB",
    );
    let columns = [
        "id", "ti", "flag", "mi", "bi", "dec6", "fl", "db", "ch", "vc", "tx", "js", "en", "st",
        "bn", "vb", "bl", "d", "dt", "ts", "tm", "yr", "bt",
    ];
    let db = Db::open(
        &Location::Server(my.url.clone()),
        Access::Write,
        cutover::spec::Side::Target,
    )
    .expect("opening the target");
    db.capture()
        .image_for("kinds", "kinds", &columns)
        .expect("the image");
    assert_eq!(
        db.install_journal("kinds", "kinds", &columns, 1).unwrap(),
        3
    );
    db.prove_journal("kinds", "kinds", &columns, 1)
        .expect("the proof on an empty table");
    let sql = db.rows().table_sql("kinds", &columns, 1, None);
    let scan = |id: i64| db.rows().get_row(&sql, &[int(id)]).expect("reading a row");
    let app = my.app_user();
    let mut after = 0;
    let mut check = |what: &str, write: &str, id: i64| {
        let before = scan(id);
        app.exec(write)
            .unwrap_or_else(|e| panic!("{what}: the application's write: {e}"));
        let now = scan(id);
        let got = entries(&db, after);
        assert_eq!(got.len(), 1, "{what}: {got:?}");
        let e = &got[0];
        assert_eq!((&e.old, &e.new), (&before, &now), "{what}");
        after = e.seq;
    };
    check(
        "every type",
        "INSERT INTO kinds VALUES (1, -128, 1, 16777215, 9223372036854775807,
            -12345678901234.000001, 0.1, 0.30000000000000004,
            'ab ', 'café', 'line\nnext', '{\"k\": [1, 2.50]}', 'c d', 'z,x',
            X'0102', X'', X'00FF', '2024-02-29', '2024-03-15 13:45:00.5', '1970-01-01 00:00:01.000001',
            '-838:59:59.000', 2155, b'10101')",
        1,
    );
    check("NULLs", "INSERT INTO kinds (id) VALUES (2)", 2);
    check(
        "an update of every type",
        "UPDATE kinds SET ti = 127, flag = 0, mi = 0, bi = 0, dec6 = 0.5, fl = -0.0, db = 1e308,
            ch = '', vc = 'ÿ', tx = '', js = 'null', en = 'B', st = '', bn = X'FFFFFFFF', vb = X'00',
            bl = NULL, d = '1000-01-01', dt = '9999-12-31 23:59:59.999999', ts = '2038-01-19 03:14:07.999999',
            tm = '838:59:59.999', yr = 0, bt = 0 WHERE id = 1",
        1,
    );
    check(
        "a NULL row updated",
        "UPDATE kinds SET js = '[]', bn = X'61' WHERE id = 2",
        2,
    );
    check("a delete", "DELETE FROM kinds WHERE id = 1", 1);
    // The digest covers every entry: read twice it is the same, and one
    // more entry changes it.
    let digest = db.journal().journal_digest().unwrap();
    assert_eq!(db.journal().journal_digest().unwrap(), digest);
    app.exec("UPDATE kinds SET vc = 'x' WHERE id = 2").unwrap();
    assert_ne!(db.journal().journal_digest().unwrap(), digest);
}

/// A table that is not InnoDB (its writes are not undone with the
/// transaction its journal rows are) is refused before anything of the
/// journal is written.
#[test]
fn a_table_that_is_not_innodb_is_refused() {
    let Some(s) = Setup::new(
        "mysql_journal_myisam",
        &TARGET.replacen(") ENGINE = InnoDB;", ") ENGINE = MyISAM;", 1),
        "",
    ) else {
        return;
    };
    cutover_in(s.path(), &["journal", "install"])
        .expect(2)
        .assert_mentions(&["'orders'", "InnoDB"]);
    assert_eq!(
        s.my.value(
            "SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE()"
        ),
        "0"
    );
}

/// The spec's column list changes after the switch: `journal install`
/// gives the table a new image, and its triggers replace the earlier
/// image's under the same names, so each write after it is journaled once,
/// in the new image, and the entries before stay in the old one.
#[test]
fn a_new_column_list_replaces_the_triggers_in_place() {
    let Some(s) = Setup::switched("mysql_journal_columns") else {
        return;
    };
    let names = || {
        s.my.exec(
            "SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE() ORDER BY 1",
        )
    };
    let before = names();
    let app = s.my.app_user();
    app.exec("UPDATE orders SET cents = 7 WHERE id = 1")
        .unwrap();
    // n3 no longer carried (gone from the source): the target keeps its own.
    rusqlite::Connection::open(s.path().join("source.db"))
        .unwrap()
        .execute_batch("ALTER TABLE orders DROP COLUMN n3")
        .unwrap();
    let fewer: Vec<&str> = COPIES.iter().copied().filter(|c| *c != "n3").collect();
    std::fs::write(
        s.path().join("spec.toml"),
        orders_spec(
            "sqlite://source.db",
            &s.my.url,
            &fewer,
            "\n[[tables.columns]]\ntarget = \"n3\"\ndefault = true\n",
        ),
    )
    .unwrap();
    assert_ne!(s.status()["stale"], serde_json::json!([]));
    cutover_in(s.path(), &["journal", "install"])
        .expect(0)
        .assert_mentions(&["3 triggers"]);
    assert_eq!(s.status()["stale"], serde_json::json!([]));
    assert_eq!(names(), before, "the same three triggers, replaced");
    app.exec("UPDATE orders SET cents = 8 WHERE id = 1")
        .unwrap();
    let db = s.target();
    let images = db.journal_tables().unwrap();
    assert_eq!(images.len(), 2, "{images:?}");
    assert!(!images[1].columns.iter().any(|c| c == "n3"));
    let all = entries(&db, 0);
    assert_eq!(
        all.iter().map(|e| (e.img, e.op)).collect::<Vec<_>>(),
        [(images[0].img, Op::Update), (images[1].img, Op::Update)]
    );
    assert_eq!(
        all[1].new.as_ref().map(Vec::len),
        Some(images[1].columns.len())
    );
}

/// A write under `LOCK TABLES … WRITE` (a dump being restored, say) is
/// journaled or refused, never made unjournaled. MariaDB 10.11 refuses it
/// once the journal's tables are in its table cache (error 1442: three
/// triggers of one table write the same tables; docs/journal.md, "MySQL
/// and MariaDB"), so the table must be as it was then; should the server
/// take it, the entry must be there.
#[test]
fn a_write_under_lock_tables_is_journaled_or_refused() {
    let Some(s) = Setup::switched("mysql_journal_lock_tables") else {
        return;
    };
    let db = s.target();
    // Read the journal once: its tables are then in the table cache.
    assert!(entries(&db, 0).is_empty());
    let before = s.my.rows("SELECT id, cents FROM orders ORDER BY id");
    match s.my.try_exec(
        "LOCK TABLES orders WRITE;
         INSERT INTO orders (id, cents, status) VALUES (40, 4, 'active');
         UNLOCK TABLES;",
    ) {
        Ok(_) => {
            let all = entries(&db, 0);
            assert_eq!(
                all.iter().map(|e| (e.op, entry_key(e))).collect::<Vec<_>>(),
                [(Op::Insert, 40)]
            );
        }
        Err(e) => {
            assert!(e.contains("1442"), "{e}");
            assert_eq!(
                s.my.rows("SELECT id, cents FROM orders ORDER BY id"),
                before
            );
            assert!(entries(&db, 0).is_empty());
        }
    }
    // The same write outside LOCK TABLES goes through, journaled.
    s.my.app_user()
        .exec("INSERT INTO orders (id, cents, status) VALUES (41, 4, 'active')")
        .unwrap();
    assert!(entries(&db, 0).iter().any(|e| entry_key(e) == 41));
}

/// A UNIQUE value changed on a row whose `TIMESTAMP(6)` holds a fraction
/// of a second is journaled: the update trigger's check that the row was
/// written compares each column with `=` and `IS NULL`, since MariaDB
/// 10.11 answers `t.col <=> NEW.col` false there (a lost write once).
#[test]
fn a_unique_value_changed_beside_a_fractional_timestamp_is_journaled() {
    let Some(my) = TestDb::new("mysql_journal_stamp") else {
        return;
    };
    my.exec(
        "CREATE TABLE customers (id BIGINT NOT NULL PRIMARY KEY, email VARCHAR(120) NOT NULL UNIQUE,
             seen TIMESTAMP(6) NULL, avatar BLOB) ENGINE = InnoDB",
    );
    let dir = tempfile::tempdir().expect("a folder");
    rusqlite::Connection::open(dir.path().join("source.db"))
        .expect("the source")
        .execute_batch(
            "CREATE TABLE customers (id INTEGER PRIMARY KEY, email TEXT NOT NULL UNIQUE, seen TEXT, avatar BLOB);
             INSERT INTO customers VALUES (1, 'a@x', '2020-01-01 00:00:01.5+00', x'0102'),
                                          (7, 'b@x', NULL, NULL);",
        )
        .expect("the source's rows");
    std::fs::write(
        dir.path().join("spec.toml"),
        format!(
            "[source]\nurl = \"sqlite://source.db\"\n[target]\nurl = \"{}\"\n[[tables]]\nname = \"customers\"\nkey = [\"id\"]\n[[tables.columns]]\nsource = \"email\"\n[[tables.columns]]\nsource = \"seen\"\n[[tables.columns]]\nsource = \"avatar\"\n",
            my.url
        ),
    )
    .expect("the spec");
    cutover_in(dir.path(), &["load"]).expect(0);
    cutover_in(dir.path(), &["journal", "install"]).expect(0);
    my.app_user()
        .exec(
            "UPDATE customers SET email = 'moved1@x' WHERE id = 1;
             UPDATE customers SET email = 'moved7@x' WHERE id = 7;",
        )
        .unwrap();
    let db = Db::open(
        &Location::Server(my.url.clone()),
        Access::Read,
        cutover::spec::Side::Target,
    )
    .expect("opening the target");
    let columns = image_columns(&db);
    let email = columns.iter().position(|c| c == "email").expect("email");
    let got: Vec<(i64, Option<Value>)> = entries(&db, 0)
        .iter()
        .map(|e| (entry_key(e), e.new.as_ref().map(|n| n[email].clone())))
        .collect();
    assert_eq!(
        got,
        [(1, Some(text("moved1@x"))), (7, Some(text("moved7@x")))]
    );
}
