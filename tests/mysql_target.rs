//! MySQL (MariaDB here) as the target of a migration, through the binary:
//! `load` from SQLite, from PostgreSQL and from another MySQL database,
//! `gate` and its rehearsal, a load rerun, `--replace`, `sync`, and a load killed
//! part-way resuming exactly. The target's rows are read back through the
//! `mariadb` client and compared with an oracle the test computes from the
//! rows it wrote into the source, never from the tool's decoding.

mod support;

use support::mysql::{TestDb as MyDb, cents};
use support::postgres::TestDb as PgDb;
use support::run::cutover_in;

const MY_TARGET: &str = "CREATE TABLE orders (
    id BIGINT NOT NULL PRIMARY KEY,
    cents BIGINT NOT NULL,
    status VARCHAR(10) NOT NULL,
    note TEXT CHARACTER SET utf8mb4,
    code BLOB,
    at DATETIME(6)
) ENGINE = InnoDB";

/// One source row: id, dollars, status code, note, code bytes, at.
type SourceRow = (
    i64,
    String,
    &'static str,
    Option<String>,
    Option<Vec<u8>>,
    Option<String>,
);

/// The source's rows: a few edges, then `n` ordinary ones.
fn rows(n: i64) -> Vec<SourceRow> {
    let mut out: Vec<SourceRow> = vec![
        (
            -7,
            "0.01".into(),
            "C",
            Some("héllo \u{1F600}".into()),
            Some(vec![0, 255, 16]),
            Some("2024-02-29 23:59:59.999999".into()),
        ),
        (
            0,
            "-5.25".into(),
            "A",
            Some(String::new()),
            Some(Vec::new()),
            None,
        ),
        (
            i64::MAX,
            "92233720368547758.07".into(),
            "A",
            Some("a'quote\ttab".into()),
            None,
            Some("2000-01-01 00:00:00".into()),
        ),
    ];
    for id in 1..=n {
        out.push((
            id,
            format!("{}.{:02}", id * 7 % 100_000, id % 100),
            if id % 3 == 0 { "C" } else { "A" },
            (id % 5 != 0).then(|| format!("note {id}")),
            (id % 4 != 0).then(|| id.to_be_bytes().to_vec()),
            // A fraction the way MySQL spells it back: no trailing zero.
            (id % 6 != 0).then(|| format!("2024-03-15 13:45:{:02}.{:06}", id % 60, id * 10 + 7)),
        ));
    }
    out.sort_by_key(|r| r.0);
    out
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The oracle: each source row as the target must hold it, in the
/// spelling [`target_rows`] reads, in key order.
fn oracle(source: &[SourceRow]) -> Vec<Vec<String>> {
    source
        .iter()
        .map(|(id, dollars, status, note, code, at)| {
            vec![
                id.to_string(),
                cents(dollars).to_string(),
                if *status == "A" { "active" } else { "closed" }.to_string(),
                note.clone().unwrap_or_else(|| "NULL!".into()),
                code.as_deref().map_or_else(|| "NULL!".into(), hex),
                at.as_deref().map_or_else(
                    || "NULL!".into(),
                    // DATETIME(6) prints all six digits.
                    |a| {
                        if a.contains('.') {
                            a.to_string()
                        } else {
                            format!("{a}.000000")
                        }
                    },
                ),
            ]
        })
        .collect()
}

/// The target's rows as the `mariadb` client prints them (tabs and
/// backslashes in the note escaped by the client, so read through HEX).
fn target_rows(my: &MyDb) -> Vec<Vec<String>> {
    my.rows(
        "SELECT id, cents, status, IFNULL(HEX(note), 'NULL!'), IFNULL(LOWER(HEX(code)), 'NULL!'),
                IFNULL(at, 'NULL!') FROM orders ORDER BY id",
    )
    .into_iter()
    .map(|mut r| {
        if r[3] != "NULL!" {
            let bytes: Vec<u8> = (0..r[3].len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&r[3][i..i + 2], 16).unwrap())
                .collect();
            r[3] = String::from_utf8(bytes).unwrap();
        }
        r
    })
    .collect()
}

fn spec(source: &str, target: &str) -> String {
    support::mysql::orders_spec(source, target, &["note", "code", "at"], "")
}

/// A SQLite source holding `source` in a folder of its own, its spec
/// pointing at `target`.
fn sqlite_source(source: &[SourceRow], target: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let c = rusqlite::Connection::open(dir.path().join("source.db")).unwrap();
    c.execute_batch(
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, dollars TEXT NOT NULL, status TEXT NOT NULL,
             note TEXT, code BLOB, at TEXT); BEGIN;",
    )
    .unwrap();
    for r in source {
        c.execute(
            "INSERT INTO orders VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            rusqlite::params![r.0, r.1, r.2, r.3, r.4, r.5],
        )
        .unwrap();
    }
    c.execute_batch("COMMIT").unwrap();
    std::fs::write(
        dir.path().join("spec.toml"),
        spec("sqlite://source.db", target),
    )
    .unwrap();
    dir
}

/// Every table of the target with its rows, as the client prints them:
/// "nothing changed" compares two of these.
fn image(my: &MyDb) -> String {
    let tables = my.rows(
        "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() ORDER BY 1",
    );
    let mut out = my.exec(
        "SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE() ORDER BY 1",
    );
    for t in tables {
        out.push_str(&format!("== {}\n", t[0]));
        out.push_str(&my.exec(&format!("SELECT * FROM `{}` ORDER BY 1", t[0])));
    }
    out
}

#[test]
fn a_sqlite_source_loads_into_mysql_exactly_and_the_gate_and_its_rehearsal_hold() {
    let Some(my) = MyDb::new("mysql_target_load") else {
        return;
    };
    my.exec(MY_TARGET);
    let source = rows(1200);
    let dir = sqlite_source(&source, &my.url);
    let load = cutover_in(dir.path(), &["--format", "json", "load", "--batch", "100"])
        .expect(0)
        .json();
    assert_eq!(load["tables"][0]["loaded"], 1203, "{load}");
    assert_eq!(target_rows(&my), oracle(&source));
    cutover_in(dir.path(), &["gate"]).expect(0);
    cutover_in(dir.path(), &["gate", "--mode", "stream"]).expect(0);

    // The rehearsal injects its faults in a transaction it rolls back and
    // exits 1, as a gate that caught them.
    let before = image(&my);
    cutover_in(dir.path(), &["gate", "--inject-mismatch"])
        .expect(1)
        .assert_mentions(&["caught 3 of 3"]);
    assert_eq!(
        image(&my),
        before,
        "the rehearsal left the target as it was"
    );

    // A second load finds the first complete and writes nothing.
    let again = cutover_in(dir.path(), &["--format", "json", "load"])
        .expect(0)
        .json();
    assert_eq!(again["tables"][0]["loaded"], 0, "{again}");
    assert_eq!(image(&my), before);

    // The application changes a row: the gate sees it, exit 1.
    let app = my.app_user();
    app.exec("UPDATE orders SET cents = cents + 1 WHERE id = 5")
        .unwrap();
    cutover_in(dir.path(), &["gate"])
        .expect(1)
        .assert_mentions(&["[5]"]);

    // `--replace` empties the table and loads it again, exactly.
    cutover_in(dir.path(), &["load", "--replace"]).expect(0);
    assert_eq!(target_rows(&my), oracle(&source));
    cutover_in(dir.path(), &["gate"]).expect(0);

    // A row the source gains later comes over with `sync` (watermark id).
    let spec_path = dir.path().join("spec.toml");
    let text = std::fs::read_to_string(&spec_path).unwrap();
    std::fs::write(
        &spec_path,
        text.replacen("key = [\"id\"]", "key = [\"id\"]\nwatermark = \"id\"", 1),
    )
    .unwrap();
    let mut grown = source.clone();
    grown.push((5000, "1.23".into(), "C", Some("late".into()), None, None));
    grown.sort_by_key(|r| r.0);
    rusqlite::Connection::open(dir.path().join("source.db"))
        .unwrap()
        .execute(
            "INSERT INTO orders VALUES (5000, '1.23', 'C', 'late', NULL, NULL)",
            [],
        )
        .unwrap();
    cutover_in(dir.path(), &["sync"]).expect(0);
    assert_eq!(target_rows(&my), oracle(&grown));
    cutover_in(dir.path(), &["gate"]).expect(0);

    // A column the source gains stops sync (exit 1); `--evolve` cannot add
    // it to a MySQL target (exit 2), and the target is as it was.
    rusqlite::Connection::open(dir.path().join("source.db"))
        .unwrap()
        .execute_batch("ALTER TABLE orders ADD COLUMN email TEXT")
        .unwrap();
    let before = image(&my);
    cutover_in(dir.path(), &["sync"]).expect(1);
    cutover_in(dir.path(), &["sync", "--evolve"])
        .expect(2)
        .assert_mentions(&["not supported on MySQL yet", "email"]);
    assert_eq!(
        image(&my),
        before,
        "a refused sync --evolve changed nothing"
    );
}

#[test]
fn a_load_into_mysql_killed_part_way_resumes_exactly() {
    let Some(my) = MyDb::new("mysql_target_kill") else {
        return;
    };
    my.exec(MY_TARGET);
    let source = rows(500);
    let dir = sqlite_source(&source, &my.url);
    // Killed inside the first batch and before its commit: nothing of it
    // is in the target. Killed after it: the held batches are there.
    for (fault, committed) in [("mid-batch", false), ("before-commit", false)] {
        let out = cutover_in(dir.path(), &["load", "--batch", "50"])
            .env("CUTOVER_FAULT", fault)
            .output();
        assert_eq!(
            out.code,
            Some(73),
            "the load at {fault} did not stop there\n{out}"
        );
        let n: i64 = my.value("SELECT COUNT(*) FROM orders").parse().unwrap();
        assert_eq!(
            n > 0,
            committed,
            "{n} rows after the load stopped at {fault}"
        );
    }
    let out = cutover_in(dir.path(), &["load", "--batch", "50"])
        .env("CUTOVER_FAULT", "after-commit")
        .output();
    assert_eq!(out.code, Some(73), "{out}");
    let kept: i64 = my.value("SELECT COUNT(*) FROM orders").parse().unwrap();
    assert!(
        kept > 0,
        "the run stopped after a commit kept what it committed"
    );
    cutover_in(dir.path(), &["load", "--batch", "50"]).expect(0);
    assert_eq!(target_rows(&my), oracle(&source));
    cutover_in(dir.path(), &["gate"]).expect(0);
}

#[test]
fn a_mysql_and_a_postgresql_source_load_into_mysql_exactly() {
    let Some(src) = MyDb::new("mysql_target_from_mysql") else {
        return;
    };
    let Some(my) = MyDb::new("mysql_target_into_mysql") else {
        return;
    };
    let Some(pg) = PgDb::new("mysql_target_from_pg") else {
        return;
    };
    let source = rows(300);
    // The same rows in a MySQL source (DECIMAL dollars, an ENUM status)
    // and a PostgreSQL one (numeric, text, bytea, timestamp).
    src.exec(
        "CREATE TABLE orders (id BIGINT PRIMARY KEY, dollars DECIMAL(20,2) NOT NULL,
             status ENUM('A','C') NOT NULL, note TEXT CHARACTER SET utf8mb4, code BLOB, at DATETIME(6))",
    );
    pg.client()
        .batch_execute(
            "CREATE TABLE orders (id bigint PRIMARY KEY, dollars numeric(20,2) NOT NULL,
                 status text NOT NULL, note text, code bytea, at timestamp(6))",
        )
        .unwrap();
    let mut my_insert = String::new();
    let mut pg_insert = String::new();
    for (id, dollars, status, note, code, at) in &source {
        let text = |v: &Option<String>| {
            v.as_ref().map_or("NULL".to_string(), |s| {
                format!("'{}'", s.replace('\'', "''"))
            })
        };
        let (n, a) = (text(note), text(at));
        my_insert.push_str(&format!(
            "INSERT INTO orders VALUES ({id}, {dollars}, '{status}', {n}, {}, {a});\n",
            code.as_deref()
                .map_or("NULL".into(), |c| format!("x'{}'", hex(c)))
        ));
        pg_insert.push_str(&format!(
            "INSERT INTO orders VALUES ({id}, {dollars}, '{status}', {n}, {}, {a});\n",
            code.as_deref()
                .map_or("NULL".into(), |c| format!("'\\x{}'::bytea", hex(c)))
        ));
    }
    src.exec(&format!("SET NAMES utf8mb4; {my_insert}"));
    pg.client().batch_execute(&pg_insert).unwrap();

    for from in [&src.url, &pg.url] {
        my.exec("DROP TABLE IF EXISTS orders, _cutover_load");
        my.exec(MY_TARGET);
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("spec.toml"), spec(from, &my.url)).unwrap();
        cutover_in(dir.path(), &["load", "--batch", "64"]).expect(0);
        assert_eq!(target_rows(&my), oracle(&source), "loaded from {from}");
        cutover_in(dir.path(), &["gate"]).expect(0);
        cutover_in(dir.path(), &["gate", "--inject-mismatch"])
            .expect(1)
            .assert_mentions(&["caught 3 of 3"]);
        assert_eq!(target_rows(&my), oracle(&source), "after the rehearsal");
    }
}

/// `cutover drill --source/--target mysql://…` runs the whole runbook (load,
/// gate, journal, the application's writes, fence, replay) with that side
/// in a database of its own on the server, beside the one the URL names,
/// and drops it afterwards.
#[test]
fn the_drill_runs_the_runbook_with_either_side_on_mysql_and_leaves_nothing_there() {
    let Some(my) = MyDb::new("mysql_target_drill") else {
        return;
    };
    let drills = || {
        my.value("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME LIKE 'cutover\\_drill\\_%'")
    };
    let before = drills();
    for args in [
        vec!["--target", my.url.as_str()],
        vec!["--source", my.url.as_str(), "--target", my.url.as_str()],
    ] {
        let rep = support::run::cutover(&[&["--format", "json", "drill"], &args[..]].concat())
            .expect(0)
            .json();
        assert_eq!(rep["verdict"], "pass", "drill {args:?}: {rep}");
        assert_eq!(drills(), before, "drill {args:?} left its database behind");
    }
}
