//! Hostile names and keys. Table and column names that need quoting (spaces,
//! both kinds of quote, SQL keywords, mixed case), names that do not exist,
//! and names written to smuggle SQL: the run either works or is refused
//! cleanly, and no other statement ever runs (a canary table in each database
//! keeps its rows, every table is still there).
//!
//! Composite keys whose parts hold separators, quotes, brackets, empty
//! strings or differ only in storage class never collide through load, gate,
//! journal and replay. See `tests/commands.rs` for the first composite-key
//! and quoted-name runbooks; this file goes further.

mod support;

use rusqlite::types::Value;
use support::{Dir, ORDERS_SPEC, int, text};

/// The user tables of a database with their row counts, by name (cutover's
/// control tables and the engine's own left out, their prefixes matched as
/// SQL's `LIKE` does: ASCII case ignored).
fn tables_and_counts(d: &Dir, db: &str) -> Vec<(String, i64)> {
    d.engine()
        .tables(db)
        .into_iter()
        .filter(|n| {
            let lower = n.to_ascii_lowercase();
            !lower.starts_with("sqlite_") && !lower.starts_with("_cutover_")
        })
        .map(|n| {
            let c = d.count(db, &n);
            (n, c)
        })
        .collect()
}

// --- names that need quoting, and names that smuggle SQL ----------------------------

/// Every identifier an adversary would pick: keywords, both quotes, a
/// semicolon and a comment, brackets, mixed case, and a spec `name` that is
/// spliced into trigger bodies as a literal.
const SMUGGLING_SPEC: &str = r#"
[source]
url = "sqlite://source.db"
[target]
url = "sqlite://target.db"
[[tables]]
name = "it's'); DROP TABLE canary; --"
source_table = "order"
target_table = "Order Items\"; DROP TABLE canary; --"
key = ["x\"; DROP TABLE canary; --", "group"]

[[tables.columns]]
source = "'); DELETE FROM canary; --"
target = "CentS"
transform = "decimal_to_minor"
scale = 2

[[tables.columns]]
source = "where"
target = "]Status["
transform = "map"
map = { "A'" = "act\"ive", "C;" = "clo'sed" }

[[tables.columns]]
source = "SELECT"
target = "select"
"#;

const SMUGGLING_SOURCE: &str = r#"
CREATE TABLE canary (n INTEGER);
INSERT INTO canary VALUES (1), (2);
CREATE TABLE "order" (
    "x""; DROP TABLE canary; --" INTEGER,
    "group" TEXT,
    "'); DELETE FROM canary; --" TEXT,
    "where" TEXT,
    "SELECT" TEXT,
    PRIMARY KEY ("x""; DROP TABLE canary; --", "group")
);
INSERT INTO "order" VALUES
    (1, 'a', '1.00', 'A''', 'x'),
    (1, 'b', '2.00', 'C;', '''; DROP TABLE canary; --'),
    (2, '', '3.00', 'A''', NULL);
"#;

const SMUGGLING_TARGET: &str = r#"
CREATE TABLE canary (n INTEGER);
INSERT INTO canary VALUES (1), (2);
CREATE TABLE "Order Items""; DROP TABLE canary; --" (
    "x""; DROP TABLE canary; --" INTEGER,
    "group" TEXT,
    "CentS" INTEGER,
    "]Status[" TEXT,
    "select" TEXT,
    PRIMARY KEY ("x""; DROP TABLE canary; --", "group")
);
"#;

/// The target table's name quoted, for the application's writes.
const T: &str = r#""Order Items""; DROP TABLE canary; --""#;

#[test]
fn names_that_smuggle_sql_are_quoted_through_the_whole_runbook_and_run_nothing_else() {
    let d = Dir::new("smuggling-names");
    d.spec(SMUGGLING_SPEC);
    d.create_db("source.db", SMUGGLING_SOURCE);
    d.create_db("target.db", SMUGGLING_TARGET);
    d.run(&["check"], 0);
    d.run(&["load"], 0);
    d.run(&["gate"], 0);
    d.run(&["gate", "--inject-mismatch"], 1);
    d.run(&["journal", "install"], 0);
    d.exec(
        "target.db",
        &format!(
            r#"UPDATE {T} SET "CentS" = 150 WHERE "group" = 'a';
               DELETE FROM {T} WHERE "group" = '';
               INSERT INTO {T} VALUES (3, 'x''y', 400, 'clo''sed', 'it''s "odd"');
               UPDATE {T} SET "group" = 'z' WHERE "group" = 'b';"#
        ),
    );
    let names = d.query("target.db", "SELECT tbl FROM _cutover_journal_tables");
    assert_eq!(names, vec![vec![text("it's'); DROP TABLE canary; --")]]);
    let journal = support::journal_json(&d, 2);
    assert_eq!(journal.len(), 4, "{journal:?}");
    assert_eq!(journal[3].2.to_string(), r#"[1,"z"]"#, "{journal:?}");
    assert_eq!(
        journal[3].3.as_ref().map(|k| k.to_string()),
        Some(r#"[1,"b"]"#.to_string()),
        "{journal:?}"
    );
    d.run(&["fence", "on"], 0);
    let err = d
        .try_exec("target.db", &format!("DELETE FROM {T}"))
        .expect_err("the fence holds on a hostile name");
    assert!(err.contains("cutover fence"), "{err}");
    d.run(&["fence", "status"], 0);
    d.run(&["replay", "--dry-run"], 0);
    let json = d.json(&["replay", "--batch", "1"], 0);
    assert_eq!(json["applied"], 4, "{json:#}");
    d.run(&["status"], 0);
    d.run(&["gate"], 0);
    assert_eq!(
        d.query("source.db", r#"SELECT * FROM "order" ORDER BY 1, 2"#),
        vec![
            vec![int(1), text("a"), text("1.50"), text("A'"), text("x")],
            vec![
                int(1),
                text("z"),
                text("2.00"),
                text("C;"),
                text("'; DROP TABLE canary; --")
            ],
            vec![
                int(3),
                text("x'y"),
                text("4.00"),
                text("C;"),
                text("it's \"odd\"")
            ],
        ]
    );
    // Nothing but the migration's own statements ran.
    for db in ["source.db", "target.db"] {
        assert_eq!(d.int(db, "SELECT count(*) FROM canary"), 2, "{db}");
    }
    assert_eq!(
        tables_and_counts(&d, "source.db"),
        vec![("canary".to_string(), 2), ("order".to_string(), 3)]
    );
    assert_eq!(
        tables_and_counts(&d, "target.db"),
        vec![
            ("Order Items\"; DROP TABLE canary; --".to_string(), 3),
            ("canary".to_string(), 2)
        ]
    );
    d.run(&["fence", "off"], 0);
    d.run(&["journal", "remove"], 0);
    for db in ["source.db", "target.db"] {
        assert_eq!(d.int(db, "SELECT count(*) FROM canary"), 2, "{db}");
    }
}

/// Commands that read a spec and open the databases.
const COMMANDS: &[&[&str]] = &[
    &["check"],
    &["load"],
    &["gate"],
    &["gate", "--inject-mismatch"],
    &["journal", "install"],
    &["journal", "status"],
    &["fence", "on"],
    &["fence", "status"],
    &["replay", "--dry-run"],
    &["replay"],
    &["status"],
];

/// The running example with a canary table in both databases.
fn orders_with_canary(name: &str) -> Dir {
    let d = Dir::orders(name);
    for db in ["source.db", "target.db"] {
        d.exec(
            db,
            "CREATE TABLE canary (n INTEGER); INSERT INTO canary VALUES (1), (2), (3);",
        );
    }
    d
}

#[test]
fn names_that_do_not_exist_and_smuggle_sql_are_refused_and_run_nothing() {
    let hostile = [
        // A column that is not there, whose name would close the quote.
        (
            "source = \"dollars\"",
            "source = \"dollars\\\"; DROP TABLE canary; --\"",
            "DROP TABLE canary",
        ),
        (
            "target = \"cents\"",
            "target = \"cents'); DELETE FROM canary; --\"",
            "DELETE FROM canary",
        ),
        // A table that is not there.
        (
            "name = \"orders\"",
            "name = \"orders\"\nsource_table = \"orders; DROP TABLE canary\"",
            "DROP TABLE canary",
        ),
        (
            "name = \"orders\"",
            "name = \"orders\"\ntarget_table = \"orders\\\" WHERE 1; DELETE FROM canary; --\"",
            "DELETE FROM canary",
        ),
        // A key column that is not there.
        (
            "key = [\"id\"]",
            "key = [\"id\\\" IS NOT NULL; DROP TABLE canary; --\"]",
            "DROP TABLE canary",
        ),
    ];
    for (i, (from, to, named)) in hostile.iter().enumerate() {
        let d = orders_with_canary(&format!("hostile-missing-{i}"));
        d.spec(&ORDERS_SPEC.replace(from, to));
        let before = d.snapshot();
        for args in COMMANDS {
            let out = d.run(args, 2);
            out.assert_mentions(&[named]);
            d.assert_unchanged(&before, &format!("{args:?} with a hostile name"));
        }
        for db in ["source.db", "target.db"] {
            assert_eq!(d.int(db, "SELECT count(*) FROM canary"), 3, "{db}");
            assert_eq!(
                d.int(db, "SELECT count(*) FROM orders"),
                3 * i64::from(db == "source.db")
            );
        }
    }
}

#[test]
fn a_column_name_differing_only_in_case_is_refused_cleanly() {
    // SQLite would accept "Dollars" for dollars; the spec's names are
    // compared exactly, and the refusal must name both.
    let d = Dir::orders("column-case");
    d.spec(&ORDERS_SPEC.replace("source = \"dollars\"", "source = \"Dollars\""));
    let before = d.snapshot();
    let out = d.run(&["check"], 2);
    out.assert_mentions(&["'Dollars'", "dollars"]);
    d.run(&["load"], 2);
    d.assert_unchanged(&before, "a column name in the wrong case");
}

#[test]
fn table_names_in_another_case_go_through_the_whole_runbook() {
    // SQLite's table names are case-insensitive: "ORDERS" is orders.
    let d = Dir::orders("table-case");
    d.spec(&ORDERS_SPEC.replace(
        "name = \"orders\"",
        "name = \"orders\"\nsource_table = \"ORDERS\"\ntarget_table = \"Orders\"",
    ));
    d.run(&["check"], 0);
    d.run(&["load"], 0);
    d.run(&["gate"], 0);
    d.run(&["journal", "install"], 0);
    d.exec("target.db", support::ORDERS_APP_WRITES);
    d.run(&["fence", "on"], 0);
    let err = d
        .try_exec("target.db", "UPDATE orders SET cents = 1")
        .expect_err("the fence holds whatever the case of the name");
    assert!(err.contains("cutover fence"), "{err}");
    d.run(&["replay"], 0);
    assert_eq!(
        d.dump("source.db", "orders"),
        vec![
            vec![int(101), text("14.00"), text("A")],
            vec![int(102), text("7.50"), text("C")],
            vec![int(104), text("9.00"), text("A")],
        ]
    );
}

#[test]
fn a_key_column_with_a_case_insensitive_collation_is_read_in_binary_order_by_the_gate() {
    // ORDER BY on a NOCASE column sorts 'a' before 'B'; a merge that trusted
    // it would pair the wrong rows. Every scan orders keys COLLATE BINARY, so
    // the gate pairs the right rows and passes, and still catches a change.
    let d = Dir::new("nocase-key");
    d.spec(
        r#"
[source]
url = "sqlite://source.db"
[target]
url = "sqlite://target.db"
[[tables]]
name = "codes"
key = ["code"]
[[tables.columns]]
source = "amount"
target = "cents"
transform = "decimal_to_minor"
scale = 2
"#,
    );
    d.create_db(
        "source.db",
        "CREATE TABLE codes (code TEXT PRIMARY KEY, amount TEXT);
         INSERT INTO codes VALUES ('B', '1.00'), ('a', '2.00'), ('C', '3.00');",
    );
    d.create_db(
        "target.db",
        "CREATE TABLE codes (code TEXT PRIMARY KEY COLLATE NOCASE, cents INTEGER);",
    );
    d.run(&["load"], 0);
    let before = d.snapshot();
    d.run(&["gate"], 0);
    d.assert_unchanged(&before, "gate over a NOCASE key");
    d.exec("target.db", "UPDATE codes SET cents = 201 WHERE code = 'a'");
    let json = d.json(&["gate"], 1);
    assert_eq!(json["tables"][0]["changed"], 1, "{json:#}");
    assert_eq!(json["tables"][0]["matched"], 2, "{json:#}");
}

// --- composite keys ------------------------------------------------------------------

const KV_SPEC: &str = r#"
[source]
url = "sqlite://source.db"
[target]
url = "sqlite://target.db"
[[tables]]
name = "kv"
key = ["a", "b"]
[[tables.columns]]
source = "amount"
target = "cents"
transform = "decimal_to_minor"
scale = 2
"#;

/// Key parts that collide if a key is joined with a separator, quoted
/// naively, or compared across storage classes. The columns have no
/// affinity, so 1 and '1' are two keys.
const KV_ROWS: &str = r#"
INSERT INTO kv VALUES
    (1, '', '1.00'),
    ('1', '', '2.00'),
    ('', '1', '3.00'),
    ('1,', '', '4.00'),
    ('1', ',', '5.00'),
    ('[1', '"]', '7.00'),
    ('a"', 'b', '8.00'),
    ('a', '"b', '9.00'),
    ('a\', 'b', '10.00'),
    ('a', '\b', '11.00'),
    ('', '', '12.00'),
    (1.5, '', '13.00'),
    ('x' || char(0) || 'y', '', '14.00'),
    ('x', char(0) || 'y', '15.00');
"#;

#[test]
fn composite_keys_that_collide_when_joined_or_quoted_stay_apart_through_the_runbook() {
    let d = Dir::new("composite-collisions");
    d.spec(KV_SPEC);
    d.create_db(
        "source.db",
        &format!("CREATE TABLE kv (a, b, amount, PRIMARY KEY (a, b));{KV_ROWS}"),
    );
    d.create_db(
        "target.db",
        "CREATE TABLE kv (a, b, cents, PRIMARY KEY (a, b));",
    );
    d.run(&["check"], 0);
    d.run(&["load"], 0);
    assert_eq!(d.int("target.db", "SELECT count(*) FROM kv"), 14);
    d.run(&["gate"], 0);
    d.run(&["gate", "--inject-mismatch"], 1);
    d.run(&["journal", "install"], 0);
    // Every row changes by its own amount, then two key changes that would
    // land on a neighbour if keys were confused.
    d.exec(
        "target.db",
        "UPDATE kv SET cents = cents + rowid;
         UPDATE kv SET a = 2 WHERE a = 1 AND typeof(a) = 'integer';
         UPDATE kv SET a = '1' || ',' WHERE a = '1' AND b = ',';
         DELETE FROM kv WHERE a = '' AND b = '';
         INSERT INTO kv VALUES ('', '', 1);",
    );
    let keys: std::collections::BTreeSet<String> = support::journal_json(&d, 2)
        .into_iter()
        .filter(|e| e.1 == "update" && e.3.is_none())
        .map(|e| e.2.to_string())
        .collect();
    assert_eq!(keys.len(), 14, "one journal key per row: {keys:?}");
    d.run(&["fence", "on"], 0);
    let json = d.json(&["replay"], 0);
    assert_eq!(json["verdict"], "pass", "{json:#}");
    d.run(&["gate"], 0);
    // Independently of the gate: every target row is in the source under
    // exactly the same key, storage classes and NUL bytes included.
    let target = d.query("target.db", "SELECT a, b, cents FROM kv ORDER BY a, b");
    let source = d.query("source.db", "SELECT a, b, amount FROM kv ORDER BY a, b");
    assert_eq!(target.len(), 14, "{target:?}");
    let expected: Vec<Vec<Value>> = target
        .iter()
        .map(|r| match r[2] {
            Value::Integer(c) => vec![r[0].clone(), r[1].clone(), text(&support::dollars(c))],
            ref other => panic!("cents {other:?}"),
        })
        .collect();
    assert_eq!(source, expected);
    assert!(
        source.iter().any(|r| r[0] == int(2)) && source.iter().any(|r| r[0] == text("1")),
        "the key change moved the integer 1, not the text '1': {source:?}"
    );
}

#[test]
fn a_duplicate_key_through_a_null_part_is_refused() {
    // SQLite's UNIQUE lets (NULL, 'b') in twice.
    let d = Dir::new("null-key-duplicate");
    d.spec(KV_SPEC);
    d.create_db(
        "source.db",
        "CREATE TABLE kv (a, b, amount, PRIMARY KEY (a, b));
         INSERT INTO kv VALUES ('eu', 'a', '1.00'), (NULL, 'b', '2.00'), (NULL, 'b', '3.00');",
    );
    d.create_db(
        "target.db",
        "CREATE TABLE kv (a, b, cents, PRIMARY KEY (a, b));",
    );
    let before = d.snapshot();
    for args in [&["check"][..], &["gate"], &["load"]] {
        let out = d.cutover(args).output();
        assert!(matches!(out.code, Some(1 | 2)), "{args:?}\n{out}");
        out.assert_mentions(&["kv", "NULL"]);
    }
    d.assert_unchanged(&before, "a duplicate key through NULL");
}

// Regression test. Until 3092b6f: a NULL in a key column of the source passes check,
// load and gate (exit 0); the feed format and apply refuse the same key ('a key column
// cannot be null').
#[test]
fn a_null_key_part_in_the_source_is_refused() {
    let d = Dir::new("null-key-source");
    d.spec(KV_SPEC);
    d.create_db(
        "source.db",
        "CREATE TABLE kv (a, b, amount, PRIMARY KEY (a, b));
         INSERT INTO kv VALUES ('eu', 'a', '1.00'), (NULL, 'b', '2.00');",
    );
    d.create_db(
        "target.db",
        "CREATE TABLE kv (a, b, cents, PRIMARY KEY (a, b));",
    );
    let before = d.snapshot();
    for args in [&["check"][..], &["gate"], &["load"]] {
        let out = d.cutover(args).output();
        assert!(
            matches!(out.code, Some(1 | 2)),
            "{args:?} accepted a NULL key part\n{out}"
        );
        out.assert_mentions(&["kv", "'a'", "null"]);
    }
    d.assert_unchanged(&before, "a NULL key part");
}

/// A loaded `kv` migration whose target then gets a row with a NULL key
/// part, journaled and fenced.
fn null_key_in_the_journal(name: &str) -> Dir {
    let d = Dir::new(name);
    d.spec(KV_SPEC);
    d.create_db(
        "source.db",
        "CREATE TABLE kv (a, b, amount, PRIMARY KEY (a, b)); INSERT INTO kv VALUES ('eu', 'a', '1.00');",
    );
    d.create_db(
        "target.db",
        "CREATE TABLE kv (a, b, cents, PRIMARY KEY (a, b));",
    );
    d.run(&["load"], 0);
    d.run(&["journal", "install"], 0);
    d.exec("target.db", "INSERT INTO kv VALUES (NULL, 'c', 500)");
    d.run(&["fence", "on"], 0);
    d
}

// Regression test. Until 3092b6f: replay writes a journal entry whose key has a NULL
// part into the source, and journal export writes it to a feed that apply then refuses.
#[test]
fn a_null_key_part_in_the_journal_is_refused_by_replay_and_export() {
    let d = null_key_in_the_journal("null-key-journal");
    let before = d.snapshot();
    let out = d.cutover(&["replay"]).output();
    assert!(matches!(out.code, Some(1 | 2)), "{out}");
    out.assert_mentions(&["seq 1", "kv", "null"]);
    d.assert_unchanged(&before, "replay of a NULL key part");
    let out = d
        .command(&[
            "journal",
            "export",
            "--spec",
            "spec.toml",
            "--out",
            "feed.jsonl",
        ])
        .output();
    assert!(matches!(out.code, Some(1 | 2)), "{out}");
    assert!(!d.exists("feed.jsonl"), "export wrote a feed apply refuses");
}

#[test]
fn whatever_export_writes_for_a_null_key_part_never_changes_the_source_half_way() {
    let d = null_key_in_the_journal("null-key-export");
    let out = d
        .command(&[
            "journal",
            "export",
            "--spec",
            "spec.toml",
            "--out",
            "feed.jsonl",
        ])
        .output();
    support::assert_no_panic(&out);
    if out.code == Some(0) {
        let before = d.snapshot();
        let out = d
            .command(&[
                "apply",
                "--spec",
                "spec.toml",
                "--feed",
                "feed.jsonl",
                "--into",
                "source",
            ])
            .output();
        support::assert_no_panic(&out);
        if out.code != Some(0) {
            d.assert_unchanged(&before, "apply of an exported NULL key part");
        }
    }
}

const USERS_SPEC: &str = r#"
[source]
url = "sqlite://source.db"
[target]
url = "sqlite://target.db"
[[tables]]
name = "users"
key = ["uuid"]
[[tables.columns]]
source = "name"
"#;

const USERS_SQL: &str = "CREATE TABLE users (uuid BLOB PRIMARY KEY, name TEXT);";

#[test]
fn a_blob_key_loads_and_gates() {
    let d = Dir::new("blob-key-load");
    d.spec(USERS_SPEC);
    d.create_db(
        "source.db",
        &format!(
            "{USERS_SQL} INSERT INTO users VALUES (x'00112233445566778899aabbccddeeff', 'ann'), (x'ff', 'bob'), (x'', 'empty');"
        ),
    );
    d.create_db("target.db", USERS_SQL);
    d.run(&["check"], 0);
    d.run(&["load"], 0);
    d.run(&["gate"], 0);
}

// Regression test. Until 3092b6f: with a BLOB key (a UUID stored as 16 bytes), journal
// install makes every application write to the target fail with 'JSON cannot hold BLOB
// values' (json_array of the raw key in sql/sqlite/journal_triggers.sql).
#[test]
fn a_blob_key_is_journaled_and_replayed() {
    let d = Dir::new("blob-key-journal");
    d.spec(USERS_SPEC);
    d.create_db(
        "source.db",
        &format!("{USERS_SQL} INSERT INTO users VALUES (x'00112233445566778899aabbccddeeff', 'ann'), (x'ff', 'bob');"),
    );
    d.create_db("target.db", USERS_SQL);
    d.run(&["load"], 0);
    d.run(&["journal", "install"], 0);
    // The application's own writes must keep working once the journal is on.
    d.exec(
        "target.db",
        "UPDATE users SET name = 'ann2' WHERE uuid = x'00112233445566778899aabbccddeeff';
         INSERT INTO users VALUES (x'aa', 'cat');
         DELETE FROM users WHERE uuid = x'ff';",
    );
    d.run(&["fence", "on"], 0);
    d.run(&["replay"], 0);
    assert_eq!(
        d.query(
            "source.db",
            "SELECT hex(uuid), name FROM users ORDER BY uuid"
        ),
        vec![
            vec![text("00112233445566778899AABBCCDDEEFF"), text("ann2")],
            vec![text("AA"), text("cat")],
        ]
    );
}

#[test]
fn a_key_change_onto_a_key_of_another_storage_class_is_its_own_record() {
    // 7 and '7' are two rows in an untyped key column; a key change from one
    // must not touch the other.
    let d = Dir::new("key-class-change");
    d.spec(KV_SPEC);
    d.create_db(
        "source.db",
        "CREATE TABLE kv (a, b, amount, PRIMARY KEY (a, b));
         INSERT INTO kv VALUES (7, 'k', '1.00'), ('7', 'k', '2.00');",
    );
    d.create_db(
        "target.db",
        "CREATE TABLE kv (a, b, cents, PRIMARY KEY (a, b));",
    );
    d.run(&["load"], 0);
    d.run(&["journal", "install"], 0);
    d.exec(
        "target.db",
        "UPDATE kv SET a = 8 WHERE a = 7 AND typeof(a) = 'integer';
         UPDATE kv SET cents = 250 WHERE a = '7';",
    );
    d.run(&["fence", "on"], 0);
    let plan = d.json(&["replay", "--dry-run"], 0);
    assert_eq!(plan["stale_keys"], 3, "{plan:#}");
    d.run(&["replay"], 0);
    assert_eq!(
        d.query("source.db", "SELECT quote(a), b, amount FROM kv ORDER BY 1"),
        vec![
            vec![text("'7'"), text("k"), text("2.50")],
            vec![text("8"), text("k"), text("1.00")],
        ]
    );
    let keys: Vec<(String, Option<String>)> = support::journal_json(&d, 2)
        .into_iter()
        .map(|e| (e.2.to_string(), e.3.map(|k| k.to_string())))
        .collect();
    assert_eq!(
        keys,
        vec![
            (r#"[8,"k"]"#.to_string(), Some(r#"[7,"k"]"#.to_string())),
            (r#"["7","k"]"#.to_string(), None),
        ]
    );
}

// --- one file, two roles ---------------------------------------------------------------

/// One database holding both tables, reached through two spellings.
fn same_file(name: &str, target_url: &str) -> Dir {
    let d = Dir::new(name);
    std::fs::create_dir(d.join("sub")).expect("creating sub/");
    d.spec(&format!(
        r#"
[source]
url = "sqlite://one.db"
[target]
url = "sqlite://{target_url}"
[[tables]]
name = "orders"
source_table = "orders_old"
target_table = "orders_new"
key = ["id"]
[[tables.columns]]
source = "dollars"
target = "cents"
transform = "decimal_to_minor"
scale = 2
"#
    ));
    d.create_db(
        "one.db",
        "CREATE TABLE orders_old (id INTEGER PRIMARY KEY, dollars TEXT);
         INSERT INTO orders_old VALUES (1, '1.00'), (2, '2.00');
         CREATE TABLE orders_new (id INTEGER PRIMARY KEY, cents INTEGER);",
    );
    d
}

#[test]
fn the_same_file_as_source_and_target_is_refused_when_spelled_alike() {
    let d = same_file("same-file", "one.db");
    let before = d.snapshot();
    let out = d.run(&["check"], 2);
    out.assert_mentions(&["same file"]);
    d.assert_unchanged(&before, "check with one file for both");
}

// Regression test. Until 3092b6f: the 'source and target are the same file' refusal
// compares spelled paths; sqlite://./one.db, sqlite://sub/../one.db or a symlink passes,
// and replay then reports a false 'fence breached'.
#[test]
fn the_same_file_as_source_and_target_is_refused_however_it_is_spelled() {
    for (i, url) in ["./one.db", "sub/../one.db"].iter().enumerate() {
        let d = same_file(&format!("same-file-spelled-{i}"), url);
        let before = d.snapshot();
        let out = d.cutover(&["check"]).output();
        assert_eq!(out.code, Some(2), "{url}\n{out}");
        out.assert_mentions(&["same file"]);
        d.assert_unchanged(&before, &format!("check with one file reached as {url}"));
    }
    let d = same_file("same-file-symlink", "two.db");
    std::os::unix::fs::symlink("one.db", d.join("two.db")).expect("a symlink");
    let out = d.cutover(&["load"]).output();
    assert_eq!(out.code, Some(2), "{out}");
    out.assert_mentions(&["same file"]);
}

#[test]
fn an_exported_feed_carries_hostile_names_back_like_replay_does() {
    // The feed's JSON keys are the hostile target column names; applied into
    // a second copy of the source it must leave what replay leaves.
    let d = Dir::new("smuggling-feed");
    d.spec(SMUGGLING_SPEC);
    d.create_db("source.db", SMUGGLING_SOURCE);
    d.create_db("target.db", SMUGGLING_TARGET);
    d.run(&["load"], 0);
    d.run(&["journal", "install"], 0);
    d.exec(
        "target.db",
        &format!(
            r#"UPDATE {T} SET "CentS" = 150, "select" = '"; DROP TABLE canary; --' WHERE "group" = 'a';
               DELETE FROM {T} WHERE "group" = '';
               UPDATE {T} SET "group" = 'z' WHERE "group" = 'b';"#
        ),
    );
    d.run(&["fence", "on"], 0);
    d.copy_db("source.db", "source2.db");
    d.write(
        "spec2.toml",
        SMUGGLING_SPEC.replace("sqlite://source.db", "sqlite://source2.db"),
    );
    d.run(&["journal", "export", "--out", "feed.jsonl"], 0);
    d.run(&["replay"], 0);
    d.command(&[
        "apply",
        "--spec",
        "spec2.toml",
        "--feed",
        "feed.jsonl",
        "--into",
        "source",
    ])
    .expect(0);
    let q = r#"SELECT * FROM "order" ORDER BY 1, 2"#;
    assert_eq!(d.query("source2.db", q), d.query("source.db", q));
    for db in ["source.db", "source2.db", "target.db"] {
        assert_eq!(d.int(db, "SELECT count(*) FROM canary"), 2, "{db}");
    }
}

#[test]
fn strict_and_without_rowid_tables_go_through_the_runbook() {
    let d = Dir::new("strict-without-rowid");
    d.spec(ORDERS_SPEC);
    d.create_db(
        "source.db",
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, dollars TEXT NOT NULL, status TEXT NOT NULL) WITHOUT ROWID;
         INSERT INTO orders VALUES (101, '12.50', 'A'), (102, '7.50', 'C'), (103, '20.00', 'A');",
    );
    d.create_db(
        "target.db",
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, cents INTEGER NOT NULL, status TEXT NOT NULL) STRICT, WITHOUT ROWID;",
    );
    d.run(&["check"], 0);
    d.run(&["load"], 0);
    d.run(&["gate"], 0);
    d.run(&["gate", "--inject-mismatch"], 1);
    d.run(&["journal", "install"], 0);
    d.exec("target.db", support::ORDERS_APP_WRITES);
    d.run(&["fence", "on"], 0);
    d.run(&["replay"], 0);
    assert_eq!(
        d.dump("source.db", "orders"),
        vec![
            vec![int(101), text("14.00"), text("A")],
            vec![int(102), text("7.50"), text("C")],
            vec![int(104), text("9.00"), text("A")],
        ]
    );
}
