//! The `map` init proposes for a text column: onto the words a target's
//! CHECK allows, or from the words the target holds under the same keys,
//! or a list of the few values the source holds.

use std::collections::BTreeMap;

use anyhow::Result;

use super::check_words;
use super::draft::{norm, sample};
use crate::db::Db;
use crate::value::{Value, key_json};

/// At most this many distinct text values make a column a `map` candidate.
const MAP_MAX_VALUES: usize = 12;

/// What a text column's values suggest.
pub(super) enum Proposal {
    /// Nothing: too many values, not text, or the target holds them as they are.
    None,
    /// The target allows only certain words, and the source's values were
    /// not read as text (none, or not text).
    Words,
    /// Few distinct values and no target rows to pair them with: listed.
    Values(Vec<String>),
    /// The target spells them otherwise: each code with the word most often
    /// found under the same key (`"?"` where none was), and how many are `?`.
    Map(BTreeMap<String, String>, usize),
}

/// A `map` onto the words a target's CHECK allows: the source's distinct
/// values each paired with its word ([`check_words::pair`]).
pub(super) fn from_words(
    source: &Db,
    st: &str,
    key: &[&str],
    column: &str,
    words: &[String],
) -> Result<Proposal> {
    let mut values = std::collections::BTreeSet::new();
    for (_, v) in sample(source, st, key, column)? {
        match v {
            Value::Text(t) => {
                values.insert(t);
            }
            Value::Null => {}
            _ => return Ok(Proposal::Words),
        }
    }
    if values.is_empty() {
        return Ok(Proposal::Words);
    }
    let values: Vec<String> = values.into_iter().collect();
    Ok(match check_words::pair(&values, words) {
        None => Proposal::None,
        Some((pairs, undecided)) => Proposal::Map(pairs, undecided),
    })
}

/// Whether a value reads as a code (`A`, `active`, `NC-17`, `gold_2`):
/// short, one word of letters, digits, `_` or `-`, and not a date, a time, an
/// e-mail address or a phone number.
fn looks_like_code(v: &str) -> bool {
    let digits = v.bytes().filter(u8::is_ascii_digit).count();
    !v.is_empty()
        && v.len() <= 16
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        && v.bytes().any(|b| b.is_ascii_alphabetic())
        && digits * 2 <= v.len()
}

/// A `map` for a low-cardinality text column whose values the target spells
/// otherwise: each source code paired with the target word most often found
/// under the same key, `"?"` where the target has no row to tell.
pub(super) fn propose_map(
    source: &Db,
    st: &str,
    target: &Db,
    tt: &str,
    key: &[&str],
    s_col: &str,
    t_col: &str,
) -> Result<Proposal> {
    let s = sample(source, st, key, s_col)?;
    let mut codes: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for (_, v) in &s {
        match v {
            Value::Text(t) => {
                codes.entry(t.clone()).or_default();
            }
            Value::Null => {}
            _ => return Ok(Proposal::None),
        }
        if codes.len() > MAP_MAX_VALUES {
            return Ok(Proposal::None);
        }
    }
    if codes.is_empty() || !codes.keys().all(|c| looks_like_code(c)) {
        return Ok(Proposal::None);
    }
    // A code names a class of rows, so codes repeat. Where every row has a
    // value of its own (a small table of names), the values are data, not
    // codes, unless they are one- or two-letter codes.
    let present = s.iter().filter(|(_, v)| !matches!(v, Value::Null)).count();
    if codes.len() >= present && codes.keys().any(|c| c.len() > 2) {
        return Ok(Proposal::None);
    }
    // The target's words under the same keys (key names matched as the
    // source's, which the draft carries unchanged or renamed by position).
    let t_cols = target.catalogue().table_columns(tt)?;
    let mut t_key: Vec<&str> = Vec::new();
    for k in key {
        match t_cols.iter().find(|c| norm(&c.name) == norm(k)) {
            Some(c) => t_key.push(&c.name),
            None => return Ok(Proposal::None),
        }
    }
    let t = sample(target, tt, &t_key, t_col)?;
    let words: std::collections::HashMap<String, &Value> = t
        .iter()
        .map(|(k, v)| (key_json(k).to_string(), v))
        .collect();
    let mut any_word = false;
    for (k, v) in &s {
        if let (Value::Text(code), Some(Value::Text(word))) =
            (v, words.get(&key_json(k).to_string()))
        {
            any_word = true;
            *codes
                .entry(code.clone())
                .or_default()
                .entry(word.clone())
                .or_default() += 1;
        }
    }
    // Codes the target already holds as they are need no map.
    let identical = codes.iter().all(|(c, w)| w.keys().all(|x| x == c));
    if any_word && identical {
        return Ok(Proposal::None);
    }
    if !any_word {
        return Ok(if t.is_empty() {
            Proposal::Values(codes.into_keys().collect())
        } else {
            Proposal::None
        });
    }
    let mut undecided = 0;
    let pairs = codes
        .into_iter()
        .map(|(code, words)| {
            let word = words
                .into_iter()
                .max_by_key(|(_, n)| *n)
                .map(|(w, _)| w)
                .unwrap_or_else(|| {
                    undecided += 1;
                    "?".to_string()
                });
            (code, word)
        })
        .collect();
    Ok(Proposal::Map(pairs, undecided))
}
