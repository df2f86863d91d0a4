//! The words a target column's CHECK constraint allows (`status IN
//! ('active', 'closed')`), read from the definitions the catalogue gives,
//! and the `map` init proposes from them: each source value paired with
//! the word it abbreviates when exactly one does, otherwise a DECIDE line
//! listing the words.

use std::collections::BTreeMap;

use crate::db::SchemaPart;

/// The words of the first `column IN ('…', …)` (or `column = ANY
/// (ARRAY['…', …])`, PostgreSQL's rendering of the same) in `parts`; `None`
/// when no definition limits the column to a list of text values.
pub fn of_column(parts: &[SchemaPart], column: &str) -> Option<Vec<String>> {
    let pattern = format!(
        r#"(?i)(?:^|[^A-Za-z0-9_$])["`(]*{}["`)]*(?:::[a-z ]+)*\s*(?:\bIN\b|=\s*ANY\b)\s*\("#,
        regex::escape(column)
    );
    let re = regex::Regex::new(&pattern).ok()?;
    parts.iter().find_map(|p| {
        let m = re.find(&p.definition)?;
        let words = literals_to_close(&p.definition[m.end()..])?;
        (!words.is_empty()).then_some(words)
    })
}

/// The string literals before the parenthesis that closes the one just
/// opened, `''` read as a quote; `None` when it never closes or holds
/// something that is not a literal, a cast, `ARRAY`, a comma or a bracket.
fn literals_to_close(text: &str) -> Option<Vec<String>> {
    let mut depth = 1usize;
    let mut words = Vec::new();
    let mut chars = text.chars().peekable();
    let mut other = String::new();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                let mut w = String::new();
                loop {
                    match chars.next()? {
                        '\'' if chars.peek() == Some(&'\'') => {
                            chars.next();
                            w.push('\'');
                        }
                        '\'' => break,
                        x => w.push(x),
                    }
                }
                words.push(w);
            }
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            c => other.push(c),
        }
    }
    if depth != 0 {
        return None;
    }
    // Only casts and PostgreSQL's ARRAY[…] may sit between the literals.
    let rest = other.to_ascii_lowercase();
    let allowed = |w: &str| {
        w.is_empty()
            || w.chars()
                .all(|c| c.is_ascii_alphanumeric() || " _:,[]".contains(c))
    };
    allowed(&rest).then_some(words)
}

/// Each source value paired with its word: itself when the target allows
/// it as it is, else the one word it abbreviates (`A` → `active`, case
/// aside), else `"?"`; with how many are `"?"`. `None` when every value is
/// already one of the words (no map is needed).
pub fn pair(values: &[String], words: &[String]) -> Option<(BTreeMap<String, String>, usize)> {
    if values.iter().all(|v| words.contains(v)) {
        return None;
    }
    let mut undecided = 0;
    let pairs = values
        .iter()
        .map(|v| {
            let lower = v.to_lowercase();
            let same: Vec<&String> = words.iter().filter(|w| w.to_lowercase() == lower).collect();
            let starts: Vec<&String> = words
                .iter()
                .filter(|w| w.to_lowercase().starts_with(&lower))
                .collect();
            let word = match (same.as_slice(), starts.as_slice()) {
                ([w], _) | ([], [w]) => (*w).clone(),
                _ => {
                    undecided += 1;
                    "?".to_string()
                }
            };
            (v.clone(), word)
        })
        .collect();
    Some((pairs, undecided))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(definition: &str) -> Vec<SchemaPart> {
        vec![SchemaPart {
            name: "table t".into(),
            definition: definition.into(),
        }]
    }

    fn words(v: &[&str]) -> Option<Vec<String>> {
        Some(v.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn each_engine_s_rendering_of_a_check_is_read() {
        let want = words(&["active", "closed", "it's"]);
        for def in [
            // SQLite: the statement as written.
            "CREATE TABLE t (id INTEGER PRIMARY KEY, status TEXT CHECK (status IN ('active', 'closed', 'it''s')))",
            // PostgreSQL: pg_get_constraintdef, text and varchar.
            "CHECK ((status = ANY (ARRAY['active'::text, 'closed'::text, 'it''s'::text])))",
            "CHECK (((status)::text = ANY ((ARRAY['active'::character varying, 'closed'::character varying, 'it''s'::character varying])::text[])))",
            // MySQL and MariaDB: SHOW CREATE TABLE.
            "CREATE TABLE `t` (\n  `status` varchar(10) NOT NULL,\n  CONSTRAINT `c` CHECK (`status` in ('active','closed','it''s'))\n)",
        ] {
            assert_eq!(of_column(&part(def), "status"), want, "{def}");
        }
    }

    #[test]
    fn other_columns_and_other_checks_are_not_words() {
        for def in [
            "CHECK (substatus IN ('a', 'b'))",
            "CHECK (status IN (SELECT s FROM other))",
            "CHECK (status <> 'x')",
            "CHECK (status IN (1, 2))",
        ] {
            assert_eq!(of_column(&part(def), "status"), None, "{def}");
        }
    }

    #[test]
    fn values_pair_with_the_word_they_abbreviate() {
        let w: Vec<String> = ["active", "closed", "cancelled"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let v = |x: &[&str]| x.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (pairs, undecided) = pair(&v(&["A", "CLOSED", "C"]), &w).expect("a map");
        assert_eq!(pairs["A"], "active");
        assert_eq!(pairs["CLOSED"], "closed");
        assert_eq!(pairs["C"], "?", "closed or cancelled");
        assert_eq!(undecided, 1);
        assert!(pair(&v(&["active", "closed"]), &w).is_none());
    }
}
