//! The helpers of the adversarial suites (hostile_*, fence_bypass,
//! concurrency, environment, kills, properties): a seeded random workload on
//! the running example, and the journal and applied set read back.

use rusqlite::types::Value;

use super::{Dir, ORDERS_SPEC, ORDERS_TARGET, Rng, dollars};

/// The journal `seq`s recorded as applied in the source, in order (empty
/// before the first replay).
pub fn applied_seqs(d: &Dir) -> Vec<i64> {
    d.applied_seqs("source.db", "target.db")
}

/// The journal `seq`s of the target at or below `boundary`, in order.
pub fn journal_seqs(d: &Dir, boundary: i64) -> Vec<i64> {
    d.query(
        "target.db",
        &format!("SELECT seq FROM _cutover_journal WHERE seq <= {boundary} ORDER BY seq"),
    )
    .into_iter()
    .map(|r| match r[0] {
        Value::Integer(i) => i,
        ref other => panic!("_cutover_journal.seq holds {other:?}"),
    })
    .collect()
}

/// Builds the running example's schema with `rows` orders on both sides
/// (gated clean), installs the journal, lets the "application" make `ops`
/// seeded random writes to the target (updates, inserts, deletes and key
/// changes, one transaction), and fences. Returns the journal entries, all at
/// or below the boundary.
pub fn fenced_orders_workload(d: &Dir, rows: i64, ops: usize, seed: u64) -> i64 {
    let mut rng = Rng::new(seed);
    d.spec(ORDERS_SPEC);
    d.create_db(
        "source.db",
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, dollars TEXT NOT NULL, status TEXT NOT NULL);",
    );
    d.create_db("target.db", ORDERS_TARGET);
    let mut live = Vec::with_capacity(rows as usize + ops);
    {
        let mut s = d.conn("source.db");
        let mut t = d.conn("target.db");
        let st = s.transaction().expect("a source transaction");
        let tt = t.transaction().expect("a target transaction");
        {
            let mut si = st
                .prepare("INSERT INTO orders (id, dollars, status) VALUES (?1, ?2, ?3)")
                .expect("preparing");
            let mut ti = tt
                .prepare("INSERT INTO orders (id, cents, status) VALUES (?1, ?2, ?3)")
                .expect("preparing");
            for id in 1..=rows {
                let cents = rng.range(0, 1_000_000) as i64;
                let closed = rng.range(0, 4) == 0;
                si.execute(rusqlite::params![
                    id,
                    dollars(cents),
                    if closed { "C" } else { "A" }
                ])
                .expect("inserting a source row");
                ti.execute(rusqlite::params![
                    id,
                    cents,
                    if closed { "closed" } else { "active" }
                ])
                .expect("inserting a target row");
                live.push(id);
            }
        }
        st.commit().expect("committing the source");
        tt.commit().expect("committing the target");
    }
    d.run(&["gate"], 0);
    d.run(&["journal", "install"], 0);
    {
        let mut t = d.conn("target.db");
        let tx = t.transaction().expect("a target transaction");
        let mut next = rows + 1;
        for _ in 0..ops {
            let pick = rng.range(0, 20);
            if live.is_empty() || (5..8).contains(&pick) {
                let cents = rng.range(0, 1_000_000) as i64;
                tx.execute(
                    "INSERT INTO orders (id, cents, status) VALUES (?1, ?2, 'active')",
                    [next, cents],
                )
                .expect("an application insert");
                live.push(next);
                next += 1;
                continue;
            }
            let i = rng.range(0, live.len() as u64) as usize;
            let id = live[i];
            match pick {
                0..5 | 10..18 => {
                    let cents = rng.range(0, 1_000_000) as i64;
                    let status = if rng.range(0, 2) == 0 {
                        "active"
                    } else {
                        "closed"
                    };
                    tx.execute(
                        "UPDATE orders SET cents = ?1, status = ?2 WHERE id = ?3",
                        rusqlite::params![cents, status, id],
                    )
                    .expect("an application update");
                }
                8..10 | 18 => {
                    tx.execute("DELETE FROM orders WHERE id = ?1", [id])
                        .expect("an application delete");
                    live.swap_remove(i);
                }
                _ => {
                    tx.execute("UPDATE orders SET id = ?1 WHERE id = ?2", [next, id])
                        .expect("an application key change");
                    live[i] = next;
                    next += 1;
                }
            }
        }
        tx.commit().expect("committing the application's writes");
    }
    let json = d.json(&["fence", "on"], 0);
    json["journal_rows"]
        .as_i64()
        .unwrap_or_else(|| panic!("journal_rows in {json:#}"))
}

/// One journal entry as JSON: `(seq, op, key, old_key, old, new)`; `key` is
/// the array of the first `key_len` columns of the after-image (the
/// before-image for a delete), `old_key` the before-image's when an update
/// changed it, `old`/`new` objects keyed by target column.
pub type JournalJson = (
    i64,
    String,
    serde_json::Value,
    Option<serde_json::Value>,
    Option<serde_json::Value>,
    Option<serde_json::Value>,
);

/// Reads the target's journal back from its image tables, through the
/// engine (SQLite or PostgreSQL: the same tables on both).
pub fn journal_json(d: &Dir, key_len: usize) -> Vec<JournalJson> {
    use serde_json::{Value as Json, json};
    let to_json = |v: &Value| match v {
        Value::Null => Json::Null,
        Value::Integer(i) => json!(i),
        Value::Real(r) => json!(r),
        Value::Text(t) => Json::String(t.clone()),
        Value::Blob(b) => {
            json!({ "blob": b.iter().map(|x| format!("{x:02x}")).collect::<String>() })
        }
    };
    let heads = d.query(
        "target.db",
        "SELECT j.seq, j.op, j.img, t.columns FROM _cutover_journal j JOIN _cutover_journal_tables t USING (img) ORDER BY j.seq",
    );
    let mut out = Vec::new();
    for head in heads {
        let (seq, op, img, columns) = match head.as_slice() {
            [
                Value::Integer(seq),
                Value::Text(op),
                Value::Integer(img),
                Value::Text(columns),
            ] => (*seq, op.clone(), *img, columns.clone()),
            other => panic!("a journal entry {other:?}"),
        };
        let cols: Vec<String> = serde_json::from_str(&columns).expect("column list");
        let image = |prefix: &str| -> Option<(Json, Json)> {
            let list = (1..=cols.len())
                .map(|i| format!("{prefix}{i}"))
                .collect::<Vec<_>>()
                .join(", ");
            let rows = d
                .try_query(
                    "target.db",
                    &format!("SELECT {list} FROM _cutover_journal_{img} WHERE seq = {seq}"),
                )
                .ok()?;
            let r = rows.first()?;
            let mut obj = serde_json::Map::new();
            let mut key = Vec::new();
            for (i, c) in cols.iter().enumerate() {
                let v = to_json(&r[i]);
                if i < key_len {
                    key.push(v.clone());
                }
                obj.insert(c.clone(), v);
            }
            Some((Json::Array(key), Json::Object(obj)))
        };
        let (old, new) = match op.as_str() {
            "insert" => (None, image("n")),
            "delete" => (image("o"), None),
            _ => (image("o"), image("n")),
        };
        let key = new
            .as_ref()
            .or(old.as_ref())
            .map(|k| k.0.clone())
            .expect("an image");
        let old_key = match (&old, &new) {
            (Some(o), Some(n)) if o.0 != n.0 => Some(o.0.clone()),
            _ => None,
        };
        out.push((seq, op, key, old_key, old.map(|o| o.1), new.map(|n| n.1)));
    }
    out
}
