//! Strict feed validation before any write (docs/feed.md "How a feed is
//! applied", step 1). Every case puts a valid delivery first and the faulty
//! line after it, so "nothing written" is meaningful: the valid delivery must
//! not be committed either. Each rejection must name the line, and the field
//! where there is one, with a reason; position and key where the line has
//! them.

mod support;

use serde_json::{Value as Json, json};
use support::feed::*;
use support::{Dir, Output};

/// Line 1: a valid delivery "d1" at position 1.
fn first() -> Json {
    inv("d1", 1, "INV-1", 1, 1000)
}

/// The valid line that each case breaks: delivery "d2", position 2.
fn valid() -> Json {
    inv("d2", 2, "INV-2", 1, 2500)
}

/// Applies `text` into `into`, expects exit 1 and nothing written, and
/// returns the rejections.
fn refused_text(name: &str, text: &[u8], into: &str) -> (Output, Vec<Json>) {
    let s = Dir::invoices(name);
    let (src, tgt) = (s.image("source.db"), s.image("target.db"));
    s.write("feed.jsonl", text);
    let r = s.apply("feed.jsonl", into).expect(1);
    assert_eq!(r.json()["verdict"], "fail", "{r}");
    s.assert_db_unchanged("target.db", &tgt, &r);
    s.assert_db_unchanged("source.db", &src, &r);
    for db in ["source.db", "target.db"] {
        assert_eq!(s.count(db, "_cutover_deliveries"), 0, "{db}{r}");
        assert_eq!(s.count(db, "invoices"), 0, "{db}{r}");
    }
    let rejected = r.rejected();
    assert!(!rejected.is_empty(), "no rejected_lines{r}");
    for x in &rejected {
        assert!(x["line"].as_u64().is_some(), "a rejection without line{r}");
        assert!(
            x["reason"].as_str().is_some_and(|t| !t.is_empty()),
            "a rejection without reason{r}"
        );
    }
    (r, rejected)
}

/// The rejection of `line`, which must exist.
fn at_line(r: &Output, rejected: &[Json], line: u64) -> Json {
    rejected
        .iter()
        .find(|x| x["line"] == line)
        .cloned()
        .unwrap_or_else(|| panic!("line {line} is not among the rejections{r}"))
}

/// `bad` as line 2 after a valid delivery: rejected naming line 2 and
/// `field`, with its position and key when the line carries them.
fn refused(name: &str, bad: Json, field: &str) -> Json {
    let text = feed_text(&[first(), bad.clone()]);
    let (r, rejected) = refused_text(name, text.as_bytes(), "target");
    let x = at_line(&r, &rejected, 2);
    assert_eq!(x["field"], field, "{r}");
    if let Some(p) = bad.get("position").and_then(Json::as_i64) {
        assert_eq!(x["position"], p, "the position must be named{r}");
    }
    if let Some(k) = bad.get("key") {
        assert_eq!(&x["key"], k, "the key must be named{r}");
    }
    x
}

/// One test per case: `name: "field" => edit` breaks the valid line with
/// `edit` and expects line 2 rejected naming `field`.
macro_rules! rejects {
    ($($name:ident: $field:literal => $edit:expr),* $(,)?) => {$(
        #[test]
        fn $name() {
            let edit: fn(&mut Json) = $edit;
            let mut line = valid();
            edit(&mut line);
            refused(stringify!($name), line, $field);
        }
    )*};
}

fn remove(l: &mut Json, field: &str) {
    l.as_object_mut().expect("a line object").remove(field);
}

fn remove_in(l: &mut Json, object: &str, field: &str) {
    l[object].as_object_mut().expect("an object").remove(field);
}

// Missing and unknown fields.
rejects! {
    missing_feed_is_rejected: "feed" => |l| remove(l, "feed"),
    missing_delivery_is_rejected: "delivery" => |l| remove(l, "delivery"),
    missing_position_is_rejected: "position" => |l| remove(l, "position"),
    missing_table_is_rejected: "table" => |l| remove(l, "table"),
    missing_op_is_rejected: "op" => |l| remove(l, "op"),
    missing_key_is_rejected: "key" => |l| remove(l, "key"),
    missing_revision_on_a_revision_table_is_rejected: "revision" => |l| remove(l, "revision"),
    unknown_field_is_rejected: "colour" => |l| l["colour"] = json!("red"),
    empty_feed_name_is_rejected: "feed" => |l| l["feed"] = json!(""),
    unknown_op_is_rejected: "op" => |l| l["op"] = json!("insert"),
    unknown_table_is_rejected: "table" => |l| l["table"] = json!("receipts"),
}

// Revision, position and seq: positive integers, nothing else.
rejects! {
    revision_boolean_is_rejected: "revision" => |l| l["revision"] = json!(true),
    revision_float_1_5_is_rejected: "revision" => |l| l["revision"] = json!(1.5),
    revision_float_1_0_is_rejected: "revision" => |l| l["revision"] = json!(1.0),
    revision_string_is_rejected: "revision" => |l| l["revision"] = json!("2"),
    revision_zero_is_rejected: "revision" => |l| l["revision"] = json!(0),
    revision_negative_is_rejected: "revision" => |l| l["revision"] = json!(-1),
    revision_differing_from_the_rows_revision_is_rejected: "row.rev" => |l| l["revision"] = json!(2),
    position_string_is_rejected: "position" => |l| l["position"] = json!("2"),
    position_zero_is_rejected: "position" => |l| l["position"] = json!(0),
    seq_zero_is_rejected: "seq" => |l| l["seq"] = json!(0),
}

// Money (decimal_to_minor, min = 0) and currency (pattern = "^[A-Z]{3}$").
rejects! {
    money_float_is_rejected: "row.amount_minor" => |l| l["row"]["amount_minor"] = json!(25.5),
    money_whole_float_is_rejected: "row.amount_minor" => |l| l["row"]["amount_minor"] = json!(2500.0),
    money_string_is_rejected: "row.amount_minor" => |l| l["row"]["amount_minor"] = json!("25.00"),
    money_negative_is_rejected: "row.amount_minor" => |l| l["row"]["amount_minor"] = json!(-5),
    currency_lower_case_is_rejected: "row.currency" => |l| l["row"]["currency"] = json!("eur"),
    currency_four_letters_is_rejected: "row.currency" => |l| l["row"]["currency"] = json!("EURO"),
    currency_non_ascii_is_rejected: "row.currency" => |l| l["row"]["currency"] = json!("€UR"),
}

// Key and row.
rejects! {
    key_missing_a_key_column_is_rejected: "key.record_key" => |l| remove_in(l, "key", "record_key"),
    key_with_an_extra_column_is_rejected: "key.rev" => |l| l["key"]["rev"] = json!(1),
    key_with_a_null_part_is_rejected: "key.entity" => |l| l["key"]["entity"] = Json::Null,
    key_that_is_not_an_object_is_rejected: "key" => |l| l["key"] = json!(["erp", "A-100", "E1", "INV-2"]),
    row_key_differing_from_key_is_rejected: "row.record_key" => |l| l["row"]["record_key"] = json!("INV-9"),
    upsert_without_row_is_rejected: "row" => |l| remove(l, "row"),
    delete_with_row_is_rejected: "row" => |l| l["op"] = json!("delete"),
    row_missing_a_column_is_rejected: "row" => |l| remove_in(l, "row", "currency"),
    row_with_an_unknown_column_is_rejected: "row" => |l| l["row"]["note"] = json!("x"),
    delete_with_null_before_is_rejected: "before" => |l| {
        remove(l, "row");
        l["op"] = json!("delete");
        l["before"] = Json::Null;
    },
    row_and_before_leaving_out_different_columns_are_rejected: "before" => |l| {
        l["before"] = l["row"].clone();
        remove_in(l, "row", "currency");
    },
    row_leaving_out_a_key_column_with_before_is_rejected: "row" => |l| {
        l["before"] = Json::Null;
        remove_in(l, "row", "entity");
    },
    row_leaving_out_the_revision_column_is_rejected: "row" => |l| {
        l["before"] = Json::Null;
        remove_in(l, "row", "rev");
    },
}

/// A line may leave out a column together with `before`, in both images
/// (docs/feed.md, "Lines"): the update leaves the column as the database
/// holds it, and the expected row is compared on the columns present.
#[test]
fn a_column_left_out_of_both_images_is_left_as_it_is() {
    let s = Dir::invoices("left-out");
    s.exec(
        "target.db",
        "INSERT INTO invoices VALUES ('erp', 'A-100', 'E1', 'INV-1', 1, 1000, 'GBP')",
    );
    let mut l = inv("d1", 1, "INV-1", 2, 1200);
    l["before"] = inv_row("erp", "INV-1", 1, 1000, "EUR");
    remove_in(&mut l, "row", "currency");
    remove_in(&mut l, "before", "currency");
    s.feed("feed.jsonl", &[l]);
    let r = s.apply("feed.jsonl", "target").expect(0);
    assert_eq!(r.json()["deliveries"][0]["applied"], 1, "{r}");
    assert_eq!(
        s.query(
            "target.db",
            "SELECT rev, amount_minor, currency FROM invoices"
        ),
        vec![vec![
            rusqlite::types::Value::Integer(2),
            rusqlite::types::Value::Integer(1200),
            rusqlite::types::Value::Text("GBP".into()),
        ]],
        "{r}"
    );
}

// --- deliveries ----------------------------------------------------------------

#[test]
fn a_delivery_mixing_two_feeds_is_rejected() {
    let mut l = valid();
    l["delivery"] = json!("d1");
    l["feed"] = json!("ledger");
    let text = feed_text(&[first(), l]);
    let (r, rejected) = refused_text("mixed-feeds", text.as_bytes(), "target");
    let x = at_line(&r, &rejected, 2);
    assert_eq!(x["field"], "feed", "{r}");
    assert_eq!(x["position"], 2, "{r}");
    assert!(x["key"].to_string().contains("INV-2"), "{r}");
}

#[test]
fn positions_not_consecutive_within_a_delivery_are_rejected() {
    let mut l = valid();
    l["delivery"] = json!("d1");
    l["position"] = json!(3);
    let text = feed_text(&[first(), l]);
    let (r, rejected) = refused_text("position-gap", text.as_bytes(), "target");
    let x = at_line(&r, &rejected, 2);
    assert_eq!(x["field"], "position", "{r}");
    assert_eq!(x["position"], 3, "{r}");
}

#[test]
fn a_delivery_split_in_the_file_is_rejected() {
    let mut again = inv("d1", 3, "INV-3", 1, 300);
    again["delivery"] = json!("d1");
    let text = feed_text(&[first(), valid(), again]);
    let (r, rejected) = refused_text("split-delivery", text.as_bytes(), "target");
    let x = at_line(&r, &rejected, 3);
    assert_eq!(x["field"], "delivery", "{r}");
}

// --- lines that are not feed lines ------------------------------------------------

#[test]
fn a_line_that_is_not_json_is_rejected_naming_the_line() {
    let text = format!("{}\n{{\"feed\": \"billing\", \"delivery\": \n", first());
    let (r, rejected) = refused_text("not-json", text.as_bytes(), "target");
    let x = at_line(&r, &rejected, 2);
    assert!(
        x["reason"].as_str().is_some_and(|t| t.contains("JSON")),
        "{r}"
    );
}

#[test]
fn a_line_that_is_json_but_not_an_object_is_rejected() {
    let text = format!("{}\n[1, 2, 3]\n", first());
    let (r, rejected) = refused_text("not-object", text.as_bytes(), "target");
    at_line(&r, &rejected, 2);
}

#[test]
fn a_line_that_is_not_utf8_is_rejected_naming_the_line() {
    let mut text = format!("{}\n", first()).into_bytes();
    let bad = valid().to_string().replace("INV-2", "INV-\u{1}2");
    let mut bad = bad.into_bytes();
    let at = bad.iter().position(|&b| b == 1).expect("the marker byte");
    bad[at] = 0xff;
    text.extend(bad);
    text.push(b'\n');
    let (r, rejected) = refused_text("not-utf8", &text, "target");
    let x = at_line(&r, &rejected, 2);
    assert!(
        x["reason"].as_str().is_some_and(|t| t.contains("UTF-8")),
        "{r}"
    );
}

#[test]
fn every_faulty_line_is_named_not_only_the_first() {
    let mut a = inv("d2", 2, "INV-2", 1, 2500);
    a["revision"] = json!(true);
    let mut b = inv("d2", 3, "INV-3", 1, 300);
    b["row"]["currency"] = json!("eur");
    let mut c = inv("d2", 4, "INV-4", 1, 400);
    c["row"]["amount_minor"] = json!(-1);
    let text = feed_text(&[first(), a, b, c]);
    let (r, rejected) = refused_text("many-faults", text.as_bytes(), "target");
    let named: Vec<(u64, String)> = rejected
        .iter()
        .map(|x| {
            (
                x["line"].as_u64().unwrap_or(0),
                x["field"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert_eq!(
        named,
        [
            (2, "revision".to_string()),
            (3, "row.currency".to_string()),
            (4, "row.amount_minor".to_string()),
        ],
        "{r}"
    );
}

#[test]
fn an_invalid_feed_into_the_source_writes_nothing_there_either() {
    let mut bad = valid();
    bad["row"]["currency"] = json!("EURO");
    let text = feed_text(&[first(), bad]);
    let (r, rejected) = refused_text("into-source", text.as_bytes(), "source");
    assert_eq!(at_line(&r, &rejected, 2)["field"], "row.currency", "{r}");
}

#[test]
fn the_human_report_names_line_position_key_and_field() {
    let s = Dir::invoices("human");
    let mut bad = valid();
    bad["revision"] = json!(1.5);
    s.feed("feed.jsonl", &[first(), bad]);
    let r = s
        .cutover(&["apply", "--feed", "feed.jsonl", "--into", "target"])
        .expect(1);
    for part in ["line 2", "position 2", "INV-2", "field 'revision'"] {
        assert!(r.stdout.contains(part), "'{part}' is not named{r}");
    }
    assert_eq!(s.count("target.db", "invoices"), 0);
}

// --- files that hold no feed ------------------------------------------------------

/// A feed file that cannot be applied at all: exit 2, nothing written.
fn not_applied(name: &str, contents: Option<&[u8]>) {
    let s = Dir::invoices(name);
    let (src, tgt) = (s.image("source.db"), s.image("target.db"));
    if let Some(c) = contents {
        s.write("feed.jsonl", c);
    }
    let r = s.apply("feed.jsonl", "target").expect(2);
    assert!(r.stderr.contains("feed.jsonl"), "the file must be named{r}");
    s.assert_db_unchanged("target.db", &tgt, &r);
    s.assert_db_unchanged("source.db", &src, &r);
    assert_eq!(s.count("target.db", "_cutover_deliveries"), 0);
}

#[test]
fn an_empty_feed_file_is_refused_and_nothing_written() {
    not_applied("empty", Some(b""));
}

#[test]
fn a_feed_of_blank_lines_is_refused_and_nothing_written() {
    not_applied("blank", Some(b"\n   \n\n"));
}

#[test]
fn a_missing_feed_file_is_refused_and_nothing_written() {
    not_applied("missing", None);
}
