//! Key-ordered scans and keyed writes: the statements of a table, written
//! once per run, and values bound exactly as they are.

use anyhow::{Context, Result, bail};

use super::*;
use crate::db::types::{Conditional, PartialUpdate};

impl Rows for Sqlite {
    /// Each value hashed where SQLite holds it ([`Sqlite::digest_in_place`]).
    fn rows_digest(&self, sql: &TableSql) -> Result<Option<String>> {
        self.digest_in_place(sql)
    }

    fn table_sql(
        &self,
        table: &str,
        columns: &[&str],
        key_len: usize,
        first: Option<usize>,
    ) -> TableSql {
        // Generated columns are read, never written: the table computes
        // them. A table that cannot be described writes every column, and
        // running the statements reports what is wrong.
        let generated: Vec<String> = self
            .generated_columns(table)
            .map(|g| g.into_iter().map(|g| g.name).collect())
            .unwrap_or_default();
        match first {
            None => table_sql(table, columns, key_len, &generated),
            Some(first) => ordered_by(table, columns, key_len, first, &generated),
        }
    }

    /// Counted either way: SQLite keeps no estimate worth more.
    fn row_count(&self, sql: &TableSql, _count: Count) -> Result<i64> {
        Ok(self
            .conn
            .prepare_cached(&sql.count)?
            .query_row([], |r| r.get(0))?)
    }

    /// Values are copied once, into the block: no allocation per row. A
    /// large value of a column read as a digest is hashed where SQLite
    /// holds it, never copied.
    fn scan_into(
        &self,
        sql: &TableSql,
        after: Option<&[Value]>,
        block_rows: usize,
        f: &mut dyn FnMut(Block) -> Result<bool>,
    ) -> Result<()> {
        let (text, binds): (&str, Vec<Bind<'_>>) = match after {
            None => (&sql.scan, Vec::new()),
            Some(k) => (&sql.scan_after, k.iter().map(Bind).collect()),
        };
        let mut st = self
            .conn
            .prepare(text)
            .with_context(|| format!("reading table '{}' in {}", sql.table, self.location))?;
        let mut rows = st.query(rusqlite::params_from_iter(binds.iter()))?;
        let mut block = Block::new(sql.width, block_rows);
        let digesting = sql.digested.contains(&true);
        while let Some(r) = rows.next()? {
            if digesting {
                for i in 0..sql.width {
                    match sql.digests(i) {
                        true => block.push_digesting(cell(r.get_ref(i)?)),
                        false => block.push(cell(r.get_ref(i)?)),
                    }
                }
            } else {
                for i in 0..sql.width {
                    block.push(cell(r.get_ref(i)?));
                }
            }
            if block.full(block_rows) {
                let full = std::mem::replace(&mut block, Block::new(sql.width, block_rows));
                if !f(full)? {
                    return Ok(());
                }
            }
        }
        if !block.is_empty() {
            f(block)?;
        }
        Ok(())
    }

    /// The row stored under `key`, if any.
    fn get_row(&self, sql: &TableSql, key: &[Value]) -> Result<Option<Row>> {
        let mut st = self.conn.prepare_cached(&sql.select_by_key)?;
        let mut rows = st.query(rusqlite::params_from_iter(key.iter().map(Bind)))?;
        let first = match rows.next()? {
            Some(r) => (0..sql.width)
                .map(|i| {
                    let c = cell(r.get_ref(i)?);
                    Ok(
                        match sql.digests(i).then(|| c.digest_if_large()).flatten() {
                            Some(d) => Value::Digested(Box::new(d)),
                            None => c.to_value(),
                        },
                    )
                })
                .collect::<rusqlite::Result<Row>>()?,
            None => return Ok(None),
        };
        if rows.next()?.is_some() {
            bail!(
                "table '{}' in {} holds more than one row with key {}; the spec's key must be unique",
                sql.table,
                self.location,
                crate::value::display_key(key)
            );
        }
        Ok(Some(first))
    }

    fn write_row(&self, sql: &TableSql, write: RowWrite<'_>) -> Result<usize> {
        match write {
            RowWrite::Insert(row) => self.insert_row(sql, row),
            RowWrite::Update { key, row } => self.update_row(sql, key, row),
            RowWrite::Delete(key) => Ok(self
                .conn
                .prepare_cached(&sql.delete)?
                .execute(rusqlite::params_from_iter(key.iter().map(Bind)))?),
            RowWrite::All => Ok(self
                .conn
                .execute(&format!("DELETE FROM {}", quote_ident(&sql.table)), [])?),
        }
    }

    /// A prepared insert for a run of rows from [`Block`]s.
    fn inserter<'a>(&'a self, sql: &TableSql) -> Result<Box<dyn BatchInsert + 'a>> {
        Ok(Box::new(Inserter {
            st: self.conn.prepare_cached(&sql.insert)?,
            cols: sql.written_columns(),
        }))
    }

    /// None: SQLite's prepared insert is its fastest way in.
    fn bulk_insert(&self, _sql: &TableSql, _blocks: &[Block]) -> Result<Option<u64>> {
        Ok(None)
    }

    fn conditional_writer<'a>(&'a self, sql: &TableSql) -> Option<Box<dyn ConditionalWrite + 'a>> {
        sql.conditional.as_ref()?;
        Some(Box::new(ConditionalWriter {
            conn: &self.conn,
            sql: sql.clone(),
            insert: None,
            update: None,
            delete: None,
            partial: std::collections::HashMap::new(),
        }))
    }

    /// The largest integer in a column (index-assisted when there is one).
    fn max_integer(&self, table: &str, column: &str) -> Result<Option<i64>> {
        let c = quote_ident(column);
        let sql = format!(
            "SELECT max({c}) FROM {} WHERE typeof({c}) = 'integer'",
            quote_ident(table)
        );
        Ok(self.conn.query_row(&sql, [], |r| r.get(0))?)
    }
}

impl Sqlite {
    /// Inserts a row, its large values bound where they lie.
    fn insert_row(&self, sql: &TableSql, row: &[Value]) -> Result<usize> {
        if row.iter().any(Value::is_large) {
            return Ok(execute_in_place(
                &self.conn,
                &sql.insert,
                sql.written(row, 0),
            )?);
        }
        Ok(self
            .conn
            .prepare_cached(&sql.insert)?
            .execute(rusqlite::params_from_iter(sql.written(row, 0).map(Bind)))?)
    }

    /// Rewrites the row stored under `old_key` (which may differ from the
    /// row's own key when the key changed).
    fn update_row(&self, sql: &TableSql, old_key: &[Value], row: &[Value]) -> Result<usize> {
        let k = sql.key_len;
        let large = row.iter().any(Value::is_large);
        // The common update leaves the key alone and sets the other columns
        // only; a table of nothing but its key takes the full statement.
        if row[..k] == *old_key
            && let Some(update) = &sql.update_values
        {
            let values = sql.written(row, k).chain(old_key);
            if large {
                return Ok(execute_in_place(&self.conn, update, values)?);
            }
            return Ok(self
                .conn
                .prepare_cached(update)?
                .execute(rusqlite::params_from_iter(values.map(Bind)))?);
        }
        let values = sql.written(row, 0).chain(old_key);
        if large {
            return Ok(execute_in_place(&self.conn, &sql.update, values)?);
        }
        Ok(self
            .conn
            .prepare_cached(&sql.update)?
            .execute(rusqlite::params_from_iter(values.map(Bind)))?)
    }
}

impl Sqlite {
    /// Inserts rows into a table of a temporary database (a snapshot being
    /// read in), all in one transaction.
    pub(crate) fn fill(
        &self,
        table: &str,
        width: usize,
        rows: impl Iterator<Item = Result<Row>>,
    ) -> Result<u64> {
        let cols = (1..=width)
            .map(|i| format!("?{i}"))
            .collect::<Vec<_>>()
            .join(", ");
        self.conn.execute_batch("BEGIN")?;
        let mut n = 0;
        {
            let mut st = self.conn.prepare(&format!(
                "INSERT INTO {} VALUES ({cols})",
                quote_ident(table)
            ))?;
            for row in rows {
                let row = row?;
                st.execute(rusqlite::params_from_iter(row.iter().map(Bind)))?;
                n += 1;
            }
        }
        self.conn.execute_batch("COMMIT")?;
        Ok(n)
    }
}

/// The statements of a table whose scans go in the order of column
/// `first` (sync's watermark), then the key.
fn ordered_by(
    table: &str,
    columns: &[&str],
    key_len: usize,
    first: usize,
    generated: &[String],
) -> TableSql {
    let mut sql = table_sql(table, columns, key_len, generated);
    let cols: Vec<String> = columns.iter().map(|c| column_expr(c)).collect();
    // BINARY whatever the column's collation, as the resumed scan's
    // condition compares it: the watermark's order is the engine-neutral one.
    let order = std::iter::once(binary(&cols[first]))
        .chain(cols[..key_len].iter().map(|c| binary(c)))
        .collect::<Vec<_>>()
        .join(", ");
    sql.scan = format!(
        "SELECT {} FROM {} ORDER BY {order}",
        cols.join(", "),
        quote_ident(table)
    );
    sql.scan_after = format!(
        "SELECT {} FROM {} WHERE {} >= ?1 ORDER BY {order}",
        cols.join(", "),
        quote_ident(table),
        binary(&cols[first])
    );
    sql
}

/// The statements of `table` reading `columns` in this order, the first
/// `key_len` the key ([`Rows::table_sql`]); `generated` names the table's
/// generated columns, which are read and never written.
fn table_sql(table: &str, columns: &[&str], key_len: usize, generated: &[String]) -> TableSql {
    let t = quote_ident(table);
    let real: Vec<usize> = (0..columns.len())
        .filter(|&i| !columns[i].is_empty() && !generated.iter().any(|g| g == columns[i]))
        .collect();
    let cols: Vec<String> = columns.iter().map(|c| column_expr(c)).collect();
    let keys = &cols[..key_len];
    let written: Vec<String> = real.iter().map(|&i| cols[i].clone()).collect();
    let rest: Vec<String> = real
        .iter()
        .filter(|&&i| i >= key_len)
        .map(|&i| cols[i].clone())
        .collect();
    let list = cols.join(", ");
    // Key order is always BINARY (the order the merge relies on), whatever
    // collation a key column declares: a NOCASE key is sorted, a BINARY
    // one still walks its index.
    let order = keys
        .iter()
        .map(|k| binary(k))
        .collect::<Vec<_>>()
        .join(", ");
    let n = cols.len();
    let w = written.len();
    let keys_written = (0..key_len).all(|i| real.contains(&i));
    // Each column adds two levels to the condition's expression tree, which
    // SQLite caps at a depth of 1,000: a wider table reads its row first.
    let narrow = written.len() <= 256;
    TableSql {
        table: table.to_string(),
        key_len,
        width: n,
        columns: columns.iter().map(|c| c.to_string()).collect(),
        real: (real.len() < n).then_some(real),
        scan: format!("SELECT {list} FROM {t} ORDER BY {order}"),
        scan_after: format!(
            "SELECT {list} FROM {t} WHERE ({order}) > ({}) ORDER BY {order}",
            params(key_len, 1)
        ),
        select_by_key: format!("SELECT {list} FROM {t} WHERE {}", key_match(keys, 1)),
        insert: format!(
            "INSERT INTO {t} ({}) VALUES ({})",
            written.join(", "),
            params(w, 1)
        ),
        update: format!(
            "UPDATE {t} SET {} WHERE {}",
            assign(&written, 1, ", "),
            key_match(keys, w + 1)
        ),
        // The common update leaves the key alone: set only the other
        // columns, so SQLite need not touch the key's index.
        update_values: (!rest.is_empty()).then(|| {
            format!(
                "UPDATE {t} SET {} WHERE {}",
                assign(&rest, 1, ", "),
                key_match(keys, rest.len() + 1)
            )
        }),
        delete: format!("DELETE FROM {t} WHERE {}", key_match(keys, 1)),
        count: format!("SELECT count(*) FROM {t}"),
        conditional: (keys_written && narrow && !rest.is_empty())
            .then(|| conditional(&t, keys, &written, &rest)),
        digested: Vec::new(),
        plan: None,
    }
}

/// A table's conditional statements ([`Conditional`]): `written` its
/// quoted columns, `rest` those after the key.
fn conditional(t: &str, keys: &[String], written: &[String], rest: &[String]) -> Conditional {
    // `?first…`: the stored row, each value exactly (its storage
    // class, and BINARY whatever the column's collation).
    let exactly = |first: usize| {
        keys.iter()
            .enumerate()
            .map(|(i, k)| format!("{k} = ?{}", first + i))
            .chain(written.iter().enumerate().map(|(i, c)| {
                let p = first + i;
                format!("typeof({c}) = typeof(?{p}) AND {c} IS ?{p} COLLATE BINARY")
            }))
            .collect::<Vec<_>>()
            .join(" AND ")
    };
    Conditional {
        insert: format!(
            "INSERT INTO {t} ({}) VALUES ({}) ON CONFLICT DO NOTHING",
            written.join(", "),
            params(written.len(), 1)
        ),
        update: format!(
            "UPDATE {t} SET {} WHERE {}",
            assign(rest, 1, ", "),
            exactly(rest.len() + 1)
        ),
        delete: format!("DELETE FROM {t} WHERE {}", exactly(1)),
        partial: Some(PartialUpdate {
            head: format!("UPDATE {t} SET "),
            set: rest
                .iter()
                .enumerate()
                .map(|(i, c)| format!("{c} = ?{}", i + 1))
                .collect(),
            tail: format!(" WHERE {}", exactly(rest.len() + 1)),
        }),
    }
}

/// A column as a statement reads it: quoted, or NULL for a column the table
/// does not have (an empty name, see [`Rows::table_sql`]).
fn column_expr(name: &str) -> String {
    if name.is_empty() {
        "NULL".to_string()
    } else {
        quote_ident(name)
    }
}

/// A quoted column in BINARY order.
fn binary(quoted: &str) -> String {
    format!("{quoted} COLLATE BINARY")
}

/// `?first, ?first+1, …`: `n` numbered parameters.
fn params(n: usize, first: usize) -> String {
    (first..first + n)
        .map(|i| format!("?{i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The row under the key bound from `?first` on, exactly: `"k" = ?n AND
/// "k" = ?n COLLATE BINARY` per column. The first term walks the key's
/// index in whatever collation it declares; the second keeps a NOCASE key
/// `'A'` from reaching the row stored as `'a'`.
fn key_match(keys: &[String], first: usize) -> String {
    keys.iter()
        .enumerate()
        .map(|(i, k)| format!("{k} = ?{0} AND {k} = ?{0} COLLATE BINARY", first + i))
        .collect::<Vec<_>>()
        .join(" AND ")
}

/// `"a" = ?first <sep> "b" = ?first+1 …`.
fn assign(cols: &[String], first: usize, sep: &str) -> String {
    cols.iter()
        .enumerate()
        .map(|(i, c)| format!("{c} = ?{}", first + i))
        .collect::<Vec<_>>()
        .join(sep)
}

/// A table's conditional statements, each prepared on its first use and
/// then held: looking one up in the connection's cache for every entry (a
/// hash of its long text) cost a replay about a twentieth of its time.
struct ConditionalWriter<'a> {
    conn: &'a rusqlite::Connection,
    sql: TableSql,
    insert: Option<rusqlite::CachedStatement<'a>>,
    update: Option<rusqlite::CachedStatement<'a>>,
    delete: Option<rusqlite::CachedStatement<'a>>,
    /// Updates of some of the columns, by the columns they set (bits).
    partial: std::collections::HashMap<[u64; 4], rusqlite::CachedStatement<'a>>,
}

impl ConditionalWrite for ConditionalWriter<'_> {
    fn write_if(&mut self, before: Option<&[Value]>, after: Option<&[Value]>) -> Result<bool> {
        let ConditionalWriter {
            conn,
            sql,
            insert,
            update,
            delete,
            partial,
        } = self;
        let Some(w) = &sql.conditional else {
            return Ok(false);
        };
        let k = sql.key_len;
        // What is bound, in order: the written columns of one row from a
        // column on, then of the other from the first (no allocation).
        let none: &[Value] = &[];
        let (slot, text, first, then) = match (before, after) {
            (None, Some(a)) => (insert, &w.insert, (a, 0), (none, 0)),
            (Some(b), Some(a)) if a[..k] == b[..k] => (update, &w.update, (a, k), (b, 0)),
            (Some(b), None) => (delete, &w.delete, (b, 0), (none, 0)),
            _ => return Ok(false),
        };
        // An update sets the columns it changes, as the application's
        // statement did, unless it changes all or none of them.
        // The columns it changes, as bits: a table has conditional writes
        // only up to 256 written columns, so no update allocates.
        let mut changed = [0u64; 4];
        let mut n = 0;
        if let (Some(b), Some(a), Some(_)) = (before, after, &w.partial) {
            for (i, (x, y)) in sql.written(a, k).zip(sql.written(b, k)).enumerate() {
                if x != y {
                    changed[i / 64] |= 1 << (i % 64);
                    n += 1;
                }
            }
        }
        let st = match &w.partial {
            Some(p) if n > 0 && n < p.set.len() => match partial.entry(changed) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    let set: Vec<&str> = (0..p.set.len())
                        .filter(|i| e.key()[i / 64] & (1 << (i % 64)) != 0)
                        .map(|i| p.set[i].as_str())
                        .collect();
                    let text = format!("{}{}{}", p.head, set.join(", "), p.tail);
                    e.insert(conn.prepare_cached(&text)?)
                }
            },
            _ => match slot {
                Some(st) => st,
                None => slot.insert(conn.prepare_cached(text)?),
            },
        };
        // A large value (or one known by its digest) takes the long way,
        // where it is compared by digest and written in place: bound here,
        // SQLite would copy it, and keep it in the held statement until the
        // next write binds another.
        if first.0.iter().chain(then.0).any(Value::is_large) {
            return Ok(false);
        }
        let binds = sql
            .written(first.0, first.1)
            .chain(sql.written(then.0, then.1));
        for (i, v) in binds.enumerate() {
            st.raw_bind_parameter(i + 1, Bind(v))?;
        }
        match st.raw_execute() {
            Ok(n) => Ok(n == 1),
            // Only this statement is undone: the caller's write, made the
            // long way, meets the same refusal and says what it is.
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::ConstraintViolation =>
            {
                Ok(false)
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// Inserts rows straight from blocks, binding each cell as it is.
struct Inserter<'a> {
    st: rusqlite::CachedStatement<'a>,
    /// The block columns bound, in order.
    cols: Vec<usize>,
}

impl BatchInsert for Inserter<'_> {
    fn insert(&mut self, block: &Block, row: usize) -> Result<bool> {
        for (p, &c) in self.cols.iter().enumerate() {
            self.st
                .raw_bind_parameter(p + 1, BindCell(block.get(row, c)))?;
        }
        match self.st.raw_execute() {
            Ok(_) => Ok(true),
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
                    || e.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE =>
            {
                Ok(false)
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// Runs one write with every value bound where it lies (`SQLITE_STATIC`),
/// returning the rows it changed. rusqlite binds text and blobs
/// `SQLITE_TRANSIENT`: SQLite copies each before it builds the row's record,
/// a second copy of its own; for a row holding a large value
/// ([`crate::value::LARGE`]) that first copy is one too many. The rows
/// written and the errors are those of the same statement run through
/// rusqlite.
fn execute_in_place<'v>(
    conn: &rusqlite::Connection,
    sql: &str,
    values: impl Iterator<Item = &'v Value>,
) -> rusqlite::Result<usize> {
    use rusqlite::ffi;
    use std::ffi::{CStr, CString, c_char, c_int, c_void};

    struct Statement(*mut ffi::sqlite3_stmt);
    impl Drop for Statement {
        fn drop(&mut self) {
            // SAFETY: a statement prepared below (or NULL, which SQLite
            // ignores), finalized once.
            unsafe {
                ffi::sqlite3_finalize(self.0);
            }
        }
    }
    /// The connection's last error, as rusqlite reports one.
    ///
    /// # Safety
    /// `db` is an open connection, used on this thread.
    unsafe fn failure(db: *mut ffi::sqlite3) -> rusqlite::Error {
        // SAFETY: as the caller promises; SQLite's message is a C string
        // that lives until the next call on the connection.
        let (code, message) = unsafe {
            (
                ffi::sqlite3_extended_errcode(db),
                CStr::from_ptr(ffi::sqlite3_errmsg(db))
                    .to_string_lossy()
                    .into_owned(),
            )
        };
        rusqlite::Error::SqliteFailure(ffi::Error::new(code), Some(message))
    }

    let values: Vec<CellRef<'v>> = values.map(Value::as_cell).collect();
    for v in &values {
        value_ref(*v)?;
    }
    let text = CString::new(sql)?;
    // SAFETY: the handle is this open connection's, used on its own thread
    // (rusqlite's `Connection` is not `Sync`), and nothing of rusqlite's runs
    // on it until this returns. Every text and blob bound is borrowed by
    // `values`, which outlives the statement: it is finalized when `st`
    // drops, before this returns. A Rust slice's pointer is never NULL
    // (SQLite would bind NULL as a NULL value), even when it is empty.
    unsafe {
        let db = conn.handle();
        let mut raw = std::ptr::null_mut();
        let rc = ffi::sqlite3_prepare_v2(db, text.as_ptr(), -1, &mut raw, std::ptr::null_mut());
        let st = Statement(raw);
        if rc != ffi::SQLITE_OK {
            return Err(failure(db));
        }
        for (i, v) in values.iter().enumerate() {
            let n = (i + 1) as c_int;
            let rc = match *v {
                // A digested value was refused above.
                CellRef::Null | CellRef::Digested(_) => ffi::sqlite3_bind_null(st.0, n),
                CellRef::Integer(x) => ffi::sqlite3_bind_int64(st.0, n, x),
                CellRef::Real(x) => ffi::sqlite3_bind_double(st.0, n, x),
                CellRef::Text(t) => ffi::sqlite3_bind_text64(
                    st.0,
                    n,
                    t.as_ptr() as *const c_char,
                    t.len() as u64,
                    ffi::SQLITE_STATIC(),
                    ffi::SQLITE_UTF8 as u8,
                ),
                CellRef::Blob(b) => ffi::sqlite3_bind_blob64(
                    st.0,
                    n,
                    b.as_ptr() as *const c_void,
                    b.len() as u64,
                    ffi::SQLITE_STATIC(),
                ),
            };
            if rc != ffi::SQLITE_OK {
                return Err(failure(db));
            }
        }
        match ffi::sqlite3_step(st.0) {
            ffi::SQLITE_DONE => Ok(ffi::sqlite3_changes64(db) as usize),
            ffi::SQLITE_ROW => Err(rusqlite::Error::ExecuteReturnedResults),
            _ => Err(failure(db)),
        }
    }
}
