//! `check` names, before the switch, every place where the target can hold
//! a value the source cannot store exactly (docs/spec.md, "Hazards"): a
//! time kept to fewer digits of a second, a shorter text, a `char(n)` that
//! pads or a MySQL `CHAR(n)` that drops trailing spaces, money whose digits
//! the source bounds, a narrower integer, MySQL `TIMESTAMP`'s years and an
//! `ENUM`'s labels; a source column an insert must fill that the spec does
//! not carry; a generated source column under a column the application
//! writes. Each is a warning (exit 0) naming table, column, both types and
//! the fixes. The CHECK it prints, added to the target by the target's own
//! client, makes the target refuse exactly what crosses and clears the
//! warning; nothing else is written anywhere.

mod support;

use std::collections::BTreeSet;

use support::layout::On;
use support::spec::{Spec, Table};
use support::{Dir, Layout, each_layout};

fn source_sql(on: On) -> &'static str {
    match on {
        On::Pg => {
            "CREATE TABLE accounts (id bigint PRIMARY KEY, created timestamp(0) NOT NULL,
                email varchar(40) NOT NULL, code char(3) NOT NULL, amount numeric(12,2) NOT NULL,
                qty integer NOT NULL, total bigint GENERATED ALWAYS AS (qty * 2) STORED,
                legacy text NOT NULL, note text)"
        }
        On::My => {
            "CREATE TABLE accounts (id BIGINT PRIMARY KEY, created DATETIME(0) NOT NULL,
                email VARCHAR(40) NOT NULL, code CHAR(3) NOT NULL, amount DECIMAL(12,2) NOT NULL,
                qty INT NOT NULL, total BIGINT AS (qty * 2) STORED,
                legacy TEXT NOT NULL, note MEDIUMTEXT, stamp TIMESTAMP(0) NULL,
                kind ENUM('a','b') NOT NULL DEFAULT 'a')"
        }
        On::Sqlite => {
            "CREATE TABLE accounts (id INTEGER PRIMARY KEY, created TEXT NOT NULL,
                email TEXT NOT NULL, code TEXT NOT NULL, amount TEXT NOT NULL,
                qty INTEGER NOT NULL, total INTEGER GENERATED ALWAYS AS (qty * 2) STORED,
                legacy TEXT NOT NULL, note TEXT)"
        }
    }
}

/// The target as a migration engineer widens it: a time to the
/// microsecond, text, cents, a 64-bit quantity; a MySQL source's
/// `TIMESTAMP` and `ENUM` as a time and text.
fn target_sql(source: On, target: On) -> String {
    let (head, more) = match target {
        On::Pg => (
            "CREATE TABLE accounts (id bigint PRIMARY KEY, created timestamp NOT NULL,
                email text NOT NULL, code text NOT NULL, cents bigint NOT NULL,
                qty bigint NOT NULL, total bigint, note text",
            ", stamp timestamptz, kind text",
        ),
        On::My => (
            "CREATE TABLE accounts (id BIGINT PRIMARY KEY, created DATETIME(6) NOT NULL,
                email VARCHAR(200) NOT NULL, code VARCHAR(10) NOT NULL, cents BIGINT NOT NULL,
                qty BIGINT NOT NULL, total BIGINT, note TEXT",
            ", stamp DATETIME(6) NULL, kind VARCHAR(10)",
        ),
        On::Sqlite => (
            "CREATE TABLE accounts (id INTEGER PRIMARY KEY, created TEXT NOT NULL,
                email TEXT NOT NULL, code TEXT NOT NULL, cents INTEGER NOT NULL,
                qty INTEGER NOT NULL, total INTEGER, note TEXT",
            ", stamp TEXT, kind TEXT",
        ),
    };
    let more = if source == On::My { more } else { "" };
    format!("{head}{more})")
}

fn spec(source: On) -> Spec {
    let mut t = Table::new("accounts")
        .key(["id"])
        .copy("created")
        .copy("email")
        .copy("code")
        .decimal("amount", "cents", 2)
        .copy("qty")
        .copy("total")
        .copy("note")
        .ignore(["legacy"]);
    if source == On::My {
        t = t.copy("stamp").copy("kind");
    }
    Spec::new().table(t)
}

/// What `check` must warn of on a pair: (source column, kind).
fn expected(layout: Layout) -> BTreeSet<(&'static str, &'static str)> {
    let (source, _) = layout.sides();
    let mut want: BTreeSet<_> = [("total", "generated"), ("legacy", "required")].into();
    let bounded = match source {
        On::Sqlite => return want,
        On::Pg => vec![
            ("created", "precision"),
            ("email", "length"),
            ("code", "length"),
            ("code", "padding"),
            ("amount", "range"),
            ("qty", "range"),
        ],
        On::My => vec![
            ("created", "precision"),
            ("email", "length"),
            ("code", "length"),
            ("code", "trailing-spaces"),
            ("amount", "range"),
            ("qty", "range"),
            ("stamp", "precision"),
            ("stamp", "range"),
            ("kind", "members"),
        ],
    };
    want.extend(bounded);
    // The harness gives a PostgreSQL source bigint for integer where the
    // target is SQLite, as wide as SQLite's integers.
    if layout == Layout::PgToSqlite {
        want.remove(&("qty", "range"));
    }
    want
}

fn found(json: &serde_json::Value) -> BTreeSet<(String, String)> {
    json["hazards"]
        .as_array()
        .unwrap_or_else(|| panic!("no hazards in {json:#}"))
        .iter()
        .map(|h| {
            (
                h["column"].as_str().unwrap_or_default().to_string(),
                h["kind"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn owned(set: BTreeSet<(&str, &str)>) -> BTreeSet<(String, String)> {
    set.into_iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

fn setup(layout: Layout, name: &str) -> Dir {
    let (source, target) = layout.sides();
    let d = Dir::on(layout, name);
    d.spec(&spec(source));
    d.create_db("source.db", source_sql(source));
    d.create_db("target.db", &target_sql(source, target));
    d
}

/// Every hazard of the pair is a warning with its fixes; check passes and
/// writes nothing.
fn check_names_every_hazard_before_the_switch(layout: Layout) {
    let d = setup(layout, "hazards-named");
    let before = d.snapshot();
    let json = d.json(&["check"], 0);
    assert_eq!(found(&json), owned(expected(layout)), "{json:#}");
    for h in json["hazards"].as_array().unwrap() {
        assert_eq!(h["table"], "accounts", "{h:#}");
        assert!(!h["source_type"].as_str().unwrap().is_empty(), "{h:#}");
        let fixes = h["fixes"].as_array().unwrap();
        assert!(!fixes.is_empty(), "{h:#}");
    }
    let text = d.run(&["check"], 0).stdout;
    assert!(
        text.contains("WARN table 'accounts': source column 'legacy'"),
        "{text}"
    );
    assert!(
        text.contains("hazard(s) undecided: the target can hold values"),
        "{text}"
    );
    d.assert_unchanged(&before, "check");
}
each_layout!(check_names_every_hazard_before_the_switch);

/// A value of each bounded column that the source could not store, as the
/// application would write it into the target, each in a row otherwise in
/// bounds, and that row in bounds: `INSERT`s with `ID` for the key.
fn crossing_rows(layout: Layout) -> (Vec<String>, String) {
    let source = layout.sides().0;
    let mut good = vec![
        ("created", "'2026-01-01 10:00:00'"),
        ("email", "'a@x'"),
        ("code", "'abc'"),
        ("cents", "12345"),
        ("qty", "5"),
        ("note", "NULL"),
    ];
    let long = format!("'{}'", "x".repeat(41));
    let mut crossing = vec![
        ("created", "'2026-01-01 10:00:00.5'"),
        ("email", long.as_str()),
        ("cents", "1000000000000"),
        ("qty", "2147483648"),
    ];
    match source {
        On::Pg => crossing.push(("code", "'ab'")),
        On::My => {
            good.extend([("stamp", "'2026-01-01 00:00:00'"), ("kind", "'a'")]);
            crossing.extend([
                ("code", "'ab '"),
                ("stamp", "'2040-01-01 00:00:00'"),
                ("kind", "'c'"),
            ]);
        }
        On::Sqlite => unreachable!("a SQLite source bounds nothing"),
    }
    let insert = |row: &[(&str, &str)]| {
        let (cols, vals): (Vec<&str>, Vec<&str>) = row.iter().copied().unzip();
        format!(
            "INSERT INTO accounts (id, {}) VALUES (ID, {})",
            cols.join(", "),
            vals.join(", ")
        )
    };
    let bad = crossing
        .iter()
        .map(|&(col, val)| {
            let row: Vec<(&str, &str)> = good
                .iter()
                .map(|&(c, v)| (c, if c == col { val } else { v }))
                .collect();
            insert(&row)
        })
        .collect();
    (bad, insert(&good))
}

/// The CHECKs `check` prints, added to the target by its own client, make
/// the target refuse each value the source could not store and take one it
/// could; `check` then warns only of what no CHECK holds.
fn the_printed_checks_make_the_target_refuse_what_cannot_go_back(layout: Layout) {
    let d = setup(layout, "hazards-held");
    let json = d.json(&["check"], 0);
    let ddl: Vec<String> = json["hazards"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|h| h["fixes"].as_array().unwrap().clone())
        .filter_map(|f| {
            f.as_str()?
                .strip_prefix("or have the target refuse it: ")
                .map(str::to_string)
        })
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    assert!(!ddl.is_empty(), "{json:#}");
    for statement in &ddl {
        d.client("target.db", statement);
    }
    let again = d.json(&["check"], 0);
    assert_eq!(
        found(&again),
        owned([("total", "generated"), ("legacy", "required")].into()),
        "{again:#}"
    );
    let (bad, good) = crossing_rows(layout);
    for (i, statement) in bad.iter().enumerate() {
        let statement = statement.replace("ID", &(100 + i).to_string());
        assert!(
            d.try_client("target.db", &statement).is_err(),
            "the target took a value the source could not store: {statement}"
        );
    }
    d.client("target.db", &good.replace("ID", "1"));
    assert_eq!(d.count("target.db", "accounts"), 1);
}
each_layout!(the_printed_checks_make_the_target_refuse_what_cannot_go_back: [pg_to_pg, my_to_pg, pg_to_my, my_to_my]);

/// A MySQL `ENUM` under a PostgreSQL enum type: a hazard only where the
/// type has a label the source lacks, and the label is named.
fn an_enum_under_an_enum_warns_only_of_labels_the_source_lacks(layout: Layout) {
    let d = Dir::on(layout, "hazards-enums");
    d.spec(
        &Spec::new()
            .table(Table::new("wider").key(["id"]).copy("kind"))
            .table(Table::new("same").key(["id"]).copy("kind")),
    );
    d.create_db(
        "source.db",
        "CREATE TABLE wider (id BIGINT PRIMARY KEY, kind ENUM('a','b') NOT NULL);
         CREATE TABLE same (id BIGINT PRIMARY KEY, kind ENUM('a','b') NOT NULL);",
    );
    d.create_db(
        "target.db",
        "CREATE TYPE wider_kind AS ENUM ('a', 'b', 'c');
         CREATE TYPE same_kind AS ENUM ('b', 'a');
         CREATE TABLE wider (id bigint PRIMARY KEY, kind wider_kind NOT NULL);
         CREATE TABLE same (id bigint PRIMARY KEY, kind same_kind NOT NULL);",
    );
    let json = d.json(&["check"], 0);
    let hazards = json["hazards"].as_array().expect("hazards");
    assert_eq!(hazards.len(), 1, "{json:#}");
    let h = &hazards[0];
    assert_eq!(
        (&h["table"], &h["kind"]),
        (&"wider".into(), &"members".into()),
        "{json:#}"
    );
    assert!(
        h["why"]
            .as_str()
            .unwrap_or_default()
            .contains("the target holds c,"),
        "{json:#}"
    );
}
each_layout!(an_enum_under_an_enum_warns_only_of_labels_the_source_lacks: [my_to_pg]);

/// The source columns of [`spec`] with a hazard on a pair with a bounded
/// source: every one the spec must decide.
fn hazard_columns(layout: Layout) -> Vec<&'static str> {
    expected(layout)
        .into_iter()
        .map(|(c, _)| c)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// `journal install` refuses (exit 2, the target unchanged) while a hazard
/// is undecided; accepted in the spec (`source_limit = "watch"`), each is
/// a note at `check`, the journal goes in, and `watch` counts the writes
/// the application makes past each accepted limit: one time with a
/// fraction, one long email, and every insert for the NOT NULL column the
/// spec does not carry. A write is counted under the first column it
/// crosses.
fn journal_install_refuses_an_undecided_hazard_and_watch_counts_an_accepted_one(layout: Layout) {
    let d = setup(layout, "hazards-decided");
    let before = d.snapshot();
    let refused = d.run(&["journal", "install"], 2);
    for words in ["undecided", "table 'accounts'", "source_limit"] {
        assert!(refused.stderr.contains(words), "{words}: {refused}");
    }
    d.assert_unchanged(&before, "the refused journal install");

    let source = layout.sides().0;
    let columns = hazard_columns(layout);
    d.spec(&spec(source).edit_table("accounts", |t| t.watch(columns.iter().copied())));
    let json = d.json(&["check"], 0);
    assert_eq!(found(&json), owned(expected(layout)), "{json:#}");
    for h in json["hazards"].as_array().unwrap() {
        assert_eq!(h["accepted"], true, "{h:#}");
    }
    let text = d.run(&["check"], 0).stdout;
    assert!(!text.contains("WARN"), "{text}");
    assert!(text.contains("hazard accepted"), "{text}");
    d.run(&["journal", "install"], 0);

    let (bad, good) = crossing_rows(layout);
    d.client("target.db", &good.replace("ID", "1"));
    d.client("target.db", &bad[0].replace("ID", "100"));
    d.client("target.db", &bad[1].replace("ID", "101"));
    let watch = d.json(&["watch"], 1);
    let crossed: BTreeSet<(String, i64)> = watch["watched"]
        .as_array()
        .unwrap_or_else(|| panic!("no watched in {watch:#}"))
        .iter()
        .map(|w| {
            (
                w["column"].as_str().unwrap().to_string(),
                w["crossed"].as_i64().unwrap(),
            )
        })
        .collect();
    let want: BTreeSet<(String, i64)> = columns
        .iter()
        .map(|&c| {
            let n = match c {
                "created" | "email" => 1,
                "legacy" => 3,
                // A MySQL TIMESTAMP under a DATETIME: a time without a
                // zone (the row in bounds) is no TIMESTAMP's value.
                "stamp" if layout == Layout::MyToMy => 1,
                _ => 0,
            };
            (c.to_string(), n)
        })
        .collect();
    assert_eq!(crossed, want, "{watch:#}");
}
each_layout!(journal_install_refuses_an_undecided_hazard_and_watch_counts_an_accepted_one: [pg_to_pg, my_to_pg, pg_to_my, my_to_my]);

/// The MySQL sample's `address.location`: a `POINT NOT NULL` column
/// without a default, which cutover does not read and the spec ignores.
/// `check` names it a `required` hazard; accepted, `watch` counts the
/// address the application inserts after the switch (not a PASS), and the
/// dry run names it as the entry's conflict, exit 1, with nothing written.
fn an_ignored_geometry_without_a_default_is_a_required_hazard(layout: Layout) {
    let d = Dir::on(layout, "hazards-geometry");
    let spec = |accepted: bool| {
        let t = Table::new("address")
            .key(["id"])
            .copy("address")
            .ignore(["location"]);
        Spec::new().table(if accepted { t.watch(["location"]) } else { t })
    };
    d.spec(&spec(false));
    d.create_db(
        "source.db",
        "CREATE TABLE address (id BIGINT PRIMARY KEY, address VARCHAR(50) NOT NULL,
             location POINT NOT NULL);
         INSERT INTO address VALUES (1, 'one', POINT(1, 2)), (2, 'two', POINT(3, 4));",
    );
    d.create_db(
        "target.db",
        "CREATE TABLE address (id bigint PRIMARY KEY, address varchar(50) NOT NULL);",
    );
    let json = d.json(&["check"], 0);
    assert_eq!(
        found(&json),
        owned([("location", "required")].into()),
        "{json:#}"
    );
    d.run(&["load"], 0);
    d.run(&["journal", "install"], 2);
    d.spec(&spec(true));
    d.run(&["journal", "install"], 0);
    d.client(
        "target.db",
        "INSERT INTO address VALUES (3, 'three'); UPDATE address SET address = 'uno' WHERE id = 1;",
    );
    let watch = d.json(&["watch"], 1);
    assert_eq!(watch["watched"][0]["column"], "location", "{watch:#}");
    assert_eq!(watch["watched"][0]["crossed"], 1, "{watch:#}");
    d.run(&["fence", "on"], 0);
    // The harness's image reads no POINT: the rows, the point as text.
    let source = |d: &Dir| {
        (
            d.query(
                "source.db",
                "SELECT id, address, ST_AsText(location) FROM address ORDER BY id",
            ),
            d.counters("source.db"),
        )
    };
    let before = source(&d);
    let dry = d.json(&["replay", "--dry-run"], 1);
    let conflicts = dry["conflicts"].as_array().expect("conflicts");
    assert!(
        conflicts.iter().any(|c| c["key"] == serde_json::json!([3])
            && c["reason"]
                .as_str()
                .is_some_and(|r| r.contains("'location'"))),
        "the insert's conflict names the column: {dry:#}"
    );
    assert_eq!(source(&d), before, "the dry run changed the source");
}
each_layout!(an_ignored_geometry_without_a_default_is_a_required_hazard: [my_to_pg]);

/// `init` marks what `check` will ask to be decided, each with the line
/// that decides it commented out: the hazards of a column the target
/// widens, and a trigger of the source replay cannot hold (an audit
/// writer, on MySQL). With those lines taken in, `check` passes and the
/// journal goes in; without them, `check` fails on the trigger.
fn init_marks_each_decision_check_will_ask_for(layout: Layout) {
    let d = Dir::on(layout, "hazards-init");
    d.create_db(
        "source.db",
        "CREATE TABLE t (id BIGINT PRIMARY KEY, name VARCHAR(20) NOT NULL);
         CREATE TABLE audit (id INT AUTO_INCREMENT PRIMARY KEY, what VARCHAR(20) NOT NULL);
         CREATE TRIGGER t_audit AFTER UPDATE ON t FOR EACH ROW INSERT INTO audit (what) VALUES ('u');
         INSERT INTO t VALUES (1, 'one');",
    );
    d.create_db(
        "target.db",
        "CREATE TABLE t (id bigint PRIMARY KEY, name text NOT NULL);",
    );
    let (source, target) = (d.engine().url("source.db"), d.engine().url("target.db"));
    d.command(&[
        "init",
        "--source",
        &source,
        "--target",
        &target,
        "--out",
        "spec.toml",
    ])
    .expect(0);
    let draft = std::fs::read_to_string(d.join("spec.toml")).unwrap();
    for line in [
        "#   name: length hazard",
        "# source_limit = { \"name\" = \"watch\" }",
        "trigger 't_audit' (AFTER UPDATE FOR EACH ROW)",
        "# replay_policy = { \"t_audit\" = \"fire\" }",
    ] {
        assert!(draft.contains(line), "{line}: {draft}");
    }
    d.run(&["check"], 1)
        .assert_mentions(&["t_audit", "CANNOT HOLD"]);
    std::fs::write(
        d.join("spec.toml"),
        draft
            .replace("\n# source_limit = ", "\nsource_limit = ")
            .replace("\n# replay_policy = ", "\nreplay_policy = "),
    )
    .unwrap();
    d.run(&["check"], 0);
    d.run(&["load"], 0);
    d.run(&["journal", "install"], 0);
}
each_layout!(init_marks_each_decision_check_will_ask_for: [my_to_pg]);

/// A SQLite source whose trigger sets a carried column to the time (`UPDATE
/// orders SET updated_at = strftime(…, 'now')`): no SQLite connection can
/// switch it off or set its clock, so `check` says CANNOT HOLD (exit 1)
/// with the fix that works there, and replay refuses (exit 2) with the
/// source unchanged. Dropped for the rollback, the replay goes through; a
/// replay after it is created again applies nothing and passes.
fn a_sqlite_trigger_stamping_a_carried_column_cannot_be_held(layout: Layout) {
    let touch = "CREATE TRIGGER orders_touch AFTER UPDATE ON orders
             WHEN NEW.updated_at IS OLD.updated_at BEGIN
             UPDATE orders SET updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now') WHERE id = NEW.id;
         END;";
    let d = Dir::on(layout, "hazards-sqlite-stamp");
    d.spec(&Spec::new().table(Table::orders().copy("updated_at")));
    d.create_db(
        "source.db",
        &format!(
            "CREATE TABLE orders (id INTEGER PRIMARY KEY, dollars TEXT NOT NULL, status TEXT NOT NULL,
                                  updated_at TEXT NOT NULL);
             INSERT INTO orders VALUES (101, '12.50', 'A', '2024-01-01 00:00:00.000'),
                                       (102, '7.50', 'C', '2024-01-02 00:00:00.000');
             {touch}"
        ),
    );
    d.create_db(
        "target.db",
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, cents INTEGER NOT NULL, status TEXT NOT NULL,
                              updated_at TEXT NOT NULL);",
    );
    d.run(&["check"], 1).assert_mentions(&[
        "orders_touch",
        "CANNOT HOLD",
        "Drop it for the rollback",
    ]);
    d.run(&["load"], 0);
    d.run(&["journal", "install"], 0);
    d.client(
        "target.db",
        "UPDATE orders SET cents = 1300, updated_at = '2024-06-01 10:00:00.500' WHERE id = 101;",
    );
    d.run(&["fence", "on"], 0);
    let before = (d.snapshot(), d.counters("target.db"));
    d.run(&["replay"], 2)
        .assert_mentions(&["orders_touch", "wrote nothing"]);
    d.assert_unchanged(&before.0, "the refused replay");
    assert_eq!(d.counters("target.db"), before.1);
    d.exec("source.db", "DROP TRIGGER orders_touch");
    d.run(&["replay"], 0);
    let at: Vec<String> = d
        .query("source.db", "SELECT updated_at FROM orders WHERE id = 101")
        .into_iter()
        .map(|r| format!("{:?}", r[0]))
        .collect();
    assert_eq!(at, [r#"Text("2024-06-01 10:00:00.500")"#]);
    d.exec("source.db", touch);
    let again = d.json(&["replay"], 0);
    assert_eq!(again["applied"], 0, "{again:#}");
}
each_layout!(a_sqlite_trigger_stamping_a_carried_column_cannot_be_held: [sqlite, sqlite_to_pg]);
