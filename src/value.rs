//! Typed values, the same for every engine, and the one key order every
//! key-ordered scan and merge relies on.
//!
//! The kinds are the ones both engines' values map to without loss: NULL,
//! integer, real, text (with `TextBytes` for SQLite text that is not UTF-8)
//! and bytes. An exact decimal (PostgreSQL's NUMERIC) or a time is carried as
//! its canonical text, digit for digit, so it compares and round-trips
//! exactly; the transforms turn it into integers where the spec says so.
//!
//! A value keeps its kind: the text `'1250'` is not the integer `1250`, and
//! a reconcile that forgot this would pass a target whose money column
//! silently became text.

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

use anyhow::{Result, bail};
use serde_json::Value as Json;

/// A text or blob at least this long is large. Read from a database it is
/// kept once and shared, never copied ([`Value::Large`]); where only its
/// equality matters (the gate's comparison, replay's before-image, the
/// source row replay checks against it) it is read as its SHA-256
/// ([`Digested`]) without being kept at all. So a value of any size SQLite
/// allows (1 GB) rolls back in about twice its size (docs/journal.md,
/// "Large values").
pub const LARGE: usize = 1 << 20;

/// What a column holds, in terms no engine owns: each engine maps its own
/// declared types to a kind when it reads its catalogue, and a kind to its
/// own type when it makes a column (`sync --evolve`), so that no engine
/// reads another engine's type names. What a value is stays [`Value`]'s
/// business; the kind says what the column admits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ColumnKind {
    /// Integers (of at most 64 bits).
    Integer,
    /// Floating point.
    Real,
    /// Exact decimals, with the declared precision and scale where there
    /// are.
    Decimal {
        precision: Option<u32>,
        scale: Option<u32>,
    },
    /// Money in the engine's own money type (PostgreSQL's `money`).
    Money,
    /// Text, of at most `max_len` characters when bounded, padded to it
    /// when `fixed`.
    Text {
        max_len: Option<u32>,
        fixed: bool,
    },
    Blob,
    Boolean,
    Date,
    Timestamp {
        zone: bool,
    },
    /// A declared type that admits whatever it is given and that no kind
    /// above describes (SQLite's `DATETIME`, of NUMERIC affinity): only a
    /// text column elsewhere holds every value of it.
    Loose(String),
    /// No declared type at all: any value (a SQLite column without one).
    Any,
    /// A type of one engine's own (PostgreSQL's `uuid`, an array, a
    /// domain), its values carried as that engine's text for them: the
    /// engine, and the type as it names it.
    Other {
        engine: &'static str,
        name: String,
    },
}

impl ColumnKind {
    /// Whether the column holds numbers that could be an amount of money
    /// (a decimal, a real, money).
    pub fn is_numeric(&self) -> bool {
        matches!(
            self,
            ColumnKind::Decimal { .. } | ColumnKind::Real | ColumnKind::Money
        )
    }

    /// Whether the column is an array of one engine's own (PostgreSQL
    /// names an array type with `[]`: `text[]`), carried as its text.
    pub fn is_array(&self) -> bool {
        matches!(self, ColumnKind::Other { name, .. } if name.ends_with("[]"))
    }

    /// The declared scale of a decimal.
    pub fn scale(&self) -> Option<u32> {
        match self {
            ColumnKind::Decimal { scale, .. } => *scale,
            _ => None,
        }
    }
}

/// One value with its kind (SQLite's storage class).
#[derive(Clone, Debug)]
pub enum Value {
    Null,
    Integer(i64),
    Real(f64),
    Text(String),
    /// Text whose bytes are not UTF-8: SQLite stores what it is given, and
    /// a rollback carries it back as the same text, byte for byte.
    TextBytes(Vec<u8>),
    Blob(Vec<u8>),
    /// A text or blob of at least [`LARGE`] bytes as read, shared by every
    /// copy of the row that holds it: a clone copies no byte. Equal to the
    /// `Text`, `TextBytes` or `Blob` of the same class and bytes.
    Large(Arc<Large>),
    /// A large text or blob known by its length and SHA-256 only: read
    /// where it is only compared, never written. Equal to a value of its
    /// class whose bytes have this length and digest.
    Digested(Box<Digested>),
}

/// The bytes of a [`Value::Large`].
#[derive(Debug, PartialEq, Eq)]
pub struct Large {
    pub text: bool,
    pub bytes: Vec<u8>,
}

/// A text or blob by its class, length and SHA-256 ([`Value::Digested`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Digested {
    pub text: bool,
    pub len: u64,
    pub sha256: [u8; 32],
}

impl Digested {
    /// The digest of a text (`text`) or blob's bytes.
    pub fn of(text: bool, bytes: &[u8]) -> Digested {
        Digested {
            text,
            len: bytes.len() as u64,
            sha256: sha2::Digest::finalize(<sha2::Sha256 as sha2::Digest>::new_with_prefix(bytes))
                .into(),
        }
    }

    /// Whether `bytes`, of class text (`text`) or blob, are the bytes this
    /// digest was made of: the class and length first, then the digest.
    pub fn matches(&self, text: bool, bytes: &[u8]) -> bool {
        self.text == text && self.len == bytes.len() as u64 && *self == Digested::of(text, bytes)
    }
}

impl fmt::Display for Digested {
    /// A digested value is shown as what it is; its bytes are not here.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "<{} of {} bytes, SHA-256 {}>",
            if self.text { "text" } else { "blob" },
            self.len,
            hex::encode(self.sha256)
        )
    }
}

impl PartialEq for Value {
    /// Equality with storage class: the text `'1250'` is not the integer
    /// `1250`. A large value equals the same class and bytes however it is
    /// held (shared, or known by its digest).
    fn eq(&self, other: &Value) -> bool {
        match (self, other) {
            (Value::Null, Value::Null) => true,
            (Value::Integer(a), Value::Integer(b)) => a == b,
            (Value::Real(a), Value::Real(b)) => a == b,
            (Value::Text(a), Value::Text(b)) => a == b,
            (Value::TextBytes(a), Value::TextBytes(b)) => a == b,
            (Value::Blob(a), Value::Blob(b)) => a == b,
            (Value::Large(_) | Value::Digested(_), _)
            | (_, Value::Large(_) | Value::Digested(_)) => self.as_cell() == other.as_cell(),
            _ => false,
        }
    }
}

/// A row of a table in spec column order (key columns first).
pub type Row = Vec<Value>;

impl Value {
    /// The storage class name SQLite's `typeof()` would give.
    pub fn class(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Integer(_) => "integer",
            Value::Real(_) => "real",
            Value::Text(_) | Value::TextBytes(_) => "text",
            Value::Blob(_) => "blob",
            Value::Large(l) if l.text => "text",
            Value::Large(_) => "blob",
            Value::Digested(d) if d.text => "text",
            Value::Digested(_) => "blob",
        }
    }

    /// A text or blob as read from a database: [`Value::Large`] from
    /// [`LARGE`] bytes on, so that clones of its row share it.
    pub fn from_bytes(text: bool, bytes: Vec<u8>) -> Value {
        if bytes.len() >= LARGE {
            return Value::Large(Arc::new(Large { text, bytes }));
        }
        match text {
            false => Value::Blob(bytes),
            true => match String::from_utf8(bytes) {
                Ok(s) => Value::Text(s),
                Err(e) => Value::TextBytes(e.into_bytes()),
            },
        }
    }

    /// Whether this is a large text or blob, held or digested.
    pub fn is_large(&self) -> bool {
        match self {
            Value::Large(_) | Value::Digested(_) => true,
            Value::Text(t) => t.len() >= LARGE,
            Value::TextBytes(b) | Value::Blob(b) => b.len() >= LARGE,
            _ => false,
        }
    }

    /// The JSON form used in journal images, feeds and reports. A blob becomes
    /// `{"blob": "<hex>"}` so that it cannot be mistaken for text.
    pub fn to_json(&self) -> Json {
        match self {
            Value::Null => Json::Null,
            Value::Integer(i) => Json::from(*i),
            // JSON has no infinities: they travel as {"real": "inf"}. SQLite
            // stores NaN as NULL, so a NaN is never read from a database.
            Value::Real(r) if r.is_nan() => Json::Null,
            Value::Real(r) => serde_json::Number::from_f64(*r).map_or_else(
                || serde_json::json!({ "real": if *r > 0.0 { "inf" } else { "-inf" } }),
                Json::Number,
            ),
            Value::Text(t) => Json::String(t.clone()),
            Value::TextBytes(b) => serde_json::json!({ "text_hex": hex::encode(b) }),
            Value::Blob(b) => serde_json::json!({ "blob": hex::encode(b) }),
            Value::Large(l) => match (l.text, std::str::from_utf8(&l.bytes)) {
                (true, Ok(t)) => Json::String(t.to_string()),
                (true, Err(_)) => serde_json::json!({ "text_hex": hex::encode(&l.bytes) }),
                (false, _) => serde_json::json!({ "blob": hex::encode(&l.bytes) }),
            },
            // Only reports show a digested value; a feed never holds one
            // (`from_json` refuses it).
            Value::Digested(d) => serde_json::json!({
                if d.text { "text_sha256" } else { "blob_sha256" }: hex::encode(d.sha256),
                "bytes": d.len,
            }),
        }
    }

    /// Reads the JSON form back. A JSON integer is an integer and a JSON
    /// fraction or exponent is a real, as SQLite's `json_object` writes them.
    pub fn from_json(json: &Json) -> Result<Value> {
        Ok(match json {
            Json::Null => Value::Null,
            Json::Number(n) => {
                if let Some(i) = n.as_i64() {
                    Value::Integer(i)
                } else if n.is_u64() {
                    bail!("integer {n} is past the 64-bit range")
                } else if let Some(f) = n.as_f64() {
                    Value::Real(f)
                } else {
                    bail!("number {n} cannot be read")
                }
            }
            Json::String(s) => Value::Text(s.clone()),
            Json::Object(o) if o.len() == 1 && o.contains_key("blob") => match &o["blob"] {
                Json::String(h) => Value::Blob(hex::decode(h)?),
                other => bail!("blob must be hex text, found {other}"),
            },
            Json::Object(o) if o.len() == 1 && o.contains_key("text_hex") => match &o["text_hex"] {
                Json::String(h) => {
                    let bytes = hex::decode(h)?;
                    match String::from_utf8(bytes) {
                        Ok(s) => Value::Text(s),
                        Err(e) => Value::TextBytes(e.into_bytes()),
                    }
                }
                other => bail!("text_hex must be hex text, found {other}"),
            },
            Json::Object(o) if o.len() == 1 && o.contains_key("real") => match o["real"].as_str() {
                Some("inf") => Value::Real(f64::INFINITY),
                Some("-inf") => Value::Real(f64::NEG_INFINITY),
                _ => bail!("a real must be \"inf\" or \"-inf\", found {}", o["real"]),
            },
            other => bail!("{other} is not a value SQLite can store"),
        })
    }

    /// cutover's key order (see [`CellRef::sql_cmp`]).
    pub fn sql_cmp(&self, other: &Value) -> Ordering {
        self.as_cell().sql_cmp(&other.as_cell())
    }

    /// A borrowed view of this value.
    pub fn as_cell(&self) -> CellRef<'_> {
        match self {
            Value::Null => CellRef::Null,
            Value::Integer(i) => CellRef::Integer(*i),
            Value::Real(r) => CellRef::Real(*r),
            Value::Text(t) => CellRef::Text(t.as_bytes()),
            Value::TextBytes(t) => CellRef::Text(t),
            Value::Blob(b) => CellRef::Blob(b),
            Value::Large(l) if l.text => CellRef::Text(&l.bytes),
            Value::Large(l) => CellRef::Blob(&l.bytes),
            Value::Digested(d) => CellRef::Digested(d),
        }
    }
}

/// A value borrowed from a [`Block`] (or a [`Value`]): what the hot paths
/// compare and transform, without allocating. Text is kept as bytes because
/// SQLite does not promise UTF-8.
#[derive(Clone, Copy, Debug)]
pub enum CellRef<'a> {
    Null,
    Integer(i64),
    Real(f64),
    Text(&'a [u8]),
    Blob(&'a [u8]),
    /// A large text or blob known by its digest ([`Value::Digested`]).
    Digested(&'a Digested),
}

impl PartialEq for CellRef<'_> {
    /// Equality with storage class; a digested cell equals the text or
    /// blob of its class whose bytes it was made of.
    #[inline]
    fn eq(&self, other: &CellRef<'_>) -> bool {
        match (self, other) {
            (CellRef::Null, CellRef::Null) => true,
            (CellRef::Integer(a), CellRef::Integer(b)) => a == b,
            (CellRef::Real(a), CellRef::Real(b)) => a == b,
            (CellRef::Text(a), CellRef::Text(b)) | (CellRef::Blob(a), CellRef::Blob(b)) => a == b,
            (CellRef::Digested(a), CellRef::Digested(b)) => a == b,
            (CellRef::Digested(d), CellRef::Text(t)) | (CellRef::Text(t), CellRef::Digested(d)) => {
                d.matches(true, t)
            }
            (CellRef::Digested(d), CellRef::Blob(b)) | (CellRef::Blob(b), CellRef::Digested(d)) => {
                d.matches(false, b)
            }
            _ => false,
        }
    }
}

impl CellRef<'_> {
    /// cutover's key order, defined here once for every engine: NULL, then
    /// numbers (integers and reals compared by value), then text by bytes,
    /// then blobs by bytes. It is SQLite's `ORDER BY … COLLATE BINARY` and
    /// PostgreSQL's `COLLATE "C"`; every scan asks its engine for it and the
    /// merge checks that it got it.
    pub fn sql_cmp(&self, other: &CellRef<'_>) -> Ordering {
        fn rank(v: &CellRef<'_>) -> u8 {
            match v {
                CellRef::Null => 0,
                CellRef::Integer(_) | CellRef::Real(_) => 1,
                CellRef::Text(_) => 2,
                CellRef::Digested(d) if d.text => 2,
                CellRef::Blob(_) | CellRef::Digested(_) => 3,
            }
        }
        match (self, other) {
            (CellRef::Integer(a), CellRef::Integer(b)) => a.cmp(b),
            (CellRef::Real(a), CellRef::Real(b)) => a.total_cmp(b),
            (CellRef::Integer(a), CellRef::Real(b)) => cmp_int_real(*a, *b),
            (CellRef::Real(a), CellRef::Integer(b)) => cmp_int_real(*b, *a).reverse(),
            (CellRef::Text(a), CellRef::Text(b)) | (CellRef::Blob(a), CellRef::Blob(b)) => a.cmp(b),
            // Keys are never read as digests; a digested cell sorts after
            // the bytes of its class, digests by length and digest, so that
            // the order stays total.
            (CellRef::Digested(a), CellRef::Digested(b)) if a.text == b.text => {
                (a.len, a.sha256).cmp(&(b.len, b.sha256))
            }
            (CellRef::Digested(_), CellRef::Text(_) | CellRef::Blob(_))
                if rank(self) == rank(other) =>
            {
                Ordering::Greater
            }
            (CellRef::Text(_) | CellRef::Blob(_), CellRef::Digested(_))
                if rank(self) == rank(other) =>
            {
                Ordering::Less
            }
            _ => rank(self).cmp(&rank(other)),
        }
    }

    /// The owned value. Text that is not UTF-8 is kept as its bytes rather
    /// than altered; a large text or blob is copied once into a value its
    /// row's clones share ([`Value::Large`]).
    pub fn to_value(&self) -> Value {
        match *self {
            CellRef::Text(b) | CellRef::Blob(b) if b.len() >= LARGE => {
                Value::from_bytes(matches!(self, CellRef::Text(_)), b.to_vec())
            }
            _ => self.to_value_small(),
        }
    }

    /// [`CellRef::to_value`] without sharing.
    fn to_value_small(self) -> Value {
        match self {
            CellRef::Null => Value::Null,
            CellRef::Integer(i) => Value::Integer(i),
            CellRef::Real(r) => Value::Real(r),
            CellRef::Text(t) => match std::str::from_utf8(t) {
                Ok(s) => Value::Text(s.to_string()),
                Err(_) => Value::TextBytes(t.to_vec()),
            },
            CellRef::Blob(b) => Value::Blob(b.to_vec()),
            CellRef::Digested(d) => Value::Digested(Box::new(d.clone())),
        }
    }

    /// The digest of a large text or blob, for a reader that only compares
    /// it; `None` for any other cell.
    #[inline]
    pub fn digest_if_large(&self) -> Option<Digested> {
        match *self {
            CellRef::Text(b) if b.len() >= LARGE => Some(Digested::of(true, b)),
            CellRef::Blob(b) if b.len() >= LARGE => Some(Digested::of(false, b)),
            _ => None,
        }
    }

    /// How many bytes the value takes (8 for a number, 0 for NULL): what a
    /// reader counts against a memory budget.
    #[inline]
    pub fn size(&self) -> usize {
        match self {
            CellRef::Null => 0,
            CellRef::Integer(_) | CellRef::Real(_) => 8,
            CellRef::Text(b) | CellRef::Blob(b) => b.len(),
            CellRef::Digested(_) => std::mem::size_of::<Digested>(),
        }
    }
}

/// One cell of a [`Block`]; text and blobs point into the block's bytes.
#[derive(Clone, Copy, Debug)]
enum Cell {
    Null,
    Integer(i64),
    Real(f64),
    Text(u32, u32),
    Blob(u32, u32),
    /// An index into the block's digests.
    Digested(u32),
}

/// A run of rows of one width stored flat: a few allocations per block, none
/// per row. Scans hand rows out in blocks and reconcile works on them.
#[derive(Clone, Debug, Default)]
pub struct Block {
    width: usize,
    cells: Vec<Cell>,
    bytes: Vec<u8>,
    digests: Vec<Digested>,
}

/// The memory a block's cells and bytes may take before a scan hands it
/// on, whatever its row count: wide rows make short blocks, so the blocks in
/// flight between a reader and the merge stay a fixed amount of memory.
pub const BLOCK_BYTES: usize = 256 * 1024;

impl Block {
    pub fn new(width: usize, rows: usize) -> Block {
        let cells = (width * rows).min(BLOCK_BYTES / std::mem::size_of::<Cell>());
        Block {
            width,
            cells: Vec::with_capacity(cells),
            bytes: Vec::with_capacity((rows * width * 8).min(BLOCK_BYTES)),
            digests: Vec::new(),
        }
    }

    /// Whether a scan filling this block should hand it on: it holds
    /// `rows` rows, or [`BLOCK_BYTES`] of memory (checked between rows, so a
    /// block always holds whole rows, and one row however large).
    pub fn full(&self, rows: usize) -> bool {
        self.cells.len() >= rows * self.width
            || self.cells.len() * std::mem::size_of::<Cell>()
                + self.bytes.len()
                + self.digests.len() * std::mem::size_of::<Digested>()
                >= BLOCK_BYTES
    }

    pub fn width(&self) -> usize {
        self.width
    }

    pub fn rows(&self) -> usize {
        self.cells.len().checked_div(self.width).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }

    pub fn clear(&mut self) {
        self.cells.clear();
        self.bytes.clear();
        self.digests.clear();
    }

    /// Appends one cell; a row is complete after `width` pushes.
    #[inline(always)]
    pub fn push(&mut self, v: CellRef<'_>) {
        let mut span = |b: &[u8]| {
            let at = self.bytes.len() as u32;
            self.bytes.extend_from_slice(b);
            (at, b.len() as u32)
        };
        let cell = match v {
            CellRef::Null => Cell::Null,
            CellRef::Integer(i) => Cell::Integer(i),
            CellRef::Real(r) => Cell::Real(r),
            CellRef::Text(t) => {
                let (a, n) = span(t);
                Cell::Text(a, n)
            }
            CellRef::Blob(b) => {
                let (a, n) = span(b);
                Cell::Blob(a, n)
            }
            CellRef::Digested(d) => {
                self.digests.push(d.clone());
                Cell::Digested(self.digests.len() as u32 - 1)
            }
        };
        self.cells.push(cell);
    }

    /// Appends one cell, a large text or blob as its digest: for a reader
    /// whose rows are only compared, so that a large value is never copied.
    #[inline(always)]
    pub fn push_digesting(&mut self, v: CellRef<'_>) {
        match v.digest_if_large() {
            Some(d) => {
                self.digests.push(d);
                self.cells
                    .push(Cell::Digested(self.digests.len() as u32 - 1));
            }
            None => self.push(v),
        }
    }

    #[inline]
    pub fn get(&self, row: usize, col: usize) -> CellRef<'_> {
        let slice = |a: u32, n: u32| &self.bytes[a as usize..(a + n) as usize];
        match self.cells[row * self.width + col] {
            Cell::Null => CellRef::Null,
            Cell::Integer(i) => CellRef::Integer(i),
            Cell::Real(r) => CellRef::Real(r),
            Cell::Text(a, n) => CellRef::Text(slice(a, n)),
            Cell::Blob(a, n) => CellRef::Blob(slice(a, n)),
            Cell::Digested(i) => CellRef::Digested(&self.digests[i as usize]),
        }
    }

    /// The first `n` cells of a row as owned values.
    pub fn values(&self, row: usize, n: usize) -> Row {
        (0..n).map(|c| self.get(row, c).to_value()).collect()
    }

    /// Feeds every cell, storage class included, into a digest: the same
    /// rows in the same order always hash alike, whatever the block sizes.
    pub fn hash_into(&self, h: &mut sha2::Sha256) {
        let mut sink = HashSink::new(h);
        for i in 0..self.cells.len() {
            hash_cell(
                &mut sink,
                self.get(i / self.width.max(1), i % self.width.max(1)),
            );
        }
    }

    /// Compares the first `n` cells of two rows in SQLite's order.
    pub fn cmp_prefix(&self, row: usize, other: &Block, other_row: usize, n: usize) -> Ordering {
        let mine = &self.cells[row * self.width..][..n];
        let theirs = &other.cells[other_row * other.width..][..n];
        for (c, (a, b)) in mine.iter().zip(theirs).enumerate() {
            // Integer keys, the common case, compare without building cells.
            let o = match (a, b) {
                (Cell::Integer(a), Cell::Integer(b)) => a.cmp(b),
                _ => self.get(row, c).sql_cmp(&other.get(other_row, c)),
            };
            if o.is_ne() {
                return o;
            }
        }
        Ordering::Equal
    }
}

fn cmp_int_real(i: i64, r: f64) -> Ordering {
    // Comparing through f64 alone would call 2^53+1 equal to 2^53.
    if r.is_nan() {
        return Ordering::Greater;
    }
    // 2^63 exactly: the first real past i64::MAX.
    const TWO_63: f64 = 9_223_372_036_854_775_808_u64 as f64;
    if r >= TWO_63 {
        return Ordering::Less;
    }
    if r < -TWO_63 {
        return Ordering::Greater;
    }
    let t = r.trunc() as i64;
    match i.cmp(&t) {
        Ordering::Equal => {
            let frac = r - r.trunc();
            if frac > 0.0 {
                Ordering::Less
            } else if frac < 0.0 {
                Ordering::Greater
            } else {
                Ordering::Equal
            }
        }
        o => o,
    }
}

/// Where a cell's digest form goes: straight into a hash, or into a buffer
/// that is hashed in one piece. A row's cells are a few bytes each, and
/// handing them to SHA-256 one by one cost more than the hashing itself.
pub trait CellSink {
    fn put(&mut self, bytes: &[u8]);
}

impl CellSink for sha2::Sha256 {
    fn put(&mut self, bytes: &[u8]) {
        sha2::Digest::update(self, bytes);
    }
}

impl CellSink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// A hash fed through a buffer: small pieces are gathered and hashed
/// together, a long one is hashed where it lies, never copied.
pub struct HashSink<'h> {
    h: &'h mut sha2::Sha256,
    buf: Vec<u8>,
}

/// Pieces at least this long go to the hash without the buffer.
const HASH_DIRECT: usize = 4096;
/// How much the buffer gathers before it is hashed.
const HASH_BUFFER: usize = 64 * 1024;

impl<'h> HashSink<'h> {
    pub fn new(h: &'h mut sha2::Sha256) -> HashSink<'h> {
        HashSink {
            h,
            buf: Vec::with_capacity(HASH_BUFFER + HASH_DIRECT),
        }
    }

    fn flush(&mut self) {
        sha2::Digest::update(self.h, &self.buf);
        self.buf.clear();
    }
}

impl CellSink for HashSink<'_> {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        if bytes.len() >= HASH_DIRECT {
            self.flush();
            sha2::Digest::update(self.h, bytes);
        } else {
            self.buf.extend_from_slice(bytes);
            if self.buf.len() >= HASH_BUFFER {
                self.flush();
            }
        }
    }
}

impl Drop for HashSink<'_> {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Feeds one cell, storage class included, into a digest.
pub fn hash_cell(h: &mut impl CellSink, c: CellRef<'_>) {
    match c {
        CellRef::Null => h.put(&[0u8]),
        CellRef::Integer(v) => {
            h.put(&[1u8]);
            h.put(&v.to_le_bytes());
        }
        CellRef::Real(v) => {
            h.put(&[2u8]);
            h.put(&v.to_le_bytes());
        }
        CellRef::Text(t) => {
            h.put(&[3u8]);
            h.put(&(t.len() as u64).to_le_bytes());
            h.put(t);
        }
        CellRef::Blob(b) => {
            h.put(&[4u8]);
            h.put(&(b.len() as u64).to_le_bytes());
            h.put(b);
        }
        // No fingerprint is computed from a digested cell (the scans that
        // feed one read every value whole); should one ever be, it hashes
        // unlike the value's bytes, so a fence would report a breach rather
        // than pass a change.
        CellRef::Digested(d) => {
            h.put(&[5u8]);
            h.put(&d.len.to_le_bytes());
            h.put(&d.sha256);
        }
    }
}

/// A SHA-256 made on its own thread from what `read` hands over, in
/// order, fed by `feed`: reading a large table and hashing it overlap
/// instead of adding up. At most a few pieces wait between the two.
pub fn hashed_beside<T: Send, R>(
    feed: impl Fn(&mut sha2::Sha256, T) + Send,
    read: impl FnOnce(&mut dyn FnMut(T)) -> anyhow::Result<R>,
) -> anyhow::Result<(R, sha2::Sha256)> {
    use sha2::Digest;
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<T>(4);
        let hasher = scope.spawn(move || {
            let mut h = sha2::Sha256::new();
            for piece in rx {
                feed(&mut h, piece);
            }
            h
        });
        let read = read(&mut |piece| {
            // The hasher only stops by panicking, which join reports.
            let _ = tx.send(piece);
        });
        drop(tx);
        let h = hasher
            .join()
            .map_err(|_| anyhow::anyhow!("the digest's hashing thread panicked"))?;
        Ok((read?, h))
    })
}

/// Compares two keys column by column in SQLite's order.
pub fn key_cmp(a: &[Value], b: &[Value]) -> Ordering {
    for (x, y) in a.iter().zip(b) {
        match x.sql_cmp(y) {
            Ordering::Equal => continue,
            o => return o,
        }
    }
    a.len().cmp(&b.len())
}

/// A key as a JSON array: the journal's form, which never lets two composite
/// keys collide whatever their parts contain.
pub fn key_json(key: &[Value]) -> Json {
    Json::Array(key.iter().map(Value::to_json).collect())
}

/// Parses a key written as a JSON array.
pub fn key_from_json(json: &Json) -> Result<Vec<Value>> {
    match json {
        Json::Array(items) => items.iter().map(Value::from_json).collect(),
        other => bail!("a key must be a JSON array, found {other}"),
    }
}

impl fmt::Display for Value {
    /// Text is quoted so that `'1250'` and `1250` read differently.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Null => f.write_str("NULL"),
            Value::Integer(i) => write!(f, "{i}"),
            Value::Real(r) => write!(f, "{r:?}"),
            Value::Text(t) => write!(f, "'{}'", t.replace('\'', "''")),
            // How SQLite itself would be asked for these bytes as text.
            Value::TextBytes(b) => write!(f, "CAST(x'{}' AS TEXT)", hex::encode(b)),
            Value::Blob(b) => write!(f, "x'{}'", hex::encode(b)),
            Value::Large(l) => match (l.text, std::str::from_utf8(&l.bytes)) {
                (true, Ok(t)) => write!(f, "'{}'", t.replace('\'', "''")),
                (true, Err(_)) => write!(f, "CAST(x'{}' AS TEXT)", hex::encode(&l.bytes)),
                (false, _) => write!(f, "x'{}'", hex::encode(&l.bytes)),
            },
            Value::Digested(d) => d.fmt(f),
        }
    }
}

/// Renders a key for messages: `101` or `('a', 2)`.
pub fn display_key(key: &[Value]) -> String {
    if key.len() == 1 {
        key[0].to_string()
    } else {
        let parts: Vec<String> = key.iter().map(Value::to_string).collect();
        format!("({})", parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fingerprints stored by a fence must match whatever the version that
    /// stored them: a block's digest is SHA-256 over exactly these bytes, a
    /// class byte per cell, then the integer or the real's bits (8 bytes,
    /// little-endian), or a text's or blob's length (8 bytes) and its bytes.
    /// The bytes are written out here, not computed by the code under test.
    #[test]
    fn a_block_hashes_as_the_fingerprint_format_says() {
        use sha2::Digest;
        let cells = [
            CellRef::Integer(-7),
            CellRef::Text(b"12.50"),
            CellRef::Null,
            CellRef::Real(0.1),
            CellRef::Blob(&[0, 255, 3]),
            CellRef::Text(b""),
        ];
        let mut block = Block::new(3, 2);
        for c in cells {
            block.push(c);
        }
        let mut bytes: Vec<u8> = Vec::new();
        bytes.push(1);
        bytes.extend((-7i64).to_le_bytes());
        bytes.push(3);
        bytes.extend(5u64.to_le_bytes());
        bytes.extend(b"12.50");
        bytes.push(0);
        bytes.push(2);
        bytes.extend(0.1f64.to_bits().to_le_bytes());
        bytes.push(4);
        bytes.extend(3u64.to_le_bytes());
        bytes.extend([0, 255, 3]);
        bytes.push(3);
        bytes.extend(0u64.to_le_bytes());
        let mut whole = sha2::Sha256::new();
        block.hash_into(&mut whole);
        assert_eq!(whole.finalize(), sha2::Sha256::digest(&bytes));
        // Cell by cell straight into the hash (PostgreSQL's journal digest)
        // is the same stream.
        let mut one_by_one = sha2::Sha256::new();
        for c in cells {
            hash_cell(&mut one_by_one, c);
        }
        assert_eq!(one_by_one.finalize(), sha2::Sha256::digest(&bytes));
    }

    #[test]
    fn sql_order_puts_classes_in_sqlite_order() {
        let mut v = vec![
            Value::Blob(vec![0]),
            Value::Text("a".into()),
            Value::Integer(2),
            Value::Real(1.5),
            Value::Null,
        ];
        v.sort_by(Value::sql_cmp);
        assert_eq!(
            v,
            vec![
                Value::Null,
                Value::Real(1.5),
                Value::Integer(2),
                Value::Text("a".into()),
                Value::Blob(vec![0]),
            ]
        );
    }

    #[test]
    fn integer_and_real_compare_exactly_past_two_to_the_53() {
        let big = 9_007_199_254_740_993_i64; // 2^53 + 1
        assert_eq!(
            Value::Integer(big).sql_cmp(&Value::Real(9_007_199_254_740_992.0)),
            Ordering::Greater
        );
    }

    #[test]
    fn json_round_trip_keeps_storage_class() -> Result<()> {
        for v in [
            Value::Null,
            Value::Integer(1250),
            Value::Text("1250".into()),
            Value::Real(12.5),
            Value::Real(-0.0),
            Value::Real(f64::INFINITY),
            Value::Real(f64::NEG_INFINITY),
            Value::Real(0.1 + 0.2),
            Value::TextBytes(vec![0xfe, 0x42]),
            Value::Blob(vec![1, 2, 255]),
        ] {
            let back = Value::from_json(&v.to_json())?;
            assert_eq!(back, v);
            // Bit for bit, -0.0 included (== alone would not tell).
            if let (Value::Real(a), Value::Real(b)) = (&back, &v) {
                assert_eq!(a.to_bits(), b.to_bits());
            }
        }
        assert_ne!(Value::Integer(1250), Value::Text("1250".into()));
        Ok(())
    }

    /// A large value is the same value however it is held: bytes, shared,
    /// or known by its digest; never a value of another class or bytes.
    #[test]
    fn a_large_value_equals_its_bytes_however_it_is_held() {
        let bytes: Vec<u8> = (0..LARGE + 3).map(|i| (i % 251) as u8).collect();
        let blob = Value::Blob(bytes.clone());
        let shared = CellRef::Blob(&bytes).to_value();
        assert!(matches!(shared, Value::Large(_)), "read once, then shared");
        let digested = Value::Digested(Box::new(Digested::of(false, &bytes)));
        for (a, b) in [(&blob, &shared), (&blob, &digested), (&shared, &digested)] {
            assert_eq!(a, b);
            assert_eq!(b, a);
        }
        let mut other = bytes.clone();
        other[LARGE / 2] ^= 1;
        let text = Value::from_bytes(true, bytes.clone());
        for v in [&shared, &digested] {
            assert_ne!(v, &Value::Blob(other.clone()));
            assert_ne!(v, &text, "a text is not the blob of its bytes");
        }
        assert_eq!(text.class(), "text");
        assert_eq!(digested.class(), "blob");
        // Shown and reported by length and digest, never read back.
        let sha = hex::encode(Digested::of(false, &bytes).sha256);
        assert_eq!(
            digested.to_string(),
            format!("<blob of {} bytes, SHA-256 {sha}>", LARGE + 3)
        );
        assert_eq!(
            digested.to_json(),
            serde_json::json!({"blob_sha256": sha, "bytes": LARGE + 3})
        );
        assert!(Value::from_json(&digested.to_json()).is_err());
        // A shared value's JSON is its bytes, as a small one's.
        assert_eq!(
            Value::from_json(&shared.to_json()).expect("read back"),
            blob
        );
    }

    #[test]
    fn composite_keys_with_separators_do_not_collide() {
        let a = key_json(&[Value::Text("a,b".into()), Value::Text("".into())]);
        let b = key_json(&[Value::Text("a".into()), Value::Text("b,".into())]);
        assert_ne!(a.to_string(), b.to_string());
    }
}
