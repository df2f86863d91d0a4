//! A spec written as Rust: [`Spec`], [`Table`] and [`Column`] mirror
//! docs/spec.md key for key and render the TOML file a command reads.
//!
//! ```ignore
//! let spec = Spec::new() // source.db → target.db
//!     .table(
//!         Table::new("orders")
//!             .key(["id"])
//!             .decimal("dollars", "cents", 2)
//!             .map("status", [("A", "active"), ("C", "closed")]),
//!     );
//! d.spec(&spec);
//! ```
//!
//! Databases are named as the folder's files (`source.db`); `Dir::spec`
//! renders them as its engine's urls. The builder checks nothing about the
//! spec's meaning (a test may build a spec the tool must refuse); it only
//! guarantees valid TOML. Specs that are malformed on purpose stay raw text.

use std::fmt::Write as _;

/// A literal value of the spec: a string, an integer or a boolean.
#[derive(Clone, Debug, PartialEq)]
pub enum Lit {
    Str(String),
    Int(i64),
    Bool(bool),
}

impl From<&str> for Lit {
    fn from(s: &str) -> Lit {
        Lit::Str(s.to_string())
    }
}

impl From<String> for Lit {
    fn from(s: String) -> Lit {
        Lit::Str(s)
    }
}

impl From<i64> for Lit {
    fn from(i: i64) -> Lit {
        Lit::Int(i)
    }
}

impl From<bool> for Lit {
    fn from(b: bool) -> Lit {
        Lit::Bool(b)
    }
}

impl Lit {
    fn toml(&self) -> String {
        match self {
            Lit::Str(s) => quoted(s),
            Lit::Int(i) => i.to_string(),
            Lit::Bool(b) => b.to_string(),
        }
    }
}

/// Where a side of the migration is.
#[derive(Clone, Debug, PartialEq)]
pub enum Url {
    /// A database of the folder, by file name; the engine gives its url.
    Db(String),
    /// A url written exactly as given (`csv://snapshot-1.csv`).
    Raw(String),
}

/// A whole spec: `[source]`, `[target]` and `[[tables]]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Spec {
    source: Url,
    target: Url,
    tables: Vec<Table>,
}

impl Default for Spec {
    fn default() -> Spec {
        Spec::new()
    }
}

impl Spec {
    /// A spec from `source.db` to `target.db`, without tables yet.
    pub fn new() -> Spec {
        Spec {
            source: Url::Db("source.db".into()),
            target: Url::Db("target.db".into()),
            tables: Vec::new(),
        }
    }

    /// The running example, as `fixtures/orders/spec.toml` has it.
    pub fn orders() -> Spec {
        Spec::new().table(Table::orders())
    }

    /// The source database, a file of the folder.
    pub fn source(mut self, db: &str) -> Spec {
        self.source = Url::Db(db.into());
        self
    }

    /// The target database, a file of the folder.
    pub fn target(mut self, db: &str) -> Spec {
        self.target = Url::Db(db.into());
        self
    }

    /// The source's url exactly as given (`csv://…`, `postgres://…`).
    pub fn source_url(mut self, url: &str) -> Spec {
        self.source = Url::Raw(url.into());
        self
    }

    /// The target's url exactly as given.
    pub fn target_url(mut self, url: &str) -> Spec {
        self.target = Url::Raw(url.into());
        self
    }

    /// Adds a `[[tables]]` entry after the others.
    pub fn table(mut self, table: Table) -> Spec {
        self.tables.push(table);
        self
    }

    /// Changes the table named `name`, which must exist.
    pub fn edit_table(mut self, name: &str, f: impl FnOnce(Table) -> Table) -> Spec {
        let i = self
            .tables
            .iter()
            .position(|t| t.name == name)
            .unwrap_or_else(|| panic!("the spec has no table {name:?}"));
        let t = self.tables.remove(i);
        self.tables.insert(i, f(t));
        self
    }

    /// The TOML text, databases named `sqlite://FILE`.
    pub fn render(&self) -> String {
        self.render_with(&|db| format!("sqlite://{db}"))
    }

    /// The TOML text, each database of the folder named by `url`.
    pub fn render_with(&self, url: &dyn Fn(&str) -> String) -> String {
        let side = |u: &Url| match u {
            Url::Db(db) => url(db),
            Url::Raw(raw) => raw.clone(),
        };
        let mut s = String::new();
        let _ = writeln!(s, "[source]\nurl = {}\n", quoted(&side(&self.source)));
        let _ = writeln!(s, "[target]\nurl = {}", quoted(&side(&self.target)));
        for t in &self.tables {
            t.render(&mut s);
        }
        if let Err(e) = s.parse::<toml::Table>() {
            panic!("the spec builder wrote invalid TOML ({e}):\n{s}");
        }
        s
    }
}

/// One `[[tables]]` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct Table {
    name: String,
    source_table: Option<String>,
    target_table: Option<String>,
    key: Vec<String>,
    ignore: Option<Vec<String>>,
    currency: Option<String>,
    revision: Option<String>,
    on_change: Option<String>,
    watermark: Option<String>,
    lookback: Option<Lit>,
    watched: Vec<String>,
    columns: Vec<Column>,
}

impl Table {
    /// A table of this name on both sides; give it a `key`.
    pub fn new(name: &str) -> Table {
        Table {
            name: name.into(),
            source_table: None,
            target_table: None,
            key: Vec::new(),
            ignore: None,
            currency: None,
            revision: None,
            on_change: None,
            watermark: None,
            lookback: None,
            watched: Vec::new(),
            columns: Vec::new(),
        }
    }

    /// The running example's `orders`: dollars ↔ cents at scale 2, the
    /// codes A and C ↔ the words active and closed.
    pub fn orders() -> Table {
        Table::new("orders")
            .key(["id"])
            .decimal("dollars", "cents", 2)
            .column(
                Column::new("status")
                    .target("status")
                    .map([("A", "active"), ("C", "closed")]),
            )
    }

    /// `source_table`: the table's name in the source.
    pub fn source_table(mut self, table: &str) -> Table {
        self.source_table = Some(table.into());
        self
    }

    /// `target_table`: the table's name in the target.
    pub fn target_table(mut self, table: &str) -> Table {
        self.target_table = Some(table.into());
        self
    }

    /// `key`: the source columns identifying a row.
    pub fn key(mut self, columns: impl IntoIterator<Item = impl AsRef<str>>) -> Table {
        self.key = strings(columns);
        self
    }

    /// `ignore`: source columns deliberately not carried.
    pub fn ignore(mut self, columns: impl IntoIterator<Item = impl AsRef<str>>) -> Table {
        self.ignore = Some(strings(columns));
        self
    }

    /// `currency`: the target column money totals are grouped by.
    pub fn currency(mut self, column: &str) -> Table {
        self.currency = Some(column.into());
        self
    }

    /// `revision`: the target column holding a per-record revision.
    pub fn revision(mut self, column: &str) -> Table {
        self.revision = Some(column.into());
        self
    }

    /// `on_change`: `"reject"` or `"update"` (anything else is refused).
    pub fn on_change(mut self, policy: &str) -> Table {
        self.on_change = Some(policy.into());
        self
    }

    /// `watermark`: the source column `cutover sync` orders rows by.
    pub fn watermark(mut self, column: &str) -> Table {
        self.watermark = Some(column.into());
        self
    }

    /// `lookback`: a number, or a duration text (`"30m"`, `"2d"`).
    pub fn lookback(mut self, window: impl Into<Lit>) -> Table {
        self.lookback = Some(window.into());
        self
    }

    /// `source_limit = { column = "watch" }`: the column's hazards
    /// accepted, each source column named once.
    pub fn watch(mut self, columns: impl IntoIterator<Item = impl AsRef<str>>) -> Table {
        for c in strings(columns) {
            if !self.watched.contains(&c) {
                self.watched.push(c);
            }
        }
        self
    }

    /// Adds a `[[tables.columns]]` entry after the others.
    pub fn column(mut self, column: Column) -> Table {
        self.columns.push(column);
        self
    }

    /// A column copied under its own name.
    pub fn copy(self, source: &str) -> Table {
        self.column(Column::new(source))
    }

    /// A column copied under another name in the target.
    pub fn rename(self, source: &str, target: &str) -> Table {
        self.column(Column::new(source).target(target))
    }

    /// Decimal text in `source` ↔ integer minor units in `target`.
    pub fn decimal(self, source: &str, target: &str, scale: u32) -> Table {
        self.column(Column::new(source).target(target).decimal(scale))
    }

    /// Codes in `source` ↔ words in the target column of the same name.
    pub fn map<C: AsRef<str>, W: AsRef<str>>(
        self,
        source: &str,
        codes: impl IntoIterator<Item = (C, W)>,
    ) -> Table {
        self.column(Column::new(source).map(codes))
    }

    /// A target-only column holding one value in every row.
    pub fn constant(self, target: &str, value: impl Into<Lit>) -> Table {
        self.column(Column::constant(target, value))
    }

    /// A target-only column left to the target's own default.
    pub fn target_default(self, target: &str) -> Table {
        self.column(Column::target_default(target))
    }

    /// Changes the column whose source (or, for a target-only column,
    /// target) is `name`; it must exist.
    pub fn edit_column(mut self, name: &str, f: impl FnOnce(Column) -> Column) -> Table {
        let i = self
            .columns
            .iter()
            .position(|c| c.source.as_deref().or(c.target.as_deref()) == Some(name))
            .unwrap_or_else(|| panic!("table {:?} has no column {name:?}", self.name));
        let c = self.columns.remove(i);
        self.columns.insert(i, f(c));
        self
    }

    fn render(&self, s: &mut String) {
        let _ = writeln!(s, "\n[[tables]]\nname = {}", quoted(&self.name));
        let text = [
            ("source_table", &self.source_table),
            ("target_table", &self.target_table),
        ];
        for (k, v) in text {
            if let Some(v) = v {
                let _ = writeln!(s, "{k} = {}", quoted(v));
            }
        }
        let _ = writeln!(s, "key = {}", list(&self.key));
        if let Some(ignore) = &self.ignore {
            let _ = writeln!(s, "ignore = {}", list(ignore));
        }
        let text = [
            ("currency", &self.currency),
            ("revision", &self.revision),
            ("on_change", &self.on_change),
            ("watermark", &self.watermark),
        ];
        for (k, v) in text {
            if let Some(v) = v {
                let _ = writeln!(s, "{k} = {}", quoted(v));
            }
        }
        if let Some(l) = &self.lookback {
            let _ = writeln!(s, "lookback = {}", l.toml());
        }
        if !self.watched.is_empty() {
            let pairs: Vec<String> = self
                .watched
                .iter()
                .map(|c| format!("{} = \"watch\"", quoted(c)))
                .collect();
            let _ = writeln!(s, "source_limit = {{ {} }}", pairs.join(", "));
        }
        for c in &self.columns {
            c.render(s);
        }
    }
}

/// One `[[tables.columns]]` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct Column {
    source: Option<String>,
    target: Option<String>,
    was: Vec<String>,
    transform: Option<String>,
    scale: Option<u32>,
    map: Option<Vec<(String, String)>>,
    integer: Option<bool>,
    min: Option<i64>,
    values: Option<Vec<String>>,
    pattern: Option<String>,
    default: Option<bool>,
    value: Option<Lit>,
    labels: Option<Vec<String>>,
}

impl Column {
    /// A mapping of source column `source`, copied under its own name until
    /// told otherwise.
    pub fn new(source: &str) -> Column {
        Column {
            source: Some(source.into()),
            ..Column::empty()
        }
    }

    /// A target-only column holding `value` in every row.
    pub fn constant(target: &str, value: impl Into<Lit>) -> Column {
        Column {
            target: Some(target.into()),
            value: Some(value.into()),
            ..Column::empty()
        }
    }

    /// A target-only column left to the target's default (`default = true`).
    pub fn target_default(target: &str) -> Column {
        Column {
            target: Some(target.into()),
            default: Some(true),
            ..Column::empty()
        }
    }

    fn empty() -> Column {
        Column {
            source: None,
            target: None,
            was: Vec::new(),
            transform: None,
            scale: None,
            map: None,
            integer: None,
            min: None,
            values: None,
            pattern: None,
            default: None,
            value: None,
            labels: None,
        }
    }

    /// `transform = "set_to_array"` with the SET's `labels`.
    pub fn set_to_array(mut self, labels: impl IntoIterator<Item = impl AsRef<str>>) -> Column {
        self.transform = Some("set_to_array".into());
        self.labels = Some(strings(labels));
        self
    }

    /// `target`: the target column, when it is named otherwise.
    pub fn target(mut self, target: &str) -> Column {
        self.target = Some(target.into());
        self
    }

    /// `was`: the names the target column had before.
    pub fn was(mut self, names: impl IntoIterator<Item = impl AsRef<str>>) -> Column {
        self.was = strings(names);
        self
    }

    /// `transform`, as any text (the tool refuses unknown ones).
    pub fn transform(mut self, transform: &str) -> Column {
        self.transform = Some(transform.into());
        self
    }

    /// `transform = "decimal_to_minor"` with its `scale`.
    pub fn decimal(mut self, scale: u32) -> Column {
        self.transform = Some("decimal_to_minor".into());
        self.scale = Some(scale);
        self
    }

    /// `scale` alone (with `transform`, or to see it refused without).
    pub fn scale(mut self, scale: u32) -> Column {
        self.scale = Some(scale);
        self
    }

    /// `transform = "map"` with its code table, in the order given.
    pub fn map<C: AsRef<str>, W: AsRef<str>>(
        mut self,
        codes: impl IntoIterator<Item = (C, W)>,
    ) -> Column {
        self.transform = Some("map".into());
        self.map = Some(
            codes
                .into_iter()
                .map(|(c, w)| (c.as_ref().to_string(), w.as_ref().to_string()))
                .collect(),
        );
        self
    }

    /// Check: `integer = true`.
    pub fn integer(mut self) -> Column {
        self.integer = Some(true);
        self
    }

    /// Check: `min = N`.
    pub fn min(mut self, min: i64) -> Column {
        self.min = Some(min);
        self
    }

    /// Check: `values = [...]`.
    pub fn values(mut self, values: impl IntoIterator<Item = impl AsRef<str>>) -> Column {
        self.values = Some(strings(values));
        self
    }

    /// Check: `pattern = "..."`.
    pub fn pattern(mut self, pattern: &str) -> Column {
        self.pattern = Some(pattern.into());
        self
    }

    fn render(&self, s: &mut String) {
        s.push_str("\n[[tables.columns]]\n");
        let text = [
            ("source", &self.source),
            ("target", &self.target),
            ("transform", &self.transform),
        ];
        for (k, v) in text {
            if let Some(v) = v {
                let _ = writeln!(s, "{k} = {}", quoted(v));
            }
        }
        if !self.was.is_empty() {
            let _ = writeln!(s, "was = {}", list(&self.was));
        }
        if let Some(scale) = self.scale {
            let _ = writeln!(s, "scale = {scale}");
        }
        if let Some(labels) = &self.labels {
            let _ = writeln!(s, "labels = {}", list(labels));
        }
        if let Some(map) = &self.map {
            let pairs: Vec<String> = map
                .iter()
                .map(|(c, w)| format!("{} = {}", key(c), quoted(w)))
                .collect();
            let _ = writeln!(s, "map = {{ {} }}", pairs.join(", "));
        }
        if let Some(b) = self.integer {
            let _ = writeln!(s, "integer = {b}");
        }
        if let Some(min) = self.min {
            let _ = writeln!(s, "min = {min}");
        }
        if let Some(values) = &self.values {
            let _ = writeln!(s, "values = {}", list(values));
        }
        if let Some(p) = &self.pattern {
            let _ = writeln!(s, "pattern = {}", quoted(p));
        }
        if let Some(b) = self.default {
            let _ = writeln!(s, "default = {b}");
        }
        if let Some(v) = &self.value {
            let _ = writeln!(s, "value = {}", v.toml());
        }
    }
}

/// A TOML basic string: quotes, backslashes and control characters escaped.
pub fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A TOML key: bare when it can be, quoted otherwise.
fn key(k: &str) -> String {
    if !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        k.to_string()
    } else {
        quoted(k)
    }
}

fn strings(items: impl IntoIterator<Item = impl AsRef<str>>) -> Vec<String> {
    items.into_iter().map(|i| i.as_ref().to_string()).collect()
}

/// A TOML array of strings.
fn list(items: &[String]) -> String {
    let items: Vec<String> = items.iter().map(|i| quoted(i)).collect();
    format!("[{}]", items.join(", "))
}
