//! Hostile values, wherever a value enters: the source (check, load, gate),
//! the target (a value the application wrote that the reverse transform
//! cannot carry back, met by replay) and change-feed files (`apply`).
//!
//! Every value docs/spec.md ("Transforms") says the transform rejects is rejected with the key,
//! the column and a reason, and nothing is written; the `i64` limits of minor
//! units are exact to the last cent in both directions; a megabyte of digits
//! costs bounded time and no panic; look-alike codes are not codes; and a
//! value whose storage class differs from what the other side holds is a
//! difference, never "equal enough".
//!
//! See `tests/bad_input.rs` for the first decimal spellings (NaN, 1e3, +7.50,
//! …); this file adds the rest of docs/spec.md's table and the edges.

mod support;

use std::time::{Duration, Instant};

use rusqlite::types::Value;
use serde_json::{Value as Json, json};
use support::feed::feed_text;
use support::{Dir, ORDERS_SPEC, ORDERS_TARGET, Spec, Table, assert_no_panic, int, text};

/// Runs `args`, expecting `code`, and proves every file in the folder is
/// byte-for-byte as before.
fn unchanged(d: &Dir, args: &[&str], code: i32) -> support::Output {
    let before = d.snapshot();
    let out = d.run(args, code);
    d.assert_unchanged(&before, &args.join(" "));
    out
}

/// A source of the running example whose `orders` rows are `(id, dollars,
/// status)` exactly as given (untyped `dollars`, so every storage class
/// stays what it is), and the fixture's empty target.
fn orders_with(name: &str, rows: &[(i64, Value, &str)]) -> Dir {
    let d = Dir::new(name);
    d.spec(ORDERS_SPEC);
    d.create_db(
        "source.db",
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, dollars, status TEXT NOT NULL);",
    );
    d.create_db("target.db", ORDERS_TARGET);
    let conn = d.conn("source.db");
    for (id, dollars, status) in rows {
        conn.execute(
            "INSERT INTO orders (id, dollars, status) VALUES (?1, ?2, ?3)",
            rusqlite::params![id, dollars, status],
        )
        .expect("inserting a source row");
    }
    d
}

/// The `invalid` diffs of a check or gate report, by key.
fn invalid_keys(json: &Json) -> Vec<i64> {
    let mut keys: Vec<i64> = json["diffs"]
        .as_array()
        .unwrap_or_else(|| panic!("no diffs in {json:#}"))
        .iter()
        .filter(|d| d["kind"] == "invalid")
        .map(|d| d["key"][0].as_i64().expect("an integer key"))
        .collect();
    keys.sort_unstable();
    keys
}

// --- decimals in the source ------------------------------------------------------

/// Every spelling docs/spec.md rejects (and a few more an adversary would
/// try), not already covered by `tests/bad_input.rs`.
const REJECTED_DECIMALS: &[&str] = &[
    "0x10",
    "1_000",
    "nan",
    "-inf",
    "7.50 ",
    "7. 50",
    "-",
    "5.",
    "12.5.0",
    "--1",
    "1-",
    "12.345",
    "",
    "١٢.٥٠",
    "99999999999999999.00",
    "-92233720368547758.09",
    "1.5e1",
    "12.50\n",
    "\t7.50",
    "\u{2212}7.50",  // MINUS SIGN, not a hyphen
    "７.50",         // one full-width digit
    "12\u{00A0}50",  // no-break space
    "1\u{0660}.00",  // ARABIC-INDIC DIGIT ZERO
    "12.5\u{FF10}",  // a full-width zero in the fraction
    "12.50\u{0}",    // a NUL byte after a valid decimal
    "\u{FEFF}12.50", // a byte-order mark
    "12.50\u{200B}", // a zero-width space
    "1,000.00",
    "$12.50",
    "12.50-",
    "0.001",
    "-.5",
    "Infinity",
];

#[test]
fn every_rejected_decimal_spelling_is_an_invalid_row_in_check_load_and_gate() {
    let rows: Vec<(i64, Value, &str)> = REJECTED_DECIMALS
        .iter()
        .enumerate()
        .map(|(i, v)| (i as i64 + 1, text(v), "A"))
        .collect();
    let d = orders_with("rejected-decimals", &rows);
    let n = REJECTED_DECIMALS.len();
    let before = d.snapshot();
    let json = d.json(&["check", "--max-diffs", "100"], 1);
    assert_eq!(json["tables"][0]["invalid"], n, "{json:#}");
    assert_eq!(
        invalid_keys(&json),
        (1..=n as i64).collect::<Vec<_>>(),
        "every spelling must be reported under its own key: {json:#}"
    );
    for diff in json["diffs"].as_array().expect("diffs") {
        let i = diff["key"][0].as_u64().expect("an integer key") as usize - 1;
        assert_eq!(diff["column"], "dollars", "{diff:#}");
        assert_eq!(
            diff["actual"],
            json!(REJECTED_DECIMALS[i]),
            "the value is reported exactly as stored, never trimmed: {diff:#}"
        );
        assert!(
            diff["reason"].as_str().is_some_and(|r| !r.is_empty()),
            "{:?} has no reason: {diff:#}",
            REJECTED_DECIMALS[i]
        );
    }
    let gate = d.json(&["gate", "--max-diffs", "100"], 1);
    assert_eq!(gate["tables"][0]["invalid"], n, "{gate:#}");
    let out = d.run(&["load"], 1);
    out.assert_mentions(&["nothing was written", "dollars"]);
    d.assert_unchanged(&before, "check, gate and load over invalid decimals");
}

#[test]
fn the_reason_names_what_is_wrong_with_each_spelling() {
    let cases: &[(&str, &str)] = &[
        ("0x10", "'x'"),
        ("7.50 ", "whitespace"),
        (".5", "no digit before the point"),
        ("5.", "no digit after the point"),
        ("12.345", "3 decimal places"),
        ("", "empty text"),
        ("١٢.٥٠", "non-ASCII digit"),
        ("-92233720368547758.09", "64-bit range"),
        ("\u{2212}7.50", "'\u{2212}'"),
    ];
    let rows: Vec<(i64, Value, &str)> = cases
        .iter()
        .enumerate()
        .map(|(i, (v, _))| (i as i64 + 1, text(v), "A"))
        .collect();
    let d = orders_with("decimal-reasons", &rows);
    let json = d.json(&["check", "--max-diffs", "100"], 1);
    for diff in json["diffs"].as_array().expect("diffs") {
        let i = diff["key"][0].as_u64().expect("a key") as usize - 1;
        let reason = diff["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains(cases[i].1),
            "{:?}: the reason should say {:?}, it says {reason:?}",
            cases[i].0,
            cases[i].1
        );
    }
}

/// An INTEGER or a REAL holding a whole amount is that amount (SQLite's
/// NUMERIC columns store money so); a BLOB is never money.
#[test]
fn money_stored_as_a_blob_in_the_source_is_invalid() {
    let d = orders_with(
        "money-storage-class",
        &[
            (1, Value::Integer(1250), "A"),
            (2, Value::Blob(b"12.50".to_vec()), "A"),
            (3, Value::Real(12.0), "A"),
            (4, text("12.50"), "A"),
        ],
    );
    let before = d.snapshot();
    let json = d.json(&["check"], 1);
    assert_eq!(invalid_keys(&json), vec![2], "{json:#}");
    let out = d.run(&["load"], 1);
    out.assert_mentions(&["nothing was written"]);
    d.assert_unchanged(&before, "load over money of the wrong storage class");
}

#[test]
fn the_i64_limits_of_cents_survive_the_whole_runbook_to_the_last_cent() {
    // i64::MAX cents is 92233720368547758.07 and i64::MIN is
    // -92233720368547758.08: valid, loaded exactly, written back exactly,
    // and their sums (past i64) reported exactly.
    let d = orders_with(
        "i64-limits",
        &[
            (101, text("92233720368547758.07"), "A"),
            (102, text("-92233720368547758.08"), "C"),
            (103, text("92233720368547758.07"), "A"),
        ],
    );
    unchanged(&d, &["check"], 0);
    d.run(&["load"], 0);
    assert_eq!(
        d.dump("target.db", "orders"),
        vec![
            vec![int(101), int(i64::MAX), text("active")],
            vec![int(102), int(i64::MIN), text("closed")],
            vec![int(103), int(i64::MAX), text("active")],
        ]
    );
    let gate = d.json(&["gate"], 0);
    let sum = i128::from(i64::MAX) * 2 + i128::from(i64::MIN);
    let shown = |v: &Json| match v {
        Json::String(s) => s.clone(),
        other => other.to_string(),
    };
    assert_eq!(
        shown(&gate["tables"][0]["totals"][0]["source"]),
        sum.to_string(),
        "{gate:#}"
    );
    d.run(&["journal", "install"], 0);
    d.exec(
        "target.db",
        "UPDATE orders SET cents = -9223372036854775808 WHERE id = 101;
         UPDATE orders SET cents = 9223372036854775807 WHERE id = 102;
         UPDATE orders SET cents = 9223372036854775806 WHERE id = 103;
         INSERT INTO orders (id, cents, status) VALUES (104, -1, 'active');",
    );
    d.run(&["fence", "on"], 0);
    let json = d.json(&["replay"], 0);
    assert_eq!(json["applied"], 4, "{json:#}");
    assert_eq!(
        d.dump("source.db", "orders"),
        vec![
            vec![int(101), text("-92233720368547758.08"), text("A")],
            vec![int(102), text("92233720368547758.07"), text("C")],
            vec![int(103), text("92233720368547758.06"), text("A")],
            vec![int(104), text("-0.01"), text("A")],
        ]
    );
    d.run(&["gate"], 0);
}

#[test]
fn the_i64_limits_hold_at_scale_0_and_scale_18() {
    for (scale, max, min, past) in [
        (
            0,
            "9223372036854775807",
            "-9223372036854775808",
            "9223372036854775808",
        ),
        (
            18,
            "9.223372036854775807",
            "-9.223372036854775808",
            "9.223372036854775808",
        ),
    ] {
        let d = orders_with(
            &format!("limits-scale-{scale}"),
            &[
                (1, text(max), "A"),
                (2, text(min), "A"),
                (3, text(past), "A"),
            ],
        );
        d.spec(
            &Spec::orders().edit_table("orders", |t| t.edit_column("dollars", |c| c.scale(scale))),
        );
        let json = d.json(&["check"], 1);
        assert_eq!(invalid_keys(&json), vec![3], "scale {scale}: {json:#}");
        d.exec("source.db", "DELETE FROM orders WHERE id = 3");
        d.run(&["load"], 0);
        assert_eq!(
            d.query("target.db", "SELECT cents FROM orders ORDER BY id"),
            vec![vec![int(i64::MAX)], vec![int(i64::MIN)]],
            "scale {scale}"
        );
        d.run(&["gate"], 0);
    }
}

#[test]
fn a_megabyte_of_digits_is_refused_in_bounded_time_without_panic() {
    let huge = "1".repeat(1 << 20);
    let d = orders_with("megabyte-digits", &[(1, text(&huge), "A")]);
    let before = d.snapshot();
    for args in [&["check"][..], &["load"]] {
        let started = Instant::now();
        let out = d.cutover(args).output();
        let took = started.elapsed();
        assert_no_panic(&out);
        assert_eq!(out.code, Some(1), "{args:?} on a megabyte of digits\n{out}");
        assert!(
            took < Duration::from_secs(20),
            "{args:?} took {took:?} on a megabyte of digits"
        );
        assert!(
            out.all().contains("64-bit range"),
            "{args:?}: the reason must say why: {}",
            &out.all()[..out.all().len().min(2000)]
        );
    }
    d.assert_unchanged(&before, "check and load on a megabyte of digits");
}

#[test]
fn a_megabyte_of_leading_zeros_is_a_valid_non_canonical_decimal() {
    // The value is 1.00: long, odd, but exact. It must neither overflow nor
    // be refused, and check must say replay would rewrite it.
    let zeros = format!("{}1.00", "0".repeat(1 << 20));
    let d = orders_with("megabyte-zeros", &[(1, text(&zeros), "A")]);
    let json = d.json(&["check"], 0);
    assert_eq!(json["tables"][0]["non_canonical"], 1, "{json:#}");
    d.run(&["load"], 0);
    assert_eq!(
        d.dump("target.db", "orders"),
        vec![vec![int(1), int(100), text("active")]]
    );
    d.run(&["gate"], 0);
}

#[test]
fn a_megabyte_of_fraction_digits_is_refused_as_past_the_scale() {
    let long = format!("0.{}", "0".repeat(1 << 20));
    let d = orders_with("megabyte-fraction", &[(1, text(&long), "A")]);
    let before = d.snapshot();
    let out = d.cutover(&["check"]).expect(1);
    assert_no_panic(&out);
    out.assert_mentions(&["past the scale"]);
    d.assert_unchanged(&before, "check on a megabyte of fraction digits");
}

// --- map codes in the source --------------------------------------------------------

#[test]
fn look_alike_and_near_miss_codes_are_invalid_not_mapped() {
    let codes = [
        "А",  // CYRILLIC CAPITAL LETTER A
        "Α",  // GREEK CAPITAL LETTER ALPHA
        "Ａ", // FULLWIDTH LATIN CAPITAL LETTER A
        "a",  // no case folding
        "A ", // no trimming
        " A",
        "A\u{200B}", // a zero-width space
        "",          // empty text is not a code
        "C\u{0}",    // a NUL byte after a valid code
        "A\u{301}",  // A + COMBINING ACUTE ACCENT
    ];
    let rows: Vec<(i64, Value, &str)> = codes
        .iter()
        .enumerate()
        .map(|(i, c)| (i as i64 + 1, text("1.00"), *c))
        .collect();
    let d = orders_with("look-alike-codes", &rows);
    let before = d.snapshot();
    let json = d.json(&["check", "--max-diffs", "100"], 1);
    assert_eq!(
        invalid_keys(&json),
        (1..=codes.len() as i64).collect::<Vec<_>>(),
        "{json:#}"
    );
    for diff in json["diffs"].as_array().expect("diffs") {
        let i = diff["key"][0].as_u64().expect("a key") as usize - 1;
        assert_eq!(diff["column"], "status", "{diff:#}");
        assert_eq!(diff["actual"], json!(codes[i]), "{diff:#}");
    }
    d.run(&["load"], 1);
    d.assert_unchanged(&before, "check and load over look-alike codes");
}

#[test]
fn a_map_with_both_a_latin_and_a_cyrillic_code_keeps_them_apart_both_ways() {
    // Bijective, so legitimate: each code has its own word, and replay
    // writes back exactly the code the word came from.
    let d = orders_with(
        "latin-and-cyrillic",
        &[(1, text("1.00"), "A"), (2, text("2.00"), "А")],
    );
    d.spec(&Spec::orders().edit_table("orders", |t| {
        t.edit_column("status", |c| c.map([("A", "active"), ("А", "aktivny")]))
    }));
    d.run(&["check"], 0);
    d.run(&["load"], 0);
    assert_eq!(
        d.query("target.db", "SELECT status FROM orders ORDER BY id"),
        vec![vec![text("active")], vec![text("aktivny")]]
    );
    d.run(&["journal", "install"], 0);
    d.exec(
        "target.db",
        "UPDATE orders SET status = 'aktivny' WHERE id = 1;
         UPDATE orders SET status = 'active' WHERE id = 2;",
    );
    d.run(&["fence", "on"], 0);
    d.run(&["replay"], 0);
    assert_eq!(
        d.query("source.db", "SELECT status FROM orders ORDER BY id"),
        vec![vec![text("А")], vec![text("A")]]
    );
}

// --- storage classes: a difference is a difference ------------------------------------

#[test]
fn gate_reports_a_copy_column_whose_storage_class_differs_naming_key_and_column() {
    // The source column has no affinity, so each value keeps its class; the
    // target's INTEGER affinity turns text '1250' and real 12.0 into
    // integers on the way in. Value-equal is not equal.
    let d = Dir::new("storage-class-copy");
    d.spec(&Spec::new().table(Table::new("items").key(["id"]).copy("qty")));
    d.create_db(
        "source.db",
        "CREATE TABLE items (id INTEGER PRIMARY KEY, qty);
         INSERT INTO items VALUES (1, '1250'), (2, 12.0), (3, x'31323530'), (4, 7), (5, 12.5);",
    );
    d.create_db(
        "target.db",
        "CREATE TABLE items (id INTEGER PRIMARY KEY, qty INTEGER);",
    );
    d.run(&["load"], 0);
    let json = d.json(&["gate"], 1);
    let changed: Vec<(i64, String)> = json["diffs"]
        .as_array()
        .expect("diffs")
        .iter()
        .map(|x| {
            assert_eq!(x["kind"], "changed", "{x:#}");
            (
                x["key"][0].as_i64().expect("a key"),
                x["column"].as_str().expect("a column").to_string(),
            )
        })
        .collect();
    assert_eq!(
        changed,
        vec![(1, "qty".to_string()), (2, "qty".to_string())],
        "{json:#}"
    );
    let out = d.run(&["gate"], 1);
    out.assert_mentions(&["qty", "'1250'", "1250"]);
}

#[test]
fn gate_reports_money_stored_as_real_or_blob_in_the_target() {
    let d = Dir::new("storage-class-money");
    d.spec(ORDERS_SPEC);
    d.create_db("source.db", support::ORDERS_SOURCE);
    // No affinity on cents, so a real 1250.0 stays a real.
    d.create_db(
        "target.db",
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, cents, status TEXT NOT NULL);",
    );
    d.run(&["load"], 0);
    d.run(&["gate"], 0);
    d.exec(
        "target.db",
        "UPDATE orders SET cents = 1250.0 WHERE id = 101;
         UPDATE orders SET cents = CAST('750' AS BLOB) WHERE id = 102;",
    );
    let before = d.snapshot();
    let json = d.json(&["gate"], 1);
    assert_eq!(json["tables"][0]["changed"], 2, "{json:#}");
    let by_key = |k: i64| {
        json["diffs"]
            .as_array()
            .expect("diffs")
            .iter()
            .find(|x| x["key"] == json!([k]))
            .cloned()
            .unwrap_or_else(|| panic!("no diff for {k}: {json:#}"))
    };
    assert_eq!(by_key(101)["column"], "cents", "{json:#}");
    assert_eq!(by_key(101)["expected"], 1250, "{json:#}");
    assert_eq!(by_key(101)["actual"], json!(1250.0), "{json:#}");
    assert_eq!(by_key(102)["column"], "cents", "{json:#}");
    d.assert_unchanged(&before, "gate");
}

// --- values in the target that cannot be carried back ----------------------------------

/// The running example loaded and journaled; the application writes
/// 101 → 1400 (seq 1), then `bad` (seq 2); fenced.
fn fenced_after(name: &str, spec: &Spec, target_sql: &str, bad: &str) -> Dir {
    let d = Dir::new(name);
    d.spec(spec);
    d.create_db("source.db", support::ORDERS_SOURCE);
    d.create_db("target.db", target_sql);
    d.run(&["load"], 0);
    d.run(&["journal", "install"], 0);
    d.exec("target.db", "UPDATE orders SET cents = 1400 WHERE id = 101");
    d.exec("target.db", bad);
    d.run(&["fence", "on"], 0);
    d
}

/// Replays `d` (one batch holding seq 1 and 2) and checks the conflict at
/// seq 2, key [102], `column`, with the source byte-for-byte unchanged: the
/// valid entry 1 of the same batch must be rolled back too.
fn conflict_at_seq_2(d: &Dir, column: &str, reason: &str) {
    let before = d.snapshot();
    let json = d.json(&["replay"], 1);
    let c = &json["conflict"];
    assert_eq!(c["tag"], 2, "{json:#}");
    assert_eq!(c["table"], "orders", "{json:#}");
    assert_eq!(c["key"], json!([102]), "{json:#}");
    assert_eq!(c["column"], column, "{json:#}");
    assert!(
        c["reason"].as_str().unwrap_or_default().contains(reason),
        "the reason should say {reason:?}: {json:#}"
    );
    assert_eq!(json["applied"], 0, "{json:#}");
    d.assert_unchanged(&before, "replay that met a value it cannot carry back");
    let out = d.run(&["replay"], 1);
    out.assert_mentions(&["CONFLICT at seq 2", "'orders'", "[102]", column]);
    d.assert_unchanged(&before, "replay (text report)");
}

#[test]
fn a_target_cents_value_that_is_not_an_integer_stops_replay_at_its_seq() {
    for (i, (bad, reason)) in [
        ("UPDATE orders SET cents = 12.5 WHERE id = 102", "real"),
        ("UPDATE orders SET cents = 'abc' WHERE id = 102", "text"),
        ("UPDATE orders SET cents = x'01ff' WHERE id = 102", "blob"),
    ]
    .into_iter()
    .enumerate()
    {
        let d = fenced_after(
            &format!("target-cents-{i}"),
            &Spec::orders(),
            ORDERS_TARGET,
            bad,
        );
        conflict_at_seq_2(&d, "cents", reason);
    }
}

#[test]
fn a_target_word_the_map_does_not_know_stops_replay_at_its_seq() {
    for (i, word) in ["Active", "аctive", "", "active ", "5"].iter().enumerate() {
        let d = fenced_after(
            &format!("target-word-{i}"),
            &Spec::orders(),
            ORDERS_TARGET,
            &format!(
                "UPDATE orders SET status = '{}' WHERE id = 102",
                word.replace('\'', "''")
            ),
        );
        conflict_at_seq_2(&d, "status", "not in the map");
    }
}

#[test]
fn a_target_value_that_fails_a_column_check_stops_replay_at_its_seq() {
    // min = 0 on cents; a third word the values check does not allow.
    let spec = Spec::orders().edit_table("orders", |t| {
        t.edit_column("dollars", |c| c.min(0))
            .edit_column("status", |c| {
                c.map([("A", "active"), ("C", "closed"), ("P", "pending")])
                    .values(["active", "closed"])
            })
    });
    let d = fenced_after(
        "target-below-min",
        &spec,
        ORDERS_TARGET,
        "UPDATE orders SET cents = -5 WHERE id = 102",
    );
    conflict_at_seq_2(&d, "cents", "minimum");
    let d = fenced_after(
        "target-not-allowed",
        &spec,
        ORDERS_TARGET,
        "UPDATE orders SET status = 'pending' WHERE id = 102",
    );
    conflict_at_seq_2(&d, "status", "allowed");
}

/// A copy column `body` on both sides, for text that is not UTF-8.
fn notes_spec() -> Spec {
    Spec::new().table(Table::new("notes").key(["id"]).copy("body"))
}

fn notes_with_bad_utf8_in_the_journal(name: &str) -> Dir {
    let d = Dir::new(name);
    d.spec(&notes_spec());
    d.create_db(
        "source.db",
        "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT); INSERT INTO notes VALUES (1, 'a'), (2, 'b');",
    );
    d.create_db(
        "target.db",
        "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT);",
    );
    d.run(&["load"], 0);
    d.run(&["journal", "install"], 0);
    // SQLite stores whatever bytes it is given as TEXT; the journal's
    // image then holds bytes that are not UTF-8.
    d.exec(
        "target.db",
        "UPDATE notes SET body = CAST(x'fe42' AS TEXT) WHERE id = 1",
    );
    d.run(&["fence", "on"], 0);
    d
}

#[test]
fn text_that_is_not_utf8_in_the_journal_never_reaches_the_source_half_written() {
    let d = notes_with_bad_utf8_in_the_journal("journal-not-utf8");
    let before = d.snapshot();
    let out = d.cutover(&["replay"]).output();
    assert_no_panic(&out);
    if out.code != Some(0) {
        d.assert_unchanged(&before, "a replay that refused non-UTF-8 text");
    }
}

// Until 3092b6f a journal image holding non-UTF-8 text failed replay with a
// bare error; until the native journal it was refused naming seq and table.
// Now it is carried back as the same text, byte for byte.
#[test]
fn text_that_is_not_utf8_in_the_journal_is_carried_back_as_the_same_text() {
    let d = notes_with_bad_utf8_in_the_journal("journal-not-utf8-carried");
    d.run(&["replay"], 0);
    let row = d.query(
        "source.db",
        "SELECT typeof(body), hex(body) FROM notes WHERE id = 1",
    );
    assert_eq!(
        row,
        vec![vec![support::text("text"), support::text("FE42")]]
    );
    d.run(&["gate"], 0);
}

// --- feed files --------------------------------------------------------------------------

/// A feed line of the running example: an upsert of `id` with the given
/// `row` fields (target form) in delivery `delivery` at `position`.
fn order_line(delivery: &str, position: i64, id: i64, row: Json) -> Json {
    json!({
        "feed": "f", "delivery": delivery, "position": position, "table": "orders",
        "op": "upsert", "key": {"id": id}, "row": row,
    })
}

/// The running example loaded, with `lines` written to `feed.jsonl` after a
/// valid first delivery (so "nothing written" covers a delivery that would
/// have committed).
fn with_feed(name: &str, lines: &[Json]) -> Dir {
    let d = Dir::orders_loaded(name);
    let mut all = vec![order_line(
        "d1",
        1,
        200,
        json!({"id": 200, "cents": 100, "status": "active"}),
    )];
    all.extend_from_slice(lines);
    d.write("feed.jsonl", feed_text(&all));
    d
}

fn apply(d: &Dir, into: &str) -> support::Output {
    d.command(&[
        "--format",
        "json",
        "apply",
        "--spec",
        "spec.toml",
        "--feed",
        "feed.jsonl",
        "--into",
        into,
    ])
    .output()
}

#[test]
fn feed_money_outside_i64_or_not_an_integer_is_refused_before_any_write() {
    let bad = [
        json!(9_223_372_036_854_775_808u64),
        json!(18_446_744_073_709_551_615u64),
        serde_json::from_str::<Json>("-9223372036854775809").expect("a JSON number"),
        serde_json::from_str::<Json>("1e2").expect("a JSON number"),
        serde_json::from_str::<Json>("1.0e19").expect("a JSON number"),
        json!("12.50"),
        json!(true),
        json!({"blob": "01"}),
        json!([1250]),
    ];
    // One line per value, each its own delivery after the valid d1: every
    // one must be named, and nothing written, d1 included.
    let lines: Vec<Json> = bad
        .iter()
        .enumerate()
        .map(|(i, cents)| {
            let p = i as i64 + 2;
            order_line(
                &format!("d{p}"),
                p,
                200 + p,
                json!({"id": 200 + p, "cents": cents, "status": "active"}),
            )
        })
        .collect();
    for into in ["target", "source"] {
        let d = with_feed(&format!("feed-money-{into}"), &lines);
        let before = d.snapshot();
        let out = apply(&d, into);
        assert_no_panic(&out);
        assert_eq!(out.code, Some(1), "into {into}\n{out}");
        let rejected = out.json()["rejected_lines"].clone();
        for (i, cents) in bad.iter().enumerate() {
            let line = i as u64 + 2;
            let r = rejected
                .as_array()
                .and_then(|rs| rs.iter().find(|r| r["line"] == line))
                .unwrap_or_else(|| panic!("cents {cents} (line {line}) was not rejected: {out}"));
            let named = format!("{} {}", r["field"], r["reason"]);
            assert!(
                named.contains("cents"),
                "cents {cents}: the rejection must name the column: {r}"
            );
        }
        d.assert_unchanged(&before, &format!("apply of bad money into {into}"));
    }
}

#[test]
fn feed_money_at_the_i64_limits_is_written_back_to_the_last_cent() {
    let d = with_feed(
        "feed-i64-limits",
        &[
            order_line(
                "d2",
                2,
                201,
                json!({"id": 201, "cents": i64::MAX, "status": "active"}),
            ),
            order_line(
                "d2",
                3,
                202,
                json!({"id": 202, "cents": i64::MIN, "status": "closed"}),
            ),
        ],
    );
    let out = apply(&d, "source");
    assert_eq!(out.code, Some(0), "{out}");
    assert_eq!(
        d.query(
            "source.db",
            "SELECT * FROM orders WHERE id >= 200 ORDER BY id"
        ),
        vec![
            vec![int(200), text("1.00"), text("A")],
            vec![int(201), text("92233720368547758.07"), text("A")],
            vec![int(202), text("-92233720368547758.08"), text("C")],
        ]
    );
}

#[test]
fn feed_words_the_map_does_not_know_are_refused_into_the_source() {
    for (i, word) in ["", "Аctive", "ACTIVE", "active\u{0}"].iter().enumerate() {
        // In the same delivery as the valid line 1, so all of it rolls back.
        let d = with_feed(
            &format!("feed-word-source-{i}"),
            &[order_line(
                "d1",
                2,
                201,
                json!({"id": 201, "cents": 5, "status": word}),
            )],
        );
        let before = d.snapshot();
        let out = apply(&d, "source");
        assert_no_panic(&out);
        assert_eq!(out.code, Some(1), "status {word:?}\n{out}");
        assert!(
            out.stdout.contains("status") && out.stdout.contains("not in the map"),
            "status {word:?}: {out}"
        );
        d.assert_unchanged(
            &before,
            &format!("apply of status {word:?} into the source"),
        );
    }
}

// Regression test. Until 3092b6f: apply --into target writes a map column value that is
// not a word of the map ('' or Cyrillic 'Аctive'); the rollback can never carry it back.
#[test]
fn feed_words_the_map_does_not_know_are_refused_into_the_target() {
    for (i, word) in ["", "Аctive", "ACTIVE"].iter().enumerate() {
        let d = with_feed(
            &format!("feed-word-target-{i}"),
            &[order_line(
                "d2",
                2,
                201,
                json!({"id": 201, "cents": 5, "status": word}),
            )],
        );
        let before = d.snapshot();
        let out = apply(&d, "target");
        assert_eq!(out.code, Some(1), "status {word:?}\n{out}");
        d.assert_unchanged(
            &before,
            &format!("apply of status {word:?} into the target"),
        );
    }
}

/// A table with a nullable copy column, where empty text, NULL and a
/// missing field must stay three different things.
fn memo_spec() -> Spec {
    Spec::new().table(Table::new("memos").key(["id"]).copy("note"))
}

const MEMO_SQL: &str = "CREATE TABLE memos (id INTEGER PRIMARY KEY, note TEXT);";

fn memo_line(position: i64, id: i64, row: Json) -> Json {
    json!({
        "feed": "m", "delivery": format!("d{position}"), "position": position,
        "table": "memos", "op": "upsert", "key": {"id": id}, "row": row,
    })
}

#[test]
fn empty_text_null_and_a_missing_field_are_three_different_things_in_a_feed() {
    for into in ["target", "source"] {
        let d = Dir::new(&format!("empty-null-missing-{into}"));
        d.spec(&memo_spec());
        d.create_db("source.db", MEMO_SQL);
        d.create_db("target.db", MEMO_SQL);
        let db = format!("{into}.db");
        d.write(
            "feed.jsonl",
            feed_text(&[
                memo_line(1, 1, json!({"id": 1, "note": ""})),
                memo_line(2, 2, json!({"id": 2, "note": null})),
            ]),
        );
        let out = apply(&d, into);
        assert_eq!(out.code, Some(0), "{out}");
        assert_eq!(
            d.query(&db, "SELECT id, note, typeof(note) FROM memos ORDER BY id"),
            vec![
                vec![int(1), text(""), text("text")],
                vec![int(2), Value::Null, text("null")],
            ],
            "into {into}"
        );
        // The same content again is a duplicate; '' for NULL is not.
        d.write(
            "feed.jsonl",
            feed_text(&[
                memo_line(1, 1, json!({"id": 1, "note": ""})),
                memo_line(2, 2, json!({"id": 2, "note": null})),
                memo_line(3, 2, json!({"id": 2, "note": ""})),
            ]),
        );
        let before = d.snapshot();
        let out = apply(&d, into);
        assert_eq!(
            out.code,
            Some(1),
            "'' must conflict with NULL into {into}\n{out}"
        );
        d.assert_unchanged(&before, "apply of '' over NULL");
        // A missing field is neither: the line is refused.
        let before_rows = d.dump(&db, "memos");
        d.write(
            "feed.jsonl",
            feed_text(&[
                memo_line(1, 1, json!({"id": 1, "note": ""})),
                memo_line(2, 2, json!({"id": 2, "note": null})),
                memo_line(3, 3, json!({"id": 3})),
            ]),
        );
        let out = apply(&d, into);
        assert_eq!(out.code, Some(1), "{out}");
        let rejected = &out.json()["rejected_lines"][0];
        assert_eq!(rejected["line"], 3, "{out}");
        assert_eq!(rejected["field"], "row", "{out}");
        assert_eq!(d.dump(&db, "memos"), before_rows, "into {into}");
    }
}

#[test]
fn a_null_where_the_schema_says_not_null_is_refused_whole_naming_the_column() {
    for into in ["target", "source"] {
        let d = with_feed(
            &format!("feed-null-not-null-{into}"),
            &[order_line(
                "d2",
                2,
                201,
                json!({"id": 201, "cents": 5, "status": null}),
            )],
        );
        let before_rows = d.dump(&format!("{into}.db"), "orders");
        let out = apply(&d, into);
        assert_no_panic(&out);
        assert!(matches!(out.code, Some(1 | 2)), "into {into}\n{out}");
        assert!(out.all().contains("status"), "into {into}\n{out}");
        // d1 committed before d2 failed, whole; d2 left nothing.
        let after = d.dump(&format!("{into}.db"), "orders");
        assert!(
            !after.iter().any(|r| r[0] == int(201)),
            "into {into}: {after:?}"
        );
        assert!(
            after.len() <= before_rows.len() + 1,
            "into {into}: {after:?}"
        );
    }
}

#[test]
fn a_feed_position_at_the_i64_limit_alone_is_refused_as_from_the_future() {
    let d = Dir::orders_loaded("position-max-alone");
    d.write(
        "feed.jsonl",
        feed_text(&[order_line(
            "d1",
            i64::MAX,
            200,
            json!({"id": 200, "cents": 1, "status": "active"}),
        )]),
    );
    let before = d.snapshot();
    let out = apply(&d, "target");
    assert_no_panic(&out);
    assert_eq!(out.code, Some(1), "{out}");
    d.assert_unchanged(&before, "apply of a delivery from the far future");
}

// Regression test. Until 3092b6f: a delivery whose first line is at position i64::MAX
// and has a second line panics ('attempt to add with overflow', src/feed/file.rs validate)
// instead of rejecting the line.
#[test]
fn a_feed_position_past_the_i64_limit_within_a_delivery_is_rejected_without_panic() {
    let d = Dir::orders_loaded("position-overflow");
    d.write(
        "feed.jsonl",
        feed_text(&[
            order_line(
                "d1",
                i64::MAX,
                200,
                json!({"id": 200, "cents": 1, "status": "active"}),
            ),
            order_line(
                "d1",
                5,
                201,
                json!({"id": 201, "cents": 1, "status": "active"}),
            ),
        ]),
    );
    let before = d.snapshot();
    let out = apply(&d, "target");
    assert_no_panic(&out);
    assert_eq!(out.code, Some(1), "{out}");
    d.assert_unchanged(&before, "apply of positions past i64");
}
