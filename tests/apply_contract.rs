//! The apply contract (docs/feed.md, "How a feed is applied"; the
//! durability rules and control tables of docs/spec.md and README.md), one
//! test per rule, each driving the built binary on
//! real SQLite files in a temporary folder. A test is named after the rule it
//! guards, so a failure says which promise broke.

mod support;

use serde_json::{Value as Json, json};
use support::feed::*;
use support::{Cmd, Dir, FAULT_EXIT, Layout, Output, Spec, each_layout, int, text};

/// Three EUR invoices at revision 1 (INV-1 1000, INV-2 2500, INV-3 400),
/// positions 1..3 of feed "billing", committed.
fn with_d1(name: &str) -> Dir {
    with_d1_on(Layout::named("sqlite"), name)
}

/// [`with_d1`] in a layout.
fn with_d1_on(layout: Layout, name: &str) -> Dir {
    let s = Dir::invoices_on(layout, name);
    let r = s
        .apply_lines(
            "d1.jsonl",
            &[
                inv("d1", 1, "INV-1", 1, 1000),
                inv("d1", 2, "INV-2", 1, 2500),
                inv("d1", 3, "INV-3", 1, 400),
            ],
        )
        .expect(0);
    assert_eq!(r.delivery(0)["status"], "applied", "{r}");
    s
}

fn status(r: &Output, i: usize) -> String {
    r.delivery(i)["status"].as_str().unwrap_or("").to_string()
}

fn reason(r: &Output, i: usize) -> String {
    r.delivery(i)["reason"].as_str().unwrap_or("").to_string()
}

fn counts(r: &Output, i: usize) -> (i64, i64, i64) {
    let d = r.delivery(i);
    (
        d["applied"].as_i64().unwrap_or(-1),
        d["duplicate"].as_i64().unwrap_or(-1),
        d["stale"].as_i64().unwrap_or(-1),
    )
}

fn invoice(s: &Dir, source: &str, rk: &str) -> Option<(i64, i64)> {
    s.invoices_in("invoices")
        .into_iter()
        .find(|i| i.0 == source && i.1 == rk)
        .map(|i| (i.2, i.3))
}

// --- one delivery, one transaction -------------------------------------------

fn rule_delivery_is_atomic_conflict_after_valid_row_rolls_back_all(layout: Layout) {
    let s = with_d1_on(layout, "atomic-conflict");
    let (src, tgt) = (s.image("source.db"), s.image("target.db"));
    let evidence_before = s.count("target.db", "_cutover_revisions");
    // Every kind of write before the conflict: a new row, stale evidence,
    // a newer revision (superseded evidence and an update), a tombstone.
    let r = s
        .apply_lines(
            "d2.jsonl",
            &[
                inv("d2", 4, "INV-9", 1, 900),
                inv("d2", 5, "INV-3", 3, 450),
                inv("d2", 6, "INV-3", 2, 111),
                inv_delete("d2", 7, "INV-1", 2),
                // Revision 1 of INV-2 is stored with 2500: a conflict.
                inv("d2", 8, "INV-2", 1, 2600),
            ],
        )
        .expect(1);
    assert_eq!(status(&r, 0), "rejected", "{r}");
    let why = reason(&r, 0);
    assert!(
        why.contains("line 5") && why.contains("position 8"),
        "the report must name the line and position of the conflict: {why}"
    );
    s.assert_db_unchanged("target.db", &tgt, &"target after the conflict");
    s.assert_db_unchanged("source.db", &src, &"source after the conflict");
    assert_eq!(s.count("target.db", "_cutover_deliveries"), 1);
    assert_eq!(s.count("target.db", "_cutover_revisions"), evidence_before);
    assert_eq!(r.json()["checkpoints"]["billing"], 3, "{r}");
}
each_layout!(rule_delivery_is_atomic_conflict_after_valid_row_rolls_back_all);

fn rule_delivery_is_atomic_sql_error_after_valid_rows_rolls_back_all(layout: Layout) {
    let s = with_d1_on(layout, "atomic-error");
    let tgt = s.image("target.db");
    // The target's NOT NULL refuses a null currency: an error, not a conflict.
    let mut bad = inv("d2", 6, "INV-8", 1, 800);
    bad["row"]["currency"] = Json::Null;
    let r = s
        .apply_lines(
            "d2.jsonl",
            &[
                inv("d2", 4, "INV-9", 1, 900),
                inv("d2", 5, "INV-1", 2, 1100),
                bad,
            ],
        )
        .output();
    assert_ne!(r.code, Some(0), "a failed write must not pass{r}");
    s.assert_db_unchanged("target.db", &tgt, &r);
    assert_eq!(s.checkpoint("target.db", BILLING), 3);
}
each_layout!(rule_delivery_is_atomic_sql_error_after_valid_rows_rolls_back_all);

#[test]
fn rule_delivery_error_report_names_the_line() {
    let s = with_d1("error-names-line");
    let mut bad = inv("d2", 5, "INV-8", 1, 800);
    bad["row"]["currency"] = Json::Null;
    let r = s
        .apply_lines("d2.jsonl", &[inv("d2", 4, "INV-9", 1, 900), bad])
        .output();
    assert_ne!(r.code, Some(0), "{r}");
    let said = format!("{}{}", r.stdout, r.stderr);
    assert!(
        said.contains("line 2") && said.contains("position 5"),
        "the failing line (line 2, position 5) must be named{r}"
    );
}

fn rule_delivery_commits_with_its_receipt_and_checkpoint(layout: Layout) {
    let s = with_d1_on(layout, "receipt");
    let receipts = s.query(
        "target.db",
        "SELECT feed, delivery, length(digest), first_position, last_position, written, duplicate, stale
         FROM _cutover_deliveries",
    );
    use rusqlite::types::Value::{Integer, Text};
    assert_eq!(
        receipts,
        vec![vec![
            Text("billing".into()),
            Text("d1".into()),
            Integer(64),
            Integer(1),
            Integer(3),
            Integer(3),
            Integer(0),
            Integer(0),
        ]]
    );
    assert_eq!(s.count("target.db", "invoices"), 3);
    assert_eq!(s.checkpoint("target.db", BILLING), 3);
}
each_layout!(rule_delivery_commits_with_its_receipt_and_checkpoint);

fn rule_delivery_each_is_its_own_transaction_rejection_keeps_earlier_stops_later(layout: Layout) {
    let s = Dir::invoices_on(layout, "per-delivery");
    let r = s
        .apply_lines(
            "feed.jsonl",
            &[
                inv("a", 1, "INV-1", 1, 1000),
                inv("a", 2, "INV-2", 1, 2000),
                inv("b", 3, "INV-3", 1, 300),
                inv("b", 4, "INV-1", 1, 1001), // conflict
                inv("c", 5, "INV-5", 1, 500),
            ],
        )
        .expect(1);
    assert_eq!(
        (status(&r, 0), status(&r, 1), status(&r, 2)),
        ("applied".into(), "rejected".into(), "not_attempted".into()),
        "{r}"
    );
    let keys: Vec<String> = s.invoices_in("invoices").into_iter().map(|i| i.1).collect();
    assert_eq!(keys, ["INV-1", "INV-2"]);
    assert_eq!(s.checkpoint("target.db", BILLING), 2);
    assert_eq!(s.count("target.db", "_cutover_deliveries"), 1);
}
each_layout!(rule_delivery_each_is_its_own_transaction_rejection_keeps_earlier_stops_later);

// --- positions -----------------------------------------------------------------

fn rule_positions_future_delivery_is_refused_checkpoint_unchanged(layout: Layout) {
    let s = with_d1_on(layout, "future");
    let tgt = s.image("target.db");
    let r = s
        .apply_lines("d9.jsonl", &[inv("d9", 5, "INV-9", 1, 900)])
        .expect(1);
    assert_eq!(status(&r, 0), "rejected", "{r}");
    assert!(reason(&r, 0).contains("future"), "{r}");
    assert_eq!(r.json()["checkpoints"]["billing"], 3);
    s.assert_db_unchanged("target.db", &tgt, &r);
}
each_layout!(rule_positions_future_delivery_is_refused_checkpoint_unchanged);

#[test]
fn rule_positions_first_delivery_of_a_feed_must_start_at_1() {
    let s = Dir::invoices("first-at-1");
    let tgt = s.image("target.db");
    let r = s
        .apply_lines("d.jsonl", &[inv("d", 2, "INV-1", 1, 100)])
        .expect(1);
    assert!(reason(&r, 0).contains("future"), "{r}");
    s.assert_db_unchanged("target.db", &tgt, &r);
}

#[test]
fn rule_positions_stale_unknown_delivery_at_or_before_checkpoint_is_refused() {
    let s = with_d1("stale");
    let tgt = s.image("target.db");
    for first in [3, 1] {
        let r = s
            .apply_lines("dx.jsonl", &[inv("dx", first, "INV-9", 1, 900)])
            .expect(1);
        assert_eq!(status(&r, 0), "rejected", "{r}");
        assert!(reason(&r, 0).contains("stale"), "{r}");
        assert_eq!(r.json()["checkpoints"]["billing"], 3);
        s.assert_db_unchanged("target.db", &tgt, &r);
    }
}

#[test]
fn rule_positions_reordered_deliveries_are_refused() {
    let s = Dir::invoices("reordered");
    let tgt = s.image("target.db");
    let r = s
        .apply_lines(
            "feed.jsonl",
            &[inv("b", 2, "INV-2", 1, 200), inv("a", 1, "INV-1", 1, 100)],
        )
        .expect(1);
    assert!(reason(&r, 0).contains("future"), "{r}");
    assert_eq!(status(&r, 1), "not_attempted", "{r}");
    s.assert_db_unchanged("target.db", &tgt, &r);
}

fn rule_positions_are_per_feed_another_feed_has_its_own(layout: Layout) {
    let s = with_d1_on(layout, "per-feed");
    let mut l = inv("l1", 1, "INV-7", 1, 700);
    l["feed"] = json!("ledger");
    let r = s.apply_lines("ledger.jsonl", &[l]).expect(0);
    assert_eq!(status(&r, 0), "applied", "{r}");
    assert_eq!(s.checkpoint("target.db", "ledger"), 1);
    assert_eq!(s.checkpoint("target.db", BILLING), 3);
    // Position 4 is billing's next, not ledger's.
    let mut l = inv("l2", 4, "INV-8", 1, 800);
    l["feed"] = json!("ledger");
    let r = s.apply_lines("ledger2.jsonl", &[l]).expect(1);
    assert!(reason(&r, 0).contains("future"), "{r}");
    // And billing goes on at 4 regardless of ledger.
    s.apply_lines("d2.jsonl", &[inv("d2", 4, "INV-4", 1, 40)])
        .expect(0);
    assert_eq!(s.checkpoint("target.db", BILLING), 4);
    assert_eq!(s.checkpoint("target.db", "ledger"), 1);
}
each_layout!(rule_positions_are_per_feed_another_feed_has_its_own);

// --- delivery identity ---------------------------------------------------------

fn rule_replay_same_id_same_digest_is_replayed_even_after_later_deliveries(layout: Layout) {
    let s = with_d1_on(layout, "replayed");
    s.apply_lines("d2.jsonl", &[inv("d2", 4, "INV-1", 2, 1100)])
        .expect(0);
    s.apply_lines("d3.jsonl", &[inv_delete("d3", 5, "INV-2", 2)])
        .expect(0);
    let tgt = s.image("target.db");
    for d in ["d1.jsonl", "d2.jsonl", "d3.jsonl"] {
        let r = s.apply(d, "target").expect(0);
        assert_eq!(status(&r, 0), "replayed", "{r}");
        assert_eq!(counts(&r, 0), (0, 0, 0), "{r}");
        s.assert_db_unchanged("target.db", &tgt, &r);
    }
}
each_layout!(rule_replay_same_id_same_digest_is_replayed_even_after_later_deliveries);

#[test]
fn rule_replay_same_content_reformatted_is_still_replayed() {
    let s = with_d1("replay-reformatted");
    let tgt = s.image("target.db");
    // Same lines, other key order and spacing: the digest is of content.
    let text = std::fs::read_to_string(s.join("d1.jsonl")).expect("reading d1");
    let pretty: String = text
        .lines()
        .map(|l| {
            let v: Json = serde_json::from_str(l).expect("a JSON line");
            let mut fields: Vec<(String, Json)> = v
                .as_object()
                .expect("an object")
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            fields.reverse();
            let body: Vec<String> = fields
                .iter()
                .map(|(k, v)| format!("{} : {}", json!(k), v))
                .collect();
            format!("{{ {} }}\n", body.join(" ,  "))
        })
        .collect();
    s.write("d1-again.jsonl", pretty);
    let r = s.apply("d1-again.jsonl", "target").expect(0);
    assert_eq!(status(&r, 0), "replayed", "{r}");
    s.assert_db_unchanged("target.db", &tgt, &r);
}

fn rule_replay_same_id_different_content_is_refused(layout: Layout) {
    let s = with_d1_on(layout, "reused-id");
    s.apply_lines("d2.jsonl", &[inv("d2", 4, "INV-4", 1, 40)])
        .expect(0);
    let tgt = s.image("target.db");
    for (name, lines) in [
        (
            "d1-other.jsonl",
            vec![
                inv("d1", 1, "INV-1", 1, 1000),
                inv("d1", 2, "INV-2", 1, 2500),
                inv("d1", 3, "INV-3", 1, 401),
            ],
        ),
        ("d2-other.jsonl", vec![inv("d2", 4, "INV-4", 1, 41)]),
        (
            "d2-longer.jsonl",
            vec![inv("d2", 4, "INV-4", 1, 40), inv("d2", 5, "INV-5", 1, 50)],
        ),
    ] {
        let r = s.apply_lines(name, &lines).expect(1);
        assert_eq!(status(&r, 0), "rejected", "{r}");
        assert!(reason(&r, 0).contains("different content"), "{r}");
        s.assert_db_unchanged("target.db", &tgt, &r);
    }
}
each_layout!(rule_replay_same_id_different_content_is_refused);

// --- identity ------------------------------------------------------------------

fn rule_identity_composite_key_every_part_counts(layout: Layout) {
    let s = Dir::invoices_on(layout, "composite");
    let base = inv_key("erp", "INV-1");
    let mut lines = Vec::new();
    for (i, (part, value)) in [
        ("record_key", "INV-1"),
        ("account", "A-200"),
        ("entity", "E2"),
        ("record_key", "INV-2"),
    ]
    .into_iter()
    .enumerate()
    {
        let mut key = base.clone();
        key[part] = json!(value);
        let mut row = key.clone();
        row["rev"] = json!(1);
        row["amount_minor"] = json!(100 * (i as i64 + 1));
        row["currency"] = json!("EUR");
        lines.push(upsert(
            BILLING,
            "d1",
            i as i64 + 1,
            "invoices",
            key,
            Some(1),
            row,
        ));
    }
    let r = s.apply_lines("d1.jsonl", &lines).expect(0);
    assert_eq!(counts(&r, 0), (4, 0, 0), "{r}");
    assert_eq!(s.count("target.db", "invoices"), 4);
    // A newer revision of one composite key touches that record only.
    s.apply_lines("d2.jsonl", &[inv("d2", 5, "INV-1", 2, 999)])
        .expect(0);
    let amounts: Vec<i64> = s
        .query(
            "target.db",
            "SELECT amount_minor FROM invoices ORDER BY account, entity, record_key",
        )
        .into_iter()
        .map(|r| match r[0] {
            rusqlite::types::Value::Integer(i) => i,
            ref other => panic!("amount {other:?}"),
        })
        .collect();
    assert_eq!(amounts, [999, 400, 300, 200]);
}
each_layout!(rule_identity_composite_key_every_part_counts);

#[test]
fn rule_identity_same_key_in_another_table_is_another_record() {
    let s = Dir::with(
        "two-tables",
        &two_tables_spec(),
        &two_tables_sql(INVOICES_SOURCE),
        &two_tables_sql(INVOICES_TARGET),
    );
    s.apply_lines(
        "d1.jsonl",
        &[
            inv_at("invoices", "erp", "d1", 1, "INV-1", 3, 1000),
            inv_at("invoices", "erp", "d1", 2, "INV-2", 1, 2000),
            {
                let mut d = inv_delete("d1", 3, "INV-2", 5);
                d["table"] = json!("invoices");
                d
            },
        ],
    )
    .expect(0);
    // Same keys, older revisions, other table: new records, not stale ones.
    let r = s
        .apply_lines(
            "d2.jsonl",
            &[
                inv_at("credits", "erp", "d2", 4, "INV-1", 1, 10),
                inv_at("credits", "erp", "d2", 5, "INV-2", 1, 20),
            ],
        )
        .expect(0);
    assert_eq!(counts(&r, 0), (2, 0, 0), "{r}");
    assert_eq!(
        s.invoices_in("credits"),
        [
            ("erp".into(), "INV-1".into(), 1, 10, "EUR".into()),
            ("erp".into(), "INV-2".into(), 1, 20, "EUR".into()),
        ]
    );
    assert_eq!(
        s.invoices_in("invoices"),
        [("erp".into(), "INV-1".into(), 3, 1000, "EUR".into())]
    );
}

#[test]
fn rule_identity_same_key_parts_in_another_source_scope_is_another_record() {
    let s = with_d1("scope");
    s.apply_lines(
        "d2.jsonl",
        &[
            inv("d2", 4, "INV-1", 3, 1200),
            inv_delete("d2", 5, "INV-2", 2),
        ],
    )
    .expect(0);
    let r = s
        .apply_lines(
            "d3.jsonl",
            &[
                inv_at("invoices", "crm", "d3", 6, "INV-1", 1, 50),
                inv_at("invoices", "crm", "d3", 7, "INV-2", 1, 60),
            ],
        )
        .expect(0);
    assert_eq!(counts(&r, 0), (2, 0, 0), "{r}");
    assert_eq!(invoice(&s, "crm", "INV-1"), Some((1, 50)));
    assert_eq!(invoice(&s, "crm", "INV-2"), Some((1, 60)));
    assert_eq!(invoice(&s, "erp", "INV-1"), Some((3, 1200)));
    assert_eq!(invoice(&s, "erp", "INV-2"), None);
}

// --- revisions -----------------------------------------------------------------

fn rule_revision_newer_replaces_and_old_row_is_kept_as_evidence(layout: Layout) {
    let s = with_d1_on(layout, "newer");
    let r = s
        .apply_lines("d2.jsonl", &[inv("d2", 4, "INV-1", 2, 1100)])
        .expect(0);
    assert_eq!(counts(&r, 0), (1, 0, 0), "{r}");
    assert_eq!(invoice(&s, "erp", "INV-1"), Some((2, 1100)));
    let ev = s.evidence();
    let old = ev
        .iter()
        .find(|e| e.2 == 1 && e.3 == "superseded" && e.1.contains("INV-1"))
        .unwrap_or_else(|| panic!("no evidence of revision 1: {ev:?}"));
    let row: Json = serde_json::from_str(old.4.as_deref().expect("the old row")).expect("JSON");
    assert_eq!(row["amount_minor"], 1000);
}
each_layout!(rule_revision_newer_replaces_and_old_row_is_kept_as_evidence);

fn rule_revision_older_is_kept_as_stale_evidence_and_does_not_replace(layout: Layout) {
    let s = with_d1_on(layout, "older");
    s.apply_lines("d2.jsonl", &[inv("d2", 4, "INV-1", 3, 1300)])
        .expect(0);
    let r = s
        .apply_lines("d3.jsonl", &[inv("d3", 5, "INV-1", 2, 1200)])
        .expect(0);
    assert_eq!(status(&r, 0), "applied", "{r}");
    assert_eq!(counts(&r, 0), (0, 0, 1), "{r}");
    assert_eq!(invoice(&s, "erp", "INV-1"), Some((3, 1300)));
    let ev = s.evidence();
    let stale = ev
        .iter()
        .find(|e| e.2 == 2 && e.3 == "stale")
        .unwrap_or_else(|| panic!("no stale evidence of revision 2: {ev:?}"));
    let row: Json = serde_json::from_str(stale.4.as_deref().expect("the row")).expect("JSON");
    assert_eq!(row["amount_minor"], 1200);
}
each_layout!(rule_revision_older_is_kept_as_stale_evidence_and_does_not_replace);

#[test]
fn rule_revision_same_revision_same_content_is_duplicate() {
    let s = with_d1("same-rev-same");
    let rows = s.image("target.db").tables["invoices"].clone();
    let ev = s.evidence();
    let r = s
        .apply_lines("d2.jsonl", &[inv("d2", 4, "INV-2", 1, 2500)])
        .expect(0);
    assert_eq!(counts(&r, 0), (0, 1, 0), "{r}");
    assert_eq!(s.image("target.db").tables["invoices"], rows);
    assert_eq!(s.evidence(), ev);
}

fn rule_revision_same_revision_different_content_is_conflict(layout: Layout) {
    let s = with_d1_on(layout, "same-rev-other");
    let tgt = s.image("target.db");
    let r = s
        .apply_lines("d2.jsonl", &[inv("d2", 4, "INV-2", 1, 2501)])
        .expect(1);
    assert_eq!(status(&r, 0), "rejected", "{r}");
    s.assert_db_unchanged("target.db", &tgt, &r);
}
each_layout!(rule_revision_same_revision_different_content_is_conflict);

#[test]
fn rule_revision_superseded_revision_with_different_content_is_conflict() {
    let s = with_d1("old-rev-other");
    s.apply_lines("d2.jsonl", &[inv("d2", 4, "INV-1", 2, 1100)])
        .expect(0);
    let tgt = s.image("target.db");
    let r = s
        .apply_lines("d3.jsonl", &[inv("d3", 5, "INV-1", 1, 999)])
        .expect(1);
    assert_eq!(status(&r, 0), "rejected", "{r}");
    s.assert_db_unchanged("target.db", &tgt, &r);
    // The same old revision with the content seen then is a duplicate.
    let r = s
        .apply_lines("d3b.jsonl", &[inv("d3b", 5, "INV-1", 1, 1000)])
        .expect(0);
    assert_eq!(counts(&r, 0), (0, 1, 0), "{r}");
    assert_eq!(invoice(&s, "erp", "INV-1"), Some((2, 1100)));
}

#[test]
fn rule_revision_conflict_on_an_old_revision_reports_the_stored_record() {
    let s = with_d1("old-rev-report");
    s.apply_lines("d2.jsonl", &[inv("d2", 4, "INV-1", 2, 1100)])
        .expect(0);
    let r = s
        .apply_lines("d3.jsonl", &[inv("d3", 5, "INV-1", 1, 999)])
        .expect(1);
    let why = reason(&r, 0);
    assert!(
        !why.contains("found no row"),
        "INV-1 is stored at revision 2, yet the report says there is no row: {why}"
    );
}

#[test]
fn rule_revision_stale_revision_seen_again_with_different_content_is_conflict() {
    let s = with_d1("stale-rev-other");
    s.apply_lines(
        "d2.jsonl",
        &[
            inv("d2", 4, "INV-1", 5, 1500),
            inv("d2", 5, "INV-1", 3, 1300),
        ],
    )
    .expect(0);
    let tgt = s.image("target.db");
    let r = s
        .apply_lines("d3.jsonl", &[inv("d3", 6, "INV-1", 3, 1333)])
        .expect(1);
    assert_eq!(status(&r, 0), "rejected", "{r}");
    s.assert_db_unchanged("target.db", &tgt, &r);
}

fn rule_revision_delete_is_a_tombstone_an_older_update_cannot_resurrect(layout: Layout) {
    let s = with_d1_on(layout, "tombstone");
    s.apply_lines("d2.jsonl", &[inv_delete("d2", 4, "INV-2", 3)])
        .expect(0);
    assert_eq!(invoice(&s, "erp", "INV-2"), None);
    let r = s
        .apply_lines(
            "d3.jsonl",
            &[
                inv("d3", 5, "INV-2", 1, 2500), // the row as it was: a duplicate
                inv("d3", 6, "INV-2", 2, 2700), // never seen, older: stale
            ],
        )
        .expect(0);
    assert_eq!(counts(&r, 0), (0, 1, 1), "{r}");
    assert_eq!(
        invoice(&s, "erp", "INV-2"),
        None,
        "the tombstone was resurrected"
    );
    let ev = s.evidence();
    assert!(
        ev.iter()
            .any(|e| e.2 == 3 && e.3 == "tombstone" && e.1.contains("INV-2")),
        "the tombstone must be kept: {ev:?}"
    );
    assert!(
        ev.iter()
            .any(|e| e.2 == 2 && e.3 == "stale" && e.1.contains("INV-2")),
        "the older update must be kept as evidence: {ev:?}"
    );
}
each_layout!(rule_revision_delete_is_a_tombstone_an_older_update_cannot_resurrect);

#[test]
fn rule_revision_delete_of_unseen_record_is_a_tombstone_too() {
    let s = Dir::invoices("tombstone-unseen");
    s.apply_lines("d1.jsonl", &[inv_delete("d1", 1, "INV-7", 5)])
        .expect(0);
    let r = s
        .apply_lines("d2.jsonl", &[inv("d2", 2, "INV-7", 3, 300)])
        .expect(0);
    assert_eq!(counts(&r, 0), (0, 0, 1), "{r}");
    assert_eq!(invoice(&s, "erp", "INV-7"), None);
    // A newer revision than the delete is a new life of the record.
    s.apply_lines("d3.jsonl", &[inv("d3", 3, "INV-7", 6, 600)])
        .expect(0);
    assert_eq!(invoice(&s, "erp", "INV-7"), Some((6, 600)));
}

#[test]
fn rule_revision_delete_with_before_still_leaves_a_tombstone() {
    let s = with_d1("tombstone-before");
    let mut d = inv_delete("d2", 4, "INV-2", 2);
    d["before"] = inv_row("erp", "INV-2", 1, 2500, "EUR");
    s.apply_lines("d2.jsonl", &[d]).expect(0);
    assert_eq!(invoice(&s, "erp", "INV-2"), None);
    s.apply_lines("d3.jsonl", &[inv("d3", 5, "INV-2", 1, 2500)]);
    assert_eq!(
        invoice(&s, "erp", "INV-2"),
        None,
        "revision 1 resurrected a record deleted at revision 2"
    );
}

// --- no revision column ----------------------------------------------------------

#[test]
fn rule_no_revision_identical_content_is_duplicate() {
    let s = Dir::items("plain-dup", None);
    s.apply_lines("a.jsonl", &[item("a", 1, 1, "new")])
        .expect(0);
    let r = s
        .apply_lines("b.jsonl", &[item("b", 2, 1, "new")])
        .expect(0);
    assert_eq!(counts(&r, 0), (0, 1, 0), "{r}");
    assert_eq!(s.items_rows("target.db"), [(1, "new".into())]);
}

fn rule_no_revision_different_content_is_conflict_old_row_kept(layout: Layout) {
    let s = Dir::items_on(layout, "plain-conflict", None);
    s.apply_lines("a.jsonl", &[item("a", 1, 1, "new")])
        .expect(0);
    let tgt = s.image("target.db");
    let r = s
        .apply_lines("b.jsonl", &[item("b", 2, 1, "done")])
        .expect(1);
    assert_eq!(status(&r, 0), "rejected", "{r}");
    assert_eq!(s.items_rows("target.db"), [(1, "new".into())]);
    s.assert_db_unchanged("target.db", &tgt, &r);
}
each_layout!(rule_no_revision_different_content_is_conflict_old_row_kept);

#[test]
fn rule_no_revision_never_a_blind_replace_within_one_delivery() {
    let s = Dir::items("plain-in-delivery", None);
    let tgt = s.image("target.db");
    let r = s
        .apply_lines(
            "a.jsonl",
            &[
                item("a", 1, 1, "new"),
                item("a", 2, 2, "new"),
                item("a", 3, 1, "done"),
            ],
        )
        .expect(1);
    assert!(reason(&r, 0).contains("line 3"), "{r}");
    s.assert_db_unchanged("target.db", &tgt, &r);
}

#[test]
fn rule_no_revision_on_change_update_lets_the_later_position_replace() {
    let s = Dir::items("plain-update", Some("update"));
    s.apply_lines("a.jsonl", &[item("a", 1, 1, "new")])
        .expect(0);
    let r = s
        .apply_lines("b.jsonl", &[item("b", 2, 1, "done")])
        .expect(0);
    assert_eq!(counts(&r, 0), (1, 0, 0), "{r}");
    assert_eq!(s.items_rows("target.db"), [(1, "done".into())]);
    // Within one delivery the later position wins too.
    s.apply_lines(
        "c.jsonl",
        &[
            item("c", 3, 2, "done"),
            item("c", 4, 2, "new"),
            item("c", 5, 1, "new"),
        ],
    )
    .expect(0);
    assert_eq!(
        s.items_rows("target.db"),
        [(1, "new".into()), (2, "new".into())]
    );
}

// --- identity: key types and key checks ------------------------------------------

#[test]
fn rule_identity_key_type_matters_text_key_does_not_delete_integer_record() {
    let s = Dir::items("key-type", None);
    s.apply_lines("a.jsonl", &[item("a", 1, 1, "new"), item("a", 2, 2, "new")])
        .expect(0);
    let r = s
        .apply_lines(
            "b.jsonl",
            &[
                delete("items", "b", 3, "items", json!({"id": "1"}), None),
                delete("items", "b", 4, "items", json!({"id": 2.0}), None),
            ],
        )
        .output();
    assert_eq!(
        s.items_rows("target.db"),
        [(1, "new".into()), (2, "new".into())],
        "a text or real key deleted an integer record{r}"
    );
}

#[test]
fn rule_batch_last_delete_with_invalid_key_leaves_nothing() {
    let s = Dir::items("invalid-key-delete", None);
    let tgt = s.image("target.db");
    let r = s
        .apply_lines(
            "a.jsonl",
            &[
                item("a", 1, 1, "new"),
                item("a", 2, 2, "new"),
                delete("items", "a", 3, "items", json!({"id": 0}), None),
            ],
        )
        .output();
    assert_eq!(r.code, Some(1), "{r}");
    s.assert_db_unchanged("target.db", &tgt, &r);
}

// --- journal export round trip ---------------------------------------------------

const SOURCE2_SPEC_FROM: &str = "sqlite://source.db";

/// A second spec in the same folder whose source is `source2.db`, a copy of
/// the source as it is now: replay goes there, the feed to `source.db`.
fn second_source(s: &Dir) {
    s.copy_db("source.db", "source2.db");
    let spec = std::fs::read_to_string(s.join("spec.toml")).expect("reading the spec");
    assert!(spec.contains(SOURCE2_SPEC_FROM));
    s.write(
        "spec2.toml",
        spec.replace(SOURCE2_SPEC_FROM, "sqlite://source2.db"),
    );
}

fn orders(s: &Dir, db: &str) -> Vec<Vec<rusqlite::types::Value>> {
    s.query(db, "SELECT id, dollars, status FROM orders ORDER BY id")
}

fn applied_seqs(s: &Dir, db: &str) -> Vec<i64> {
    s.applied_seqs(db, "target.db")
}

fn export(s: &Dir, out: &str, size: &str) -> Cmd {
    s.cutover_json(&["journal", "export", "--out", out, "--delivery-size", size])
}

fn read_feed(s: &Dir, name: &str) -> Vec<Json> {
    std::fs::read_to_string(s.join(name))
        .expect("reading the feed")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a complete JSON line"))
        .collect()
}

#[test]
fn rule_export_positions_are_gapless_where_journal_seq_has_gaps() {
    let s = Dir::orders_fenced_with_gaps("export-gaps", 10);
    export(&s, "feed.jsonl", "2").expect(0);
    let lines = read_feed(&s, "feed.jsonl");
    let positions: Vec<i64> = lines
        .iter()
        .map(|l| l["position"].as_i64().unwrap_or(0))
        .collect();
    let seqs: Vec<i64> = lines
        .iter()
        .map(|l| l["seq"].as_i64().unwrap_or(0))
        .collect();
    assert_eq!(positions, [1, 2, 3]);
    assert!(
        seqs.windows(2).all(|w| w[1] > w[0] + 1),
        "the fixture must have seq gaps: {seqs:?}"
    );
    let deliveries: Vec<&str> = lines
        .iter()
        .map(|l| l["delivery"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(deliveries[0], deliveries[1]);
    assert_ne!(deliveries[1], deliveries[2]);
}

#[test]
fn rule_export_applied_into_source_equals_replay_and_records_applied_seqs() {
    let s = Dir::orders_fenced_with_gaps("export-equals-replay", 10);
    second_source(&s);
    export(&s, "feed.jsonl", "2").expect(0);
    let r = s.apply("feed.jsonl", "source").expect(0);
    assert!(
        r.json()["deliveries"]
            .as_array()
            .is_some_and(|d| d.iter().all(|d| d["status"] == "applied")),
        "{r}"
    );
    s.command(&["--format", "json", "replay", "--spec", "spec2.toml"])
        .expect(0);
    assert_eq!(orders(&s, "source.db"), orders(&s, "source2.db"));
    let journal: Vec<i64> = s
        .query("target.db", "SELECT seq FROM _cutover_journal ORDER BY seq")
        .into_iter()
        .map(|r| match r[0] {
            rusqlite::types::Value::Integer(i) => i,
            ref other => panic!("seq {other:?}"),
        })
        .collect();
    assert_eq!(applied_seqs(&s, "source.db"), journal);
    assert_eq!(applied_seqs(&s, "source2.db"), journal);
    // A replay after the feed finds nothing to do and changes nothing.
    let src = s.image("source.db");
    let r = s.cutover_json(&["replay"]).expect(0);
    assert_eq!(r.json()["applied"], 0, "{r}");
    s.assert_db_unchanged("source.db", &src, &r);
}

/// The running example's journal exported and applied into the source,
/// and replayed into a copy of the source, on every layout: both sources
/// hold the rows the application's writes leave (carried back by hand
/// here), both record every journal seq as applied, and a replay after the
/// feed applies nothing and changes nothing.
fn rule_export_applied_into_source_equals_replay_on_every_layout(layout: Layout) {
    let s = Dir::orders_fenced_on(layout, "export-apply-layout");
    s.copy_db("source.db", "source2.db");
    s.spec_file("spec2.toml", &Spec::orders().source("source2.db"));
    export(&s, "feed.jsonl", "2").expect(0);
    s.apply("feed.jsonl", "source").expect(0);
    s.command(&["--format", "json", "replay", "--spec", "spec2.toml"])
        .expect(0);
    let rolled_back = vec![
        vec![int(101), text("14.00"), text("A")],
        vec![int(102), text("7.50"), text("C")],
        vec![int(104), text("9.00"), text("A")],
    ];
    assert_eq!(s.dump("source.db", "orders"), rolled_back);
    assert_eq!(s.dump("source2.db", "orders"), rolled_back);
    let journal: Vec<i64> = s
        .query("target.db", "SELECT seq FROM _cutover_journal ORDER BY seq")
        .into_iter()
        .map(|r| match r[0] {
            rusqlite::types::Value::Integer(i) => i,
            ref other => panic!("seq {other:?}"),
        })
        .collect();
    assert_eq!(journal.len(), 3, "{journal:?}");
    assert_eq!(applied_seqs(&s, "source.db"), journal);
    assert_eq!(applied_seqs(&s, "source2.db"), journal);
    let src = s.image("source.db");
    let r = s.cutover_json(&["replay"]).expect(0);
    assert_eq!(r.json()["applied"], 0, "{r}");
    s.assert_db_unchanged("source.db", &src, &r);
}
each_layout!(rule_export_applied_into_source_equals_replay_on_every_layout);

#[test]
fn rule_export_replay_first_then_apply_counts_every_change_duplicate() {
    let s = Dir::orders_fenced_with_gaps("replay-then-apply", 3);
    export(&s, "feed.jsonl", "2").expect(0);
    s.cutover_json(&["replay"]).expect(0);
    let rows = orders(&s, "source.db");
    let seqs = applied_seqs(&s, "source.db");
    let r = s.apply("feed.jsonl", "source").expect(0);
    let deliveries = r.json()["deliveries"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(deliveries.len(), 2, "{r}");
    for d in &deliveries {
        let size =
            d["positions"][1].as_i64().unwrap_or(0) - d["positions"][0].as_i64().unwrap_or(0) + 1;
        assert_eq!(d["status"], "applied", "{r}");
        assert_eq!(d["applied"], 0, "{r}");
        assert_eq!(d["duplicate"], size, "{r}");
    }
    assert_eq!(orders(&s, "source.db"), rows);
    assert_eq!(applied_seqs(&s, "source.db"), seqs);
}

#[test]
fn rule_export_writes_the_file_atomically_and_complete() {
    let s = Dir::orders_fenced_with_gaps("export-atomic", 0);
    std::fs::create_dir(s.join("out")).expect("creating out/");
    // An older, longer file there is replaced whole, not overwritten in place.
    s.write("out/feed.jsonl", "x".repeat(10_000));
    export(&s, "out/feed.jsonl", "1000").expect(0);
    let names: Vec<String> = std::fs::read_dir(s.join("out"))
        .expect("listing out/")
        .map(|e| {
            e.expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(
        names,
        ["feed.jsonl"],
        "a temporary file was left beside the feed"
    );
    let text = std::fs::read_to_string(s.join("out/feed.jsonl")).expect("reading the feed");
    assert!(
        text.ends_with('\n'),
        "the last line is incomplete: {text:?}"
    );
    let lines = read_feed(&s, "out/feed.jsonl");
    assert_eq!(lines.len(), 3);
    assert_eq!(
        lines
            .iter()
            .map(|l| l["position"].as_i64().unwrap_or(0))
            .collect::<Vec<_>>(),
        [1, 2, 3]
    );
}

#[test]
fn rule_export_refused_without_fence_leaves_no_file() {
    let s = Dir::orders_fenced_with_gaps("export-unfenced", 0);
    s.cutover_json(&["fence", "off", "--force"]).expect(0);
    std::fs::create_dir(s.join("out")).expect("creating out/");
    let r = export(&s, "out/feed.jsonl", "1000").expect(2);
    let left: Vec<_> = std::fs::read_dir(s.join("out"))
        .expect("listing out/")
        .collect();
    assert!(left.is_empty(), "export left files behind{r}");
}

#[test]
fn rule_export_same_journal_twice_gives_identical_files() {
    let s = Dir::orders_fenced_with_gaps("export-stable", 5);
    export(&s, "a.jsonl", "2").expect(0);
    export(&s, "b.jsonl", "2").expect(0);
    let a = std::fs::read(s.join("a.jsonl")).expect("reading a");
    let b = std::fs::read(s.join("b.jsonl")).expect("reading b");
    assert!(!a.is_empty());
    assert_eq!(
        a, b,
        "the same journal exported twice must give the same bytes"
    );
}

#[test]
fn rule_feed_with_seq_applies_into_target_or_is_refused_cleanly() {
    let s = Dir::invoices("seq-into-target");
    let tgt = s.image("target.db");
    let mut l = inv("d1", 1, "INV-1", 1, 1000);
    l["seq"] = json!(7);
    let r = s.apply_lines("d1.jsonl", &[l]).output();
    assert!(!r.stderr.contains("no such table"), "{r}");
    match r.code {
        Some(0) => assert_eq!(invoice(&s, "erp", "INV-1"), Some((1, 1000))),
        Some(1) => s.assert_db_unchanged("target.db", &tgt, &r),
        _ => panic!("neither applied nor refused as a finding{r}"),
    }
}

// --- durability ------------------------------------------------------------------

#[test]
fn rule_durability_check_reports_journal_mode_and_synchronous_for_both() {
    let s = Dir::items("durability", None);
    // SQLite persists only WAL among the journal modes; OFF and MEMORY last
    // as long as one connection, so what a file can carry is WAL or DELETE.
    let mode: String = s
        .conn("target.db")
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .expect("switching the target to WAL");
    assert_eq!(mode, "wal");
    let r = s.cutover_json(&["check"]).expect(0);
    let j = r.json();
    assert_eq!(j["source"]["journal_mode"], "delete", "{r}");
    assert_eq!(j["target"]["journal_mode"], "wal", "{r}");
    for side in ["source", "target"] {
        assert_eq!(j[side]["synchronous"], "FULL", "{side}{r}");
    }
}

#[test]
fn rule_durability_apply_into_a_wal_database_commits_and_keeps_wal() {
    let s = Dir::items("wal-apply", None);
    s.conn("target.db")
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0))
        .expect("switching the target to WAL");
    s.apply_lines("a.jsonl", &[item("a", 1, 1, "new")])
        .expect(0);
    assert_eq!(s.items_rows("target.db"), [(1, "new".into())]);
    let mode: String = s
        .conn("target.db")
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .expect("reading the mode");
    assert_eq!(mode, "wal");
}

#[test]
fn rule_checkpoint_survives_closing_and_reopening_the_process() {
    let s = Dir::invoices("restart");
    s.apply_lines(
        "d1.jsonl",
        &[inv("d1", 1, "INV-1", 1, 100), inv("d1", 2, "INV-2", 1, 200)],
    )
    .expect(0);
    // Read back by another connection after the process ended.
    assert_eq!(s.checkpoint("target.db", BILLING), 2);
    let r = s
        .apply_lines("d2.jsonl", &[inv("d2", 3, "INV-3", 1, 300)])
        .expect(0);
    assert_eq!(status(&r, 0), "applied", "{r}");
    assert_eq!(r.json()["checkpoints"]["billing"], 3, "{r}");
    assert_eq!(s.checkpoint("target.db", BILLING), 3);
}

// --- crash points ----------------------------------------------------------------

fn crash_d2(s: &Dir) {
    s.feed(
        "d2.jsonl",
        &[
            inv("d2", 4, "INV-4", 1, 40),
            inv("d2", 5, "INV-1", 2, 1100),
            inv_delete("d2", 6, "INV-3", 2),
        ],
    );
}

fn crash_leaves_every_table_as_before(point: &str) {
    let s = with_d1(point);
    crash_d2(&s);
    let (src, tgt) = (s.image("source.db"), s.image("target.db"));
    let r = s
        .apply("d2.jsonl", "target")
        .env("CUTOVER_FAULT", point)
        .expect(FAULT_EXIT);
    s.assert_db_unchanged("target.db", &tgt, &r);
    s.assert_db_unchanged("source.db", &src, &r);
    // Resumed without the fault, the delivery applies whole.
    let r = s.apply("d2.jsonl", "target").expect(0);
    assert_eq!(status(&r, 0), "applied", "{r}");
    assert_eq!(counts(&r, 0), (3, 0, 0), "{r}");
    assert_eq!(s.checkpoint("target.db", BILLING), 6);
}

#[test]
fn rule_crash_mid_batch_exits_73_and_leaves_every_table_as_before() {
    crash_leaves_every_table_as_before("mid-batch");
}

#[test]
fn rule_crash_before_commit_exits_73_and_leaves_every_table_as_before() {
    crash_leaves_every_table_as_before("before-commit");
}

#[test]
fn rule_crash_after_commit_exits_73_delivery_committed_and_retry_is_replayed() {
    let s = with_d1("after-commit");
    crash_d2(&s);
    s.apply("d2.jsonl", "target")
        .env("CUTOVER_FAULT", "after-commit")
        .expect(FAULT_EXIT);
    assert_eq!(s.checkpoint("target.db", BILLING), 6);
    assert_eq!(invoice(&s, "erp", "INV-4"), Some((1, 40)));
    assert_eq!(invoice(&s, "erp", "INV-1"), Some((2, 1100)));
    assert_eq!(invoice(&s, "erp", "INV-3"), None);
    let tgt = s.image("target.db");
    let r = s.apply("d2.jsonl", "target").expect(0);
    assert_eq!(status(&r, 0), "replayed", "{r}");
    s.assert_db_unchanged("target.db", &tgt, &r);
}

// --- batch semantics of a simple (id, status) feed --------------------------------

#[test]
fn rule_batch_replaying_the_same_batch_adds_nothing() {
    let s = Dir::items("batch-replay", None);
    let batch = [
        item("b1", 1, 1, "new"),
        item("b1", 2, 2, "new"),
        item("b1", 3, 3, "done"),
    ];
    s.apply_lines("b1.jsonl", &batch).expect(0);
    let before = s.count("target.db", "items");
    assert_eq!(before, 3);
    let r = s.apply("b1.jsonl", "target").expect(0);
    assert_eq!(status(&r, 0), "replayed", "{r}");
    assert_eq!(s.count("target.db", "items"), before);
    // The same rows again as a new delivery: every one a duplicate.
    let again: Vec<Json> = batch
        .iter()
        .map(|l| {
            let mut l = l.clone();
            l["delivery"] = json!("b2");
            l["position"] = json!(l["position"].as_i64().unwrap_or(0) + 3);
            l
        })
        .collect();
    let r = s.apply_lines("b2.jsonl", &again).expect(0);
    assert_eq!(counts(&r, 0), (0, 3, 0), "{r}");
    assert_eq!(s.count("target.db", "items"), before);
}

#[test]
fn rule_batch_same_id_changed_status_is_conflict_old_row_stays() {
    let s = Dir::items("batch-conflict", None);
    s.apply_lines(
        "b1.jsonl",
        &[item("b1", 1, 1, "new"), item("b1", 2, 2, "new")],
    )
    .expect(0);
    let before = s.count("target.db", "items");
    let r = s
        .apply_lines("b2.jsonl", &[item("b2", 3, 2, "done")])
        .expect(1);
    assert_eq!(status(&r, 0), "rejected", "{r}");
    assert_eq!(s.count("target.db", "items"), before);
    assert_eq!(
        s.items_rows("target.db"),
        [(1, "new".into()), (2, "new".into())]
    );
}

fn invalid_last_row_leaves_nothing(bad: Json, field: &str) {
    let s = Dir::items("batch-invalid", None);
    s.apply_lines("b0.jsonl", &[item("b0", 1, 9, "new")])
        .expect(0);
    let tgt = s.image("target.db");
    let before = s.count("target.db", "items");
    let r = s
        .apply_lines(
            "b1.jsonl",
            &[item("b1", 2, 1, "new"), item("b1", 3, 2, "done"), bad],
        )
        .expect(1);
    assert_eq!(s.count("target.db", "items"), before);
    s.assert_db_unchanged("target.db", &tgt, &r);
    let rejected = r.rejected();
    assert!(
        rejected
            .iter()
            .any(|x| x["line"] == 3 && x["field"] == field),
        "line 3, field {field} must be named{r}"
    );
}

#[test]
fn rule_batch_last_row_invalid_status_leaves_nothing_of_earlier_rows() {
    invalid_last_row_leaves_nothing(item("b1", 4, 3, "lost"), "row.status");
}

#[test]
fn rule_batch_last_row_invalid_id_0_leaves_nothing_of_earlier_rows() {
    invalid_last_row_leaves_nothing(item("b1", 4, 0, "new"), "key.id");
}

#[test]
fn rule_batch_order_of_a_failing_batch_changes_the_reported_line_not_the_state() {
    // Invalid row: rejected at validation, first or last.
    let mut states = Vec::new();
    for (order, line, position) in [("last", 3, 3), ("first", 1, 1)] {
        let s = Dir::items(&format!("order-invalid-{order}"), None);
        let before = s.count("target.db", "items");
        let mut rows = vec![item("b1", 0, 1, "new"), item("b1", 0, 2, "new")];
        let bad = item("b1", 0, 3, "lost");
        if order == "last" {
            rows.push(bad);
        } else {
            rows.insert(0, bad);
        }
        for (i, r) in rows.iter_mut().enumerate() {
            r["position"] = json!(i + 1);
        }
        let r = s.apply_lines("b1.jsonl", &rows).expect(1);
        let rej = r.rejected();
        assert_eq!(rej.len(), 1, "{r}");
        assert_eq!(rej[0]["line"], line, "{r}");
        assert_eq!(rej[0]["position"], position, "{r}");
        assert_eq!(s.count("target.db", "items"), before);
        states.push(s.image("target.db"));
    }
    assert_eq!(states[0], states[1]);

    // Conflicting row: rejected while applying, first or last.
    let mut states = Vec::new();
    for (order, line) in [("last", 2), ("first", 1)] {
        let s = Dir::items(&format!("order-conflict-{order}"), None);
        s.apply_lines("b0.jsonl", &[item("b0", 1, 1, "new")])
            .expect(0);
        let before = s.count("target.db", "items");
        let mut rows = vec![item("b1", 0, 2, "new"), item("b1", 0, 1, "done")];
        if order == "first" {
            rows.reverse();
        }
        for (i, r) in rows.iter_mut().enumerate() {
            r["position"] = json!(i + 2);
        }
        let r = s.apply_lines("b1.jsonl", &rows).expect(1);
        let why = reason(&r, 0);
        assert!(
            why.contains(&format!("line {line}, position {}", line + 1)),
            "{r}"
        );
        assert_eq!(s.count("target.db", "items"), before);
        assert_eq!(s.items_rows("target.db"), [(1, "new".into())]);
        states.push(s.items_rows("target.db"));
    }
    assert_eq!(states[0], states[1]);
}

/// A source replayed by a cutover that recorded one row per entry keeps its
/// rows, read as runs of one, and replay goes on after them.
#[test]
fn an_applied_set_of_single_entries_gains_runs_on_sqlite() -> anyhow::Result<()> {
    let d = Dir::new("applied-set-upgrade");
    support::older_applied_set_upgrades(&empty_sqlite(&d)?)
}

/// A new, empty SQLite database in `d`, opened for writing.
fn empty_sqlite(d: &Dir) -> anyhow::Result<cutover::db::Db> {
    std::fs::write(d.join("fresh.db"), b"")?;
    cutover::db::Db::open_file(
        &d.join("fresh.db"),
        cutover::db::Access::Write,
        cutover::spec::Side::Source,
    )
}

/// Into the source, the rollback of an exported journal applies whole or
/// not at all: a conflict in its last delivery rolls back the deliveries
/// before it too, and the source is exactly as it was.
#[test]
fn rule_a_feed_applied_into_the_source_commits_whole_or_not_at_all() {
    let s = Dir::orders_fenced_with_gaps("export-all-or-nothing", 0);
    export(&s, "feed.jsonl", "1").expect(0);
    // The last entry deletes order 103; the source's row no longer is the
    // one the journal saw.
    s.exec(
        "source.db",
        "UPDATE orders SET dollars = '99.99' WHERE id = 103",
    );
    let src = s.image("source.db");
    let r = s.apply("feed.jsonl", "source").expect(1);
    let statuses: Vec<String> = r.json()["deliveries"]
        .as_array()
        .expect("deliveries")
        .iter()
        .map(|d| d["status"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(statuses, ["rolled_back", "rolled_back", "rejected"], "{r}");
    s.assert_db_unchanged("source.db", &src, &r);
    assert!(applied_seqs(&s, "source.db").is_empty());
    // Set right, the feed applies whole.
    s.exec(
        "source.db",
        "UPDATE orders SET dollars = '20.00' WHERE id = 103",
    );
    s.apply("feed.jsonl", "source").expect(0);
    assert_eq!(applied_seqs(&s, "source.db").len(), 3);
    s.cutover_json(&["gate"]).expect(0);
}
