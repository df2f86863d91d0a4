//! Money kept in an exact decimal type of the source's engine
//! (PostgreSQL's `numeric(19,4)`, MySQL's `DECIMAL(19,4)`, a
//! `numeric(12,3)`) carried into integer cents at scale 2: zeros past the
//! spec's scale are exact (`12.5000` is 1250 cents), and only a value with
//! a non-zero digit there is refused, alone, by `check`, `load` and both
//! gates, naming its key. The replay writes cents back into such a column
//! exactly. The application's rows are written by the engine's own client
//! (`psql`, `mariadb`); the oracle reads the source's text and computes
//! cents by its digits. Decimal *text* keeps its grammar
//! (`tests/hostile_values.rs`, `tests/bad_input.rs`); the parser's cases
//! are the unit tests of `src/transform.rs`.

mod support;

use serde_json::json;
use support::spec::{Spec, Table};
use support::{Dir, Layout, each_layout, int};

/// The key of the one row whose amount would have to be rounded.
const BAD: i64 = 777_777;

/// `rows` amounts of `places` fraction digits, each a whole number of
/// cents (zeros past the second place), some negative, some large.
fn amounts(rows: i64, places: usize) -> Vec<(i64, String)> {
    (1..=rows)
        .map(|i| {
            let sign = if i % 17 == 0 { "-" } else { "" };
            let whole = (i * 7919) % 1_000_000;
            let zeros = "0".repeat(places - 2);
            (i, format!("{sign}{whole}.{:02}{zeros}", i % 100))
        })
        .collect()
}

/// Cents of a decimal the source's client printed, by its digits: every
/// digit past the second place must be zero.
fn cents(text: &str) -> i64 {
    let (neg, d) = match text.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, text),
    };
    let (whole, frac) = d.split_once('.').expect("a fraction");
    assert!(
        frac[2..].bytes().all(|b| b == b'0'),
        "{text} is not whole cents"
    );
    let c = whole.parse::<i64>().unwrap() * 100 + frac[..2].parse::<i64>().unwrap();
    if neg { -c } else { c }
}

/// The target as the source's rows say it must be, read by the harness's
/// own client.
fn oracle(d: &Dir) -> Vec<Vec<rusqlite::types::Value>> {
    let mut rows: Vec<(i64, i64)> = d
        .query("source.db", "SELECT id, amount FROM payments")
        .into_iter()
        .map(|r| match (&r[0], &r[1]) {
            (rusqlite::types::Value::Integer(id), rusqlite::types::Value::Text(a)) => {
                (*id, cents(a))
            }
            other => panic!("unexpected source row {other:?}"),
        })
        .collect();
    rows.sort();
    rows.into_iter()
        .map(|(id, c)| vec![int(id), int(c)])
        .collect()
}

fn digests(layout: Layout) -> bool {
    matches!(
        layout,
        Layout::PgToPg | Layout::MyToPg | Layout::MyToMy | Layout::PgToMy
    )
}

/// The one finding a run reports: the row `BAD`, invalid, with its value
/// and the reason.
fn only_the_bad_row(json: &serde_json::Value, value: &str, places: usize) {
    assert_eq!(json["tables"][0]["invalid"], 1, "{json:#}");
    let diffs = json["diffs"].as_array().expect("diffs");
    assert_eq!(diffs.len(), 1, "{json:#}");
    let d = &diffs[0];
    assert_eq!(
        (&d["key"], &d["kind"], &d["column"], &d["actual"]),
        (
            &json!([BAD]),
            &json!("invalid"),
            &json!("amount"),
            &json!(value)
        ),
        "{json:#}"
    );
    let reason = d["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains(&format!(
            "has {places} decimal places once its trailing zeros are dropped, past the scale of 2"
        )),
        "{json:#}"
    );
}

/// One migration of `decl` money (`DECIMAL(19,4)`, which PostgreSQL and
/// MySQL both read) into cents: refused for the one real sub-cent value
/// alone, then, once the application corrects it, loaded, gated, and
/// caught again when it comes back.
fn typed_money(layout: Layout, name: &str, decl: &str, places: usize, bad: &str, fixed: &str) {
    let d = Dir::on(layout, name);
    d.spec(
        &Spec::new().table(
            Table::new("payments")
                .key(["id"])
                .decimal("amount", "cents", 2)
                .watch(["amount"]),
        ),
    );
    d.create_db(
        "source.db",
        &format!("CREATE TABLE payments (id BIGINT PRIMARY KEY, amount {decl} NOT NULL)"),
    );
    d.create_db(
        "target.db",
        "CREATE TABLE payments (id BIGINT PRIMARY KEY, cents BIGINT NOT NULL)",
    );
    let values: Vec<String> = amounts(3000, places)
        .iter()
        .map(|(i, a)| format!("({i}, {a})"))
        .collect();
    d.client(
        "source.db",
        &format!(
            "INSERT INTO payments (id, amount) VALUES {}, ({BAD}, {bad});",
            values.join(", ")
        ),
    );
    let shown = d.query(
        "source.db",
        &format!("SELECT amount FROM payments WHERE id = {BAD}"),
    );
    assert_eq!(shown, vec![vec![rusqlite::types::Value::Text(bad.into())]]);

    let before = d.snapshot();
    only_the_bad_row(&d.json(&["check"], 1), bad, 3);
    let json = d.json(&["load"], 1);
    assert_eq!(json["invalid"]["key"], json!([BAD]), "{json:#}");
    assert_eq!(json["invalid"]["column"], "amount", "{json:#}");
    d.assert_unchanged(&before, "check and a refused load");

    d.client(
        "source.db",
        &format!("UPDATE payments SET amount = {fixed} WHERE id = {BAD};"),
    );
    let json = d.json(&["check"], 0);
    assert_eq!(json["tables"][0]["invalid"], 0, "{json:#}");
    assert_eq!(json["tables"][0]["non_canonical"], 0, "{json:#}");
    d.run(&["load"], 0);
    assert_eq!(d.dump("target.db", "payments"), oracle(&d));
    d.run(&["gate", "--mode", "stream"], 0);
    if digests(layout) {
        d.run(&["gate", "--mode", "digest"], 0);
    }

    d.client(
        "source.db",
        &format!("UPDATE payments SET amount = {bad} WHERE id = {BAD};"),
    );
    only_the_bad_row(&d.json(&["gate", "--mode", "stream"], 1), bad, 3);
    if digests(layout) {
        only_the_bad_row(&d.json(&["gate", "--mode", "digest"], 1), bad, 3);
    }
}

fn money_at_four_places_is_exact_cents_and_one_sub_cent_value_is_refused_alone(layout: Layout) {
    typed_money(
        layout,
        "money-19-4",
        "DECIMAL(19,4)",
        4,
        "12.3450",
        "12.3400",
    );
}
each_layout!(
    money_at_four_places_is_exact_cents_and_one_sub_cent_value_is_refused_alone: [pg_to_pg, pg_to_sqlite, my_to_pg, my_to_my, pg_to_my]
);

fn money_at_three_places_is_exact_cents_and_one_sub_cent_value_is_refused_alone(layout: Layout) {
    typed_money(layout, "money-12-3", "NUMERIC(12,3)", 3, "12.345", "12.340");
}
each_layout!(
    money_at_three_places_is_exact_cents_and_one_sub_cent_value_is_refused_alone: [pg_to_pg, my_to_pg]
);

/// The rollback writes the target's cents back into the `DECIMAL(19,4)`
/// column as the exact amount, and the replay reconciles.
fn replay_writes_cents_back_into_money_at_four_places_exactly(layout: Layout) {
    let d = Dir::on(layout, "money-19-4-replay");
    d.spec(
        &Spec::new().table(
            Table::new("payments")
                .key(["id"])
                .decimal("amount", "cents", 2)
                .watch(["amount"]),
        ),
    );
    d.create_db(
        "source.db",
        "CREATE TABLE payments (id BIGINT PRIMARY KEY, amount DECIMAL(19,4) NOT NULL)",
    );
    d.create_db(
        "target.db",
        "CREATE TABLE payments (id BIGINT PRIMARY KEY, cents BIGINT NOT NULL)",
    );
    d.client(
        "source.db",
        "INSERT INTO payments (id, amount) VALUES (1, 12.5000), (2, -0.0100), (3, 7.0000);",
    );
    d.run(&["load"], 0);
    d.run(&["journal", "install"], 0);
    d.client(
        "target.db",
        "UPDATE payments SET cents = 99999 WHERE id = 1;
         INSERT INTO payments (id, cents) VALUES (4, 1), (5, -123456789);
         DELETE FROM payments WHERE id = 3;",
    );
    d.run(&["fence", "on"], 0);
    d.run(&["replay"], 0);
    let text = |s: &str| rusqlite::types::Value::Text(s.into());
    let mut rows = d.query("source.db", "SELECT id, amount FROM payments");
    rows.sort_by_key(|r| match r[0] {
        rusqlite::types::Value::Integer(i) => i,
        _ => 0,
    });
    assert_eq!(
        rows,
        vec![
            vec![int(1), text("999.9900")],
            vec![int(2), text("-0.0100")],
            vec![int(4), text("0.0100")],
            vec![int(5), text("-1234567.8900")],
        ]
    );
    d.run(&["gate", "--mode", "stream"], 0);
}
each_layout!(replay_writes_cents_back_into_money_at_four_places_exactly: [pg_to_pg, my_to_my]);

/// `sync` reads the same: rows past the cursor in `DECIMAL(19,4)` are
/// carried as exact cents, and a sub-cent one is refused, the target as
/// it was.
fn sync_carries_money_at_four_places_exactly(layout: Layout) {
    let d = Dir::on(layout, "money-19-4-sync");
    d.spec(
        &Spec::new().table(
            Table::new("payments")
                .key(["id"])
                .decimal("amount", "cents", 2)
                .copy("updated")
                .watermark("updated"),
        ),
    );
    d.create_db(
        "source.db",
        "CREATE TABLE payments (id BIGINT PRIMARY KEY, amount DECIMAL(19,4) NOT NULL, updated BIGINT NOT NULL)",
    );
    d.create_db(
        "target.db",
        "CREATE TABLE payments (id BIGINT PRIMARY KEY, cents BIGINT NOT NULL, updated BIGINT NOT NULL)",
    );
    d.client(
        "source.db",
        "INSERT INTO payments (id, amount, updated) VALUES (1, 12.5000, 1), (2, -0.0100, 1);",
    );
    d.run(&["load"], 0);
    d.client(
        "source.db",
        "INSERT INTO payments (id, amount, updated) VALUES (3, 3.2000, 2);
         UPDATE payments SET amount = 99.9900, updated = 2 WHERE id = 1;",
    );
    d.run(&["sync"], 0);
    assert_eq!(
        d.dump("target.db", "payments"),
        vec![
            vec![int(1), int(9999), int(2)],
            vec![int(2), int(-1), int(1)],
            vec![int(3), int(320), int(2)],
        ]
    );
    d.client(
        "source.db",
        "INSERT INTO payments (id, amount, updated) VALUES (4, 1.2345, 3);",
    );
    let before = d.image("target.db");
    let out = d.run(&["sync"], 1);
    out.assert_mentions(&["payments", "amount", "1.2345"]);
    d.assert_db_unchanged("target.db", &before, &"a refused sync");
}
each_layout!(sync_carries_money_at_four_places_exactly: [pg_to_sqlite, my_to_pg]);
