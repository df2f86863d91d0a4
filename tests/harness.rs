//! The harness's own promises (tests/support/): the spec builder writes the
//! fixture specs as they are and quotes any name, and the engine seam dumps
//! and counts tables as the other files rely on. What the tool does with a
//! spec is the other files' business.

mod support;

use support::feed::{INVOICES_SPEC, invoices_table};
use support::{Column, Dir, ORDERS_SPEC, Spec, Table, int, text};

fn parsed(toml: &str) -> toml::Table {
    toml.parse()
        .unwrap_or_else(|e| panic!("not TOML ({e}):\n{toml}"))
}

#[test]
fn the_spec_builder_writes_the_running_example_as_the_fixture_has_it() {
    assert_eq!(parsed(&Spec::orders().render()), parsed(ORDERS_SPEC));
}

#[test]
fn the_spec_builder_writes_the_invoices_fixture_as_it_is() {
    let spec = Spec::new().table(invoices_table("invoices"));
    assert_eq!(parsed(&spec.render()), parsed(INVOICES_SPEC));
}

#[test]
fn the_spec_builder_writes_every_key_of_docs_spec_md() {
    let spec = Spec::new()
        .source_url("csv://snapshot.csv")
        .target("t.db")
        .table(
            Table::new("invoices")
                .source_table("Invoice")
                .target_table("invoices_v2")
                .key(["InvoiceId", "Line"])
                .ignore(["Legacy"])
                .currency("currency")
                .revision("rev")
                .on_change("update")
                .watermark("Updated")
                .lookback("2d")
                .rename("InvoiceId", "invoice_id")
                .copy("Line")
                .copy("Updated")
                .decimal("Total", "total_cents", 2)
                .map("Status", [("P", "paid"), ("O", "open")])
                .column(Column::new("rev").integer().min(1))
                .column(Column::new("Kind").values(["a", "b"]).pattern("^[ab]$"))
                .constant("currency", "USD")
                .target_default("created"),
        );
    let expected = r#"
        [source]
        url = "csv://snapshot.csv"
        [target]
        url = "sqlite://t.db"
        [[tables]]
        name = "invoices"
        source_table = "Invoice"
        target_table = "invoices_v2"
        key = ["InvoiceId", "Line"]
        ignore = ["Legacy"]
        currency = "currency"
        revision = "rev"
        on_change = "update"
        watermark = "Updated"
        lookback = "2d"
        [[tables.columns]]
        source = "InvoiceId"
        target = "invoice_id"
        [[tables.columns]]
        source = "Line"
        [[tables.columns]]
        source = "Updated"
        [[tables.columns]]
        source = "Total"
        target = "total_cents"
        transform = "decimal_to_minor"
        scale = 2
        [[tables.columns]]
        source = "Status"
        transform = "map"
        map = { P = "paid", O = "open" }
        [[tables.columns]]
        source = "rev"
        integer = true
        min = 1
        [[tables.columns]]
        source = "Kind"
        values = ["a", "b"]
        pattern = "^[ab]$"
        [[tables.columns]]
        target = "currency"
        value = "USD"
        [[tables.columns]]
        target = "created"
        default = true
    "#;
    assert_eq!(parsed(&spec.render()), parsed(expected));
}

#[test]
fn the_spec_builder_quotes_names_toml_would_misread() {
    let odd = "it's \"odd\" \\ \n\t\u{7f}\u{1}";
    let spec = Spec::new().table(Table::new(odd).key([odd]).column(Column::new(odd).map([
        (odd, "word"),
        ("Ä", "umlaut"),
        ("'", "q"),
    ])));
    let t = parsed(&spec.render());
    let table = &t["tables"].as_array().expect("tables")[0];
    assert_eq!(table["name"].as_str(), Some(odd));
    assert_eq!(table["key"][0].as_str(), Some(odd));
    let column = &table["columns"][0];
    assert_eq!(column["source"].as_str(), Some(odd));
    let map = column["map"].as_table().expect("a map");
    assert_eq!(map[odd].as_str(), Some("word"));
    assert_eq!(map["Ä"].as_str(), Some("umlaut"));
    assert_eq!(map["'"].as_str(), Some("q"));
}

#[test]
fn a_built_spec_names_the_folders_databases_and_passes_check() {
    let d = Dir::orders("built-spec");
    d.spec(&Spec::orders());
    d.run(&["check"], 0);
}

#[test]
fn dump_orders_by_the_primary_key_and_count_says_0_for_a_missing_table() {
    let d = Dir::new("dump-order");
    d.create_db(
        "x.db",
        "CREATE TABLE keyed (name TEXT, id INTEGER PRIMARY KEY);
         INSERT INTO keyed VALUES ('b', 2), ('a', 3), ('c', 1);
         CREATE TABLE heap (a, b);
         INSERT INTO heap VALUES (2, 'x'), (1, 'z'), (1, 'y');",
    );
    assert_eq!(
        d.dump("x.db", "keyed"),
        vec![
            vec![text("c"), int(1)],
            vec![text("b"), int(2)],
            vec![text("a"), int(3)],
        ]
    );
    assert_eq!(
        d.dump("x.db", "heap"),
        vec![
            vec![int(1), text("y")],
            vec![int(1), text("z")],
            vec![int(2), text("x")],
        ]
    );
    assert_eq!(d.count("x.db", "keyed"), 3);
    assert_eq!(d.count("x.db", "missing"), 0);
    assert!(d.has_table("x.db", "heap") && !d.has_table("x.db", "missing"));
}

#[test]
fn an_engine_named_in_cutover_require_engines_may_not_skip() {
    use support::required_engines;
    assert_eq!(required_engines(false, None), Vec::<&str>::new());
    assert_eq!(required_engines(false, Some("")), Vec::<&str>::new());
    assert_eq!(
        required_engines(false, Some("postgres, MySQL")),
        ["postgres", "mysql"]
    );
    assert_eq!(
        required_engines(true, None),
        ["sqlite", "postgres", "mysql"]
    );
    let typo = std::panic::catch_unwind(|| required_engines(false, Some("postgress")));
    assert!(
        typo.is_err(),
        "a name that is no engine must not pass quietly"
    );
}

#[test]
fn ci_requires_every_engine() {
    let run = std::fs::read_to_string(support::repo_path(".ci/run")).expect(".ci/run");
    let line = run
        .lines()
        .find_map(|l| l.strip_prefix("export CUTOVER_REQUIRE_ENGINES="))
        .expect(".ci/run exports CUTOVER_REQUIRE_ENGINES");
    assert_eq!(
        support::required_engines(false, Some(line)),
        ["sqlite", "postgres", "mysql"]
    );
}
