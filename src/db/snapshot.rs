//! A whole database as drills compare it before and after a crash: every
//! table (cutover's own and the engine's record of ids too), each as its
//! rows sorted, a row as its values' JSON, leaving out the columns that
//! hold a time (`at`, `*_at`), which a rerun writes anew. Written once for
//! every engine, over the catalogue and key-ordered scans.

use anyhow::Result;

use super::Db;

/// Every table of `db` with its rows, in table then row order.
pub fn snapshot(db: &Db) -> Result<Vec<(String, Vec<String>)>> {
    let mut out = Vec::new();
    for t in db.catalogue().tables(true)? {
        let columns: Vec<String> = db
            .catalogue()
            .table_columns(&t)?
            .into_iter()
            .map(|c| c.name)
            .filter(|n| n != "at" && !n.ends_with("_at"))
            .collect();
        if columns.is_empty() {
            continue;
        }
        let names: Vec<&str> = columns.iter().map(String::as_str).collect();
        // Every column a key: a total order, whatever the table declares.
        let sql = db.rows().table_sql(&t, &names, names.len(), None);
        let mut rows = Vec::new();
        db.scan(&sql, None, |row| {
            let values: Vec<serde_json::Value> = row.iter().map(|v| v.to_json()).collect();
            rows.push(serde_json::Value::Array(values).to_string());
            Ok(true)
        })?;
        rows.sort();
        out.push((t, rows));
    }
    Ok(out)
}
