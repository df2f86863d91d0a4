//! The matrix: every command on every engine pair (SQLite, PostgreSQL and
//! MySQL/MariaDB as source and as target, nine pairs), on a schema shaped
//! like a real one — an identity or `AUTO_INCREMENT` key, a UNIQUE email, a
//! child table with `ON DELETE CASCADE` and a foreign-key cycle back to it,
//! a column generated on both sides, a touch trigger on the source and, on
//! MySQL, a `BEFORE INSERT` one stamping the creation time —
//! over a battery of the column types real schemas use: `varchar(n)`,
//! `text`, `numeric(19,4)`, money as cents, `smallint`/`integer`,
//! `boolean`/`TINYINT(1)`, `date`, `timestamp(p)`/`DATETIME(p)`,
//! `timestamptz`/`TIMESTAMP(6)`, `bytea`/`BLOB`; and each engine's own
//! types where both sides have them (`uuid`, `jsonb`, arrays, `char(n)`;
//! `ENUM`, `SET`, `JSON`, `CHAR(n)`; an `ENUM` under an enum type and a
//! `SET` as an array).
//!
//! Each pair runs the runbook through the binary: `check` (its hazards
//! accepted in the spec, after `journal install` refused them undecided),
//! `load` and `sync` in several batches, `gate` in every mode and with
//! `--inject-mismatch`, `journal install`, the application's writes to the
//! target through its own client, `watch`, `status`, `replay --rehearse`,
//! `fence on`, `replay --dry-run` and `replay` in several batches; then
//! every table of the source is compared with an oracle the test computes
//! from the target without cutover. docs/engines.md carries the table of
//! what each command does on each pair ("The matrix"), and the run is
//! checked against it, cell by cell.
//!
//! `CUTOVER_MATRIX_ROWS` sets the customers per pair (default 1,200, with
//! batches of 500 rows and 100 journal entries; 100000 is the full size).

mod support;

use std::collections::BTreeMap;

use support::layout::On;
use support::spec::{Column, Spec, Table};
use support::{Dir, Layout, each_layout};

/// The customers each pair starts with.
fn rows() -> i64 {
    std::env::var("CUTOVER_MATRIX_ROWS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_200)
}

/// One column of `customers` or `orders`: its type on each engine.
struct Col {
    name: &'static str,
    pg: &'static str,
    my: &'static str,
    sqlite: &'static str,
}

impl Col {
    fn on(&self, on: On) -> &'static str {
        match on {
            On::Pg => self.pg,
            On::My => self.my,
            On::Sqlite => self.sqlite,
        }
    }
}

const fn col(name: &'static str, pg: &'static str, my: &'static str, sqlite: &'static str) -> Col {
    Col {
        name,
        pg,
        my,
        sqlite,
    }
}

/// The customers' columns after the key, in the order rows are written;
/// `price` is the source's, `price_cents` the target's.
const CUSTOMERS: &[Col] = &[
    col(
        "email",
        "varchar(120) NOT NULL UNIQUE",
        "VARCHAR(120) NOT NULL UNIQUE",
        "TEXT NOT NULL UNIQUE",
    ),
    col(
        "name",
        "varchar(80) NOT NULL",
        "VARCHAR(80) NOT NULL",
        "TEXT NOT NULL",
    ),
    col("bio", "text", "TEXT", "TEXT"),
    col(
        "balance",
        "numeric(19,4) NOT NULL",
        "DECIMAL(19,4) NOT NULL",
        "TEXT NOT NULL",
    ),
    col(
        "price",
        "numeric(12,2) NOT NULL",
        "DECIMAL(12,2) NOT NULL",
        "TEXT NOT NULL",
    ),
    col(
        "small",
        "smallint NOT NULL",
        "SMALLINT NOT NULL",
        "INTEGER NOT NULL",
    ),
    col(
        "qty",
        "integer NOT NULL",
        "INT NOT NULL",
        "INTEGER NOT NULL",
    ),
    col(
        "active",
        "boolean NOT NULL",
        "TINYINT(1) NOT NULL",
        "INTEGER NOT NULL",
    ),
    col("born", "date", "DATE", "TEXT"),
    col(
        "created",
        "timestamp(6) NOT NULL",
        "DATETIME(6) NOT NULL",
        "TEXT NOT NULL",
    ),
    col("seen", "timestamptz", "TIMESTAMP(6) NULL", "TEXT"),
    col("closed", "timestamp(3)", "DATETIME(3)", "TEXT"),
    col("avatar", "bytea", "BLOB", "BLOB"),
    col(
        "updated",
        "timestamp(6) NOT NULL",
        "DATETIME(6) NOT NULL",
        "TEXT NOT NULL",
    ),
];

/// The orders' columns after the key and the customer.
const ORDERS: &[Col] = &[
    col("placed", "date NOT NULL", "DATE NOT NULL", "TEXT NOT NULL"),
    col(
        "amount",
        "numeric(12,2) NOT NULL",
        "DECIMAL(12,2) NOT NULL",
        "TEXT NOT NULL",
    ),
    col("note", "text", "TEXT", "TEXT"),
];

/// A column only some pairs have: a type of one engine that real schemas
/// use, on the pairs where both sides hold it.
struct Extra {
    name: &'static str,
    source: &'static str,
    target: &'static str,
    value: fn(i64, i64) -> V,
    /// Carried by `set_to_array` with these labels, else as it is.
    labels: Option<&'static [&'static str]>,
}

const SET: &[&str] = &["x", "y", "z"];

fn labels_of(i: i64) -> V {
    match i % 10 {
        0 => V::Null,
        n => V::Set(
            SET.iter()
                .enumerate()
                .filter(|(b, _)| n >> b & 1 == 1)
                .map(|(_, l)| *l)
                .collect(),
        ),
    }
}

fn kind_of(i: i64, round: i64) -> V {
    V::Text(["a", "b", "c"][((i + round) % 3) as usize].to_string())
}

/// The pair's own columns: PostgreSQL's `uuid`, `jsonb`, `text[]` and
/// `char(n)` between two PostgreSQL schemas; MySQL's `ENUM`, `SET`, `JSON`
/// and `CHAR(n)` between two MySQL databases; a MySQL `ENUM` under a
/// PostgreSQL enum type of the same labels, and a `SET` as a `text[]`.
fn extras(layout: Layout) -> Vec<Extra> {
    let token = |i: i64, round: i64| V::Text(format!("{i:08x}-0000-4000-8000-{:012x}", round + 1));
    // jsonb's own spelling: keys by length then bytes, `": "` and `", "`.
    let doc = |i: i64, round: i64| {
        V::Text(format!(
            "{{\"i\": {i}, \"r\": {round}, \"tags\": [\"a\", \"b\"]}}"
        ))
    };
    let code = |i: i64, round: i64| V::Text(format!("c{}", (i + round) % 1000));
    let e = |name, source, target, value: fn(i64, i64) -> V| Extra {
        name,
        source,
        target,
        value,
        labels: None,
    };
    match layout {
        Layout::PgToPg => vec![
            e("token", "uuid", "uuid", token),
            e("doc", "jsonb", "jsonb", doc),
            e("tags", "text[]", "text[]", |i, r| labels_of(i + r)),
            e("code", "char(5)", "char(5)", code),
        ],
        Layout::MyToMy => vec![
            e(
                "kind",
                "ENUM('a','b','c') NOT NULL",
                "ENUM('a','b','c') NOT NULL",
                kind_of,
            ),
            e("perks", "SET('x','y','z')", "SET('x','y','z')", |i, r| {
                labels_of(i + r)
            }),
            e("doc", "JSON", "JSON", doc),
            e("code", "CHAR(5)", "CHAR(5)", code),
        ],
        Layout::MyToPg => vec![
            e(
                "kind",
                "ENUM('a','b','c') NOT NULL",
                "kind_t NOT NULL",
                kind_of,
            ),
            Extra {
                labels: Some(SET),
                ..e("perks", "SET('x','y','z')", "text[]", |i, r| {
                    labels_of(i + r)
                })
            },
        ],
        _ => Vec::new(),
    }
}

/// The customers' columns of a side, the pair's own last.
fn customer_names(layout: Layout, target: bool) -> Vec<&'static str> {
    let mut n = names(CUSTOMERS, target);
    n.extend(extras(layout).iter().map(|e| e.name));
    n
}

/// Customer `i`'s row after the key, the pair's own columns last.
fn customer_row(layout: Layout, i: i64, round: i64) -> Vec<V> {
    let mut row = customer(i, round);
    row.extend(extras(layout).iter().map(|e| (e.value)(i, round)));
    row
}

fn key_type(on: On) -> &'static str {
    match on {
        On::Pg => "bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY",
        On::My => "BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY",
        On::Sqlite => "INTEGER PRIMARY KEY",
    }
}

fn bigint(on: On) -> &'static str {
    match on {
        On::Sqlite => "INTEGER",
        _ => "bigint",
    }
}

/// The schema of one side: the source's with `price`, the target's with
/// `price_cents`.
fn schema(layout: Layout, on: On, target: bool) -> String {
    let mut customers = vec![format!("id {}", key_type(on))];
    for c in CUSTOMERS {
        let (name, ty) = match (c.name, target) {
            ("price", true) => ("price_cents", format!("{} NOT NULL", bigint(on))),
            (n, _) => (n, c.on(on).to_string()),
        };
        customers.push(format!("{name} {ty}"));
    }
    for e in extras(layout) {
        customers.push(format!(
            "{} {}",
            e.name,
            if target { e.target } else { e.source }
        ));
    }
    // Computed by each side's database, never written or mapped.
    customers.push(match on {
        On::Pg => "twice bigint GENERATED ALWAYS AS (qty * 2) STORED".into(),
        On::My => "twice BIGINT AS (qty * 2) STORED".into(),
        On::Sqlite => "twice INTEGER GENERATED ALWAYS AS (qty * 2) STORED".into(),
    });
    // The cycle: a customer's last order, an order's customer.
    let last_order = match (on, target) {
        (On::My, true) => "RESTRICT",
        _ => "SET NULL",
    };
    customers.push(match on {
        On::Sqlite => format!("last_order INTEGER REFERENCES orders (id) ON DELETE {last_order}"),
        _ => format!("last_order {}", bigint(on)),
    });
    let mut orders = vec![
        format!("id {}", key_type(on)),
        format!("customer_id {} NOT NULL", bigint(on)),
    ];
    orders.extend(ORDERS.iter().map(|c| format!("{} {}", c.name, c.on(on))));
    // InnoDB's cascades fire no trigger, so a MySQL target's journal
    // refuses them: there the application deletes the children itself.
    orders.push(format!(
        "CONSTRAINT orders_customer FOREIGN KEY (customer_id) REFERENCES customers (id) ON DELETE {}",
        if target && on == On::My {
            "RESTRICT"
        } else {
            "CASCADE"
        }
    ));
    let types = match (layout, target) {
        (Layout::MyToPg, true) => "CREATE TYPE kind_t AS ENUM ('a', 'b', 'c');\n",
        _ => "",
    };
    // No order loads a cycle checked at each statement: a PostgreSQL
    // target defers it to the commit; a MySQL one, which cannot, gets it
    // once loaded (`cycle`).
    let cycle = match (on, target) {
        (On::Sqlite, _) | (On::My, true) => String::new(),
        (On::Pg, _) => format!("{};\n", cycle(last_order)),
        (On::My, false) => format!(
            "ALTER TABLE customers ADD CONSTRAINT customers_last_order FOREIGN KEY (last_order) REFERENCES orders (id) ON DELETE {last_order};\n"
        ),
    };
    format!(
        "{types}CREATE TABLE customers ({});\nCREATE TABLE orders ({});\n{cycle}",
        customers.join(", "),
        orders.join(", ")
    )
}

/// A value as the generator makes it, in canonical spelling.
#[derive(Clone, Debug)]
enum V {
    Null,
    Int(i64),
    Bool(bool),
    /// Text, dates and decimals.
    Text(String),
    /// A time without a zone.
    Time(String),
    /// An instant, in UTC, without its zone.
    Instant(String),
    Bytes(Vec<u8>),
    /// Labels of a SET (MySQL) or a text array (PostgreSQL).
    Set(Vec<&'static str>),
}

/// `V` as a literal of engine `on`.
fn lit(v: &V, on: On) -> String {
    let quoted = |s: &str| format!("'{}'", s.replace('\'', "''"));
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    match (v, on) {
        (V::Null, _) => "NULL".into(),
        (V::Int(i), _) => i.to_string(),
        (V::Bool(b), On::Pg) => b.to_string(),
        (V::Bool(b), _) => i64::from(*b).to_string(),
        (V::Text(s) | V::Time(s), _) => quoted(s),
        (V::Instant(s), On::My) => quoted(s),
        (V::Instant(s), _) => quoted(&format!("{s}+00")),
        (V::Bytes(b), On::Pg) => format!("'\\x{}'::bytea", hex(b)),
        (V::Bytes(b), _) => format!("X'{}'", hex(b)),
        (V::Set(l), On::Pg) => quoted(&format!("{{{}}}", l.join(","))),
        (V::Set(l), _) => quoted(&l.join(",")),
    }
}

/// A time `seconds` past 2020-01-01 with `micros`, in canonical spelling
/// (a fraction only when there is one, no trailing zeros).
fn time(seconds: i64, micros: i64) -> String {
    let t = chrono::DateTime::from_timestamp(1_577_836_800 + seconds, 0)
        .expect("a time")
        .naive_utc();
    let mut s = t.format("%Y-%m-%d %H:%M:%S").to_string();
    if micros != 0 {
        let f = format!("{micros:06}");
        s.push('.');
        s.push_str(f.trim_end_matches('0'));
    }
    s
}

/// Decimal text of `units` at `scale` digits.
fn decimal(units: i64, scale: u32) -> String {
    let p = 10i64.pow(scale);
    let sign = if units < 0 { "-" } else { "" };
    let a = units.abs();
    format!("{sign}{}.{:0w$}", a / p, a % p, w = scale as usize)
}

/// Customer `i`'s row after the key, in [`CUSTOMERS`]' order, `price` in
/// cents; `round` > 0 for a version the application wrote later.
fn customer(i: i64, round: i64) -> Vec<V> {
    let name = match i % 11 {
        0 => format!("Zoë O'Brien {i}"),
        _ => format!("Name {i} r{round}"),
    };
    vec![
        V::Text(format!("user{i}@example.com")),
        V::Text(name),
        if i % 5 == 0 {
            V::Null
        } else {
            V::Text(format!("bio of {i}, round {round}"))
        },
        V::Text(decimal(
            (i * 7919 + round) % 100_000_000 * if i % 9 == 0 { -1 } else { 1 },
            4,
        )),
        V::Int(i * 37 % 500_000 + round),
        V::Int(i % 60_000 - 30_000),
        V::Int(i * 1_000 + round),
        V::Bool(i % 2 == 0),
        if i % 13 == 0 {
            V::Null
        } else {
            V::Text(chrono_date(i % 20_000))
        },
        V::Time(time(i * 37, fraction(i))),
        if i % 4 == 0 {
            V::Null
        } else {
            V::Instant(time(i * 53 + 86_400, fraction(i + 1)))
        },
        if i % 7 == 0 {
            V::Null
        } else {
            V::Time(time(i * 41 + 7_200 + round, (i % 1_000) * 1_000))
        },
        if i % 6 == 0 {
            V::Null
        } else {
            V::Bytes((0..(i % 17)).map(|b| (b * 31 + i) as u8).collect())
        },
        // The watermark: on a SQLite source a text of one width.
        V::Time(time(
            i * 37 + 3_600 + round * 100_000_000,
            (i * 7_919 % 100_000) * 10 + 1,
        )),
    ]
}

/// Micros whose last digit is not 0, or none.
fn fraction(i: i64) -> i64 {
    match i % 3 {
        0 => 0,
        _ => (i * 7_919 % 100_000) * 10 + 1,
    }
}

fn chrono_date(days: i64) -> String {
    (chrono::NaiveDate::from_ymd_opt(1950, 1, 1).expect("a date") + chrono::Duration::days(days))
        .format("%Y-%m-%d")
        .to_string()
}

/// Order `i` of customer `c`, after the key and the customer.
fn order(i: i64, round: i64) -> Vec<V> {
    vec![
        V::Text(chrono_date(20_000 + i % 3_000)),
        V::Text(decimal(i * 101 % 1_000_000 + round, 2)),
        if i % 7 == 0 {
            V::Null
        } else {
            V::Text(format!("order {i} r{round}"))
        },
    ]
}

/// The row as engine `on` writes it: money as the side holds it.
fn literals(row: &[V], on: On, target: bool, money: Option<usize>) -> Vec<String> {
    row.iter()
        .enumerate()
        .map(|(i, v)| match (v, Some(i) == money, target) {
            (V::Int(cents), true, false) => lit(&V::Text(decimal(*cents, 2)), on),
            _ => lit(v, on),
        })
        .collect()
}

fn names(cols: &[Col], target: bool) -> Vec<&'static str> {
    cols.iter()
        .map(|c| match (c.name, target) {
            ("price", true) => "price_cents",
            (n, _) => n,
        })
        .collect()
}

/// The foreign key closing the cycle on a server: a customer's last order.
fn cycle(on_delete: &str) -> String {
    format!(
        "ALTER TABLE customers ADD CONSTRAINT customers_last_order FOREIGN KEY (last_order) REFERENCES orders (id) ON DELETE {on_delete} DEFERRABLE INITIALLY DEFERRED"
    )
}

/// The application's triggers of a source on a server, made once its rows
/// are in: a touch of `updated` on update and, on MySQL, a stamp of
/// `created` on insert.
fn triggers(on: On) -> &'static str {
    match on {
        On::Pg => {
            "CREATE FUNCTION touch() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN NEW.updated := localtimestamp; RETURN NEW; END $$;
             CREATE TRIGGER customers_touch BEFORE UPDATE ON customers FOR EACH ROW EXECUTE FUNCTION touch();"
        }
        On::My => {
            "CREATE TRIGGER customers_touch BEFORE UPDATE ON customers FOR EACH ROW SET NEW.updated = NOW(6);
             CREATE TRIGGER customers_created BEFORE INSERT ON customers FOR EACH ROW SET NEW.created = NOW(6);"
        }
        On::Sqlite => "",
    }
}

/// INSERT statements of customers `ids` and of one order each, in chunks.
fn inserts(layout: Layout, on: On, target: bool, ids: &[i64], round: i64, orders: bool) -> String {
    let mut sql = String::new();
    let money = Some(4);
    for chunk in ids.chunks(500) {
        let values: Vec<String> = chunk
            .iter()
            .map(|&i| {
                let mut v = vec![i.to_string()];
                v.extend(literals(&customer_row(layout, i, round), on, target, money));
                format!("({})", v.join(", "))
            })
            .collect();
        sql.push_str(&format!(
            "INSERT INTO customers (id, {}) VALUES {};\n",
            customer_names(layout, target).join(", "),
            values.join(", ")
        ));
        if !orders {
            continue;
        }
        let values: Vec<String> = chunk
            .iter()
            .map(|&i| {
                let mut v = vec![i.to_string(), i.to_string()];
                v.extend(literals(&order(i, round), on, target, None));
                format!("({})", v.join(", "))
            })
            .collect();
        sql.push_str(&format!(
            "INSERT INTO orders (id, customer_id, {}) VALUES {};\n",
            names(ORDERS, target).join(", "),
            values.join(", ")
        ));
    }
    sql
}

/// UPDATE statements writing customer `i` (and its order) at `round`,
/// every column but the key and the email.
fn updates(layout: Layout, on: On, target: bool, ids: &[i64], round: i64, orders: bool) -> String {
    let mut sql = String::new();
    for &i in ids {
        let row = literals(&customer_row(layout, i, round), on, target, Some(4));
        let sets: Vec<String> = customer_names(layout, target)
            .iter()
            .zip(&row)
            .skip(1)
            .map(|(n, v)| format!("{n} = {v}"))
            .collect();
        sql.push_str(&format!(
            "UPDATE customers SET {} WHERE id = {i};\n",
            sets.join(", ")
        ));
        if !orders {
            continue;
        }
        let row = literals(&order(i, round), on, target, None);
        let sets: Vec<String> = names(ORDERS, target)
            .iter()
            .zip(&row)
            .map(|(n, v)| format!("{n} = {v}"))
            .collect();
        sql.push_str(&format!(
            "UPDATE orders SET {} WHERE id = {i};\n",
            sets.join(", ")
        ));
    }
    sql
}

fn spec(layout: Layout, watched: &BTreeMap<String, Vec<String>>) -> Spec {
    let watch = |t: Table, name: &str| t.watch(watched.get(name).cloned().unwrap_or_default());
    let mut customers = Table::new("customers").key(["id"]).watermark("updated");
    for c in CUSTOMERS {
        customers = match c.name {
            "price" => customers.decimal("price", "price_cents", 2),
            n => customers.copy(n),
        };
    }
    customers = customers.copy("last_order");
    for e in extras(layout) {
        customers = match e.labels {
            Some(labels) => customers.column(Column::new(e.name).set_to_array(labels)),
            None => customers.copy(e.name),
        };
    }
    let mut orders = Table::new("orders").key(["id"]).copy("customer_id");
    for c in ORDERS {
        orders = orders.copy(c.name);
    }
    Spec::new()
        .table(watch(customers, "customers"))
        .table(watch(orders, "orders"))
}

/// Every row of a table of one side, each value as text the way the test
/// reads it on every engine: integers, decimals at their scale, booleans
/// as 0/1, times to the microsecond in UTC, bytes in hex.
fn read(d: &Dir, layout: Layout, db: &str, table: &str, target: bool) -> Vec<Vec<Option<String>>> {
    let (cols, lead): (&[Col], &[&str]) = match table {
        "customers" => (CUSTOMERS, &["id"]),
        _ => (ORDERS, &["id", "customer_id"]),
    };
    let engine = d.engine_of(db);
    let mut exprs: Vec<String> = lead.iter().map(|c| cast_text(engine, c)).collect();
    for (c, n) in cols.iter().zip(names(cols, target)) {
        exprs.push(match c.name {
            "active" if engine == "postgres" => "active::int::text".into(),
            "born" | "placed" => match engine {
                "postgres" => format!("{n}::text"),
                "mysql" => format!("DATE_FORMAT({n}, '%Y-%m-%d')"),
                _ => n.to_string(),
            },
            "created" | "seen" | "updated" | "closed" => match engine {
                "postgres" if c.name == "seen" => {
                    format!("to_char({n} AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')")
                }
                "postgres" => format!("to_char({n}, 'YYYY-MM-DD HH24:MI:SS.US')"),
                "mysql" => format!("DATE_FORMAT({n}, '%Y-%m-%d %H:%i:%s.%f')"),
                _ => n.to_string(),
            },
            "avatar" => match engine {
                "postgres" => "encode(avatar, 'hex')".into(),
                "mysql" => "LOWER(HEX(avatar))".into(),
                _ => "CASE WHEN avatar IS NULL THEN NULL ELSE lower(hex(avatar)) END".into(),
            },
            _ => cast_text(engine, n),
        });
    }
    let own: Vec<&str> = match table {
        "customers" => extras(layout)
            .iter()
            .map(|e| e.name)
            .chain(["twice", "last_order"])
            .collect(),
        _ => Vec::new(),
    };
    exprs.extend(own.iter().map(|n| cast_text(engine, n)));
    let sql = format!("SELECT {} FROM {table}", exprs.join(", "));
    let mut rows: Vec<Vec<Option<String>>> = d
        .query(db, &sql)
        .into_iter()
        .map(|r| {
            r.into_iter()
                .zip(
                    lead.iter()
                        .copied()
                        .chain(names(cols, target))
                        .chain(own.iter().copied()),
                )
                .map(|(v, n)| text_of(v).map(|t| normal(n, t)))
                .collect()
        })
        .collect();
    rows.sort_by_key(|r| r[0].as_deref().and_then(|k| k.parse::<i64>().ok()));
    rows
}

fn cast_text(engine: &str, column: &str) -> String {
    match engine {
        "postgres" => format!("{column}::text"),
        "mysql" => format!("CAST({column} AS CHAR)"),
        _ => column.to_string(),
    }
}

fn text_of(v: rusqlite::types::Value) -> Option<String> {
    use rusqlite::types::Value as R;
    match v {
        R::Null => None,
        R::Integer(i) => Some(i.to_string()),
        R::Real(r) => Some(r.to_string()),
        R::Text(t) => Some(t),
        R::Blob(b) => Some(b.iter().map(|x| format!("{x:02x}")).collect()),
    }
}

/// A time of a SQLite side as the servers print it: six digits of a
/// second, no zone.
fn normal(column: &str, text: String) -> String {
    if matches!(column, "tags" | "perks") {
        // A text array's braces; a SET's labels as they are.
        return text
            .trim_start_matches('{')
            .trim_end_matches('}')
            .to_string();
    }
    if !matches!(column, "created" | "seen" | "updated" | "closed") {
        return text;
    }
    let t = text.strip_suffix("+00").unwrap_or(&text);
    match t.split_once('.') {
        Some((s, f)) => format!("{s}.{f:0<6}"),
        None => format!("{t}.000000"),
    }
}

/// The source's rows the target's stand for: money back from cents.
fn oracle(target: Vec<Vec<Option<String>>>, table: &str) -> Vec<Vec<Option<String>>> {
    let money = match table {
        "customers" => Some(1 + 4),
        _ => None,
    };
    target
        .into_iter()
        .map(|mut r| {
            if let Some(m) = money
                && let Some(c) = r[m].take()
            {
                r[m] = Some(decimal(c.parse().expect("cents"), 2));
            }
            r
        })
        .collect()
}

/// What the docs say of one pair: each command's outcome, by column.
fn documented(layout: Layout) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/engines.md"))
        .expect("docs/engines.md");
    let table = text
        .split("<!-- matrix -->")
        .nth(1)
        .expect("docs/engines.md has the matrix between <!-- matrix --> lines");
    let mut lines = table.lines().filter(|l| l.starts_with('|'));
    let cells = |l: &str| -> Vec<String> {
        l.trim()
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().trim_matches('`').to_string())
            .collect()
    };
    let head = cells(lines.next().expect("the matrix's head"));
    let pair = layout.to_string().replace('→', " → ");
    let row = lines
        .map(cells)
        .find(|r| r[0] == pair || (r[0] == "sqlite → sqlite" && layout == Layout::Sqlite))
        .unwrap_or_else(|| panic!("no row {pair:?} in the matrix of docs/engines.md"));
    head.into_iter().zip(row).skip(1).collect()
}

/// The exit code a documented outcome stands for.
fn code(outcome: &str) -> i32 {
    match outcome.split_whitespace().next() {
        Some("pass") => 0,
        Some("caught") => 1,
        Some("refused") => 2,
        other => panic!("an outcome the matrix does not know: {other:?}"),
    }
}

/// The statements `sql` makes for `ids`, run by the database's own client
/// 100 rows at a time (a client script is one argument of a command line).
fn client(d: &Dir, db: &str, ids: &[i64], sql: impl Fn(&[i64]) -> String) {
    for part in ids.chunks(100) {
        d.client(db, &sql(part));
    }
}

/// Runs `args`, expecting exit `code`; after a non-zero exit every
/// database of the folder must be as it was, rows, schema and id counters.
fn run(d: &Dir, args: &[&str], code: i32) {
    if code == 0 {
        d.run(args, 0);
        return;
    }
    let counters = |d: &Dir| (d.counters("source.db"), d.counters("target.db"));
    let (before, counted) = (d.snapshot(), counters(d));
    d.run(args, code);
    d.assert_unchanged(&before, &args.join(" "));
    assert_eq!(counters(d), counted, "{}: the id counters", args.join(" "));
}

fn matrix(layout: Layout) {
    let (source, target) = layout.sides();
    let n = rows();
    let d = Dir::on(layout, "matrix");
    let doc = documented(layout);
    let ids: Vec<i64> = (1..=n).collect();
    d.create_db("source.db", &schema(layout, source, false));
    // In parts, each within a server's packet.
    for part in ids.chunks(500) {
        d.exec("source.db", &inserts(layout, source, false, part, 0, true));
    }
    d.exec(
        "source.db",
        "UPDATE customers SET last_order = id WHERE id % 3 = 0",
    );
    if source != On::Sqlite {
        d.exec("source.db", triggers(source));
    }
    d.create_db("target.db", &schema(layout, target, true));

    // check names the hazards; journal install refuses them undecided.
    d.spec(&spec(layout, &BTreeMap::new()));
    let check = d.json(&["check"], 0);
    let mut watched: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for h in check["hazards"].as_array().expect("hazards") {
        let (t, c) = (h["table"].as_str().unwrap(), h["column"].as_str().unwrap());
        let cols = watched.entry(t.to_string()).or_default();
        if !cols.iter().any(|x| x == c) {
            cols.push(c.to_string());
        }
    }
    let hazards = check["hazards"].as_array().unwrap().len();
    let said: usize = doc["hazards"].parse().expect("a count of hazards");
    let named: Vec<String> = check["hazards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| format!("{}.{} {}", h["table"], h["column"], h["kind"]))
        .collect();
    assert_eq!(hazards, said, "hazards on {layout}: {named:?}");
    if hazards > 0 {
        run(&d, &["journal", "install"], 2);
    }
    d.spec(&spec(layout, &watched));
    let step = |args: &[&str], column: &str| run(&d, args, code(&doc[column]));
    step(&["check"], "check");
    step(&["load", "--batch", "500"], "load");
    if target == On::My {
        d.exec(
            "target.db",
            &cycle("RESTRICT").replace(" DEFERRABLE INITIALLY DEFERRED", ""),
        );
    }

    // The application writes the source's customers before the switch
    // (the orders have no watermark): sync carries them.
    let fresh: Vec<i64> = (n + 1..=n + 5).collect();
    let touched: Vec<i64> = (1..=n).step_by(97).collect();
    d.client(
        "source.db",
        &inserts(layout, source, false, &fresh, 1, false),
    );
    client(&d, "source.db", &touched, |ids| {
        updates(layout, source, false, ids, 1, false)
    });
    step(&["sync", "--batch", "500", "--table", "customers"], "sync");
    step(&["gate"], "gate");
    step(&["gate", "--mode", "digest"], "gate --mode digest");
    step(&["gate", "--mode", "auto"], "gate --mode auto");
    step(&["gate", "--inject-mismatch"], "gate --inject-mismatch");
    step(&["journal", "install"], "journal install");

    // The application writes the target after the switch.
    let new: Vec<i64> = (n + 10..n + 13).collect();
    let changed: Vec<i64> = (2..=n).step_by(89).collect();
    d.client("target.db", &inserts(layout, target, true, &new, 2, true));
    client(&d, "target.db", &changed, |ids| {
        updates(layout, target, true, ids, 3, true)
    });
    d.client(
        "target.db",
        &format!(
            "UPDATE customers SET last_order = {0} WHERE id = {0};
             UPDATE customers SET last_order = NULL WHERE id = 3;",
            n + 10
        ),
    );
    d.client(
        "target.db",
        "UPDATE customers SET email = 'moved7@example.com' WHERE id = 7;
         DELETE FROM orders WHERE customer_id = 3;
         DELETE FROM customers WHERE id = 3;
         DELETE FROM orders WHERE id = 5;",
    );
    step(&["watch"], "watch");
    step(&["status"], "status");
    step(
        &["replay", "--rehearse", "--batch", "100"],
        "replay --rehearse",
    );
    step(&["fence", "on"], "fence on");
    step(
        &["replay", "--dry-run", "--batch", "100"],
        "replay --dry-run",
    );
    step(&["replay", "--batch", "100"], "replay");
    step(&["status"], "status");

    for table in ["customers", "orders"] {
        let want = oracle(read(&d, layout, "target.db", table, true), table);
        let got = read(&d, layout, "source.db", table, false);
        assert_eq!(got.len(), want.len(), "{table} on {layout}: rows");
        let width = match table {
            "customers" => 1 + CUSTOMERS.len() + extras(layout).len() + 2,
            _ => 2 + ORDERS.len(),
        };
        assert!(
            got.iter().chain(&want).all(|r| r.len() == width),
            "{table} on {layout}: columns"
        );
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g, w, "{table} on {layout}");
        }
    }
}
each_layout!(matrix: [sqlite, sqlite_to_pg, sqlite_to_my, pg_to_pg, pg_to_sqlite, pg_to_my, my_to_my, my_to_pg, my_to_sqlite]);
