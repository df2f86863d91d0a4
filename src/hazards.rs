//! What `check` names before the switch: every place where the target can
//! hold a value the source cannot store exactly. After the switch the
//! application writes only the target, and a write past such a place
//! cannot go back: replay refuses it as a conflict and the rollback is
//! blocked with the application fenced. Before the switch it can still be
//! fixed: widen the source, or have the target refuse what the source
//! cannot hold (the DDL of a mirroring CHECK is printed).
//!
//! Read from both catalogues, never from the rows: a column's declared
//! bound ([`Limit`]) on each side, compared through the spec's transform;
//! a source column an insert must fill that the spec does not carry; a
//! generated source column the target lets the application write. A
//! target CHECK named as `check` prints it (`<column>_fits_source`) counts
//! as the bound held.

use anyhow::Result;
use serde::Serialize;

use crate::db::{ColumnInfo, Db, Limit};
use crate::spec::{Spec, Table};
use crate::transform::Transform;

/// One place where the target holds what the source cannot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Hazard {
    /// The spec's table.
    pub table: String,
    /// The source column.
    pub column: String,
    /// The target column it is carried to; `None` for a source column the
    /// spec does not carry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_column: Option<String>,
    pub kind: HazardKind,
    pub source_type: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub target_type: String,
    /// What the target holds that the source cannot, in words.
    pub why: String,
    /// What to do before the switch.
    pub fixes: Vec<String>,
    /// The spec accepts it (`source_limit = "watch"`): `watch` counts each
    /// write that crosses it, and `journal install` goes ahead.
    pub accepted: bool,
}

impl Hazard {
    /// The spec's words that accept it.
    pub fn acceptance(&self) -> String {
        match self.target_column {
            Some(_) => format!(
                "source_limit = \"watch\" in the [[tables.columns]] entry of source column '{}'",
                self.column
            ),
            None => format!(
                "source_limit = {{ {} = \"watch\" }} in table '{}'",
                self.column, self.table
            ),
        }
    }
}

/// What kind of value crosses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HazardKind {
    /// More digits of a second, or more digits before the point.
    Precision,
    /// More digits after the point.
    Scale,
    /// Longer text.
    Length,
    /// Integers, or years, past the source's range.
    Range,
    /// A shorter text that the source pads with spaces.
    Padding,
    /// Trailing spaces that the source drops.
    TrailingSpaces,
    /// Labels the source's ENUM or enum type lacks.
    Members,
    /// A source column an insert must fill, which the spec does not carry.
    Required,
    /// A generated source column carried to a column the application
    /// writes.
    Generated,
}

impl HazardKind {
    pub fn name(self) -> &'static str {
        match self {
            HazardKind::Precision => "precision",
            HazardKind::Scale => "scale",
            HazardKind::Length => "length",
            HazardKind::Range => "range",
            HazardKind::Padding => "padding",
            HazardKind::TrailingSpaces => "trailing spaces",
            HazardKind::Members => "members",
            HazardKind::Required => "required",
            HazardKind::Generated => "generated",
        }
    }
}

/// Every hazard of the spec's tables, table by table in the spec's order,
/// columns in the spec's order, then the source's columns it leaves out.
pub fn of(spec: &Spec, source: &Db, target: &Db) -> Result<Vec<Hazard>> {
    let mut out = Vec::new();
    let policy = crate::side_effects::Policy::read(spec, source)?;
    for t in &spec.tables {
        let s_cols = source.catalogue().table_columns(&t.source_table)?;
        let t_cols = target.catalogue().table_columns(&t.target_table)?;
        let s_generated = source.catalogue().generated_columns(&t.source_table)?;
        let t_generated = target.catalogue().generated_columns(&t.target_table)?;
        // The CHECKs printed as fixes, once the operator has added them.
        let target_schema: Vec<String> = target
            .catalogue()
            .schema_of(&[t.target_table.as_str()])?
            .into_iter()
            .map(|p| format!("{} {}", p.name, p.definition).to_ascii_lowercase())
            .collect();
        let held = |column: &str| held_by(&target_schema, column);
        for c in &t.columns {
            // SQLite lists a generated column apart from the others.
            let source_column = s_cols
                .iter()
                .find(|x| x.name == c.source)
                .cloned()
                .or_else(|| {
                    s_generated
                        .iter()
                        .find(|g| g.name == c.source)
                        .map(|g| ColumnInfo {
                            name: g.name.clone(),
                            decl_type: format!("generated, {}", g.kind()),
                            kind: crate::value::ColumnKind::Any,
                            pk: 0,
                            labels: None,
                            unread: None,
                            limit: Limit::None,
                            required: false,
                        })
                });
            let (Some(s), Some(tc)) = (source_column, t_cols.iter().find(|x| x.name == c.target))
            else {
                continue;
            };
            let at = |kind, why: String, fixes| Hazard {
                table: t.name.clone(),
                column: s.name.clone(),
                target_column: Some(tc.name.clone()),
                kind,
                source_type: s.decl_type.clone(),
                target_type: tc.decl_type.clone(),
                why,
                fixes,
                accepted: false,
            };
            if s_generated.iter().any(|g| g.name == s.name)
                && !t_generated.iter().any(|g| g.name == tc.name)
            {
                out.push(at(
                    HazardKind::Generated,
                    format!(
                        "the source computes '{}' itself, while the application may write target column '{}': a value other than the source's computation cannot go back",
                        s.name, tc.name
                    ),
                    vec![
                        format!(
                            "make target column '{}' generated by the same expression",
                            tc.name
                        ),
                        format!(
                            "or leave '{}' out of the spec's columns (the source computes it again)",
                            s.name
                        ),
                    ],
                ));
            }
            let Some(bound) = image(&s.limit, &c.transform) else {
                continue;
            };
            if held(&tc.name) {
                continue;
            }
            for (kind, why) in crossings(&bound, &tc.limit) {
                let mut fixes = vec![format!(
                    "widen source column '{}' ({}) to hold what target column '{}' ({}) holds",
                    s.name, s.decl_type, tc.name, tc.decl_type
                )];
                if let Some(ddl) = (target.engine().bound_check)(&t.target_table, &tc.name, &bound)
                {
                    fixes.push(format!("or have the target refuse it: {ddl}"));
                }
                out.push(at(kind, why, fixes));
            }
        }
        let filled = policy.filled_on_insert(&t.source_table);
        out.extend(required(t, &s_cols, &s_generated, &filled));
    }
    Ok(out.into_iter().map(|h| decided(spec, h)).collect())
}

/// The hazard with the spec's decision, and the fix that accepts it.
fn decided(spec: &Spec, mut h: Hazard) -> Hazard {
    h.accepted = spec
        .table(&h.table)
        .is_some_and(|t| t.watched.contains(&h.column));
    let accept = h.acceptance();
    h.fixes.push(format!(
        "or accept it, and have watch count each write that crosses it: {accept}"
    ));
    h
}

/// The hazards the spec has not decided: `journal install` refuses while
/// there is one.
pub fn undecided(hazards: &[Hazard]) -> impl Iterator<Item = &Hazard> {
    hazards.iter().filter(|h| !h.accepted)
}

/// Whether a part of the target table's schema (lower case) names the
/// CHECK that holds `column` to the source's bound: the whole name, so
/// that `id_fits_source` is not taken for `paid_fits_source`.
fn held_by(schema: &[String], column: &str) -> bool {
    let name = crate::db::bounds::constraint_name(column);
    let word = regex::Regex::new(&format!(r"\b{}\b", regex::escape(&name)))
        .expect("an escaped name is a pattern");
    schema.iter().any(|p| word.is_match(p))
}

/// The source's columns that an insert must fill and the spec does not
/// carry: every row the application inserts after the switch.
fn required(
    t: &Table,
    s_cols: &[ColumnInfo],
    generated: &[crate::db::Generated],
    filled: &[String],
) -> Vec<Hazard> {
    uncarried_required(t, s_cols, generated, filled)
        .map(|s| Hazard {
            table: t.name.clone(),
            column: s.name.clone(),
            target_column: None,
            kind: HazardKind::Required,
            source_type: s.decl_type.clone(),
            target_type: String::new(),
            why: format!(
                "source column '{}' is NOT NULL without a default and the spec does not carry it: no row the application inserts after the switch can go back",
                s.name
            ),
            fixes: vec![
                format!("give source column '{}' a default", s.name),
                format!(
                    "or let it hold NULL, or carry it in the spec to a column of table '{}'",
                    t.target_table
                ),
            ],
            accepted: false,
        })
        .collect()
}

/// Neither carried, nor generated, nor `filled` by a trigger that fires on
/// replay's inserts.
fn uncarried_required<'c>(
    t: &Table,
    s_cols: &'c [ColumnInfo],
    generated: &[crate::db::Generated],
    filled: &[String],
) -> impl Iterator<Item = &'c ColumnInfo> {
    s_cols
        .iter()
        // A column cutover does not read (a GEOMETRY) counts too: an insert
        // must fill it all the same.
        .filter(|s| s.required)
        .filter(|s| !t.columns.iter().any(|c| c.source == s.name))
        .filter(|s| !generated.iter().any(|g| g.name == s.name))
        .filter(|s| !filled.contains(&s.name))
}

/// The names of the source table's columns that an insert must fill and
/// neither the spec nor a trigger of `policy` does: replay cannot insert a
/// row there.
pub fn required_columns(
    t: &Table,
    source: &Db,
    policy: &crate::side_effects::Policy,
) -> Result<Vec<String>> {
    let s_cols = source.catalogue().table_columns(&t.source_table)?;
    let generated = source.catalogue().generated_columns(&t.source_table)?;
    let filled = policy.filled_on_insert(&t.source_table);
    Ok(uncarried_required(t, &s_cols, &generated, &filled)
        .map(|c| c.name.clone())
        .collect())
}

/// The source column's bound in the target column's terms, through the
/// spec's transform; `None` where the transform's own reverse decides
/// what goes back (a map, a constant, a set of labels) or the source has
/// no bound.
fn image(source: &Limit, transform: &Transform) -> Option<Limit> {
    match (source, transform) {
        (Limit::None, _) => None,
        (_, Transform::Copy) => Some(source.clone()),
        (
            Limit::Digits {
                precision,
                scale,
                unsigned,
            },
            Transform::DecimalToMinor { scale: minor, .. },
        ) => {
            // Minor units: the whole digits and `minor` after the point.
            let digits = precision.saturating_sub(*scale) + minor;
            let max = 10i128.checked_pow(digits)? - 1;
            Some(Limit::Integer {
                min: if *unsigned { 0 } else { -max },
                max,
            })
        }
        _ => None,
    }
}

/// Each hazard as a `WARN` line, then its fixes; one the spec accepts as
/// a `note` line.
pub fn render(hazards: &[Hazard]) -> String {
    let mut text = String::new();
    for h in hazards {
        let at = match &h.target_column {
            Some(t) => format!(
                "source column '{}' ({}) under target column '{t}' ({})",
                h.column, h.source_type, h.target_type
            ),
            None => format!("source column '{}' ({})", h.column, h.source_type),
        };
        if h.accepted {
            text.push_str(&format!(
                "note: table '{}': {at}: {} hazard accepted (source_limit = \"watch\"): {}; watch counts each write that crosses it, and replay refuses such a write as a conflict\n",
                h.table,
                h.kind.name(),
                h.why
            ));
            continue;
        }
        text.push_str(&format!(
            "WARN table '{}': {at}: {} hazard: {}\n",
            h.table,
            h.kind.name(),
            h.why
        ));
        for fix in &h.fixes {
            text.push_str(&format!("  fix: {fix}\n"));
        }
    }
    text
}

/// What the target's bound lets through that `source` does not, each with
/// why in words.
fn crossings(source: &Limit, target: &Limit) -> Vec<(HazardKind, String)> {
    match source {
        Limit::None => Vec::new(),
        &Limit::Integer { min, max } => integers(min, max, target),
        &Limit::Digits {
            precision,
            scale,
            unsigned,
        } => digits(precision.saturating_sub(scale), scale, unsigned, target),
        &Limit::Chars {
            length,
            padded,
            cut,
        } => chars(length, padded, cut, target),
        &Limit::Time { fraction, years } => times(fraction, years, target),
        Limit::Members(labels) => members(labels, target),
    }
}

/// Integers from `min` to `max`.
fn integers(min: i128, max: i128, target: &Limit) -> Vec<(HazardKind, String)> {
    let why = match target {
        &Limit::Integer {
            min: tmin,
            max: tmax,
        } if tmin >= min && tmax <= max => return Vec::new(),
        Limit::Integer {
            min: tmin,
            max: tmax,
        } => {
            format!(
                "the target holds integers from {tmin} to {tmax}, the source from {min} to {max}"
            )
        }
        _ => format!("the target holds numbers past the source's integers from {min} to {max}"),
    };
    vec![(HazardKind::Range, why)]
}

/// Numbers of `whole` digits before the point and `scale` after.
fn digits(whole: u32, scale: u32, unsigned: bool, target: &Limit) -> Vec<(HazardKind, String)> {
    let mut out = Vec::new();
    match *target {
        Limit::Digits {
            precision: tp,
            scale: ts,
            unsigned: tu,
        } => {
            if ts > scale {
                out.push((
                    HazardKind::Scale,
                    format!("the target keeps {ts} digits after the point, the source {scale}: the source would round them"),
                ));
            }
            let twhole = tp.saturating_sub(ts);
            if twhole > whole {
                out.push((
                    HazardKind::Precision,
                    format!("the target holds {twhole} digits before the point, the source {whole}"),
                ));
            }
            if unsigned && !tu {
                out.push((
                    HazardKind::Range,
                    "the target holds numbers below zero, the source's column is UNSIGNED".into(),
                ));
            }
        }
        Limit::Integer { min, max } => {
            let bound = 10i128.checked_pow(whole).unwrap_or(i128::MAX);
            if max >= bound || min <= -bound || (unsigned && min < 0) {
                let sign = if unsigned { ", none below zero" } else { "" };
                out.push((
                    HazardKind::Range,
                    format!("the target holds integers from {min} to {max}, the source fewer than {whole} digits before the point{sign}"),
                ));
            }
        }
        _ => out.push((
            HazardKind::Precision,
            format!("the target holds numbers of any size and scale, the source {whole} digits before the point and {scale} after"),
        )),
    }
    out
}

/// Text of at most `length` characters, `padded` or with trailing spaces
/// `cut` by the source.
fn chars(length: u32, padded: bool, cut: bool, target: &Limit) -> Vec<(HazardKind, String)> {
    let mut out = Vec::new();
    match *target {
        Limit::Chars { length: tl, .. } if tl <= length => {}
        Limit::Chars { length: tl, .. } => out.push((
            HazardKind::Length,
            format!("the target holds {tl} characters, the source {length}"),
        )),
        _ => out.push((
            HazardKind::Length,
            format!("the target holds text of any length, the source {length} characters"),
        )),
    }
    let tpadded = matches!(*target, Limit::Chars { length: tl, padded: true, .. } if tl == length);
    if padded && !tpadded {
        out.push((
            HazardKind::Padding,
            format!("the target holds text shorter than {length} characters, which the source pads with spaces"),
        ));
    }
    if cut && !matches!(target, Limit::Chars { cut: true, .. }) {
        out.push((
            HazardKind::TrailingSpaces,
            "the target keeps trailing spaces, which the source's CHAR drops".into(),
        ));
    }
    out
}

/// Times kept to `fraction` digits of a second, within `years`.
fn times(fraction: u32, years: Option<(i32, i32)>, target: &Limit) -> Vec<(HazardKind, String)> {
    let mut out = Vec::new();
    let (tf, tyears) = match *target {
        Limit::Time { fraction, years } => (Some(fraction), years),
        _ => (None, None),
    };
    if tf.is_none_or(|tf| tf > fraction) {
        let held = tf.map_or_else(|| "any number of".to_string(), |tf| tf.to_string());
        out.push((
            HazardKind::Precision,
            format!("the target keeps {held} digits of a second, the source {fraction}: the source would round them"),
        ));
    }
    if let Some((from, to)) = years
        && !tyears.is_some_and(|(a, b)| a >= from && b <= to)
    {
        out.push((
            HazardKind::Range,
            format!("the target holds times before {from} or after {to}-01-19, which the source's TIMESTAMP cannot"),
        ));
    }
    out
}

/// One of `labels`.
fn members(labels: &[String], target: &Limit) -> Vec<(HazardKind, String)> {
    let why = match target {
        Limit::Members(t) => {
            let extra: Vec<&str> = t
                .iter()
                .filter(|l| !labels.contains(l))
                .map(String::as_str)
                .collect();
            if extra.is_empty() {
                return Vec::new();
            }
            format!(
                "the target holds {}, which the source's labels lack",
                extra.join(", ")
            )
        }
        _ => format!(
            "the target holds any text, the source only {}",
            labels.join(", ")
        ),
    };
    vec![(HazardKind::Members, why)]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn time(fraction: u32) -> Limit {
        Limit::Time {
            fraction,
            years: None,
        }
    }

    fn kinds(source: &Limit, target: &Limit) -> Vec<HazardKind> {
        crossings(source, target)
            .into_iter()
            .map(|(k, _)| k)
            .collect()
    }

    #[test]
    fn a_source_keeping_fewer_digits_of_a_second_is_a_precision_hazard() {
        assert_eq!(kinds(&time(0), &time(6)), [HazardKind::Precision]);
        assert_eq!(kinds(&time(6), &time(0)), []);
        assert_eq!(kinds(&time(3), &time(3)), []);
        assert_eq!(kinds(&time(6), &Limit::None), [HazardKind::Precision]);
        let stamp = Limit::Time {
            fraction: 0,
            years: Some((1970, 2038)),
        };
        assert_eq!(
            kinds(&stamp, &time(6)),
            [HazardKind::Precision, HazardKind::Range]
        );
        assert_eq!(kinds(&stamp, &stamp), []);
    }

    #[test]
    fn digits_lengths_widths_and_labels() {
        let digits = |precision, scale| Limit::Digits {
            precision,
            scale,
            unsigned: false,
        };
        assert_eq!(kinds(&digits(12, 2), &digits(12, 2)), []);
        assert_eq!(kinds(&digits(12, 2), &digits(12, 4)), [HazardKind::Scale]);
        assert_eq!(
            kinds(&digits(12, 2), &digits(14, 2)),
            [HazardKind::Precision]
        );
        assert_eq!(kinds(&digits(12, 2), &Limit::None), [HazardKind::Precision]);
        let int = |bits: u32| Limit::Integer {
            min: -(1i128 << (bits - 1)),
            max: (1i128 << (bits - 1)) - 1,
        };
        assert_eq!(kinds(&int(32), &int(64)), [HazardKind::Range]);
        assert_eq!(kinds(&int(64), &int(32)), []);
        let chars = |length, padded| Limit::Chars {
            length,
            padded,
            cut: false,
        };
        assert_eq!(
            kinds(&chars(10, false), &chars(20, false)),
            [HazardKind::Length]
        );
        assert_eq!(kinds(&chars(10, false), &chars(10, false)), []);
        assert_eq!(
            kinds(&chars(3, true), &chars(3, false)),
            [HazardKind::Padding]
        );
        assert_eq!(kinds(&chars(3, true), &chars(3, true)), []);
        let labels = |l: &[&str]| Limit::Members(l.iter().map(|s| s.to_string()).collect());
        assert_eq!(kinds(&labels(&["a", "b"]), &labels(&["a"])), []);
        assert_eq!(
            kinds(&labels(&["a"]), &labels(&["a", "b"])),
            [HazardKind::Members]
        );
        assert_eq!(kinds(&labels(&["a"]), &Limit::None), [HazardKind::Members]);
    }

    #[test]
    fn a_check_is_found_by_its_whole_name() {
        let schema = ["check paid_fits_source: check ((paid >= 0))".to_string()];
        assert!(held_by(&schema, "paid"));
        assert!(held_by(&schema, "Paid"));
        assert!(!held_by(&schema, "id"));
    }

    #[test]
    fn money_carried_as_minor_units_is_bounded_by_the_source_digits() {
        let transform = Transform::DecimalToMinor {
            scale: 2,
            typed: Default::default(),
        };
        let source = Limit::Digits {
            precision: 12,
            scale: 2,
            unsigned: false,
        };
        let bound = image(&source, &transform).unwrap();
        assert_eq!(
            bound,
            Limit::Integer {
                min: -999_999_999_999,
                max: 999_999_999_999
            }
        );
        let bigint = Limit::Integer {
            min: i128::from(i64::MIN),
            max: i128::from(i64::MAX),
        };
        assert_eq!(kinds(&bound, &bigint), [HazardKind::Range]);
        assert_eq!(kinds(&bound, &bound), []);
    }
}
