//! Bad input of every kind: a wrong spec, a missing file, a value the strict
//! decimal grammar refuses, a source row changed after the cutover. Each gets
//! exit 2 (or 1 where it is a finding about the data), a message that names
//! the file, table, key and column and says what to do, and leaves every
//! database exactly as it was.

mod support;

use serde_json::json;
use support::{Dir, ORDERS_SPEC, SPEC};

/// Runs `args` against the folder, expecting `code`, and proves the folder
/// (spec and both databases) is byte-for-byte as before.
fn refused(d: &Dir, args: &[&str], code: i32) -> support::Output {
    let before = d.snapshot();
    let out = d.run(args, code);
    d.assert_unchanged(&before, &args.join(" "));
    out
}

/// The commands that read a spec and open the databases, each with the exit
/// code bad input must give.
const EVERY_COMMAND: &[&[&str]] = &[
    &["check"],
    &["load"],
    &["gate"],
    &["gate", "--inject-mismatch"],
    &["journal", "install"],
    &["journal", "status"],
    &["journal", "remove"],
    &["fence", "on"],
    &["fence", "status"],
    &["fence", "off"],
    &["replay"],
    &["replay", "--dry-run"],
    &["status"],
];

// --- the spec ----------------------------------------------------------------

#[test]
fn a_misspelled_column_is_refused_naming_spec_table_and_column() {
    let d = Dir::orders("misspelled-column");
    d.spec(&ORDERS_SPEC.replace("source = \"dollars\"", "source = \"dolars\""));
    for args in EVERY_COMMAND {
        let out = refused(&d, args, 2);
        out.assert_mentions(&[SPEC, "'orders'", "source.db", "'dolars'", "dollars", "fix"]);
    }
}

#[test]
fn a_source_limit_naming_no_source_column_is_refused_naming_the_columns_there() {
    let d = Dir::orders("source-limit-column");
    d.spec(&ORDERS_SPEC.replace(
        "key = [\"id\"]",
        "key = [\"id\"]\nsource_limit = { dolars = \"watch\" }",
    ));
    for args in EVERY_COMMAND {
        let out = refused(&d, args, 2);
        out.assert_mentions(&[SPEC, "'orders'", "source_limit", "'dolars'", "dollars"]);
    }
}

#[test]
fn a_source_limit_other_than_watch_is_refused_naming_the_one_it_takes() {
    let d = Dir::orders("source-limit-value");
    d.spec(&ORDERS_SPEC.replace("scale = 2", "scale = 2\nsource_limit = \"ignore\""));
    let out = refused(&d, &["check"], 2);
    out.assert_mentions(&[SPEC, "ignore", "watch"]);
}

#[test]
fn a_source_limit_on_a_target_only_column_is_refused() {
    let d = Dir::orders("source-limit-target-only");
    d.spec(&format!(
        "{ORDERS_SPEC}\n[[tables.columns]]\ntarget = \"currency\"\nvalue = \"USD\"\nsource_limit = \"watch\"\n"
    ));
    let out = refused(&d, &["check"], 2);
    out.assert_mentions(&[SPEC, "'currency'", "source_limit", "target-only"]);
}

#[test]
fn a_misspelled_target_column_is_refused_naming_it() {
    let d = Dir::orders("misspelled-target-column");
    d.spec(&ORDERS_SPEC.replace("target = \"cents\"", "target = \"cent\""));
    let out = refused(&d, &["load"], 2);
    out.assert_mentions(&[SPEC, "'orders'", "target.db", "'cent'", "cents"]);
}

#[test]
fn a_misspelled_table_is_refused_naming_it_and_the_tables_there() {
    let d = Dir::orders("misspelled-table");
    d.spec(&ORDERS_SPEC.replace("name = \"orders\"", "name = \"order\""));
    for args in EVERY_COMMAND {
        let out = refused(&d, args, 2);
        out.assert_mentions(&[SPEC, "'order'", "source.db", "orders", "fix"]);
    }
}

#[test]
fn a_missing_database_file_is_refused_and_never_created() {
    for side in ["source", "target"] {
        let d = Dir::orders(&format!("missing-{side}"));
        d.spec(&ORDERS_SPEC.replace(
            &format!("sqlite://{side}.db"),
            &format!("sqlite://no-such-{side}.db"),
        ));
        for args in EVERY_COMMAND {
            let out = refused(&d, args, 2);
            out.assert_mentions(&[&format!("no-such-{side}.db"), "does not exist", "spec"]);
            assert!(
                !d.exists(format!("no-such-{side}.db")),
                "{args:?} created it"
            );
        }
    }
}

#[test]
fn a_spec_path_that_is_a_directory_is_refused() {
    let d = Dir::orders("spec-is-dir");
    std::fs::create_dir(d.join("dir.toml")).unwrap();
    let before = d.snapshot();
    let out = d.command(&["check", "--spec", "dir.toml"]).expect(2);
    out.assert_mentions(&["dir.toml", "directory"]);
    d.assert_unchanged(&before, "check --spec dir.toml");
}

#[test]
fn a_missing_spec_file_is_refused_naming_it() {
    let d = Dir::orders("spec-missing");
    let out = d.command(&["load", "--spec", "nope.toml"]).expect(2);
    out.assert_mentions(&["nope.toml", "--spec"]);
    assert!(!d.exists("nope.toml"));
}

#[test]
fn a_map_with_two_codes_for_one_word_is_refused() {
    let d = Dir::orders("map-not-bijective");
    d.spec(&ORDERS_SPEC.replace("C = \"closed\"", "C = \"active\""));
    for args in [&["check"][..], &["load"], &["replay"]] {
        let out = refused(&d, args, 2);
        out.assert_mentions(&["'orders'", "'status'", "'A'", "'C'", "'active'"]);
    }
}

#[test]
fn an_unknown_transform_is_refused_naming_it_and_the_known_ones() {
    let d = Dir::orders("unknown-transform");
    d.spec(&ORDERS_SPEC.replace("transform = \"map\"", "transform = \"lookup\""));
    let out = refused(&d, &["load"], 2);
    out.assert_mentions(&[
        "'orders'",
        "'status'",
        "'lookup'",
        "decimal_to_minor",
        "map",
    ]);
}

#[test]
fn an_unknown_field_in_the_spec_is_refused_naming_it() {
    let d = Dir::orders("unknown-field");
    d.spec(&ORDERS_SPEC.replace("scale = 2", "scale = 2\nround = true"));
    let out = refused(&d, &["load"], 2);
    out.assert_mentions(&[SPEC, "round"]);
}

#[test]
fn a_spec_that_is_not_toml_is_refused() {
    let d = Dir::orders("spec-not-toml");
    d.spec("this is [not toml");
    let out = refused(&d, &["check"], 2);
    out.assert_mentions(&[SPEC]);
}

#[test]
fn an_unsupported_url_is_refused_naming_the_form_to_use() {
    let d = Dir::orders("url-unsupported");
    d.spec(&ORDERS_SPEC.replace("sqlite://source.db", "mssql://localhost/orders"));
    let out = refused(&d, &["check"], 2);
    out.assert_mentions(&["mssql://localhost/orders", "sqlite://", "postgres://"]);
}

#[test]
fn a_source_file_that_is_not_a_database_is_refused_and_left_alone() {
    let d = Dir::orders("not-a-database");
    std::fs::remove_file(d.join("source.db")).unwrap();
    d.write("source.db", "id,dollars,status\n101,12.50,A\n");
    for args in EVERY_COMMAND {
        let out = refused(&d, args, 2);
        out.assert_mentions(&["source.db"]);
    }
}

// --- invalid values in the source ---------------------------------------------

#[test]
fn a_value_past_the_scale_is_a_finding_naming_key_and_column() {
    let d = Dir::orders("past-scale");
    d.exec(
        "source.db",
        "UPDATE orders SET dollars = '12.345' WHERE id = 102",
    );
    let out = refused(&d, &["check"], 1);
    out.assert_mentions(&["102", "dollars", "12.345", "scale"]);
    let out = refused(&d, &["load"], 1);
    out.assert_mentions(&["102", "dollars", "12.345", "nothing was written"]);
    assert!(d.dump("target.db", "orders").is_empty());
}

/// Puts `value` into order 102's dollars; check must exit 1 naming key,
/// column and value, and load must write nothing.
fn refuses_decimal(name: &str, value: &str) {
    let d = Dir::orders(name);
    d.conn("source.db")
        .execute("UPDATE orders SET dollars = ?1 WHERE id = 102", [value])
        .unwrap();
    let json = {
        let before = d.snapshot();
        let j = d.json(&["check"], 1);
        d.assert_unchanged(&before, "check");
        j
    };
    assert_eq!(json["tables"][0]["invalid"], 1, "{value:?}: {json:#}");
    let diff = &json["diffs"][0];
    assert_eq!(
        (
            &diff["key"],
            &diff["column"],
            &diff["kind"],
            &diff["actual"]
        ),
        (
            &json!([102]),
            &json!("dollars"),
            &json!("invalid"),
            &json!(value)
        ),
        "{value:?}: {json:#}"
    );
    let out = refused(&d, &["check"], 1);
    out.assert_mentions(&["102", "dollars"]);
    let out = refused(&d, &["load"], 1);
    out.assert_mentions(&["102", "dollars", "nothing was written"]);
}

#[test]
fn nan_is_invalid() {
    refuses_decimal("nan", "NaN");
}

#[test]
fn an_exponent_is_invalid() {
    refuses_decimal("exponent", "1e3");
}

#[test]
fn a_leading_plus_is_invalid() {
    refuses_decimal("plus", "+7.50");
}

#[test]
fn a_leading_space_is_invalid() {
    refuses_decimal("space", " 7.50");
}

#[test]
fn no_digit_before_the_point_is_invalid() {
    refuses_decimal("no-int-part", ".5");
}

#[test]
fn a_decimal_comma_is_invalid() {
    refuses_decimal("comma", "12,50");
}

#[test]
fn full_width_digits_are_invalid() {
    refuses_decimal("full-width", "１２.５０");
}

#[test]
fn infinity_is_invalid() {
    refuses_decimal("inf", "inf");
}

#[test]
fn a_value_past_i64_cents_is_invalid() {
    // i64::MAX cents is 92233720368547758.07; one cent more does not fit.
    refuses_decimal("past-i64", "92233720368547758.08");
}

#[test]
fn the_largest_i64_cents_value_is_valid() {
    let d = Dir::orders("i64-max");
    d.exec(
        "source.db",
        "UPDATE orders SET dollars = '92233720368547758.07' WHERE id = 102",
    );
    d.run(&["check"], 0);
    d.run(&["load"], 0);
    assert_eq!(
        d.dump("target.db", "orders")[1][1],
        rusqlite::types::Value::Integer(i64::MAX)
    );
}

#[test]
fn a_real_in_a_money_column_with_more_places_than_the_scale_is_invalid() {
    let d = Dir::new("real-money");
    d.spec(ORDERS_SPEC);
    // Untyped column: the reals stay REALs. 12.5 is the amount 12.50; 12.505
    // has three places at scale 2.
    d.create_db(
        "source.db",
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, dollars, status TEXT);
         INSERT INTO orders VALUES (100, 12.5, 'A'), (101, 12.505, 'A');",
    );
    d.create_db("target.db", support::ORDERS_TARGET);
    let out = refused(&d, &["check"], 1);
    out.assert_mentions(&["101", "dollars", "12.505", "decimal places"]);
    refused(&d, &["load"], 1);
}

#[test]
fn a_code_missing_from_the_map_is_invalid() {
    let d = Dir::orders("unknown-code");
    d.exec("source.db", "UPDATE orders SET status = 'X' WHERE id = 103");
    let out = refused(&d, &["check"], 1);
    out.assert_mentions(&["103", "status", "'X'"]);
    refused(&d, &["load"], 1);
}

// --- preconditions --------------------------------------------------------------

#[test]
fn replay_without_a_fence_is_refused_and_says_to_fence_first() {
    let d = Dir::orders_after_writes("replay-unfenced");
    let out = refused(&d, &["replay"], 2);
    out.assert_mentions(&["target.db", "not fenced", "fence on"]);
    let out = refused(&d, &["replay", "--dry-run"], 2);
    out.assert_mentions(&["fence on"]);
}

#[test]
fn a_second_fence_on_says_already_and_changes_nothing() {
    let d = Dir::orders_fenced("fence-twice");
    let out = refused(&d, &["fence", "on"], 0);
    out.assert_mentions(&["already"]);
}

#[test]
fn load_into_a_fenced_target_is_refused() {
    let d = Dir::orders_fenced("load-fenced");
    let out = refused(&d, &["load", "--replace"], 2);
    out.assert_mentions(&["target.db", "fenced"]);
}

#[test]
fn load_into_a_journaled_target_is_refused() {
    let d = Dir::orders_after_writes("load-journaled");
    let out = refused(&d, &["load", "--replace"], 2);
    out.assert_mentions(&["'orders'", "journal remove"]);
}

#[test]
fn gate_rehearsal_on_a_fenced_target_is_refused() {
    let d = Dir::orders_fenced("rehearsal-fenced");
    let out = refused(&d, &["gate", "--inject-mismatch"], 2);
    out.assert_mentions(&["fenced"]);
}

#[test]
fn load_into_a_target_changed_since_its_load_is_refused_naming_replace() {
    let d = Dir::orders_loaded("load-again-changed");
    d.exec("target.db", "DELETE FROM orders WHERE id = 103");
    let out = refused(&d, &["load"], 2);
    out.assert_mentions(&["'orders'", "target.db", "2 rows", "--replace"]);
}

#[test]
fn load_again_after_a_completed_load_leaves_the_target_as_it_is() {
    // Whether this is "nothing to do" (0) or "pass --replace" (2), the rows
    // must be exactly the ones the first load wrote.
    let d = Dir::orders_loaded("load-again");
    let rows = d.dump("target.db", "orders");
    let out = d.cutover(&["load"]).output();
    assert!(matches!(out.code, Some(0 | 2)), "{out}");
    assert_eq!(d.dump("target.db", "orders"), rows);
    d.run(&["gate"], 0);
}

// The first version created the `_cutover_*` control tables before refusing.
#[test]
fn load_into_a_target_someone_else_filled_is_refused_and_writes_nothing() {
    let d = Dir::orders("load-foreign-rows");
    d.exec(
        "target.db",
        "INSERT INTO orders (id, cents, status) VALUES (1, 1, 'active')",
    );
    let out = refused(&d, &["load"], 2);
    out.assert_mentions(&["'orders'", "1 rows", "--replace", "Nothing was written"]);
}

// --- a conflict in the replay ------------------------------------------------------

#[test]
fn replay_conflict_names_three_versions_and_changes_nothing() {
    let d = Dir::orders_fenced("replay-conflict");
    // Someone changed order 103 in the source after the cutover; the journal
    // deletes it (seq 3, the last entry of the one batch).
    d.exec(
        "source.db",
        "UPDATE orders SET dollars = '21.00' WHERE id = 103",
    );
    let rows_before = d.dump("source.db", "orders");
    let before = d.snapshot();

    let out = d.run(&["replay"], 1);
    out.assert_mentions(&[
        "'orders'",
        "[103]",
        "'cents'",
        "expected",
        "found",
        "after-image",
        "2000",
        "2100",
        "(no row)",
    ]);
    assert_eq!(
        d.dump("source.db", "orders"),
        rows_before,
        "the batch with the conflict must be rolled back whole (101 and 104 included)"
    );
    d.assert_unchanged(&before, "replay that stopped at a conflict");

    let json = d.json(&["replay"], 1);
    let c = &json["conflict"];
    assert_eq!(c["table"], "orders", "{json:#}");
    assert_eq!(c["key"], json!([103]), "{json:#}");
    assert_eq!(c["column"], "cents", "{json:#}");
    assert_eq!(
        c["expected"],
        json!({"id": 103, "cents": 2000, "status": "active"}),
        "{json:#}"
    );
    assert_eq!(
        c["found"],
        json!({"id": 103, "cents": 2100, "status": "active"}),
        "{json:#}"
    );
    assert_eq!(c["wanted"], json!(null), "a delete leaves no row: {json:#}");
    assert_eq!(d.dump("source.db", "orders"), rows_before);
}

#[test]
fn replay_conflict_writes_nothing_and_replays_whole_once_the_row_is_fixed() {
    let d = Dir::orders_fenced("replay-conflict-resume");
    d.exec("source.db", "UPDATE orders SET status = 'C' WHERE id = 103");
    let before = d.dump("source.db", "orders");
    let json = d.json(&["replay", "--batch", "1"], 1);
    assert_eq!(json["conflict"]["tag"], 3, "{json:#}");
    assert_eq!(json["conflict"]["column"], "status", "{json:#}");
    // The two entries before it were applied, then rolled back with it.
    assert_eq!(json["applied"], 0, "{json:#}");
    assert_eq!(json["rolled_back"], 2, "{json:#}");
    assert!(d.applied_seqs("source.db", "target.db").is_empty());
    assert_eq!(d.dump("source.db", "orders"), before);
    // The operator decides the journal is right and restores the row.
    d.exec("source.db", "UPDATE orders SET status = 'A' WHERE id = 103");
    let json = d.json(&["replay", "--batch", "1"], 0);
    assert_eq!(json["applied"], 3, "{json:#}");
    assert_eq!(json["previously_applied"], 0, "{json:#}");
    assert_eq!(
        d.dump("source.db", "orders"),
        vec![
            vec![
                support::int(101),
                support::text("14.00"),
                support::text("A")
            ],
            vec![support::int(102), support::text("7.50"), support::text("C")],
            vec![support::int(104), support::text("9.00"), support::text("A")],
        ]
    );
}

#[test]
fn replay_conflict_on_an_inserted_key_that_the_source_already_holds() {
    let d = Dir::orders_fenced("replay-conflict-insert");
    d.exec(
        "source.db",
        "INSERT INTO orders (id, dollars, status) VALUES (104, '1.00', 'C')",
    );
    let before = d.dump("source.db", "orders");
    let json = d.json(&["replay"], 1);
    assert_eq!(json["conflict"]["key"], json!([104]), "{json:#}");
    assert_eq!(json["conflict"]["expected"], json!(null), "{json:#}");
    assert_eq!(
        json["conflict"]["found"],
        json!({"id": 104, "cents": 100, "status": "closed"}),
        "{json:#}"
    );
    assert_eq!(d.dump("source.db", "orders"), before);
}

#[test]
fn a_target_word_with_no_source_code_stops_the_replay_naming_key_and_column() {
    let d = Dir::orders_loaded("replay-unmappable");
    d.run(&["journal", "install"], 0);
    d.exec(
        "target.db",
        "UPDATE orders SET status = 'pending' WHERE id = 102",
    );
    d.run(&["fence", "on"], 0);
    let before = d.snapshot();
    let out = d.run(&["replay"], 1);
    out.assert_mentions(&["'orders'", "[102]", "'status'", "'pending'", "map"]);
    d.assert_unchanged(&before, "replay of a value with no source code");
}

#[test]
fn a_conflict_on_an_unmappable_value_still_shows_the_journal_before_image() {
    let d = Dir::orders_loaded("replay-unmappable-image");
    d.run(&["journal", "install"], 0);
    d.exec(
        "target.db",
        "UPDATE orders SET status = 'pending' WHERE id = 102",
    );
    d.run(&["fence", "on"], 0);
    let json = d.json(&["replay"], 1);
    assert_eq!(
        json["conflict"]["expected"],
        json!({"id": 102, "cents": 750, "status": "closed"}),
        "{json:#}"
    );
}

/// A source table without a key constraint holding order 101 twice.
fn duplicate_key_source(name: &str, second: &str) -> Dir {
    let d = Dir::new(name);
    d.spec(ORDERS_SPEC);
    d.create_db(
        "source.db",
        &format!(
            "CREATE TABLE orders (id INTEGER, dollars TEXT NOT NULL, status TEXT NOT NULL);
             INSERT INTO orders VALUES (101, '12.50', 'A'), (101, '{second}', 'A'), (102, '7.50', 'C');"
        ),
    );
    d.create_db("target.db", support::ORDERS_TARGET);
    d
}

#[test]
fn gate_refuses_a_duplicate_source_key_naming_it() {
    let d = duplicate_key_source("dup-gate", "13.00");
    let out = refused(&d, &["gate"], 2);
    out.assert_mentions(&["'orders'", "101", "unique"]);
}

#[test]
fn check_reports_a_duplicate_source_key_naming_it() {
    let d = duplicate_key_source("dup-check", "13.00");
    let out = d.cutover(&["check"]).output();
    assert!(matches!(out.code, Some(1 | 2)), "{out}");
    out.assert_mentions(&["101"]);
}

#[test]
fn load_refuses_a_duplicate_source_key_and_writes_nothing() {
    let d = duplicate_key_source("dup-load", "12.50");
    let before = d.snapshot();
    let out = d.cutover(&["load"]).output();
    assert!(matches!(out.code, Some(1 | 2)), "{out}");
    out.assert_mentions(&["101"]);
    d.assert_unchanged(&before, "load of a duplicate key");
}
