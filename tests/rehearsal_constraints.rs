//! The gate's rehearsal (`gate --inject-mismatch`, RUNBOOK A4) on a target
//! with the constraints of an ordinary schema: a second UNIQUE column
//! (`email`), CHECKs (`status IN (...)`, a bounded score, non-negative
//! cents), NOT NULL columns and a foreign key, on each engine as the
//! target. It exits 1 with every injected fault caught, never 2, and the
//! target is as it was afterwards, row for row. The rehearsal's own
//! contract on the running example is in `tests/commands.rs` and
//! `tests/exit_codes.rs`.

mod support;

use support::spec::{Spec, Table};
use support::{Dir, Layout, each_layout};

const SOURCE: &str = "
CREATE TABLE customers (id BIGINT PRIMARY KEY, email VARCHAR(100) NOT NULL,
    status VARCHAR(10) NOT NULL, score BIGINT NOT NULL);
CREATE TABLE orders (id BIGINT PRIMARY KEY, customer_id BIGINT NOT NULL,
    cents BIGINT NOT NULL);";

/// The target: `email` UNIQUE beside the key, `status` and `score`
/// checked, every column NOT NULL, `orders` referring to `customers`.
const TARGET: &str = "
CREATE TABLE customers (id BIGINT PRIMARY KEY, email VARCHAR(100) NOT NULL UNIQUE,
    status VARCHAR(10) NOT NULL CHECK (status IN ('active', 'closed')),
    score BIGINT NOT NULL CHECK (score BETWEEN 0 AND 10));
CREATE TABLE orders (id BIGINT PRIMARY KEY, customer_id BIGINT NOT NULL,
    cents BIGINT NOT NULL CHECK (cents >= 0),
    FOREIGN KEY (customer_id) REFERENCES customers (id));";

/// What the application wrote. The second customer's score is at its
/// CHECK's bound, so a nudged score is refused; every customer has an
/// order, so each is a parent.
const ROWS: &str = "
INSERT INTO customers (id, email, status, score) VALUES
    (1, 'ann@example.com', 'active', 3),
    (2, 'bob@example.com', 'closed', 10),
    (3, 'cy@example.com', 'active', 0);
INSERT INTO orders (id, customer_id, cents) VALUES (10, 1, 1250), (11, 2, 0), (12, 3, 99);";

fn spec(first: &str) -> Spec {
    let customers = Table::new("customers")
        .key(["id"])
        .copy("email")
        .copy("status")
        .copy("score");
    let orders = Table::new("orders")
        .key(["id"])
        .copy("customer_id")
        .copy("cents");
    match first {
        "customers" => Spec::new().table(customers).table(orders),
        _ => Spec::new().table(orders).table(customers),
    }
}

/// Loads the migration, rehearses with `first` the first table of the
/// spec (the one the faults go into), and checks the outcome.
fn rehearse(layout: Layout, name: &str, first: &str) {
    let d = Dir::on(layout, name);
    d.spec(&spec(first));
    d.create_db("source.db", SOURCE);
    d.create_db("target.db", TARGET);
    d.client("source.db", ROWS);
    d.run(&["load"], 0);
    d.run(&["gate"], 0);
    let source = d.image("source.db");
    let target = d.image("target.db");
    let json = d.json(&["gate", "--inject-mismatch"], 1);
    assert_eq!(json["injected"], 3, "{json:#}");
    assert_eq!(json["caught"], 3, "{json:#}");
    let kinds: Vec<&str> = json["faults"]
        .as_array()
        .expect("faults")
        .iter()
        .map(|f| {
            assert_eq!(f["table"], first, "{json:#}");
            f["kind"].as_str().unwrap_or_default()
        })
        .collect();
    assert_eq!(kinds, ["changed", "missing", "extra"], "{json:#}");
    d.assert_db_unchanged("target.db", &target, &"the rehearsal");
    d.assert_db_unchanged("source.db", &source, &"the rehearsal");
    d.run(&["gate"], 0);
}

fn the_rehearsal_respects_a_second_unique_column_checks_and_not_null(layout: Layout) {
    rehearse(layout, "rehearse-unique", "customers");
}
each_layout!(
    the_rehearsal_respects_a_second_unique_column_checks_and_not_null: [sqlite, sqlite_to_pg, pg_to_pg, sqlite_to_my, my_to_my]
);

fn the_rehearsal_in_a_child_table_respects_its_checks_and_foreign_key(layout: Layout) {
    rehearse(layout, "rehearse-child", "orders");
}
each_layout!(
    the_rehearsal_in_a_child_table_respects_its_checks_and_foreign_key: [sqlite, sqlite_to_pg, sqlite_to_my]
);

/// Drops the test's roles once its database is gone with them.
struct Role {
    name: String,
    db_url: String,
    admin: String,
}

impl Drop for Role {
    fn drop(&mut self) {
        if let Ok(mut c) = support::postgres::Client::connect(&self.db_url) {
            let _ = c.batch_execute(&format!("DROP OWNED BY {} CASCADE", self.name));
        }
        if let Ok(mut c) = support::postgres::Client::connect(&self.admin) {
            let _ = c.batch_execute(&format!("DROP ROLE IF EXISTS {}", self.name));
        }
    }
}

/// `url` with its user replaced by `user`.
fn as_user(url: &str, user: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL");
    let (_, host) = rest.split_once('@').expect("a URL with a user");
    format!("{scheme}://{user}@{host}")
}

/// A role that owns its tables but may not set `session_replication_role`
/// meets the foreign key as the application does (not DEFERRABLE, NO
/// ACTION): the rehearsal deletes a customer no order refers to, keeps the
/// UNIQUE email and the CHECKs, and exits 1 with every fault caught.
#[test]
fn the_rehearsal_as_a_plain_owner_takes_rows_a_foreign_key_that_is_not_deferrable_accepts() {
    let Some(db) = support::postgres::TestDb::new("rehearse_owner") else {
        return;
    };
    let owner = format!("owner_{}", db.name.trim_start_matches("cutover_t_"));
    let _role = Role {
        name: owner.clone(),
        db_url: db.url.clone(),
        admin: db.admin.clone(),
    };
    db.client()
        .batch_execute(&format!(
            "CREATE ROLE {owner} LOGIN;
             CREATE SCHEMA source AUTHORIZATION {owner};
             CREATE SCHEMA target AUTHORIZATION {owner};"
        ))
        .expect("the owner's role and schemas");
    let url = as_user(&db.url, &owner);
    let mut c = support::postgres::Client::connect(&url).expect("connecting as the owner");
    c.batch_execute(&format!(
        "SET search_path = source; {SOURCE}
         SET search_path = target; {TARGET}
         SET search_path = source; {ROWS}
         INSERT INTO customers (id, email, status, score) VALUES (4, 'di@example.com', 'closed', 5);"
    ))
    .expect("the tables and rows");
    let dir = tempfile::tempdir().expect("a temporary folder");
    let toml = spec("customers").render_with(&|name: &str| match name {
        "source.db" => format!("{url}?schema=source"),
        _ => format!("{url}?schema=target"),
    });
    std::fs::write(dir.path().join("spec.toml"), toml).expect("the spec");
    let run = |args: &[&str], code: i32| support::cutover_in(dir.path(), args).expect(code);
    run(&["load"], 0);
    run(&["gate"], 0);
    let image = |c: &mut support::postgres::Client| -> Vec<String> {
        [
            "source.customers",
            "source.orders",
            "target.customers",
            "target.orders",
        ]
        .iter()
        .map(|t| {
            c.query(
                &format!("SELECT coalesce(string_agg(x::text, ';' ORDER BY x.id), '') FROM {t} x"),
                &[],
            )
            .expect("an image")[0]
                .get(0)
        })
        .collect()
    };
    let before = image(&mut c);
    let out = support::cutover_in(
        dir.path(),
        &["--format", "json", "gate", "--inject-mismatch"],
    )
    .expect(1);
    let json = out.json();
    assert_eq!(json["injected"], 3, "{json:#}");
    assert_eq!(json["caught"], 3, "{json:#}");
    assert_eq!(json["faults"][1]["key"], serde_json::json!([4]), "{json:#}");
    assert_eq!(image(&mut c), before, "the rehearsal changed the databases");
    run(&["gate"], 0);
}
