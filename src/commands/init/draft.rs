//! The draft `cutover init` writes: tables and columns matched by name,
//! keys from the source's primary key, transforms proposed from the
//! declared types and a sample of the values, and whatever does not match a
//! commented line to decide on.

use std::fmt::Write as _;

use anyhow::Result;

use super::check_words;
use super::map::{Proposal, from_words, propose_map};
use crate::db::{ColumnInfo, Db};
use crate::value::{ColumnKind, Value};

/// Rows read per column to find a scale or a map (a draft, not a proof).
const SAMPLE_ROWS: usize = 100_000;

/// A name as matching sees it: lower case, no underscores, no plural `s`.
pub(super) fn norm(name: &str) -> String {
    let n: String = name
        .chars()
        .filter(|c| *c != '_')
        .flat_map(char::to_lowercase)
        .collect();
    n.strip_suffix('s').map(str::to_string).unwrap_or(n)
}

/// A TOML string literal.
pub(super) fn lit(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// The scale a declared type gives (`NUMERIC(10,2)` → 2).
fn integer_type(c: &ColumnInfo) -> bool {
    c.kind == ColumnKind::Integer
}

/// Values of one column keyed by the table's key, first rows only.
pub(super) fn sample(
    db: &Db,
    table: &str,
    key: &[&str],
    column: &str,
) -> Result<Vec<(Vec<Value>, Value)>> {
    let mut cols: Vec<&str> = key.to_vec();
    cols.push(column);
    let sql = db.rows().table_sql(table, &cols, key.len(), None);
    let mut out = Vec::new();
    db.scan(&sql, None, |mut row| {
        let v = row.pop().unwrap_or(Value::Null);
        out.push((row, v));
        Ok(out.len() < SAMPLE_ROWS)
    })?;
    Ok(out)
}

/// The largest number of fraction digits among decimal-looking values.
fn data_scale(values: &[(Vec<Value>, Value)]) -> u32 {
    values
        .iter()
        .filter_map(|(_, v)| match v {
            Value::Text(t) => Some(t.clone()),
            Value::Real(r) if r.is_finite() => Some(format!("{r}")),
            _ => None,
        })
        .map(|t| t.split_once('.').map_or(0, |(_, f)| f.len() as u32))
        .max()
        .unwrap_or(0)
}

/// Drafts the entry of matched tables `st` (source) and `tt` (target): the
/// key, the columns paired, what is left to decide.
pub(super) fn table(
    source: &Db,
    target: &Db,
    st: &str,
    tt: &str,
    toml: &mut String,
    to_decide: &mut usize,
) -> Result<()> {
    let s_cols = source.catalogue().table_columns(st)?;
    // A target's generated column is its database's to compute: it needs
    // no mapping and nothing to decide.
    let generated = target.catalogue().generated_columns(tt)?;
    let t_cols: Vec<ColumnInfo> = target
        .catalogue()
        .table_columns(tt)?
        .into_iter()
        .filter(|c| !generated.iter().any(|g| g.name == c.name))
        .collect();
    let mut pk: Vec<&ColumnInfo> = s_cols.iter().filter(|c| c.pk > 0).collect();
    pk.sort_by_key(|c| c.pk);
    let _ = writeln!(toml, "\n[[tables]]\nname = {}", lit(tt));
    if st != tt {
        let _ = writeln!(toml, "source_table = {}", lit(st));
    }
    let _ = writeln!(toml, "target_table = {}", lit(tt));
    if pk.is_empty() {
        *to_decide += 1;
        let _ = writeln!(
            toml,
            "# DECIDE: source table {st} has no primary key; name the column(s) that identify a row\nkey = []"
        );
    } else {
        let names: Vec<String> = pk.iter().map(|c| lit(&c.name)).collect();
        let _ = writeln!(toml, "key = [{}]", names.join(", "));
    }
    for g in &generated {
        let _ = writeln!(
            toml,
            "# target column {tt}.{} is generated: the target computes it as rows arrive (no mapping)",
            g.name
        );
    }
    let key: Vec<&str> = pk.iter().map(|c| c.name.as_str()).collect();
    // Columns whose values cutover does not read are left out on both
    // sides, so that the rest of the table is drafted and carried.
    let (s_read, s_unread) = super::unread::split(&s_cols);
    let (t_read, t_unread) = super::unread::split(&t_cols);
    // Pair the columns first: `ignore` belongs above the column entries.
    let (pairs, ignored) = pair_columns(&s_read, &t_read);
    super::unread::ignore(st, &s_unread, &ignored, toml, to_decide);
    let used_t: Vec<&str> = pairs.iter().map(|p| p.1.name.as_str()).collect();
    // The target's definitions, for the words its CHECKs allow.
    let parts = target.catalogue().schema_of(&[tt])?;
    for (sc, tc) in pairs {
        let words = check_words::of_column(&parts, &tc.name);
        let entry = column_entry(
            (source, st),
            (target, tt),
            &key,
            (sc, tc),
            words.as_deref(),
            to_decide,
        )?;
        if let Some(entry) = entry {
            toml.push_str(&entry);
        }
    }
    super::unread::left_to_default(tt, &t_unread, toml, to_decide);
    for tc in t_read.iter().filter(|t| !used_t.contains(&t.name.as_str())) {
        *to_decide += 1;
        let _ = writeln!(
            toml,
            "\n# DECIDE: target column {}.{} ({}) has no source column: map one to it, hold a constant,\n# or leave it to the target's default (default = true instead of value):\n# [[tables.columns]]\n# target = {}\n# value = \"…\"",
            tt,
            tc.name,
            if tc.decl_type.is_empty() {
                "untyped"
            } else {
                &tc.decl_type
            },
            lit(&tc.name)
        );
    }
    Ok(())
}

/// Whether `flag` is `name` asked as a question: `is_active` or
/// `IsActive` of `active`.
fn flag_of(flag: &str, name: &str) -> bool {
    let question = flag.to_ascii_lowercase().starts_with("is_")
        || (flag.starts_with("Is") && flag[2..].starts_with(|c: char| c.is_ascii_uppercase()));
    question && norm(flag).strip_prefix("is") == Some(norm(name).as_str())
}

/// Source columns, each with the target column it is paired with.
type Pairs<'c> = Vec<(&'c ColumnInfo, &'c ColumnInfo)>;

/// The source columns paired with target columns, in the source's order,
/// and the source columns left without one.
fn pair_columns<'c>(
    s_cols: &'c [ColumnInfo],
    t_cols: &'c [ColumnInfo],
) -> (Pairs<'c>, Vec<String>) {
    let mut pairs: Pairs<'c> = Vec::new();
    let mut ignored: Vec<String> = Vec::new();
    for sc in s_cols {
        if let Some(tc) = t_cols
            .iter()
            .find(|t| norm(&t.name) == norm(&sc.name) && !pairs.iter().any(|p| p.1.name == t.name))
        {
            pairs.push((sc, tc));
        }
    }
    // A flag named as a question on one side only: `is_active` ↔
    // `active`, either way, when exactly one column answers.
    for sc in s_cols {
        if pairs.iter().any(|p| p.0.name == sc.name) {
            continue;
        }
        let free: Vec<&ColumnInfo> = t_cols
            .iter()
            .filter(|t| !pairs.iter().any(|p| p.1.name == t.name))
            .filter(|t| flag_of(&sc.name, &t.name) || flag_of(&t.name, &sc.name))
            .collect();
        if let [tc] = free[..] {
            pairs.push((sc, tc));
        }
    }
    // Then an amount renamed with its unit (`Total` →
    // `total_cents`): a numeric source column and an integer target
    // column whose name starts with it, when exactly one does.
    for sc in s_cols {
        if pairs.iter().any(|p| p.0.name == sc.name) {
            continue;
        }
        let free: Vec<&ColumnInfo> = t_cols
            .iter()
            .filter(|t| !pairs.iter().any(|p| p.1.name == t.name))
            .filter(|t| {
                sc.kind.is_numeric()
                    && integer_type(t)
                    && norm(&t.name).starts_with(&norm(&sc.name))
            })
            .collect();
        if let [tc] = free[..] {
            pairs.push((sc, tc));
        }
    }
    for sc in s_cols {
        if !pairs.iter().any(|p| p.0.name == sc.name) {
            ignored.push(sc.name.clone());
        }
    }
    // In the source's column order.
    pairs.sort_by_key(|p| s_cols.iter().position(|c| c.name == p.0.name));
    (pairs, ignored)
}

/// The `[[tables.columns]]` entry of source column `sc` paired with target
/// column `tc`: a transform proposed where the types or the values suggest
/// one. `None` for a key column of the same name, which needs none.
fn column_entry(
    (source, st): (&Db, &str),
    (target, tt): (&Db, &str),
    key: &[&str],
    (sc, tc): (&ColumnInfo, &ColumnInfo),
    words: Option<&[String]>,
    to_decide: &mut usize,
) -> Result<Option<String>> {
    let is_key = key.contains(&sc.name.as_str());
    let mut entry = format!("\n[[tables.columns]]\nsource = {}\n", lit(&sc.name));
    if tc.name != sc.name {
        let _ = writeln!(entry, "target = {}", lit(&tc.name));
    }
    if let Some(labels) = sc.labels.as_ref().filter(|_| !is_key && tc.kind.is_array()) {
        let shown: Vec<String> = labels.iter().map(|l| lit(l)).collect();
        let _ = writeln!(
            entry,
            "transform = \"set_to_array\"   # the source's SET, as an array of its labels\nlabels = [{}]",
            shown.join(", ")
        );
    } else if !is_key && sc.kind.is_numeric() && integer_type(tc) {
        let scale = match sc.kind.scale() {
            Some(s) => s,
            None => data_scale(&sample(source, st, key, &sc.name)?),
        };
        let _ = writeln!(
            entry,
            "transform = \"decimal_to_minor\"\nscale = {scale}   # from {}",
            if sc.kind.scale().is_some() {
                format!("the declared type {}", sc.decl_type)
            } else {
                "the data".to_string()
            }
        );
    } else if !is_key && !key.is_empty() && !sc.kind.is_numeric() {
        let proposal = match words {
            Some(w) => from_words(source, st, key, &sc.name, w)?,
            None => propose_map(source, st, target, tt, key, &sc.name, &tc.name)?,
        };
        let allowed = words.map_or_else(String::new, |w| {
            let shown: Vec<String> = w.iter().map(|x| lit(x)).collect();
            format!("; the target's CHECK allows {}", shown.join(", "))
        });
        match proposal {
            Proposal::None => {}
            Proposal::Words => {
                *to_decide += 1;
                let _ = writeln!(
                    entry,
                    "# DECIDE: the source's values are not known here{allowed}: if the source spells them\n# otherwise, add transform = \"map\" and map = {{ CODE = \"word\", … }}"
                );
            }
            Proposal::Values(values) => {
                let shown: Vec<String> = values.iter().map(|v| lit(v)).collect();
                let _ = writeln!(
                    entry,
                    "# a few distinct values: {}; if the target spells them otherwise, add\n# transform = \"map\" and map = {{ CODE = \"word\", … }}",
                    shown.join(", ")
                );
            }
            Proposal::Map(pairs, undecided) => {
                let _ = writeln!(entry, "transform = \"map\"");
                if undecided > 0 {
                    *to_decide += 1;
                    let _ = writeln!(
                        entry,
                        "# DECIDE: give each code its word (\"?\" marks the {undecided} not told apart){allowed}"
                    );
                }
                let items: Vec<String> = pairs
                    .iter()
                    .map(|(k, v)| format!("{} = {}", lit(k), lit(v)))
                    .collect();
                let _ = writeln!(entry, "map = {{ {} }}", items.join(", "));
            }
        }
    }
    Ok((!(is_key && tc.name == sc.name)).then_some(entry))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flag_pairs_with_its_name_asked_as_a_question() {
        assert!(flag_of("is_active", "active"));
        assert!(flag_of("IsActive", "Active"));
        assert!(flag_of("is_deleted", "deleted"));
        assert!(!flag_of("island", "land"));
        assert!(!flag_of("isactive", "active"));
        assert!(!flag_of("active", "is_active"));
        assert!(!flag_of("is_active", "inactive"));
    }
}
