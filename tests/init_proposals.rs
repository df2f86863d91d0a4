//! What `cutover init` proposes from the target's schema: a `map` from the
//! words a target CHECK allows (`status IN ('active', 'closed')`) when the
//! target holds no rows to pair the source's codes with, a DECIDE line
//! listing the words when it cannot tell, and `is_x` ↔ `x` columns paired
//! either way. The draft passes `check`, loads and gates as drafted, on a
//! SQLite, PostgreSQL and MySQL/MariaDB target; the target's rows after the
//! load are compared with what the source's rows spell out by hand.

mod support;

use support::Dir;
use support::mysql::TestDb as MyDb;
use support::postgres::TestDb as PgDb;

const SOURCE: &str = "CREATE TABLE accounts (id INTEGER PRIMARY KEY, status TEXT NOT NULL, is_active INTEGER NOT NULL, deleted INTEGER NOT NULL);
     INSERT INTO accounts VALUES (1, 'A', 1, 0), (2, 'C', 0, 1), (3, 'A', 1, 0);";

/// The rows the target must hold after the load, as `id|status|active|is_deleted`.
const EXPECTED: &str = "1|active|1|0\n2|closed|0|1\n3|active|1|0";

/// Drafts a spec from the folder's source.db to `target`, checks what it
/// proposes, and runs check, load and gate on it as drafted.
fn draft_check_load_gate(d: &Dir, target: &str) {
    d.command(&[
        "init",
        "--source",
        "sqlite://source.db",
        "--target",
        target,
        "--out",
        "spec.toml",
    ])
    .expect(0);
    let draft = std::fs::read_to_string(d.join("spec.toml")).expect("the draft");
    for part in [
        "source = \"status\"\ntransform = \"map\"\nmap = { \"A\" = \"active\", \"C\" = \"closed\" }",
        "source = \"is_active\"\ntarget = \"active\"",
        "source = \"deleted\"\ntarget = \"is_deleted\"",
    ] {
        assert!(draft.contains(part), "{part} not in the draft:\n{draft}");
    }
    assert!(!draft.contains("# DECIDE"), "{draft}");
    d.run(&["check"], 0);
    d.run(&["load"], 0);
    d.run(&["gate"], 0);
}

#[test]
fn a_sqlite_target_s_check_words_give_the_map() {
    let d = Dir::new("init-check-words");
    d.create_db("source.db", SOURCE);
    d.create_db(
        "target.db",
        "CREATE TABLE accounts (id INTEGER PRIMARY KEY,
             status TEXT NOT NULL CHECK (status IN ('active', 'closed')),
             active INTEGER NOT NULL, is_deleted INTEGER NOT NULL);",
    );
    draft_check_load_gate(&d, "sqlite://target.db");
    let rows = d.query(
        "target.db",
        "SELECT id || '|' || status || '|' || active || '|' || is_deleted FROM accounts ORDER BY id",
    );
    let got: Vec<String> = rows
        .iter()
        .map(|r| match &r[0] {
            rusqlite::types::Value::Text(t) => t.clone(),
            other => panic!("not text: {other:?}"),
        })
        .collect();
    assert_eq!(got.join("\n"), EXPECTED);
}

#[test]
fn a_postgres_target_s_check_words_give_the_map() {
    let Some(pg) = PgDb::new("init_check_words") else {
        return;
    };
    pg.client()
        .batch_execute(
            "CREATE TABLE accounts (id bigint PRIMARY KEY,
                 status varchar(10) NOT NULL CHECK (status IN ('active', 'closed')),
                 active integer NOT NULL, is_deleted integer NOT NULL)",
        )
        .expect("the target's table");
    let d = Dir::new("init-check-words-pg");
    d.create_db("source.db", SOURCE);
    draft_check_load_gate(&d, &format!("{}?schema=public", pg.url));
    let out = std::process::Command::new("psql")
        .args([
            pg.url.as_str(),
            "-XAtc",
            "SELECT id, status, active, is_deleted FROM accounts ORDER BY id",
        ])
        .output()
        .expect("psql");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), EXPECTED);
}

#[test]
fn a_mysql_target_s_check_words_give_the_map() {
    let Some(my) = MyDb::new("init_check_words") else {
        return;
    };
    my.exec(
        "CREATE TABLE accounts (id BIGINT PRIMARY KEY,
             status VARCHAR(10) NOT NULL, active INT NOT NULL, is_deleted INT NOT NULL,
             CONSTRAINT status_words CHECK (status IN ('active', 'closed')))",
    );
    let d = Dir::new("init-check-words-my");
    d.create_db("source.db", SOURCE);
    draft_check_load_gate(&d, &my.url);
    let rows: Vec<String> = my
        .rows("SELECT id, status, active, is_deleted FROM accounts ORDER BY id")
        .into_iter()
        .map(|r| r.join("|"))
        .collect();
    assert_eq!(rows.join("\n"), EXPECTED);
}

/// Where a code could be either of two words, or the source's values are
/// not read, the draft lists the words to decide among; left as drafted,
/// the `"?"` is refused by the target's CHECK and the load writes nothing.
#[test]
fn words_it_cannot_tell_apart_are_left_to_decide() {
    let d = Dir::new("init-check-words-decide");
    d.create_db(
        "source.db",
        "CREATE TABLE accounts (id INTEGER PRIMARY KEY, status TEXT NOT NULL);
         CREATE TABLE notes (id INTEGER PRIMARY KEY, kind TEXT);
         INSERT INTO accounts VALUES (1, 'A'), (2, 'C');",
    );
    d.create_db(
        "target.db",
        "CREATE TABLE accounts (id INTEGER PRIMARY KEY,
             status TEXT NOT NULL CHECK (status IN ('active', 'closed', 'cancelled')));
         CREATE TABLE notes (id INTEGER PRIMARY KEY, kind TEXT CHECK (kind IN ('memo', 'call')));",
    );
    d.command(&[
        "init",
        "--source",
        "sqlite://source.db",
        "--target",
        "sqlite://target.db",
        "--out",
        "spec.toml",
    ])
    .expect(0);
    let draft = std::fs::read_to_string(d.join("spec.toml")).expect("the draft");
    for part in [
        "map = { \"A\" = \"active\", \"C\" = \"?\" }",
        "the target's CHECK allows \"active\", \"closed\", \"cancelled\"",
        // notes has no rows: the words are listed.
        "the source's values are not known here; the target's CHECK allows \"memo\", \"call\"",
    ] {
        assert!(draft.contains(part), "{part} not in the draft:\n{draft}");
    }
    assert_eq!(draft.matches("# DECIDE").count(), 2, "{draft}");
    let out = d.cutover(&["load"]).output();
    assert_ne!(out.code, Some(0), "{out}");
    assert_eq!(
        d.query("target.db", "SELECT count(*) FROM accounts"),
        vec![vec![rusqlite::types::Value::Integer(0)]]
    );
}
