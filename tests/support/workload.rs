//! The helpers of the adversarial suites (hostile_*, fence_bypass,
//! concurrency, environment, kills, properties): a seeded random workload on
//! the running example, and the journal and applied set read back.

use rusqlite::types::Value;

use super::{Dir, ORDERS_SPEC, ORDERS_TARGET, Rng, dollars};

/// The journal `seq`s recorded as applied in the source, in order (empty
/// before the first replay).
pub fn applied_seqs(d: &Dir) -> Vec<i64> {
    if !d.has_table("source.db", "_cutover_applied") {
        return Vec::new();
    }
    d.query("source.db", "SELECT seq FROM _cutover_applied ORDER BY seq")
        .into_iter()
        .map(|r| match r[0] {
            Value::Integer(i) => i,
            ref other => panic!("_cutover_applied.seq holds {other:?}"),
        })
        .collect()
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

/// Reads the target's journal back from its image tables.
pub fn journal_json(d: &Dir, key_len: usize) -> Vec<JournalJson> {
    use serde_json::{Value as Json, json};
    let conn = d.conn("target.db");
    let to_json = |v: rusqlite::types::ValueRef<'_>| match v {
        rusqlite::types::ValueRef::Null => Json::Null,
        rusqlite::types::ValueRef::Integer(i) => json!(i),
        rusqlite::types::ValueRef::Real(r) => json!(r),
        rusqlite::types::ValueRef::Text(t) => Json::String(String::from_utf8_lossy(t).into()),
        rusqlite::types::ValueRef::Blob(b) => {
            json!({ "blob": b.iter().map(|x| format!("{x:02x}")).collect::<String>() })
        }
    };
    let mut heads = conn
        .prepare("SELECT j.seq, j.op, j.img, t.columns FROM _cutover_journal j JOIN _cutover_journal_tables t USING (img) ORDER BY j.seq")
        .expect("reading the journal");
    let heads: Vec<(i64, String, i64, String)> = heads
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .expect("reading the journal")
        .collect::<Result<_, _>>()
        .expect("reading the journal");
    let mut out = Vec::new();
    for (seq, op, img, columns) in heads {
        let cols: Vec<String> = serde_json::from_str(&columns).expect("column list");
        let image = |prefix: &str| -> Option<(Json, Json)> {
            let list = (1..=cols.len())
                .map(|i| format!("{prefix}{i}"))
                .collect::<Vec<_>>()
                .join(", ");
            let mut st = conn
                .prepare(&format!(
                    "SELECT {list} FROM _cutover_journal_{img} WHERE seq = ?1"
                ))
                .ok()?;
            st.query_row([seq], |r| {
                let mut obj = serde_json::Map::new();
                let mut key = Vec::new();
                for (i, c) in cols.iter().enumerate() {
                    let v = to_json(r.get_ref(i)?);
                    if i < key_len {
                        key.push(v.clone());
                    }
                    obj.insert(c.clone(), v);
                }
                Ok((Json::Array(key), Json::Object(obj)))
            })
            .ok()
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
