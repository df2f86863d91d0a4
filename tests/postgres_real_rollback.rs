//! The rollback into a PostgreSQL source shaped like a public sample schema
//! as it ships (fixtures/pg_rental): touch triggers, a trigger-kept
//! tsvector, an enum, partitions by inheritance routed by rules, sequences
//! feeding columns without being owned by them, and tables outside the spec
//! whose foreign keys cascade or set NULL. The application writes through
//! `psql` as a role with ordinary grants; cutover runs as a superuser, or
//! as the tables' plain owner. After replay every table of the source, in
//! the spec or not, and every sequence is compared with an oracle computed
//! here from the target's rows and the source as it was.
//!
//! Each test makes its own database and roles and drops them. Without a
//! server the tests say so and pass, except under CI (`CI` set).

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use support::postgres::{Client, TestDb};

const SOURCE_SQL: &str = include_str!("../fixtures/pg_rental/source.sql");
const TARGET_SQL: &str = include_str!("../fixtures/pg_rental/target.sql");
const SPEC: &str = include_str!("../fixtures/pg_rental/spec.toml");

/// Roles made for one test, dropped with it (before its database goes).
struct Roles {
    db_url: String,
    admin: String,
    names: Vec<String>,
}

impl Drop for Roles {
    fn drop(&mut self) {
        if let Ok(mut c) = Client::connect(&self.db_url) {
            for r in &self.names {
                let _ = c.batch_execute(&format!("DROP OWNED BY {r} CASCADE"));
            }
        }
        if let Ok(mut c) = Client::connect(&self.admin) {
            for r in &self.names {
                let _ = c.batch_execute(&format!("DROP ROLE IF EXISTS {r}"));
            }
        }
    }
}

/// The migration's folder, its database and roles.
struct Rental {
    dir: tempfile::TempDir,
    /// Dropped before the database, as its roles must be.
    #[allow(dead_code, reason = "held for its Drop")]
    roles: Roles,
    db: TestDb,
    /// The role the application writes as.
    app: String,
    /// The role cutover runs as.
    runner: String,
}

/// `url` with its user replaced by `user`.
fn as_user(url: &str, user: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL");
    let (_, host) = rest.split_once('@').expect("a URL with a user");
    format!("{scheme}://{user}@{host}")
}

impl Rental {
    /// The schemas, the application's role, and a spec for cutover running
    /// as `runner`: `None` for the superuser the tests connect as; `Some`
    /// to make a plain role of that name own both schemas' tables (or, for
    /// a name starting `writer`, the target's, with write grants on the
    /// source's).
    fn new(test: &str, runner: Option<&str>) -> Option<Rental> {
        Rental::with(test, runner, SOURCE_SQL, TARGET_SQL, SPEC)
    }

    /// The same for another pair of schemas and spec.
    fn with(
        test: &str,
        runner: Option<&str>,
        source_sql: &str,
        target_sql: &str,
        spec: &str,
    ) -> Option<Rental> {
        let db = TestDb::new(test)?;
        let suffix = db.name.trim_start_matches("cutover_t_").to_string();
        let app = format!("app_{suffix}");
        let mut roles = Roles {
            db_url: db.url.clone(),
            admin: db.admin.clone(),
            names: vec![app.clone()],
        };
        let mut c = db.client();
        c.batch_execute(&format!(
            "CREATE SCHEMA source; CREATE SCHEMA target; SET search_path = source;\n{source_sql}\nSET search_path = target;\n{target_sql}"
        ))
        .expect("the fixture schemas");
        c.batch_execute(&format!(
            "CREATE ROLE {app} LOGIN; GRANT USAGE ON SCHEMA target TO {app};
             GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA target TO {app};
             GRANT USAGE ON ALL SEQUENCES IN SCHEMA target TO {app};"
        ))
        .expect("the application's role");
        let me: String = c
            .query_one("SELECT current_user::text", &[])
            .expect("who the tests are")
            .get(0);
        let runner = match runner {
            None => me,
            Some(r) => {
                let r = format!("{r}_{suffix}");
                roles.names.push(r.clone());
                let owned: Vec<(String, String)> = c
                    .query(
                        "SELECT n.nspname::text, c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                         WHERE n.nspname IN ('source', 'target') AND (c.relkind = 'r' OR c.relkind = 'S'
                           AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = c.oid AND d.deptype IN ('a', 'i')))",
                        &[],
                    )
                    .expect("the source's relations")
                    .iter()
                    .map(|row| (row.get(0), row.get(1)))
                    .collect();
                let mut sql = format!(
                    "CREATE ROLE {r} LOGIN; GRANT ALL ON SCHEMA source, target TO {r};
                     GRANT ALL ON ALL TABLES IN SCHEMA target TO {r};
                     GRANT ALL ON ALL SEQUENCES IN SCHEMA target TO {r};
                     GRANT CREATE ON DATABASE {} TO {r};",
                    db.name
                );
                // A `writer` owns the target's tables but is only granted
                // writes on the source's.
                let writer = r.starts_with("writer");
                if writer {
                    sql.push_str(&format!(
                        "GRANT ALL ON ALL TABLES IN SCHEMA source TO {r};
                         GRANT ALL ON ALL SEQUENCES IN SCHEMA source TO {r};"
                    ));
                }
                for (schema, rel) in owned {
                    if !(writer && schema == "source") {
                        sql.push_str(&format!("ALTER TABLE {schema}.\"{rel}\" OWNER TO {r};"));
                    }
                }
                c.batch_execute(&sql).expect("the runner's role");
                r
            }
        };
        let url = as_user(&db.url, &runner);
        let spec = spec
            .replace("SOURCE_URL", &format!("{url}?schema=source"))
            .replace("TARGET_URL", &format!("{url}?schema=target"));
        let dir = tempfile::tempdir().expect("a temporary folder");
        std::fs::write(dir.path().join("spec.toml"), spec).expect("the spec");
        Some(Rental {
            dir,
            roles,
            db,
            app,
            runner,
        })
    }

    #[track_caller]
    fn run(&self, args: &[&str], code: i32) -> support::Output {
        let mut c = support::cutover_in(self.dir.path(), args);
        c.env("CUTOVER_BUSY_TIMEOUT_MS", "10000")
            .env("CUTOVER_LOCK_TIMEOUT_MS", "10000");
        let out = c.output();
        assert_eq!(
            out.code,
            Some(code),
            "cutover as {}: expected exit {code}\n{out}",
            self.runner
        );
        out
    }

    #[track_caller]
    fn json(&self, args: &[&str], code: i32) -> serde_json::Value {
        let mut all = vec!["--format", "json"];
        all.extend_from_slice(args);
        self.run(&all, code).json()
    }

    /// Runs `sql` on the target as the application: `psql`, its own role.
    #[track_caller]
    fn application(&self, sql: &str) {
        let out = self.psql_as_application(sql);
        assert!(
            out.status.success(),
            "the application's psql failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Runs `sql` as the application and returns what refused it.
    #[track_caller]
    fn application_refused(&self, sql: &str) -> String {
        let out = self.psql_as_application(sql);
        assert!(!out.status.success(), "the application wrote: {sql}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    fn psql_as_application(&self, sql: &str) -> Output {
        let url = as_user(&self.db.url, &self.app);
        let mut child = Command::new("psql")
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", &url])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting psql");
        use std::io::Write as _;
        child
            .stdin
            .take()
            .expect("psql's stdin")
            .write_all(format!("SET search_path = target;\n{sql}\n").as_bytes())
            .expect("writing to psql");
        child.wait_with_output().expect("running psql")
    }

    /// Every table of a schema, rows as text in a fixed order, each row
    /// with the table that physically holds it; and every sequence's next
    /// value.
    fn dump(&self, schema: &str) -> Dump {
        let mut c = self.db.client();
        let tables: Vec<String> = c
            .query(
                "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE n.nspname = $1 AND c.relkind = 'r' AND c.relname NOT LIKE '\\_cutover\\_%'
                 ORDER BY 1",
                &[&schema],
            )
            .expect("the schema's tables")
            .iter()
            .map(|r| r.get(0))
            .collect();
        let mut rows = BTreeMap::new();
        for t in tables {
            let sql = format!(
                "SELECT t::text FROM ONLY {schema}.\"{t}\" t ORDER BY t::text COLLATE \"C\""
            );
            let found: Vec<String> = c
                .query(sql.as_str(), &[])
                .expect("a table's rows")
                .iter()
                .map(|r| r.get(0))
                .collect();
            rows.insert(t, found);
        }
        let sequences: BTreeMap<String, i64> = c
            .query(
                "SELECT sequencename::text,
                        CASE WHEN last_value IS NULL THEN start_value ELSE last_value + 1 END
                 FROM pg_sequences WHERE schemaname = $1",
                &[&schema],
            )
            .expect("the schema's sequences")
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        Dump { rows, sequences }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The first column of each row `sql` returns, as text, in its order.
    fn texts(&self, sql: &str) -> Vec<String> {
        self.db
            .client()
            .query(sql, &[])
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .iter()
            .map(|row| row.get(0))
            .collect()
    }
}

#[derive(Debug, PartialEq, Eq, Clone)]
struct Dump {
    /// Table → its own rows (`ONLY`), as row text, sorted.
    rows: BTreeMap<String, Vec<String>>,
    /// Sequence → the value `nextval` would hand out next.
    sequences: BTreeMap<String, i64>,
}

/// The source as it must be after the rollback, computed here: every spec
/// table from the target's rows turned back into source form by SQL the
/// test writes (cents to NUMERIC, the rating to the enum, each payment in
/// the partition its date belongs to, the film's tsvector as PostgreSQL's
/// own trigger function makes it from the title and description), every
/// other table as it was before the switch, and each sequence past its
/// column's largest value.
fn oracle(r: &Rental, before: &Dump) -> Dump {
    let mut c = r.db.client();
    c.batch_execute(
        "DROP SCHEMA IF EXISTS oracle CASCADE; CREATE SCHEMA oracle;
         CREATE TABLE oracle.film_text (title text, description text, fulltext tsvector);
         CREATE TRIGGER t BEFORE INSERT ON oracle.film_text FOR EACH ROW
           EXECUTE FUNCTION tsvector_update_trigger(fulltext, 'pg_catalog.english', title, description);
         INSERT INTO oracle.film_text (title, description) SELECT title, description FROM target.film;",
    )
    .expect("the oracle's full-text rows");
    let mut query = |sql: &str| -> Vec<String> {
        let mut v: Vec<String> = c_rows(&mut c, sql);
        v.sort();
        v
    };
    fn c_rows(c: &mut Client, sql: &str) -> Vec<String> {
        c.query(sql, &[])
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .iter()
            .map(|r| r.get(0))
            .collect()
    }
    let mut rows = before.rows.clone();
    rows.insert(
        "customer".into(),
        query(
            "SELECT ROW(customer_id::integer, first_name, last_name, email::varchar(50), active, last_update)::text
             FROM target.customer",
        ),
    );
    rows.insert(
        "film".into(),
        query(
            "SELECT ROW(f.film_id::integer, f.title, f.description, f.rating,
                        (f.rental_cents / 100.0)::numeric(4,2), f.last_update,
                        (SELECT o.fulltext FROM oracle.film_text o
                         WHERE o.title = f.title AND o.description IS NOT DISTINCT FROM f.description LIMIT 1))::text
             FROM target.film f",
        ),
    );
    for (part, from, to) in [
        ("payment", "-infinity", "2007-01-01"),
        ("payment_p2007_01", "2007-01-01", "2007-02-01"),
        ("payment_p2007_02", "2007-02-01", "2007-03-01"),
    ] {
        rows.insert(
            part.into(),
            query(&format!(
                "SELECT ROW(payment_id::integer, customer_id::integer, (amount_cents / 100.0)::numeric(5,2), payment_date)::text
                 FROM target.payment WHERE payment_date >= '{from}' AND payment_date < '{to}'"
            )),
        );
    }
    for v in rows.values_mut() {
        v.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    }
    let mut sequences = before.sequences.clone();
    for (seq, table, col) in [
        ("customer_customer_id_seq", "customer", "customer_id"),
        ("film_film_id_seq", "film", "film_id"),
        ("payment_payment_id_seq", "payment", "payment_id"),
    ] {
        let max: i64 = c
            .query_one(
                format!("SELECT coalesce(max({col}), 0)::bigint FROM target.{table}").as_str(),
                &[],
            )
            .expect("a column's largest value")
            .get(0);
        let next = sequences.get(seq).copied().unwrap_or(1);
        sequences.insert(seq.into(), next.max(max + 1));
    }
    Dump { rows, sequences }
}

/// The application's writes after the switch: an update the target's touch
/// trigger stamps, new rows taking ids from the target's identities, a
/// renamed film (whose full text the source must recompute), a payment the
/// source's rules route into a partition, an update and a delete of rows
/// that live in partitions.
const WRITES: &str = "
BEGIN;
UPDATE customer SET email = 'mary@example.net' WHERE customer_id = 1;
INSERT INTO customer (first_name, last_name, email, active, last_update)
    VALUES ('Elizabeth', 'Brown', 'e.brown@example.org', true, '2026-12-01 10:00:00');
COMMIT;
INSERT INTO film (title, description, rating, rental_cents, last_update)
    VALUES ('Zorro Ark', 'A Intrepid Panorama of a Mad Scientist', 'PG-13', 499, '2026-12-01 10:00:00');
UPDATE film SET title = 'Academy Dinosaur II', rental_cents = 199 WHERE film_id = 1;
INSERT INTO payment (customer_id, amount_cents, payment_date) VALUES (5, 350, '2007-02-20 10:00:00');
UPDATE payment SET amount_cents = 399 WHERE payment_id = 1;
DELETE FROM payment WHERE payment_id = 4;
";

fn decision<'a>(check: &'a serde_json::Value, table: &str, name: &str) -> &'a str {
    check["side_effects"]["decided"]
        .as_array()
        .expect("the side effects")
        .iter()
        .find(|d| d["table"] == table && d["name"] == name)
        .unwrap_or_else(|| panic!("no side effect {name} on {table}: {check}"))["decision"]
        .as_str()
        .expect("a decision")
}

#[test]
fn the_whole_runbook_on_a_sample_shaped_postgres_source_rolls_back_exactly() {
    let Some(r) = Rental::new("pg_real_runbook", None) else {
        return;
    };
    let check = r.json(&["check"], 0);
    assert_eq!(decision(&check, "customer", "last_updated"), "suppress");
    assert_eq!(decision(&check, "film", "last_updated"), "suppress");
    assert_eq!(decision(&check, "film", "film_fulltext_trigger"), "fire");
    assert_eq!(
        decision(&check, "payment", "payment_insert_p2007_01"),
        "fire"
    );
    assert_eq!(
        decision(&check, "customer", "rental_customer_id_fkey"),
        "suppress"
    );
    assert_eq!(
        decision(&check, "customer", "customer_note_customer_id_fkey"),
        "suppress"
    );
    r.run(&["load"], 0);
    r.run(&["gate"], 0);
    r.run(&["gate", "--inject-mismatch"], 1);
    r.run(&["journal", "install"], 0);
    let before = r.dump("source");
    r.application(WRITES);
    r.run(&["fence", "on"], 0);
    r.run(&["replay", "--dry-run"], 0);
    assert_eq!(
        r.dump("source"),
        before,
        "a dry run changed the source (rows or sequences)"
    );
    let rep = r.json(&["replay"], 0);
    assert_eq!(rep["applied"], 7, "{rep}");
    let want = oracle(&r, &before);
    let got = r.dump("source");
    assert_eq!(
        got.rows, want.rows,
        "the source's tables after the rollback"
    );
    // Nothing of the hold on the source's triggers outlives the replay.
    let states: Vec<String> = r.texts(
        "SELECT tgname::text || ':' || tgenabled::text FROM pg_trigger t
             JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = 'source' AND NOT tgisinternal
             UNION ALL
             SELECT rulename::text || ':' || ev_enabled::text FROM pg_rewrite r
             JOIN pg_class c ON c.oid = r.ev_class JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = 'source' AND rulename <> '_RETURN' ORDER BY 1",
    );
    assert!(states.iter().all(|s| s.ends_with(":O")), "{states:?}");
    let again = r.json(&["replay"], 0);
    assert_eq!(again["applied"], 0, "{again}");
    assert_eq!(r.dump("source"), got, "a second replay changed the source");
    r.run(&["status"], 0);
    r.run(&["fence", "off"], 0);
    r.run(&["journal", "remove"], 0);
    r.run(&["status"], 0);
}

#[test]
fn a_deleted_customer_does_not_cascade_in_the_source_and_its_orphans_are_reported() {
    let Some(r) = Rental::new("pg_real_cascade", None) else {
        return;
    };
    r.run(&["load"], 0);
    r.run(&["journal", "install"], 0);
    let before = r.dump("source");
    // Customer 4 has a note (ON DELETE SET NULL) and no payments; customer
    // 3's rental cascades on the source (ON DELETE CASCADE).
    r.application(
        "DELETE FROM payment WHERE customer_id = 3; DELETE FROM customer WHERE customer_id IN (3, 4);",
    );
    r.run(&["fence", "on"], 0);
    let rep = r.json(&["replay"], 1);
    let orphans: Vec<String> = rep["foreign_keys"]
        .as_array()
        .expect("the foreign keys the replay left broken")
        .iter()
        .map(|v| v.as_str().unwrap_or_default().to_string())
        .collect();
    assert!(
        orphans
            .iter()
            .any(|o| o.contains("'rental'") && o.contains("'customer'")),
        "{orphans:?}"
    );
    assert!(
        orphans
            .iter()
            .any(|o| o.contains("'customer_note'") && o.contains("'customer'")),
        "{orphans:?}"
    );
    // The replay would leave orphans: rolled back whole, nothing changed.
    assert_eq!(r.dump("source").rows, before.rows, "a failed replay wrote");
    // Accepted, the journal's rows are gone; nothing else changed.
    r.json(&["replay", "--accept-findings"], 0);
    let after = r.dump("source");
    assert_eq!(after.rows["rental"], before.rows["rental"], "a cascade ran");
    assert_eq!(
        after.rows["customer_note"], before.rows["customer_note"],
        "SET NULL ran"
    );
    assert_eq!(
        after.rows["customer"].len(),
        before.rows["customer"].len() - 2
    );
    assert_eq!(r.dump("source").rows, oracle(&r, &before).rows);
}

impl Rental {
    /// Gives the spec's table `name` a `replay_policy` line.
    fn policy(&self, table: &str, line: &str) {
        let path = self.path().join("spec.toml");
        let spec = std::fs::read_to_string(&path).expect("the spec");
        let at = format!("name = \"{table}\"\n");
        let spec = spec.replacen(&at, &format!("{at}replay_policy = {{ {line} }}\n"), 1);
        std::fs::write(path, spec).expect("the spec");
    }
}

#[test]
fn a_value_the_source_column_cannot_hold_is_a_conflict_the_dry_run_lists() {
    let Some(r) = Rental::new("pg_real_overflow", None) else {
        return;
    };
    r.run(&["load"], 0);
    r.run(&["journal", "install"], 0);
    // The target's email is text; the source's is varchar(50).
    let long = format!("{}@example.org", "x".repeat(60));
    r.application(&format!(
        "UPDATE customer SET email = '{long}' WHERE customer_id = 2;
         UPDATE customer SET email = 'fine@example.org' WHERE customer_id = 1;"
    ));
    r.run(&["fence", "on"], 0);
    let before = r.dump("source");
    let dry = r.json(&["replay", "--dry-run"], 1);
    let conflicts = dry["conflicts"].as_array().expect("the conflicts");
    assert_eq!(conflicts.len(), 1, "{dry}");
    assert_eq!(conflicts[0]["table"], "customer");
    assert_eq!(conflicts[0]["key"], serde_json::json!([2]));
    // Found before the write, naming the source column's type and limit.
    let reason = conflicts[0]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("character varying(50)") && reason.contains("longer than 50"),
        "{dry}"
    );
    assert_eq!(r.dump("source"), before, "the dry run wrote");
    let rep = r.json(&["replay"], 1);
    assert_eq!(rep["conflict"]["key"], serde_json::json!([2]), "{rep}");
    assert!(
        !rep.to_string().contains("\"\":"),
        "a stray empty field: {rep}"
    );
}

#[test]
fn a_write_a_source_trigger_swallows_is_named_by_that_trigger() {
    let Some(r) = Rental::new("pg_real_swallow", None) else {
        return;
    };
    r.db.client()
        .batch_execute(
            "CREATE FUNCTION source.skip_ignored() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN IF NEW.last_name = 'Ignored' THEN RETURN NULL; END IF; RETURN NEW; END $$;
             CREATE TRIGGER skip_ignored BEFORE INSERT ON source.customer
               FOR EACH ROW EXECUTE FUNCTION source.skip_ignored();",
        )
        .expect("a swallowing trigger");
    r.policy("customer", "skip_ignored = \"fire\"");
    let check = r.json(&["check"], 0);
    assert_eq!(decision(&check, "customer", "skip_ignored"), "fire");
    r.run(&["load"], 0);
    r.run(&["journal", "install"], 0);
    r.application(
        "INSERT INTO customer (first_name, last_name, active, last_update)
         VALUES ('Nobody', 'Ignored', true, '2026-12-01 10:00:00');",
    );
    r.run(&["fence", "on"], 0);
    let out = r.run(&["replay"], 1);
    let text = &out.stdout;
    assert!(text.contains("changed no row"), "{text}");
    assert!(text.contains("trigger 'skip_ignored'"), "{text}");
    assert!(!text.contains("RAISE(IGNORE)"), "{text}");
}

#[test]
fn a_trigger_the_spec_lets_fire_is_named_as_the_cause_of_what_differs() {
    let Some(r) = Rental::new("pg_real_cause", None) else {
        return;
    };
    r.policy("customer", "last_updated = \"fire\"");
    r.run(&["load"], 0);
    r.run(&["journal", "install"], 0);
    r.application("UPDATE customer SET email = 'cause@example.org' WHERE customer_id = 3;");
    r.run(&["fence", "on"], 0);
    let rep = r.json(&["replay"], 1);
    let causes = rep["causes"].to_string();
    assert!(
        causes.contains("last_updated") && causes.contains("last_update"),
        "{rep}"
    );
    assert_eq!(rep["reconciliation"]["tables"][0]["changed"], 1, "{rep}");
}

const SWAP_SOURCE: &str = "
CREATE TABLE parent (id integer PRIMARY KEY, name text NOT NULL);
CREATE TABLE child (id integer PRIMARY KEY, parent_id integer NOT NULL REFERENCES parent);
INSERT INTO parent VALUES (1, 'one'), (2, 'two'), (3, 'three');
INSERT INTO child VALUES (10, 3);
";
const SWAP_TARGET: &str = "
CREATE TABLE parent (id bigint PRIMARY KEY DEFERRABLE INITIALLY DEFERRED,
                     name text NOT NULL UNIQUE DEFERRABLE INITIALLY DEFERRED);
";
const SWAP_SPEC: &str = "
[source]
url = \"SOURCE_URL\"
[target]
url = \"TARGET_URL\"
[[tables]]
name = \"parent\"
key = [\"id\"]
source_limit = { id = \"watch\" }
[[tables.columns]]
source = \"name\"
";

/// Keys swapped in one `UPDATE` under a deferrable key, names swapped under
/// a deferrable UNIQUE, and a row other rows refer to deleted and inserted
/// again in one transaction: on a source whose key, UNIQUE and foreign key
/// are checked statement by statement, replay writes each record's net
/// effect, as plain or owner role.
fn swaps_and_reinserts_roll_back(runner: Option<&str>) {
    let Some(r) = Rental::with("pg_real_swap", runner, SWAP_SOURCE, SWAP_TARGET, SWAP_SPEC) else {
        return;
    };
    r.run(&["load"], 0);
    r.run(&["journal", "install"], 0);
    r.application(
        "UPDATE parent SET id = 3 - id WHERE id IN (1, 2);
         BEGIN; DELETE FROM parent WHERE id = 3; INSERT INTO parent VALUES (3, 'three again'); COMMIT;",
    );
    r.run(&["fence", "on"], 0);
    let before = r.dump("source");
    r.run(&["replay", "--dry-run"], 0);
    assert_eq!(r.dump("source"), before, "the dry run wrote");
    let rep = r.json(&["replay"], 0);
    assert_eq!(
        rep["applied"].as_u64().unwrap_or(0) + rep["already_in_place"].as_u64().unwrap_or(0),
        4,
        "{rep}"
    );
    let after = r.dump("source");
    assert_eq!(
        after.rows["parent"],
        vec!["(1,two)", "(2,one)", "(3,\"three again\")"],
        "{after:?}"
    );
    assert_eq!(after.rows["child"], before.rows["child"]);
}

#[test]
fn swapped_keys_and_a_reinserted_parent_roll_back_as_superuser() {
    swaps_and_reinserts_roll_back(None);
}

#[test]
fn names_swapped_under_a_unique_the_source_checks_at_once_are_a_conflict_naming_it() {
    let source = SWAP_SOURCE.replace("name text NOT NULL)", "name text NOT NULL UNIQUE)");
    let Some(r) = Rental::with("pg_real_unique", None, &source, SWAP_TARGET, SWAP_SPEC) else {
        return;
    };
    r.run(&["load"], 0);
    r.run(&["journal", "install"], 0);
    r.application(
        "UPDATE parent SET name = CASE name WHEN 'one' THEN 'two' ELSE 'one' END WHERE id IN (1, 2);",
    );
    r.run(&["fence", "on"], 0);
    let before = r.dump("source");
    let dry = r.json(&["replay", "--dry-run"], 1);
    assert!(
        dry["conflicts"].to_string().contains("parent_name_key"),
        "{dry}"
    );
    assert_eq!(r.dump("source"), before, "the dry run wrote");
}

/// The SQLite source's tables as text rows, sorted (the oracle's form).
fn sqlite_rows(path: &Path, sql: &str) -> Vec<String> {
    let c = rusqlite::Connection::open(path).expect("the SQLite source");
    let mut st = c.prepare(sql).expect("a query of the source");
    let mut v: Vec<String> = st
        .query_map([], |r| r.get::<_, String>(0))
        .expect("the source's rows")
        .collect::<Result<_, _>>()
        .expect("the source's rows");
    v.sort();
    v
}

#[test]
fn the_whole_runbook_from_sqlite_into_a_sample_shaped_postgres_target_rolls_back_exactly() {
    let Some(r) = Rental::with(
        "pg_real_from_sqlite",
        None,
        "",
        include_str!("../fixtures/pg_rental/target_rich.sql"),
        include_str!("../fixtures/pg_rental/spec_sqlite.toml"),
    ) else {
        return;
    };
    let spec_path = r.path().join("spec.toml");
    let spec = std::fs::read_to_string(&spec_path).expect("the spec");
    let source_url = spec
        .lines()
        .find(|l| l.starts_with("url") && l.contains("schema=source"))
        .expect("the source's url")
        .to_string();
    std::fs::write(
        &spec_path,
        spec.replacen(&source_url, "url = \"sqlite://source.db\"", 1),
    )
    .expect("the spec");
    let source = r.path().join("source.db");
    rusqlite::Connection::open(&source)
        .and_then(|c| c.execute_batch(include_str!("../fixtures/pg_rental/source.sqlite.sql")))
        .expect("the SQLite source");
    r.db.client()
        .batch_execute(&format!(
            "GRANT USAGE ON ALL SEQUENCES IN SCHEMA target TO {}",
            r.app
        ))
        .expect("the application's grants");
    r.db.client()
        .batch_execute(&format!(
            "GRANT TRUNCATE ON target.payment_p2007_03 TO {}",
            r.app
        ))
        .expect("the application's grants");
    r.run(&["check"], 0);
    r.run(&["load"], 0);
    // Load writes as the application would: the rules route January's
    // payments (1 and 4) into their month's table.
    assert_eq!(
        r.texts("SELECT string_agg(payment_id::text, ',' ORDER BY payment_id) FROM ONLY target.payment_p2007_01"),
        ["1,4"]
    );
    r.run(&["gate"], 0);
    r.run(&["gate", "--inject-mismatch"], 1);
    r.run(&["journal", "install"], 0);
    r.application(
        "UPDATE customer SET email = 'mary@example.net' WHERE customer_id = 1;
         INSERT INTO customer (first_name, last_name, email, active, last_update)
             VALUES ('Elizabeth', 'Brown', NULL, true, '2026-12-01 10:00:00');
         INSERT INTO film (title, description, rating, rental_cents, last_update)
             VALUES ('Zorro Ark', 'A Intrepid Panorama', 'PG-13', 499, '2026-12-01 10:00:00');
         UPDATE film SET title = 'Academy Dinosaur II' WHERE film_id = 1;
         DELETE FROM customer WHERE customer_id = 2;
         INSERT INTO payment (customer_id, amount_cents, payment_date) VALUES (5, 350, '2007-02-20 10:00:00');
         UPDATE payment SET amount_cents = 300 WHERE payment_id = 1;
         DELETE FROM payment WHERE payment_id = 4;
         INSERT INTO payment (customer_id, amount_cents, payment_date) VALUES (3, 125, '2007-01-30 08:00:00');
         INSERT INTO payment_p2007_01 (payment_id, customer_id, amount_cents, payment_date)
             VALUES (100, 1, 725, '2007-01-31 08:00:00');
         INSERT INTO payment (customer_id, amount_cents, payment_date) VALUES (1, 990, '2007-03-02 08:00:00');
         INSERT INTO payment_p2007_03 (payment_id, customer_id, amount_cents, payment_date)
             VALUES (101, 3, 10, '2007-03-03 08:00:00');",
    );
    r.application("TRUNCATE payment_p2007_03;");
    r.application(
        "INSERT INTO payment (customer_id, amount_cents, payment_date) VALUES (3, 45, '2007-03-04 08:00:00');",
    );
    // Every change went somewhere the journal saw: in a month's table or
    // in the payments' own.
    assert_eq!(
        r.texts("SELECT count(*)::text FROM ONLY target.payment_p2007_01")
            .into_iter()
            .chain(r.texts("SELECT count(*)::text FROM ONLY target.payment_p2007_03"))
            .collect::<Vec<_>>(),
        ["3", "1"]
    );
    r.run(&["fence", "on"], 0);
    let before = std::fs::read(&source).expect("the source file");
    r.run(&["replay", "--dry-run"], 0);
    assert_eq!(
        std::fs::read(&source).expect("the source file"),
        before,
        "the dry run wrote"
    );
    r.run(&["replay"], 0);
    // The oracle: the target's rows in source form, by SQL written here,
    // as JSON arrays both databases print alike (no space after a comma).
    for (mine, theirs) in [
        (
            "SELECT json_array(customer_id, first_name, last_name, email, active, last_update) FROM customer",
            "SELECT json_build_array(customer_id, first_name, last_name, email, active::int, last_update::text)::text FROM target.customer",
        ),
        (
            "SELECT json_array(film_id, title, description, rating, rental_rate) FROM film",
            "SELECT json_build_array(film_id, title, description, rating, to_char(rental_cents / 100.0, 'FM9990.00'))::text FROM target.film",
        ),
        (
            "SELECT json_array(payment_id, customer_id, amount) FROM payment",
            "SELECT json_build_array(payment_id, customer_id, to_char(amount_cents / 100.0, 'FM9990.00'))::text FROM target.payment",
        ),
    ] {
        let mut want: Vec<String> = r
            .texts(theirs)
            .into_iter()
            .map(|s| s.replace(", ", ","))
            .collect();
        want.sort();
        assert_eq!(sqlite_rows(&source, mine), want, "{mine}");
    }
    r.run(&["replay"], 0);
    r.run(&["status"], 0);
    r.run(&["fence", "off"], 0);
    r.run(&["journal", "remove"], 0);
    r.run(&["status"], 0);
}

#[test]
fn a_plain_owner_is_refused_before_writing_when_an_entry_would_cascade() {
    let Some(r) = Rental::new("pg_real_owner", Some("owner")) else {
        return;
    };
    let check = r.run(&["check"], 0);
    let text = &check.stdout;
    assert!(text.contains("CANNOT HOLD"), "{text}");
    r.run(&["load"], 0);
    r.run(&["journal", "install"], 0);
    r.application("UPDATE customer SET email = 'x@example.org' WHERE customer_id = 2;");
    r.run(&["fence", "on"], 0);
    // An owner holds the triggers (in its own transactions): no cascade in
    // the way, the replay is exact.
    let before = r.dump("source");
    r.run(&["replay", "--dry-run"], 0);
    assert_eq!(r.dump("source"), before);
    r.run(&["replay"], 0);
    assert_eq!(r.dump("source").rows, oracle(&r, &before).rows);
    r.run(&["fence", "off"], 0);

    // Now an entry that would cascade into rental: refused before writing.
    let r = Rental::new("pg_real_owner_cascade", Some("owner")).expect("a server");
    r.run(&["load"], 0);
    r.run(&["journal", "install"], 0);
    r.application(
        "UPDATE customer SET email = 'y@example.org' WHERE customer_id = 2;
         DELETE FROM payment WHERE customer_id = 1; DELETE FROM customer WHERE customer_id = 1;",
    );
    r.run(&["fence", "on"], 0);
    let before = r.dump("source");
    let dry = r.json(&["replay", "--dry-run"], 1);
    assert!(dry["conflicts"].to_string().contains("rental"), "{dry}");
    let rep = r.json(&["replay"], 1);
    let refused = rep["refused"].to_string();
    assert!(refused.contains("rental_customer_id_fkey"), "{rep}");
    assert_eq!(r.dump("source"), before, "a refused replay wrote");
    assert_eq!(rep["applied"], 0);
}

#[test]
fn swapped_keys_and_a_reinserted_parent_roll_back_as_a_plain_owner() {
    swaps_and_reinserts_roll_back(Some("owner"));
}

#[test]
fn a_target_rule_that_sends_writes_outside_the_table_is_refused_by_journal_install() {
    let target = "
        CREATE TABLE parent (id bigint PRIMARY KEY, name text NOT NULL);
        CREATE TABLE parent_inbox (id bigint, name text);
        CREATE RULE parent_route AS ON INSERT TO parent WHERE (id > 100)
            DO INSTEAD INSERT INTO parent_inbox VALUES (NEW.*);";
    let Some(r) = Rental::with("pg_real_inherits", None, SWAP_SOURCE, target, SWAP_SPEC) else {
        return;
    };
    r.run(&["load"], 0);
    let out = r.run(&["journal", "install"], 2);
    let err = &out.stderr;
    assert!(
        err.contains("parent_route") && err.contains("parent_inbox"),
        "{err}"
    );
    let triggers: i64 =
        r.db.client()
            .query_one(
                "SELECT count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
             JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = 'target' AND NOT t.tgisinternal",
                &[],
            )
            .expect("the target's triggers")
            .get(0);
    assert_eq!(triggers, 0, "a refused install left triggers behind");
}

/// A TRUNCATE of a parent empties its inheritance children too, firing
/// each one's trigger: every row is journaled once, and a child added after
/// `journal install` is named as unjournaled until it is run again.
#[test]
fn a_truncated_inheritance_parent_journals_each_row_once_and_a_new_child_is_named() {
    let target = "
        CREATE TABLE parent (id bigint PRIMARY KEY, name text NOT NULL);
        CREATE TABLE parent_high (CHECK (id > 2)) INHERITS (parent);
        CREATE RULE parent_route AS ON INSERT TO parent WHERE (id > 2)
            DO INSTEAD INSERT INTO parent_high VALUES (NEW.*);";
    let Some(r) = Rental::with("pg_real_truncate", None, SWAP_SOURCE, target, SWAP_SPEC) else {
        return;
    };
    r.db.client()
        .batch_execute(&format!(
            "GRANT TRUNCATE ON target.parent, target.parent_high TO {}",
            r.app
        ))
        .expect("the application's grants");
    r.run(&["load"], 0);
    assert_eq!(
        r.texts("SELECT count(*)::text FROM ONLY target.parent_high"),
        ["1"]
    );
    r.run(&["journal", "install"], 0);
    r.application("INSERT INTO parent VALUES (4, 'four');");
    r.application("TRUNCATE parent;");
    r.application("INSERT INTO parent VALUES (5, 'five'), (1, 'one again'), (3, 'three');");
    let journal = r.json(&["journal", "status"], 0);
    let parent = &journal["tables"][0];
    assert_eq!(
        (parent["insert"].as_i64(), parent["delete"].as_i64()),
        (Some(4), Some(4)),
        "{journal}"
    );
    r.db.client()
        .batch_execute("CREATE TABLE target.parent_later () INHERITS (target.parent)")
        .expect("a new child");
    let journal = r.json(&["journal", "status"], 0);
    let stale = journal["tables"][0]["stale"].to_string();
    assert!(stale.contains("on parent_later (missing)"), "{journal}");
    let out = r.run(&["status"], 1);
    let text = &out.stdout;
    assert!(text.contains("parent_later"), "{text}");
    r.run(&["journal", "install"], 0);
    let journal = r.json(&["journal", "status"], 0);
    assert_eq!(
        journal["tables"][0]["stale"],
        serde_json::json!([]),
        "{journal}"
    );
    r.run(&["status"], 0);
    r.db.client()
        .batch_execute("DROP TABLE target.parent_later")
        .expect("the new child gone");
    r.run(&["fence", "on"], 0);
    // The fence stands on the child too, however the write reaches it.
    for write in [
        "INSERT INTO parent VALUES (6, 'six');",
        "INSERT INTO parent_high VALUES (7, 'seven');",
        "UPDATE parent SET name = 'FIVE' WHERE id = 5;",
        "DELETE FROM parent_high WHERE id = 3;",
        "TRUNCATE parent_high;",
    ] {
        let refused = r.application_refused(write);
        // Refused by the table's own fence, not only by the journal's.
        assert!(
            refused.contains("cutover fence: table parent is read-only"),
            "{write}: {refused}"
        );
    }
    r.run(&["fence", "status"], 0);
    r.run(&["replay"], 0);
    // The oracle: the source holds what the application left.
    assert_eq!(
        r.texts("SELECT string_agg(id || ':' || name, ',' ORDER BY id) FROM source.parent"),
        ["1:one again,3:three,5:five"]
    );
}

#[test]
fn a_role_that_cannot_switch_the_source_triggers_off_fails_check_and_replay_writes_nothing() {
    let Some(r) = Rental::new("pg_real_writer", Some("writer")) else {
        return;
    };
    let check = r.run(&["check"], 1);
    let text = &check.stdout;
    assert!(
        text.contains("CANNOT HOLD") && text.contains("'last_updated'"),
        "{text}"
    );
    r.run(&["load"], 0);
    r.run(&["journal", "install"], 0);
    r.application("UPDATE customer SET email = 'w@example.org' WHERE customer_id = 2;");
    r.run(&["fence", "on"], 0);
    let before = r.dump("source");
    for args in [&["replay", "--dry-run"][..], &["replay"][..]] {
        let out = r.run(args, 2);
        let err = &out.stderr;
        assert!(
            err.contains("last_updated") && err.contains("wrote nothing"),
            "{err}"
        );
        assert_eq!(r.dump("source"), before, "{args:?} wrote");
    }
}

/// A flag of 1/0 (a boolean) and a status number mapped to words: the
/// rollback writes the source's own types back.
#[test]
fn integer_and_boolean_codes_map_to_words_and_back() {
    let source = "
        CREATE TABLE account (id integer PRIMARY KEY, active boolean NOT NULL, tier smallint NOT NULL);
        INSERT INTO account VALUES (1, true, 1), (2, false, 2), (3, true, 3);";
    let target =
        "CREATE TABLE account (id bigint PRIMARY KEY, active text NOT NULL, tier text NOT NULL);";
    let spec = "
[source]
url = \"SOURCE_URL\"
[target]
url = \"TARGET_URL\"
[[tables]]
name = \"account\"
key = [\"id\"]
source_limit = { id = \"watch\" }
[[tables.columns]]
source = \"active\"
transform = \"map\"
codes = \"integer\"
map = { 1 = \"active\", 0 = \"inactive\" }
[[tables.columns]]
source = \"tier\"
transform = \"map\"
codes = \"integer\"
map = { 1 = \"bronze\", 2 = \"silver\", 3 = \"gold\" }
";
    let Some(r) = Rental::with("pg_real_codes", None, source, target, spec) else {
        return;
    };
    r.run(&["check"], 0);
    r.run(&["load"], 0);
    r.run(&["gate"], 0);
    let loaded: Vec<String> =
        r.texts("SELECT ROW(id, active, tier)::text FROM target.account ORDER BY id");
    assert_eq!(
        loaded,
        [
            "(1,active,bronze)",
            "(2,inactive,silver)",
            "(3,active,gold)"
        ]
    );
    r.run(&["journal", "install"], 0);
    r.application(
        "UPDATE account SET active = 'active', tier = 'gold' WHERE id = 2;
         INSERT INTO account VALUES (4, 'inactive', 'bronze');",
    );
    r.run(&["fence", "on"], 0);
    r.run(&["replay"], 0);
    let back: Vec<String> =
        r.texts("SELECT ROW(id, active, tier)::text FROM source.account ORDER BY id");
    assert_eq!(back, ["(1,t,1)", "(2,t,3)", "(3,t,3)", "(4,f,1)"]);
}

/// A table with the column types real PostgreSQL schemas carry beyond
/// numbers, text and times: arrays of several element types, a tsvector,
/// json and jsonb, a uuid, an interval, an inet, a domain, a composite and
/// money.
/// Each is carried by its text form, exactly: load, gate, the application's
/// writes, replay, and the source equal to the target column for column.
#[test]
fn every_other_column_type_goes_through_the_runbook_exactly() {
    let ddl = "
        CREATE DOMAIN positive_int AS integer CHECK (VALUE > 0);
        CREATE TYPE money_pair AS (amount numeric(10,2), currency char(3));
        CREATE TABLE kinds (
            id integer PRIMARY KEY,
            tags text[], counts integer[], grid numeric(6,2)[][],
            doc tsvector, j json, jb jsonb, u uuid, span interval, addr inet,
            qty positive_int, price money_pair, cash money
        );";
    let rows = "
        INSERT INTO kinds VALUES
          (1, '{a,\"b c\",NULL}', '{1,2,3}', '{{1.50,2.00},{3.25,4.00}}',
           'a fat cat', '{\"b\": 1,  \"a\": [1, 2]}', '{\"b\": 1, \"a\": [1, 2]}',
           'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '1 year 2 mons 3 days 04:05:06.5', '192.168.0.1/24',
           7, '(12.50,EUR)', '1234.56'),
          (2, '{}', NULL, NULL, '', 'null', '[]', NULL, '-1 days', '::1', 1, '(,)', NULL);";
    let spec = "
[source]
url = \"SOURCE_URL\"
[target]
url = \"TARGET_URL\"
[[tables]]
name = \"kinds\"
key = [\"id\"]
[[tables.columns]]
source = \"tags\"
[[tables.columns]]
source = \"counts\"
[[tables.columns]]
source = \"grid\"
[[tables.columns]]
source = \"doc\"
[[tables.columns]]
source = \"j\"
[[tables.columns]]
source = \"jb\"
[[tables.columns]]
source = \"u\"
[[tables.columns]]
source = \"span\"
[[tables.columns]]
source = \"addr\"
[[tables.columns]]
source = \"qty\"
[[tables.columns]]
source = \"price\"
[[tables.columns]]
source = \"cash\"
";
    let Some(r) = Rental::with("pg_real_kinds", None, &format!("{ddl}{rows}"), ddl, spec) else {
        return;
    };
    r.run(&["check"], 0);
    r.run(&["load"], 0);
    r.run(&["gate"], 0);
    r.run(&["gate", "--inject-mismatch"], 1);
    r.db.client()
        .batch_execute(&format!(
            "GRANT USAGE ON TYPE target.positive_int, target.money_pair TO {}",
            r.app
        ))
        .expect("the application's grants");
    r.run(&["journal", "install"], 0);
    r.application(
        "UPDATE kinds SET tags = tags || '{z}', jb = jb || '{\"c\": true}', span = span * 2,
                          price = '(13.00,USD)', cash = '-2.50' WHERE id = 1;
         INSERT INTO kinds VALUES (3, '{\"x,y\"}', '{0}', '{{0.01}}', 'new words', '{}', '{\"k\": \"v\"}',
             'b0eebc99-9c0b-4ef8-bb6d-6bb9bd380a12', '00:00:01', '10.0.0.0/8', 3, '(0.00,GBP)', '0.01');
         DELETE FROM kinds WHERE id = 2;",
    );
    r.run(&["fence", "on"], 0);
    r.run(&["replay", "--dry-run"], 0);
    r.run(&["replay"], 0);
    let text = |schema: &str| -> Vec<String> {
        r.texts(&format!("SELECT k::text FROM {schema}.kinds k ORDER BY id"))
    };
    assert_eq!(text("source"), text("target"));
    assert_eq!(text("source").len(), 2);
}

/// Generated columns are computed by their own database: a target's is
/// never written (named as generated when mapped); a source's mapped to a
/// plain target column is read, carried, compared, and on replay left to
/// the source to compute. As a key it is refused, named as generated.
#[test]
fn generated_columns_are_left_to_their_database_and_named_when_mapped() {
    let source = "
        CREATE TABLE person (id integer PRIMARY KEY, first text NOT NULL, last text NOT NULL,
                             initials text GENERATED ALWAYS AS (left(first, 1) || left(last, 1)) STORED);
        INSERT INTO person (id, first, last) VALUES (1, 'Ada', 'Lovelace'), (2, 'Alan', 'Turing');";
    let target = "
        CREATE TABLE person (id bigint PRIMARY KEY, first text NOT NULL, last text NOT NULL,
                             initials text NOT NULL,
                             label text GENERATED ALWAYS AS (first || ' ' || last) STORED);";
    let spec = "
[source]
url = \"SOURCE_URL\"
[target]
url = \"TARGET_URL\"
[[tables]]
name = \"person\"
key = [\"id\"]
source_limit = { id = \"watch\", initials = \"watch\" }
[[tables.columns]]
source = \"first\"
[[tables.columns]]
source = \"last\"
[[tables.columns]]
source = \"initials\"
";
    let Some(r) = Rental::with("pg_real_generated", None, source, target, spec) else {
        return;
    };
    r.run(&["check"], 0);
    r.run(&["load"], 0);
    assert_eq!(
        r.texts("SELECT p::text FROM target.person p ORDER BY id"),
        [
            "(1,Ada,Lovelace,AL,\"Ada Lovelace\")",
            "(2,Alan,Turing,AT,\"Alan Turing\")"
        ]
    );
    r.run(&["gate"], 0);
    r.run(&["gate", "--inject-mismatch"], 1);
    r.run(&["journal", "install"], 0);
    r.application(
        "UPDATE person SET last = 'King', initials = 'AK' WHERE id = 1;
         INSERT INTO person (id, first, last, initials) VALUES (3, 'Grace', 'Hopper', 'GH');",
    );
    r.run(&["fence", "on"], 0);
    r.run(&["replay", "--dry-run"], 0);
    r.run(&["replay"], 0);
    let rows: Vec<String> = r.texts("SELECT p::text FROM source.person p ORDER BY id");
    assert_eq!(
        rows,
        [
            "(1,Ada,King,AK)",
            "(2,Alan,Turing,AT)",
            "(3,Grace,Hopper,GH)"
        ]
    );
    r.run(&["fence", "off"], 0);
    let path = r.path().join("spec.toml");
    let spec = std::fs::read_to_string(&path).expect("the spec");
    for (changed, column) in [
        (
            format!("{spec}[[tables.columns]]\ntarget = \"label\"\nvalue = \"x\"\n"),
            "label",
        ),
        (
            spec.replace("key = [\"id\"]", "key = [\"initials\"]")
                .replace("source = \"initials\"", "source = \"id\""),
            "initials",
        ),
    ] {
        std::fs::write(&path, changed).expect("the spec");
        let out = r.run(&["check"], 2);
        let err = &out.stderr;
        assert!(
            err.contains(&format!("'{column}'")) && err.contains("is generated"),
            "{err}"
        );
    }
    std::fs::write(&path, spec).expect("the spec");
}

/// A declaratively partitioned target, one partition in another schema:
/// the journal sees writes into every partition (PostgreSQL clones a
/// partitioned table's row triggers onto its partitions), the fence's
/// proof writes a row that fits a partition, and the rollback is exact.
#[test]
fn a_declaratively_partitioned_target_journals_fences_and_rolls_back() {
    let source = "
        CREATE TABLE payment (id integer PRIMARY KEY, paid_on date NOT NULL, amount numeric(8,2) NOT NULL);
        INSERT INTO payment VALUES (1, '2007-01-10', 2.99), (2, '2007-02-11', 4.99);";
    let target = "
        CREATE SCHEMA IF NOT EXISTS archive;
        CREATE TABLE payment (id bigint NOT NULL, paid_on date NOT NULL, cents bigint NOT NULL,
                              PRIMARY KEY (id, paid_on)) PARTITION BY RANGE (paid_on);
        CREATE TABLE payment_2007_01 PARTITION OF payment FOR VALUES FROM ('2007-01-01') TO ('2007-02-01');
        CREATE TABLE archive.payment_2007_02 PARTITION OF payment FOR VALUES FROM ('2007-02-01') TO ('2007-03-01');";
    let spec = "
[source]
url = \"SOURCE_URL\"
[target]
url = \"TARGET_URL\"
[[tables]]
name = \"payment\"
key = [\"id\"]
source_limit = { id = \"watch\", amount = \"watch\" }
[[tables.columns]]
source = \"paid_on\"
[[tables.columns]]
source = \"amount\"
target = \"cents\"
transform = \"decimal_to_minor\"
scale = 2
";
    let Some(r) = Rental::with("pg_real_partitioned", None, source, target, spec) else {
        return;
    };
    r.db
        .client()
        .batch_execute(&format!(
            "GRANT USAGE ON SCHEMA archive TO {0}; GRANT ALL ON ALL TABLES IN SCHEMA archive TO {0};",
            r.app
        ))
        .expect("the application's grants");
    r.run(&["check"], 0);
    r.run(&["load"], 0);
    r.run(&["gate"], 0);
    r.run(&["journal", "install"], 0);
    r.application(
        "UPDATE payment SET cents = 399 WHERE id = 2;
         INSERT INTO payment VALUES (3, '2007-01-20', 150), (4, '2007-02-21', 250);
         DELETE FROM payment WHERE id = 1;",
    );
    r.run(&["fence", "on"], 0);
    r.run(&["replay"], 0);
    let rows: Vec<String> = r.texts("SELECT p::text FROM source.payment p ORDER BY id");
    assert_eq!(
        rows,
        [
            "(2,2007-02-11,3.99)",
            "(3,2007-01-20,1.50)",
            "(4,2007-02-21,2.50)"
        ]
    );
}

/// A foreign-key action judged on the journal's order: the source's
/// `orders.customer_id` is `ON DELETE SET NULL`, which the tables' plain
/// owner cannot switch off. The application first moves customer 2's only
/// order to customer 1, then deletes customer 2: at that point of the
/// journal no row refers to 2, so the action would change nothing, and the
/// replay goes through (exit 0) with every table equal to the oracle. A
/// delete of a customer whose order is never moved away is refused before
/// anything is written, and its cause says nothing of a row deleted in the
/// source.
#[test]
fn set_null_is_judged_on_the_journals_order_as_a_plain_owner() {
    const SOURCE: &str = "
        CREATE TABLE customers (id integer PRIMARY KEY, name text NOT NULL);
        CREATE TABLE orders (id integer PRIMARY KEY,
            customer_id integer REFERENCES customers ON DELETE SET NULL, note text NOT NULL);
        INSERT INTO customers VALUES (1, 'one'), (2, 'two'), (3, 'three');
        INSERT INTO orders VALUES (10, 1, 'a'), (11, 2, 'b'), (12, 3, 'c');";
    const TARGET: &str = "
        CREATE TABLE customers (id integer PRIMARY KEY, name text NOT NULL);
        CREATE TABLE orders (id integer PRIMARY KEY,
            customer_id integer REFERENCES customers, note text NOT NULL);";
    const SPEC: &str = r#"
[source]
url = "SOURCE_URL"
[target]
url = "TARGET_URL"
[[tables]]
name = "customers"
key = ["id"]
[[tables.columns]]
source = "name"
target = "name"
[[tables]]
name = "orders"
key = ["id"]
[[tables.columns]]
source = "customer_id"
target = "customer_id"
[[tables.columns]]
source = "note"
target = "note"
"#;
    for refused in [false, true] {
        let Some(r) = Rental::with(
            "set_null_order",
            Some(if refused { "owner_refused" } else { "owner" }),
            SOURCE,
            TARGET,
            SPEC,
        ) else {
            return;
        };
        r.run(&["load"], 0);
        r.run(&["journal", "install"], 0);
        r.application("UPDATE orders SET customer_id = 1 WHERE id = 11;");
        r.application("DELETE FROM customers WHERE id = 2;");
        if refused {
            r.application(
                "DELETE FROM orders WHERE id = 12; INSERT INTO orders VALUES (12, NULL, 'c');",
            );
            // Customer 3's order leaves it in the target by a delete and a
            // re-insert, but order 13, in the source only, still refers to 3.
            r.db.client()
                .batch_execute("INSERT INTO source.orders VALUES (13, 3, 'source only')")
                .expect("a source row");
            r.application("DELETE FROM customers WHERE id = 3;");
        }
        r.run(&["fence", "on"], 0);
        let before = r.dump("source");
        if refused {
            let out = r.run(&["replay"], 1);
            assert!(
                out.stdout.contains("would set off foreign-key action")
                    && !out.stdout.contains("deleted in the source"),
                "{out}"
            );
            assert_eq!(
                r.dump("source").rows,
                before.rows,
                "the source after a refusal"
            );
            continue;
        }
        let j = r.json(&["replay"], 0);
        assert_eq!(j["applied"], 2, "{j:#}");
        let mut want = before.clone();
        want.rows.insert(
            "customers".into(),
            vec!["(1,one)".into(), "(3,three)".into()],
        );
        want.rows.insert(
            "orders".into(),
            vec!["(10,1,a)".into(), "(11,1,b)".into(), "(12,3,c)".into()],
        );
        assert_eq!(r.dump("source").rows, want.rows, "the source after replay");
    }
}
