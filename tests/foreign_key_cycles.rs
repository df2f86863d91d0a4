//! `load` into PostgreSQL tables whose foreign keys refer to each other in
//! a cycle (the DVD-rental sample's `store.manager_staff_id` → `staff`,
//! `staff.store_id` → `store`, both NOT NULL), through the binary, run as
//! a plain role owning the tables (no superuser, no
//! `session_replication_role`): with a key of the cycle DEFERRABLE the
//! tables load, in one transaction that checks the keys at its commit, and
//! the gate passes; with none, load is refused before anything is written
//! (the target's tables and rows exactly as before), naming the keys and
//! the fix; and rows that do break a deferred key leave nothing loaded.

mod support;

use support::postgres::{Client, TestDb};
use support::run::cutover_in;

const SOURCE: &str = "
CREATE TABLE public.store (store_id integer PRIMARY KEY, manager_staff_id integer NOT NULL);
CREATE TABLE public.staff (staff_id integer PRIMARY KEY, name text NOT NULL, store_id integer NOT NULL);
";

const ROWS: &str = "
INSERT INTO public.store VALUES (1, 1), (2, 2);
INSERT INTO public.staff VALUES (1, 'Mike', 1), (2, 'Jon', 2), (3, 'Ann', 1);
";

/// The target, its keys of the cycle declared `STORE_KEY` and `STAFF_KEY`.
const TARGET: &str = "
CREATE SCHEMA target;
CREATE TABLE target.store (store_id integer PRIMARY KEY, manager_staff_id integer NOT NULL);
CREATE TABLE target.staff (staff_id integer PRIMARY KEY, name text NOT NULL,
    store_id integer NOT NULL CONSTRAINT staff_store_fk REFERENCES target.store ON UPDATE CASCADE STAFF_KEY);
ALTER TABLE target.store ADD CONSTRAINT store_manager_fk
    FOREIGN KEY (manager_staff_id) REFERENCES target.staff ON UPDATE CASCADE STORE_KEY;
";

const SPEC: &str = r#"
[source]
url = "URL?schema=public"

[target]
url = "URL?schema=target"

[[tables]]
name = "store"
key = ["store_id"]

[[tables.columns]]
source = "manager_staff_id"

[[tables]]
name = "staff"
key = ["staff_id"]

[[tables.columns]]
source = "name"

[[tables.columns]]
source = "store_id"
"#;

/// The target's rows after a load, as PostgreSQL prints them.
const LOADED: &str = "1|1\n2|2\n--\n1|Mike|1\n2|Jon|2\n3|Ann|1\n";

struct Cycle {
    dir: tempfile::TempDir,
    db: TestDb,
    owner: String,
}

impl Drop for Cycle {
    fn drop(&mut self) {
        if let Ok(mut c) = Client::connect(&self.db.url) {
            let _ = c.batch_execute(&format!("DROP OWNED BY {} CASCADE", self.owner));
        }
        if let Ok(mut c) = Client::connect(&self.db.admin) {
            let _ = c.batch_execute(&format!("DROP ROLE IF EXISTS {}", self.owner));
        }
    }
}

impl Cycle {
    /// Source and target in one database, every table owned by a plain
    /// role that cutover runs as.
    fn new(test: &str, store_key: &str, staff_key: &str, rows: &str) -> Option<Cycle> {
        let db = TestDb::new(test)?;
        let owner = format!("owner_{}", db.name.trim_start_matches("cutover_t_"));
        let target = TARGET
            .replace("STORE_KEY", store_key)
            .replace("STAFF_KEY", staff_key);
        db.client()
            .batch_execute(&format!(
                "{SOURCE}{rows}{target}
                 CREATE ROLE {owner} LOGIN;
                 GRANT ALL ON SCHEMA public, target TO {owner};
                 GRANT CREATE ON DATABASE {} TO {owner};
                 ALTER TABLE public.store OWNER TO {owner}; ALTER TABLE public.staff OWNER TO {owner};
                 ALTER TABLE target.store OWNER TO {owner}; ALTER TABLE target.staff OWNER TO {owner};",
                db.name
            ))
            .expect("the schemas and the owner");
        let (scheme, rest) = db.url.split_once("://").expect("a URL");
        let (_, host) = rest.split_once('@').expect("a URL with a user");
        let url = format!("{scheme}://{owner}@{host}");
        let dir = tempfile::tempdir().expect("a folder");
        std::fs::write(dir.path().join("spec.toml"), SPEC.replace("URL", &url)).expect("the spec");
        Some(Cycle { dir, db, owner })
    }

    /// The target's rows, `store` then `staff`, in key order.
    fn target_rows(&self) -> String {
        let mut c = self.db.client();
        let mut out = String::new();
        for (i, sql) in [
            "SELECT store_id::text || '|' || manager_staff_id FROM target.store ORDER BY 1",
            "SELECT staff_id::text || '|' || name || '|' || store_id FROM target.staff ORDER BY 1",
        ]
        .iter()
        .enumerate()
        {
            if i > 0 {
                out.push_str("--\n");
            }
            for r in c.query(*sql, &[]).expect("the target's rows") {
                out.push_str(&r.get::<_, String>(0));
                out.push('\n');
            }
        }
        out
    }

    /// Every table of the database, in every schema but the catalogues.
    fn tables(&self) -> Vec<String> {
        self.db
            .client()
            .query(
                "SELECT schemaname || '.' || tablename FROM pg_tables
                 WHERE schemaname NOT IN ('pg_catalog', 'information_schema') ORDER BY 1",
                &[],
            )
            .expect("the tables")
            .iter()
            .map(|r| r.get(0))
            .collect()
    }
}

#[test]
fn a_cycle_with_a_deferrable_key_loads_whole_as_the_tables_owner() {
    for (i, (store_key, staff_key)) in [
        ("DEFERRABLE", "DEFERRABLE"),
        ("DEFERRABLE INITIALLY DEFERRED", "NOT DEFERRABLE"),
        ("NOT DEFERRABLE", "DEFERRABLE"),
    ]
    .into_iter()
    .enumerate()
    {
        let Some(c) = Cycle::new(&format!("fk_cycle_{i}"), store_key, staff_key, ROWS) else {
            return;
        };
        cutover_in(c.dir.path(), &["load"]).expect(0);
        assert_eq!(c.target_rows(), LOADED, "{store_key} / {staff_key}");
        cutover_in(c.dir.path(), &["gate"]).expect(0);
    }
}

#[test]
fn a_cycle_of_keys_checked_at_each_statement_is_refused_before_anything_is_written() {
    let Some(c) = Cycle::new("fk_cycle_refused", "NOT DEFERRABLE", "", ROWS) else {
        return;
    };
    let tables = c.tables();
    cutover_in(c.dir.path(), &["load"])
        .expect(2)
        .assert_mentions(&[
            "cycle",
            "store(manager_staff_id) → staff (store_manager_fk)",
            "staff(store_id) → store (staff_store_fk)",
            "DEFERRABLE",
            "Nothing was written",
        ]);
    assert_eq!(c.tables(), tables, "the refusal made tables");
    assert_eq!(c.target_rows(), "--\n", "the refusal wrote rows");
}

#[test]
fn rows_that_break_a_deferred_key_leave_the_target_as_it_was() {
    // Staff 3 works at store 9, which the source does not have.
    let rows = ROWS.replace("(3, 'Ann', 1)", "(3, 'Ann', 9)");
    let Some(c) = Cycle::new("fk_cycle_broken", "DEFERRABLE", "DEFERRABLE", &rows) else {
        return;
    };
    let tables = c.tables();
    cutover_in(c.dir.path(), &["load"])
        .expect(2)
        .assert_mentions(&["staff_store_fk"]);
    assert_eq!(c.target_rows(), "--\n", "a failed load left rows");
    assert_eq!(c.tables(), tables, "a failed load left tables");
}
