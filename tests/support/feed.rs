//! The change-feed fixtures (`apply_contract`, `feed_validation`,
//! `drill_feed`, and the feeds of the other files): the invoices and items
//! migrations, the running example fenced with gaps in its journal, feed
//! lines built as JSON, and the rows a feed test reads back.

use std::path::PathBuf;

use rusqlite::types::Value;
use serde_json::{Value as Json, json};

use super::{
    Cmd, Column, Dir, Layout, ORDERS_APP_WRITES, ORDERS_SOURCE, ORDERS_SPEC, ORDERS_TARGET, Output,
    Spec, Table,
};

pub const INVOICES_SPEC: &str = include_str!("../../fixtures/invoices/spec.toml");
pub const INVOICES_SOURCE: &str = include_str!("../../fixtures/invoices/source.sql");
pub const INVOICES_TARGET: &str = include_str!("../../fixtures/invoices/target.sql");

/// The feed name of the invoice helpers.
pub const BILLING: &str = "billing";

/// The invoices fixture's table under another name: composite key
/// (source, account, entity, record_key), revision `rev`, amount ↔
/// amount_minor at scale 2 (`min = 0`), a three-letter currency.
pub fn invoices_table(name: &str) -> Table {
    Table::new(name)
        .key(["source", "account", "entity", "record_key"])
        .revision("rev")
        .currency("currency")
        .copy("rev")
        .column(
            Column::new("amount")
                .target("amount_minor")
                .decimal(2)
                .min(0),
        )
        .column(Column::new("currency").pattern("^[A-Z]{3}$"))
}

/// The invoices fixture with a second table, `credits`, of the very same
/// shape: the same key in another table must be another record.
pub fn two_tables_spec() -> Spec {
    Spec::new()
        .table(invoices_table("invoices"))
        .table(invoices_table("credits"))
}

/// A fixture's script with its `invoices` table created a second time as
/// `credits`.
pub fn two_tables_sql(fixture: &str) -> String {
    format!(
        "{fixture}\n{}",
        fixture.replace("CREATE TABLE invoices", "CREATE TABLE credits")
    )
}

/// The simple (id, status) table of the batch tests: no revision column,
/// `id` checked `min = 1`, `status` one of "new", "done".
pub fn items_spec(on_change: Option<&str>) -> Spec {
    let mut items = Table::new("items").key(["id"]);
    if let Some(policy) = on_change {
        items = items.on_change(policy);
    }
    Spec::new().table(
        items
            .column(Column::new("id").min(1))
            .column(Column::new("status").values(["new", "done"])),
    )
}

pub const ITEMS_SQL: &str = "CREATE TABLE items (id INTEGER PRIMARY KEY, status TEXT NOT NULL);";

impl Dir {
    /// The invoices fixture: composite key, revision, money, currency.
    pub fn invoices(name: &str) -> Dir {
        Dir::with(name, INVOICES_SPEC, INVOICES_SOURCE, INVOICES_TARGET)
    }

    /// The invoices fixture in a layout (its spec is `INVOICES_SPEC`'s).
    pub fn invoices_on(layout: Layout, name: &str) -> Dir {
        let spec = Spec::new().table(invoices_table("invoices"));
        Dir::with_on(layout, name, &spec, INVOICES_SOURCE, INVOICES_TARGET)
    }

    /// The (id, status) table, optionally with an `on_change` policy.
    pub fn items(name: &str, on_change: Option<&str>) -> Dir {
        Dir::with(name, &items_spec(on_change), ITEMS_SQL, ITEMS_SQL)
    }

    /// [`Dir::items`] in a layout.
    pub fn items_on(layout: Layout, name: &str, on_change: Option<&str>) -> Dir {
        Dir::with_on(layout, name, &items_spec(on_change), ITEMS_SQL, ITEMS_SQL)
    }

    /// The running example, fenced at boundary 3 after the application's
    /// writes (101 → 1400, 104 inserted, 103 deleted) made one statement at
    /// a time; `gap` pushes the journal's AUTOINCREMENT counter on before
    /// each write, so the journal's `seq` has gaps.
    pub fn orders_fenced_with_gaps(name: &str, gap: i64) -> Dir {
        let d = Dir::with(name, ORDERS_SPEC, ORDERS_SOURCE, ORDERS_TARGET);
        d.cutover_json(&["load"]).expect(0);
        d.cutover_json(&["journal", "install"]).expect(0);
        for stmt in ORDERS_APP_WRITES
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with("--"))
        {
            if gap > 0 {
                // A gap in seq, as entries deleted from the journal (or a
                // PostgreSQL sequence) leave: a placeholder entry `gap` past
                // the last on the list of entries the triggers take their
                // seq from, removed after the next write took the seq after it.
                d.exec(
                    "target.db",
                    &format!(
                        "INSERT INTO _cutover_journal_entries (seq, img, op) SELECT coalesce(max(seq), 0) + {gap}, 1, 'gap' FROM _cutover_journal;"
                    ),
                );
            }
            d.exec("target.db", stmt);
            if gap > 0 {
                d.exec(
                    "target.db",
                    "DELETE FROM _cutover_journal_entries WHERE op = 'gap';",
                );
            }
        }
        d.cutover_json(&["fence", "on"]).expect(0);
        d
    }

    /// Writes a feed file, one JSON line per change.
    pub fn feed(&self, name: &str, lines: &[Json]) -> PathBuf {
        self.write(name, feed_text(lines))
    }

    /// `cutover --format json apply --feed FEED --into SIDE --spec spec.toml`.
    pub fn apply(&self, feed: &str, into: &str) -> Cmd {
        self.cutover_json(&["apply", "--feed", feed, "--into", into])
    }

    /// Writes `lines` to `name`; the run that applies them into the target.
    pub fn apply_lines(&self, name: &str, lines: &[Json]) -> Cmd {
        self.feed(name, lines);
        self.apply(name, "target")
    }

    /// The checkpoint of a feed as the database holds it (0 before any).
    pub fn checkpoint(&self, db: &str, feed: &str) -> i64 {
        if !self.has_table(db, "_cutover_deliveries") {
            return 0;
        }
        self.int(
            db,
            &format!(
                "SELECT coalesce(max(last_position), 0) FROM _cutover_deliveries WHERE feed = '{}'",
                feed.replace('\'', "''")
            ),
        )
    }

    /// The invoices of a table as (source, record_key, rev, amount_minor,
    /// currency), ordered by key.
    pub fn invoices_in(&self, table: &str) -> Vec<(String, String, i64, i64, String)> {
        let sql = format!(
            "SELECT source, record_key, rev, amount_minor, currency FROM {}
             ORDER BY source, account, entity, record_key",
            self.engine().quote(table)
        );
        self.query("target.db", &sql)
            .into_iter()
            .map(|r| {
                (
                    string(&r[0]),
                    string(&r[1]),
                    integer(&r[2]),
                    integer(&r[3]),
                    string(&r[4]),
                )
            })
            .collect()
    }

    /// The evidence rows: (tbl, key, revision, kind, row).
    pub fn evidence(&self) -> Vec<(String, String, i64, String, Option<String>)> {
        if !self.has_table("target.db", "_cutover_revisions") {
            return Vec::new();
        }
        self.query(
            "target.db",
            "SELECT tbl, \"key\", revision, kind, \"row\" FROM _cutover_revisions
             ORDER BY tbl, \"key\", revision, kind",
        )
        .into_iter()
        .map(|r| {
            let row = match &r[4] {
                Value::Null => None,
                v => Some(string(v)),
            };
            (
                string(&r[0]),
                string(&r[1]),
                integer(&r[2]),
                string(&r[3]),
                row,
            )
        })
        .collect()
    }

    /// The items table as (id, status).
    pub fn items_rows(&self, db: &str) -> Vec<(i64, String)> {
        self.query(db, "SELECT id, status FROM items ORDER BY id")
            .into_iter()
            .map(|r| (integer(&r[0]), string(&r[1])))
            .collect()
    }
}

fn string(v: &Value) -> String {
    match v {
        Value::Text(t) => t.clone(),
        other => panic!("{other:?} is not text"),
    }
}

fn integer(v: &Value) -> i64 {
    match v {
        Value::Integer(i) => *i,
        other => panic!("{other:?} is not an integer"),
    }
}

impl Output {
    /// The `deliveries[i]` entry of an apply report.
    #[track_caller]
    pub fn delivery(&self, i: usize) -> Json {
        let j = self.json();
        j["deliveries"]
            .get(i)
            .cloned()
            .unwrap_or_else(|| panic!("no deliveries[{i}] in the report\n{self}"))
    }

    /// The `rejected_lines` of an apply report (empty when absent).
    #[track_caller]
    pub fn rejected(&self) -> Vec<Json> {
        self.json()["rejected_lines"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

/// Feed lines as JSON Lines text.
pub fn feed_text(lines: &[Json]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

// --- feed lines ---------------------------------------------------------

/// The key object of an invoice in scope `source` (account A-100, entity E1).
pub fn inv_key(source: &str, record_key: &str) -> Json {
    json!({"source": source, "account": "A-100", "entity": "E1", "record_key": record_key})
}

/// A whole invoice row in target form.
pub fn inv_row(source: &str, record_key: &str, rev: i64, amount: i64, currency: &str) -> Json {
    json!({
        "source": source, "account": "A-100", "entity": "E1", "record_key": record_key,
        "rev": rev, "amount_minor": amount, "currency": currency,
    })
}

/// An upsert line of any feed and table.
pub fn upsert(
    feed: &str,
    delivery: &str,
    position: i64,
    table: &str,
    key: Json,
    revision: Option<i64>,
    row: Json,
) -> Json {
    let mut l = json!({
        "feed": feed, "delivery": delivery, "position": position, "table": table,
        "op": "upsert", "key": key, "row": row,
    });
    if let Some(r) = revision {
        l["revision"] = json!(r);
    }
    l
}

/// A delete line of any feed and table.
pub fn delete(
    feed: &str,
    delivery: &str,
    position: i64,
    table: &str,
    key: Json,
    revision: Option<i64>,
) -> Json {
    let mut l = json!({
        "feed": feed, "delivery": delivery, "position": position, "table": table,
        "op": "delete", "key": key,
    });
    if let Some(r) = revision {
        l["revision"] = json!(r);
    }
    l
}

/// An EUR invoice of scope "erp" in feed "billing", table "invoices".
pub fn inv(delivery: &str, position: i64, record_key: &str, rev: i64, amount: i64) -> Json {
    inv_at(
        "invoices", "erp", delivery, position, record_key, rev, amount,
    )
}

/// An EUR invoice in any table and scope, feed "billing".
pub fn inv_at(
    table: &str,
    source: &str,
    delivery: &str,
    position: i64,
    record_key: &str,
    rev: i64,
    amount: i64,
) -> Json {
    upsert(
        BILLING,
        delivery,
        position,
        table,
        inv_key(source, record_key),
        Some(rev),
        inv_row(source, record_key, rev, amount, "EUR"),
    )
}

/// A delete of an "erp" invoice at a revision, feed "billing".
pub fn inv_delete(delivery: &str, position: i64, record_key: &str, rev: i64) -> Json {
    delete(
        BILLING,
        delivery,
        position,
        "invoices",
        inv_key("erp", record_key),
        Some(rev),
    )
}

/// An upsert of the items table, feed "items".
pub fn item(delivery: &str, position: i64, id: i64, status: &str) -> Json {
    upsert(
        "items",
        delivery,
        position,
        "items",
        json!({"id": id}),
        None,
        json!({"id": id, "status": status}),
    )
}
