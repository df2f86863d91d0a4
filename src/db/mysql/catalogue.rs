//! What the database says of its tables, from `information_schema`, each
//! answer one query: the tables (with their storage engine), a table's
//! columns in declaration order (declared type, nullability, default,
//! generated or not, place in the primary key, character set and
//! collation), its primary and unique keys, the foreign keys it declares
//! and those that refer to it (with their `ON DELETE` / `ON UPDATE`
//! actions), its triggers, and its next `AUTO_INCREMENT` value.
//!
//! A key's uniqueness is the server's, under each column's collation, and
//! cutover's keys are exact: [`key_equality`] says when the two differ
//! (`utf8mb4_general_ci` makes `'a'` and `'A'` one key; every `PAD SPACE`
//! collation, `utf8mb4_bin` included, makes `'a'` and `'a '` one key).
//!
//! Defaults are SQL expressions as MariaDB writes them (`'x'`, `1.50`,
//! `NULL`, `current_timestamp()`); MySQL 8, which gives a literal default
//! bare, is brought to the same form.

use std::collections::BTreeSet;

use anyhow::{Result, bail};
use mysql::prelude::Queryable;
use mysql::{Row, Value};

use super::client::Flavor;
use super::types::{self, Kind};
use super::{MySql, quote_ident};
use crate::db::{ColumnInfo, ForeignKeyViolation, OwnTriggers, SchemaPart, SequenceMark};
use crate::value::ColumnKind;

/// A table of the database.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableInfo {
    pub name: String,
    /// Its storage engine (`InnoDB`, `MyISAM`, …): only a transactional one
    /// commits a batch with its checkpoint.
    pub engine: Option<String>,
    /// A MariaDB system-versioned table (`WITH SYSTEM VERSIONING`).
    pub versioned: bool,
}

/// A generated column: its expression, and whether it is stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Generated {
    pub expression: String,
    pub stored: bool,
}

/// A column as `information_schema.COLUMNS` describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    /// 1-based, in declaration order.
    pub position: u32,
    /// `DATA_TYPE`, lower case: `int`, `varchar`, `decimal`, `longtext`, …
    pub data_type: String,
    /// `COLUMN_TYPE`, the declared type: `int(10) unsigned`,
    /// `decimal(12,2)`, `enum('a','b')`, `tinyint(1)`.
    pub declared: String,
    pub nullable: bool,
    /// The default as an SQL expression; `None` when the column has none.
    pub default: Option<String>,
    pub generated: Option<Generated>,
    pub auto_increment: bool,
    /// Position in the primary key (1-based), 0 when not part of it.
    pub key_position: u32,
    pub charset: Option<String>,
    pub collation: Option<String>,
    pub numeric_precision: Option<u64>,
    pub numeric_scale: Option<u64>,
    pub datetime_precision: Option<u64>,
    /// `CHARACTER_MAXIMUM_LENGTH`: characters of a text, bytes of a binary.
    pub max_length: Option<u64>,
}

/// One column of a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyPart {
    /// `None` for a part that is an expression (a MySQL 8 functional key).
    pub column: Option<String>,
    /// A prefix key's length (`SUB_PART`): only that many characters or
    /// bytes are unique, not the whole value.
    pub prefix: Option<u64>,
    pub nullable: bool,
    pub collation: Option<String>,
}

/// A primary or unique key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Key {
    pub name: String,
    pub primary: bool,
    pub parts: Vec<KeyPart>,
}

impl Key {
    /// The key's column names, when every part is a whole column.
    pub fn columns(&self) -> Option<Vec<&str>> {
        self.parts
            .iter()
            .map(|p| p.column.as_deref().filter(|_| p.prefix.is_none()))
            .collect()
    }

    /// Each part of the key whose collation makes different values one
    /// key, with why ([`key_equality`]); a prefix part says so too.
    pub fn folding(&self) -> Vec<(String, String)> {
        self.parts
            .iter()
            .filter_map(|p| {
                let column = p.column.clone().unwrap_or_else(|| "(an expression)".into());
                match (p.prefix, key_equality(p.collation.as_deref())) {
                    (Some(n), _) => {
                        Some((column, format!("only its first {n} characters are the key")))
                    }
                    (None, why) => why.map(|w| (column, w)),
                }
            })
            .collect()
    }
}

/// A foreign key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForeignKey {
    pub name: String,
    /// The database and table that declare it.
    pub database: String,
    pub table: String,
    pub columns: Vec<String>,
    pub parent_database: String,
    pub parent_table: String,
    pub parent_columns: Vec<String>,
    /// `CASCADE`, `SET NULL`, `SET DEFAULT`, `RESTRICT` or `NO ACTION`.
    pub on_delete: String,
    pub on_update: String,
}

/// The foreign keys of a table: those it declares, and those of any table
/// (itself included) that refer to it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ForeignKeys {
    pub declared: Vec<ForeignKey>,
    pub referring: Vec<ForeignKey>,
}

/// A trigger of a table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trigger {
    pub name: String,
    /// `BEFORE` or `AFTER`.
    pub timing: String,
    /// `INSERT`, `UPDATE` or `DELETE`.
    pub event: String,
    /// Its place among the triggers of the same timing and event (1-based).
    pub order: u32,
    /// The body (`BEGIN … END`, or one statement).
    pub statement: String,
    pub definer: String,
}

/// Why equality of a key column under `collation` is not equality of the
/// values cutover reads (their bytes), or `None` when it is: a binary
/// column, or a `NO PAD` binary collation (`utf8mb4_nopad_bin`,
/// `utf8mb4_0900_bin`).
pub fn key_equality(collation: Option<&str>) -> Option<String> {
    let c = collation?;
    if c == "binary" || c.ends_with("_nopad_bin") || c == "utf8mb4_0900_bin" {
        return None;
    }
    let pads = !(c.contains("_nopad_") || c.contains("_0900_") || c.contains("_uca1400_"));
    let pad = if pads {
        ", and trailing spaces are ignored ('a' and 'a ' are one key)"
    } else {
        ""
    };
    Some(if c.ends_with("_bin") {
        format!(
            "collation {c} pads with spaces: 'a' and 'a ' are one key (use {} for exact keys)",
            c.replace("_bin", "_nopad_bin")
        )
    } else if c.contains("_ci") || c.contains("_ai") {
        format!("collation {c} is case- or accent-insensitive: 'a' and 'A' are one key{pad}")
    } else {
        format!("collation {c} is linguistic: different strings can be one key{pad}")
    })
}

fn text(row: &Row, i: usize) -> Result<Option<String>> {
    match row.as_ref(i) {
        None | Some(Value::NULL) => Ok(None),
        Some(Value::Bytes(b)) => Ok(Some(String::from_utf8_lossy(b).into_owned())),
        Some(other) => Ok(Some(mysql::from_value_opt::<String>(other.clone())?)),
    }
}

fn string(row: &Row, i: usize) -> Result<String> {
    Ok(text(row, i)?.unwrap_or_default())
}

fn number(row: &Row, i: usize) -> Result<Option<u64>> {
    match row.as_ref(i) {
        None | Some(Value::NULL) => Ok(None),
        Some(v) => Ok(Some(mysql::from_value_opt::<u64>(v.clone())?)),
    }
}

/// Types whose literal default MySQL 8 gives bare and that need no quotes.
fn numeric(data_type: &str) -> bool {
    matches!(
        data_type,
        "tinyint"
            | "smallint"
            | "mediumint"
            | "int"
            | "bigint"
            | "decimal"
            | "float"
            | "double"
            | "year"
            | "bit"
    )
}

impl MySql {
    /// Runs a catalogue query with `params` and hands back its rows.
    fn catalogue(&self, what: &str, sql: &str, params: Vec<Value>) -> Result<Vec<Row>> {
        self.conn()?
            .exec(sql, params)
            .map_err(|e| self.failed(&format!("reading the catalogue ({what})"), &e))
    }

    /// The tables of the database (views, sequences and temporary tables
    /// left out), by name.
    pub fn tables(&self) -> Result<Vec<TableInfo>> {
        self.catalogue(
            "tables",
            "SELECT TABLE_NAME, ENGINE, TABLE_TYPE = 'SYSTEM VERSIONED'
             FROM information_schema.TABLES
             WHERE TABLE_SCHEMA = ? AND TABLE_TYPE IN ('BASE TABLE', 'SYSTEM VERSIONED')
             ORDER BY TABLE_NAME",
            vec![self.database().into()],
        )?
        .iter()
        .map(|r| {
            Ok(TableInfo {
                name: string(r, 0)?,
                engine: text(r, 1)?,
                versioned: number(r, 2)? == Some(1),
            })
        })
        .collect()
    }

    /// The columns of `table` in declaration order; a table that does not
    /// exist is an error naming it.
    pub fn columns(&self, table: &str) -> Result<Vec<Column>> {
        let rows = self.catalogue(
            &format!("columns of '{table}'"),
            "SELECT c.COLUMN_NAME, c.ORDINAL_POSITION, LOWER(c.DATA_TYPE), c.COLUMN_TYPE,
                    c.IS_NULLABLE = 'YES', c.COLUMN_DEFAULT, c.EXTRA, c.GENERATION_EXPRESSION,
                    COALESCE(k.ORDINAL_POSITION, 0), c.CHARACTER_SET_NAME, c.COLLATION_NAME,
                    c.NUMERIC_PRECISION, c.NUMERIC_SCALE, c.DATETIME_PRECISION,
                    c.CHARACTER_MAXIMUM_LENGTH
             FROM information_schema.COLUMNS c
             LEFT JOIN information_schema.KEY_COLUMN_USAGE k
               ON k.TABLE_SCHEMA = c.TABLE_SCHEMA AND k.TABLE_NAME = c.TABLE_NAME
              AND k.COLUMN_NAME = c.COLUMN_NAME AND k.CONSTRAINT_NAME = 'PRIMARY'
             WHERE c.TABLE_SCHEMA = ? AND c.TABLE_NAME = ?
             ORDER BY c.ORDINAL_POSITION",
            vec![self.database().into(), table.into()],
        )?;
        if rows.is_empty() {
            bail!(
                "table '{table}' does not exist in database '{}' of {}",
                self.database(),
                self.shown()
            );
        }
        rows.iter().map(|r| self.column(r)).collect()
    }

    fn column(&self, r: &Row) -> Result<Column> {
        let data_type = string(r, 2)?;
        let nullable = number(r, 4)? == Some(1);
        let extra = string(r, 6)?.to_ascii_uppercase();
        let generation = text(r, 7)?.filter(|g| !g.is_empty());
        let generated = match generation {
            Some(expression)
                if extra.contains("VIRTUAL GENERATED") || extra.contains("STORED GENERATED") =>
            {
                Some(Generated {
                    expression,
                    stored: extra.contains("STORED"),
                })
            }
            _ => None,
        };
        let raw_default = text(r, 5)?;
        let default = match self.server().flavor {
            // MariaDB: an expression already; SQL NULL when there is none.
            Flavor::MariaDb => raw_default,
            Flavor::MySql => match raw_default {
                None if nullable && generated.is_none() => Some("NULL".to_string()),
                None => None,
                Some(d) if extra.contains("DEFAULT_GENERATED") => Some(d),
                Some(d) if numeric(&data_type) => Some(d),
                Some(d) => Some(format!("'{}'", d.replace('\'', "''"))),
            },
        };
        Ok(Column {
            name: string(r, 0)?,
            position: number(r, 1)?.unwrap_or(0) as u32,
            declared: string(r, 3)?,
            data_type,
            nullable,
            default,
            generated,
            auto_increment: extra.contains("AUTO_INCREMENT"),
            key_position: number(r, 8)?.unwrap_or(0) as u32,
            charset: text(r, 9)?,
            collation: text(r, 10)?,
            numeric_precision: number(r, 11)?,
            numeric_scale: number(r, 12)?,
            datetime_precision: number(r, 13)?,
            max_length: number(r, 14)?,
        })
    }

    /// The primary key (first, when there is one) and the unique keys of
    /// `table`, each with its parts in order.
    pub fn keys(&self, table: &str) -> Result<Vec<Key>> {
        let rows = self.catalogue(
            &format!("keys of '{table}'"),
            "SELECT s.INDEX_NAME, s.COLUMN_NAME, s.SUB_PART, s.NULLABLE = 'YES', c.COLLATION_NAME
             FROM information_schema.STATISTICS s
             LEFT JOIN information_schema.COLUMNS c
               ON c.TABLE_SCHEMA = s.TABLE_SCHEMA AND c.TABLE_NAME = s.TABLE_NAME
              AND c.COLUMN_NAME = s.COLUMN_NAME
             WHERE s.TABLE_SCHEMA = ? AND s.TABLE_NAME = ? AND s.NON_UNIQUE = 0
             ORDER BY s.INDEX_NAME <> 'PRIMARY', s.INDEX_NAME, s.SEQ_IN_INDEX",
            vec![self.database().into(), table.into()],
        )?;
        let mut keys: Vec<Key> = Vec::new();
        for r in &rows {
            let name = string(r, 0)?;
            let part = KeyPart {
                column: text(r, 1)?,
                prefix: number(r, 2)?,
                nullable: number(r, 3)? == Some(1),
                collation: text(r, 4)?,
            };
            match keys.last_mut() {
                Some(k) if k.name == name => k.parts.push(part),
                _ => keys.push(Key {
                    primary: name == "PRIMARY",
                    name,
                    parts: vec![part],
                }),
            }
        }
        Ok(keys)
    }

    /// The foreign keys `table` declares and those that refer to it, from
    /// any database of the server, each with its columns in order.
    pub fn foreign_keys(&self, table: &str) -> Result<ForeignKeys> {
        let db: Value = self.database().into();
        let t: Value = table.into();
        let rows = self.catalogue(
            &format!("foreign keys of '{table}'"),
            "SELECT k.CONSTRAINT_NAME, k.TABLE_SCHEMA, k.TABLE_NAME, k.COLUMN_NAME,
                    k.REFERENCED_TABLE_SCHEMA, k.REFERENCED_TABLE_NAME, k.REFERENCED_COLUMN_NAME,
                    r.DELETE_RULE, r.UPDATE_RULE
             FROM information_schema.KEY_COLUMN_USAGE k
             JOIN information_schema.REFERENTIAL_CONSTRAINTS r
               ON r.CONSTRAINT_SCHEMA = k.CONSTRAINT_SCHEMA
              AND r.CONSTRAINT_NAME = k.CONSTRAINT_NAME AND r.TABLE_NAME = k.TABLE_NAME
             WHERE k.REFERENCED_TABLE_NAME IS NOT NULL
               AND ((k.TABLE_SCHEMA = ? AND k.TABLE_NAME = ?)
                 OR (k.REFERENCED_TABLE_SCHEMA = ? AND k.REFERENCED_TABLE_NAME = ?))
             ORDER BY k.TABLE_SCHEMA, k.TABLE_NAME, k.CONSTRAINT_NAME, k.ORDINAL_POSITION",
            vec![db.clone(), t.clone(), db, t],
        )?;
        let mut all: Vec<ForeignKey> = Vec::new();
        for r in &rows {
            let (name, database, child) = (string(r, 0)?, string(r, 1)?, string(r, 2)?);
            let (column, parent_column) = (string(r, 3)?, string(r, 6)?);
            match all.last_mut() {
                Some(fk) if fk.name == name && fk.database == database && fk.table == child => {
                    fk.columns.push(column);
                    fk.parent_columns.push(parent_column);
                }
                _ => all.push(ForeignKey {
                    name,
                    database,
                    table: child,
                    columns: vec![column],
                    parent_database: string(r, 4)?,
                    parent_table: string(r, 5)?,
                    parent_columns: vec![parent_column],
                    on_delete: string(r, 7)?,
                    on_update: string(r, 8)?,
                }),
            }
        }
        let mut out = ForeignKeys::default();
        for fk in all {
            if fk.parent_database == self.database() && fk.parent_table == table {
                out.referring.push(fk.clone());
            }
            if fk.database == self.database() && fk.table == table {
                out.declared.push(fk);
            }
        }
        Ok(out)
    }

    /// The triggers of `table`, by timing, event and order.
    pub fn triggers(&self, table: &str) -> Result<Vec<Trigger>> {
        self.catalogue(
            &format!("triggers of '{table}'"),
            "SELECT TRIGGER_NAME, ACTION_TIMING, EVENT_MANIPULATION, ACTION_ORDER,
                    ACTION_STATEMENT, DEFINER
             FROM information_schema.TRIGGERS
             WHERE EVENT_OBJECT_SCHEMA = ? AND EVENT_OBJECT_TABLE = ?
             ORDER BY ACTION_TIMING, EVENT_MANIPULATION, ACTION_ORDER",
            vec![self.database().into(), table.into()],
        )?
        .iter()
        .map(|r| {
            Ok(Trigger {
                name: string(r, 0)?,
                timing: string(r, 1)?,
                event: string(r, 2)?,
                order: number(r, 3)?.unwrap_or(0) as u32,
                statement: string(r, 4)?,
                definer: string(r, 5)?,
            })
        })
        .collect()
    }

    /// The value the next row of `table` would get from its
    /// `AUTO_INCREMENT` column; `None` when it has none.
    pub fn auto_increment(&self, table: &str) -> Result<Option<u64>> {
        let rows = self.catalogue(
            &format!("AUTO_INCREMENT of '{table}'"),
            "SELECT AUTO_INCREMENT FROM information_schema.TABLES
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
            vec![self.database().into(), table.into()],
        )?;
        let Some(r) = rows.first() else {
            bail!(
                "table '{table}' does not exist in database '{}' of {}",
                self.database(),
                self.shown()
            );
        };
        number(r, 0)
    }
}

/// A column's kind in engine-neutral terms, from its MySQL type.
pub fn column_kind(c: &Column) -> ColumnKind {
    let len = c.max_length.and_then(|n| u32::try_from(n).ok());
    match c.data_type.as_str() {
        "tinyint" if c.declared.to_ascii_lowercase().starts_with("tinyint(1)") => {
            ColumnKind::Boolean
        }
        "tinyint" | "smallint" | "mediumint" | "int" | "integer" | "bigint" | "year" | "bit" => {
            ColumnKind::Integer
        }
        "decimal" | "numeric" => ColumnKind::Decimal {
            precision: c.numeric_precision.map(|p| p as u32),
            scale: c.numeric_scale.map(|s| s as u32),
        },
        "float" | "double" | "real" => ColumnKind::Real,
        // A CHAR reads back without its padding.
        "char" | "varchar" => ColumnKind::Text {
            max_len: len,
            fixed: false,
        },
        "tinytext" | "text" | "mediumtext" | "longtext" | "enum" | "set" => ColumnKind::Text {
            max_len: None,
            fixed: false,
        },
        "binary" | "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob" => {
            ColumnKind::Blob
        }
        "date" => ColumnKind::Date,
        "datetime" => ColumnKind::Timestamp { zone: false },
        "timestamp" => ColumnKind::Timestamp { zone: true },
        _ => ColumnKind::Other {
            engine: "MySQL",
            name: c.declared.clone(),
        },
    }
}

/// The bound of a column's type, for `check`'s hazards; a `TINYINT(1)`,
/// read as a boolean, holds what any `TINYINT` holds.
fn limit_of(kind: Option<&Kind>, c: &Column) -> crate::db::Limit {
    use crate::db::Limit;
    let time = |fraction, years| Limit::Time { fraction, years };
    match kind {
        Some(&Kind::Int { bytes, unsigned }) => {
            let bits = 8 * u32::from(bytes);
            if unsigned {
                Limit::Integer {
                    min: 0,
                    max: (1i128 << bits) - 1,
                }
            } else {
                Limit::Integer {
                    min: -(1i128 << (bits - 1)),
                    max: (1i128 << (bits - 1)) - 1,
                }
            }
        }
        Some(&Kind::Decimal {
            precision,
            scale,
            unsigned,
        }) => Limit::Digits {
            precision,
            scale,
            unsigned,
        },
        Some(Kind::Char | Kind::Text) if matches!(c.data_type.as_str(), "char" | "varchar") => {
            Limit::Chars {
                length: c
                    .max_length
                    .map_or(u32::MAX, |n| n.min(u64::from(u32::MAX)) as u32),
                padded: false,
                cut: c.data_type == "char",
            }
        }
        Some(Kind::Enum(labels)) => Limit::Members(labels.to_vec()),
        Some(&Kind::DateTime { precision } | &Kind::Time { precision }) => time(precision, None),
        Some(&Kind::Timestamp { precision }) => time(precision, Some((1970, 2038))),
        Some(Kind::Year) => Limit::Integer {
            min: 1901,
            max: 2155,
        },
        _ => Limit::None,
    }
}

impl crate::db::Catalogue for MySql {
    fn table_columns(&self, table: &str) -> Result<Vec<ColumnInfo>> {
        if !self.has_table(table)? {
            return Ok(Vec::new());
        }
        Ok(self
            .columns(table)?
            .iter()
            .map(|c| {
                let kind = Kind::of(c);
                ColumnInfo {
                    name: c.name.clone(),
                    decl_type: c.declared.clone(),
                    kind: column_kind(c),
                    pk: i64::from(c.key_position),
                    labels: match &kind {
                        Ok(Kind::Set(labels)) => Some(labels.to_vec()),
                        _ => None,
                    },
                    limit: limit_of(kind.as_ref().ok(), c),
                    required: !c.nullable
                        && c.default.is_none()
                        && c.generated.is_none()
                        && !c.auto_increment,
                    unread: kind.err().map(|e| format!("{e:#}")),
                }
            })
            .collect())
    }

    fn generated_columns(&self, table: &str) -> Result<Vec<crate::db::Generated>> {
        if !self.has_table(table)? {
            return Ok(Vec::new());
        }
        Ok(self
            .columns(table)?
            .into_iter()
            .filter_map(|c| {
                c.generated.map(|g| crate::db::Generated {
                    name: c.name,
                    stored: g.stored,
                })
            })
            .collect())
    }

    /// By the bytes of their names (`ORDER BY` under the catalogue's own
    /// collation would fold case).
    fn tables(&self, own: bool) -> Result<Vec<String>> {
        let mut names: Vec<String> = self
            .tables()?
            .into_iter()
            .map(|t| t.name)
            .filter(|n| own || !n.starts_with("_cutover_"))
            .collect();
        names.sort();
        Ok(names)
    }

    /// The primary key or a unique key on exactly these whole columns
    /// (not a prefix of one). Uniqueness is the server's, under each
    /// column's collation: [`key_equality`] says where that folds values
    /// cutover tells apart.
    fn key_is_unique(&self, table: &str, key: &[&str]) -> Result<bool> {
        let want: BTreeSet<&str> = key.iter().copied().collect();
        Ok(self.keys(table)?.iter().any(|k| {
            k.columns().is_some_and(|cols| {
                cols.len() == want.len() && cols.iter().all(|c| want.contains(c))
            })
        }))
    }

    fn foreign_keys(&self, table: &str) -> Result<Vec<crate::db::ForeignKey>> {
        Ok(self
            .foreign_keys(table)?
            .declared
            .into_iter()
            .map(|fk| crate::db::ForeignKey {
                name: Some(fk.name),
                deferrable: false,
                parent: if fk.parent_database == self.database() {
                    fk.parent_table
                } else {
                    format!("{}.{}", fk.parent_database, fk.parent_table)
                },
                columns: fk
                    .columns
                    .into_iter()
                    .zip(fk.parent_columns)
                    .map(|(c, p)| (c, Some(p)))
                    .collect(),
            })
            .collect())
    }

    fn foreign_key_violations(
        &self,
        table: &str,
        key_names: &[&str],
    ) -> Result<Vec<ForeignKeyViolation>> {
        let declared = self.foreign_keys(table)?.declared;
        if declared.is_empty() {
            return Ok(Vec::new());
        }
        let columns = self.columns(table)?;
        let kinds: Vec<Kind> = key_names
            .iter()
            .map(|k| match columns.iter().find(|c| c.name == *k) {
                Some(c) => Kind::of(c),
                None => bail!("table '{table}' of {} has no column '{k}'", self.shown()),
            })
            .collect::<Result<_>>()?;
        let mut out = Vec::new();
        for fk in declared {
            let parent = format!(
                "{}.{}",
                quote_ident(&fk.parent_database),
                quote_ident(&fk.parent_table)
            );
            let present = fk
                .columns
                .iter()
                .map(|c| format!("c.{} IS NOT NULL", quote_ident(c)))
                .collect::<Vec<_>>()
                .join(" AND ");
            let joined = fk
                .columns
                .iter()
                .zip(&fk.parent_columns)
                .map(|(c, p)| format!("p.{} = c.{}", quote_ident(p), quote_ident(c)))
                .collect::<Vec<_>>()
                .join(" AND ");
            let select = if key_names.is_empty() {
                "1".to_string()
            } else {
                key_names
                    .iter()
                    .map(|k| format!("c.{}", quote_ident(k)))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let text = format!(
                "SELECT {select} FROM {} c WHERE {present} AND NOT EXISTS (SELECT 1 FROM {parent} p WHERE {joined})",
                self.qualified(table)
            );
            let rows: Vec<Row> = self
                .conn()?
                .exec(&text, ())
                .map_err(|e| self.failed(&format!("checking the foreign keys of '{table}'"), &e))?;
            let parent_name = if fk.parent_database == self.database() {
                fk.parent_table.clone()
            } else {
                format!("{}.{}", fk.parent_database, fk.parent_table)
            };
            let mut scratch = String::new();
            for r in &rows {
                let key = if key_names.is_empty() {
                    None
                } else {
                    let mut row = Vec::with_capacity(kinds.len());
                    for (i, kind) in kinds.iter().enumerate() {
                        let v = r.as_ref(i).unwrap_or(&Value::NULL);
                        row.push(
                            types::decode(kind, v, &mut scratch, |c| c.to_value())
                                .map_err(|why| anyhow::anyhow!("table '{table}': {why}"))?,
                        );
                    }
                    Some(row)
                };
                out.push(ForeignKeyViolation {
                    child: table.to_string(),
                    key,
                    parent: parent_name.clone(),
                    constraint: Some(fk.name.clone()),
                });
            }
        }
        Ok(out)
    }

    /// `SHOW CREATE TABLE` of each table (its columns, keys, foreign keys
    /// and `AUTO_INCREMENT` left out, which moves with every insert) and
    /// of cutover's own, and `SHOW CREATE TRIGGER` of their triggers (with
    /// the `sql_mode` each runs under), in name order.
    fn schema_of(&self, tables: &[&str]) -> Result<Vec<SchemaPart>> {
        let mut names: BTreeSet<String> = tables.iter().map(|t| t.to_string()).collect();
        names.extend(
            self.tables()?
                .into_iter()
                .map(|t| t.name)
                .filter(|n| n.starts_with("_cutover_")),
        );
        let mut out = Vec::new();
        for t in &names {
            if !self.has_table(t)? {
                continue;
            }
            let row: Option<(String, String)> = self
                .conn()?
                .query_first(format!("SHOW CREATE TABLE {}", self.qualified(t)))
                .map_err(|e| self.failed(&format!("reading the definition of '{t}'"), &e))?;
            let def = row.map(|(_, d)| d).unwrap_or_default();
            let def: String = def
                .split(' ')
                .filter(|w| !w.starts_with("AUTO_INCREMENT="))
                .collect::<Vec<_>>()
                .join(" ");
            out.push(SchemaPart {
                name: format!("table {t}"),
                definition: def,
            });
            for trigger in self.triggers(t)? {
                out.push(SchemaPart {
                    name: format!("trigger {}", trigger.name),
                    definition: format!(
                        "{} {} ON {t} ORDER {} DEFINER {}: {}",
                        trigger.timing,
                        trigger.event,
                        trigger.order,
                        trigger.definer,
                        trigger.statement
                    ),
                });
            }
        }
        out.sort();
        Ok(out)
    }

    /// `ALTER TABLE … AUTO_INCREMENT = n` when the counter is not already
    /// past the largest id and `to`: InnoDB moves it past an id an insert
    /// names by itself, not past one an update moves a key to. The `ALTER`
    /// commits at once (and commits the open transaction with it): callers
    /// run it outside the data's transactions (`Db::schema_change`), and a
    /// rerun after a crash completes it.
    fn raise_sequence(&self, table: &str, to: i64) -> Result<()> {
        let Some(c) = self.columns(table)?.into_iter().find(|c| c.auto_increment) else {
            return Ok(());
        };
        let held = crate::db::Rows::max_integer(self, table, &c.name)?.unwrap_or(0);
        let want = held.max(to).saturating_add(1);
        let next = self.auto_increment(table)?.unwrap_or(1);
        if u64::try_from(want).is_ok_and(|w| w <= next) {
            return Ok(());
        }
        self.set_auto_increment(table, want)
    }

    /// A table's `AUTO_INCREMENT` counter, its own and its only one: the
    /// next id it hands out, less one. InnoDB never takes back an id a
    /// rolled-back insert took, so a mark is not transactional.
    fn sequence_marks(&self, tables: &[&str]) -> Result<Vec<SequenceMark>> {
        let mut out = Vec::new();
        for t in tables {
            if !self.columns(t)?.iter().any(|c| c.auto_increment) {
                continue;
            }
            let next = self.auto_increment(t)?.unwrap_or(1);
            let next = i64::try_from(next).unwrap_or(i64::MAX);
            out.push(SequenceMark {
                name: self.qualified(t),
                last_value: if next > 1 { next - 1 } else { 1 },
                is_called: next > 1,
                table: t.to_string(),
                own: true,
                transactional: false,
            });
        }
        Ok(out)
    }

    /// Puts each counter a rolled-back run moved back where its mark
    /// stands (InnoDB never takes back an id a rolled-back insert took):
    /// `ALTER TABLE … AUTO_INCREMENT`, which commits at once, so it runs
    /// outside any transaction. The server keeps a counter past the largest
    /// id the table holds, whatever it is set to.
    fn restore_sequences(&self, marks: &[SequenceMark]) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for m in marks.iter().filter(|m| !m.transactional) {
            let was = if m.is_called { m.last_value + 1 } else { 1 };
            let now = self.auto_increment(&m.table)?.unwrap_or(1);
            if u64::try_from(was).is_ok_and(|w| w == now) {
                continue;
            }
            self.set_auto_increment(&m.table, was)?;
            out.push(m.name.clone());
        }
        Ok(out)
    }

    fn add_column(&self, table: &str, from: &ColumnInfo) -> Result<()> {
        bail!(
            "{}: {} (column '{}' of '{table}')",
            self.shown(),
            super::not_yet(
                "adding a column (sync --evolve into MySQL: the column would commit at once, outside the batch that fills it; add it to the target and map it in the spec instead)"
            ),
            from.name
        )
    }

    /// Each written column's value as a write would encode it (type,
    /// range, scale, labels), then what the server checks on assignment in
    /// strict mode: NOT NULL and a text's length in characters.
    fn holding<'a>(
        &'a self,
        sql: &crate::db::TableSql,
        _server: bool,
    ) -> Result<crate::db::Holding<'a>> {
        let plan = self.plan(sql)?;
        let columns = self.columns(&plan.table)?;
        let checks = self.check_constraints(&plan.table)?;
        // Per written column: its place in the row, its kind and its
        // catalogue entry.
        let written: Vec<(usize, Kind, Column)> = plan
            .written
            .iter()
            .filter_map(|&i| {
                let c = columns.iter().find(|c| c.name == plan.names[i])?;
                Some((i, plan.kinds[i].clone(), c.clone()))
            })
            .collect();
        let table = plan.table.clone();
        let check = move |row: &[crate::value::Value]| {
            for (i, kind, c) in &written {
                let (name, v) = (&c.name, &row[*i]);
                let why = if matches!(v, crate::value::Value::Null) {
                    (!c.nullable).then(|| {
                        format!(
                            "NULL cannot be written to column '{name}' of table '{table}', which is NOT NULL"
                        )
                    })
                } else if let Err(e) = types::encode(kind, v.as_cell()) {
                    Some(format!(
                        "column '{name}' ({}) of table '{table}' cannot hold it: {e}",
                        c.declared
                    ))
                } else if let (crate::value::Value::Text(t), Some(max), Kind::Char | Kind::Text) =
                    (v, c.max_length, kind)
                    && t.chars().count() as u64 > max
                {
                    Some(format!(
                        "column '{name}' ({}) of table '{table}' cannot hold it: {} characters, more than {max}",
                        c.declared,
                        t.chars().count()
                    ))
                } else {
                    None
                };
                if let Some(why) = why {
                    return Ok(Some(crate::db::Unfit {
                        column: name.clone(),
                        why,
                    }));
                }
            }
            Ok(None)
        };
        Ok(crate::db::Holding::new(check, checks))
    }

    /// The journal's triggers ([`super::capture`]); the fence's: those
    /// that refuse a write ([`MySql::fence_triggers`]).
    fn own_triggers(&self, table: &str) -> Result<OwnTriggers> {
        let own = self
            .triggers(table)?
            .into_iter()
            .filter(|t| super::capture::is_journal_trigger(&t.name))
            .count();
        Ok(OwnTriggers {
            journal: own,
            fence: self.fence_triggers(table)?,
        })
    }
}

impl MySql {
    /// MariaDB names a column's CHECK after the column and keeps the
    /// table in `CHECK_CONSTRAINTS`; MySQL 8 keeps it in
    /// `TABLE_CONSTRAINTS` only.
    fn check_constraints(&self, table: &str) -> Result<Vec<String>> {
        let params = vec![self.database().into(), table.into()];
        let rows = match self.catalogue(
            "CHECK constraints",
            "SELECT CONSTRAINT_NAME, CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS
             WHERE CONSTRAINT_SCHEMA = ? AND TABLE_NAME = ? ORDER BY CONSTRAINT_NAME",
            params.clone(),
        ) {
            Ok(rows) => rows,
            Err(_) => self.catalogue(
                "CHECK constraints",
                "SELECT c.CONSTRAINT_NAME, c.CHECK_CLAUSE
                 FROM information_schema.TABLE_CONSTRAINTS t
                 JOIN information_schema.CHECK_CONSTRAINTS c
                   ON c.CONSTRAINT_SCHEMA = t.CONSTRAINT_SCHEMA AND c.CONSTRAINT_NAME = t.CONSTRAINT_NAME
                 WHERE t.TABLE_SCHEMA = ? AND t.TABLE_NAME = ? AND t.CONSTRAINT_TYPE = 'CHECK'
                 ORDER BY c.CONSTRAINT_NAME",
                params,
            )?,
        };
        rows.iter()
            .map(|r| Ok(format!("{}: {}", string(r, 0)?, string(r, 1)?)))
            .collect()
    }

    /// Sets a table's `AUTO_INCREMENT` counter (the next id it hands out).
    fn set_auto_increment(&self, table: &str, next: i64) -> Result<()> {
        self.conn()?
            .query_drop(format!(
                "ALTER TABLE {} AUTO_INCREMENT = {next}",
                self.qualified(table)
            ))
            .map_err(|e| {
                self.failed(
                    &format!("moving the AUTO_INCREMENT of '{table}' to {next} (the user needs ALTER on it)"),
                    &e,
                )
            })
    }

    /// Whether the database has a base table of this name.
    pub fn has_table(&self, table: &str) -> Result<bool> {
        let n: Option<i64> = self
            .conn()?
            .exec_first(
                "SELECT COUNT(*) FROM information_schema.TABLES
                 WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND TABLE_TYPE IN ('BASE TABLE', 'SYSTEM VERSIONED')",
                (self.database(), table),
            )
            .map_err(|e| self.failed(&format!("looking for table '{table}'"), &e))?;
        Ok(n.unwrap_or(0) > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_exact_collations_make_exact_keys() {
        for exact in [
            None,
            Some("binary"),
            Some("utf8mb4_nopad_bin"),
            Some("utf8mb4_0900_bin"),
        ] {
            assert_eq!(key_equality(exact), None, "{exact:?}");
        }
        let ci = key_equality(Some("utf8mb4_general_ci")).expect("general_ci folds");
        assert!(
            ci.contains("'a' and 'A'") && ci.contains("trailing spaces"),
            "{ci}"
        );
        let bin = key_equality(Some("utf8mb4_bin")).expect("bin pads");
        assert!(
            bin.contains("'a' and 'a '") && bin.contains("utf8mb4_nopad_bin"),
            "{bin}"
        );
        let nopad_ci = key_equality(Some("utf8mb4_nopad_general_ci")).expect("still folds case");
        assert!(!nopad_ci.contains("trailing"), "{nopad_ci}");
        assert!(key_equality(Some("utf8mb4_0900_as_cs")).is_some());
    }
}
