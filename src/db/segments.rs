//! The arithmetic of the gate's digest ranges that every engine computing
//! digests shares ([`super::Digests`]): an integer key cut into runs of
//! equal width, and the groups a digest query returns folded into one
//! [`SegmentDigest`] per segment. The engine writes the queries; what their
//! rows mean is decided here once.

use std::cmp::Ordering;

use anyhow::{Result, bail};

use super::{MoneyGroup, SegmentDigest};
use crate::value::{Row, Value};

/// Up to `parts - 1` keys that cut the integers `lo..=hi` into `parts` runs
/// of nearly equal width, each key past `lo` and none twice.
pub(crate) fn equal_width(lo: i64, hi: i64, parts: usize) -> Vec<Row> {
    let (lo, width, parts) = (
        i128::from(lo),
        i128::from(hi) - i128::from(lo) + 1,
        parts.max(1) as i128,
    );
    let mut keys: Vec<Row> = Vec::new();
    for i in 1..parts {
        // Between lo and hi, so it fits an i64.
        let key = (lo + width * i / parts) as i64;
        if i128::from(key) > lo && keys.last().is_none_or(|l| l[0] != Value::Integer(key)) {
            keys.push(vec![Value::Integer(key)]);
        }
    }
    keys
}

/// One row of a digest query: the rows of one segment holding one
/// currency value.
pub(crate) struct Group {
    /// The segment, 0-based.
    pub seg: usize,
    /// The canonical currency value (NULL without a currency column).
    pub currency: Value,
    pub rows: u64,
    pub notes: u64,
    /// The sum of the rows' hashes.
    pub hash: i128,
    /// Per money column: how many rows hold an integer there, and their sum.
    pub sums: Vec<(u64, i128)>,
}

/// The digest of each of `segments` segments from the groups of `table`'s
/// digest query, money grouped by currency in the engine-neutral order of
/// the currency's value (so two engines list the same groups alike).
pub(crate) fn fold(
    table: &str,
    segments: usize,
    money: usize,
    groups: impl IntoIterator<Item = Result<Group>>,
) -> Result<Vec<SegmentDigest>> {
    let mut hashes = vec![0i128; segments];
    let mut out = vec![SegmentDigest::default(); segments];
    for g in groups {
        let g = g?;
        let (Some(d), Some(h)) = (out.get_mut(g.seg), hashes.get_mut(g.seg)) else {
            bail!("table '{table}': a segment {} out of range", g.seg);
        };
        d.rows += g.rows;
        d.notes += g.notes;
        *h += g.hash;
        if money == 0 {
            continue;
        }
        let at = d
            .money
            .binary_search_by(|m| m.currency.sql_cmp(&g.currency).then(Ordering::Equal));
        let group = match at {
            Ok(i) => &mut d.money[i],
            Err(i) => {
                d.money.insert(
                    i,
                    MoneyGroup {
                        currency: g.currency,
                        sums: vec![(0, 0); money],
                    },
                );
                &mut d.money[i]
            }
        };
        for (sum, add) in group.sums.iter_mut().zip(g.sums) {
            sum.0 += add.0;
            sum.1 += add.1;
        }
    }
    for (d, h) in out.iter_mut().zip(hashes) {
        d.digest = h.to_le_bytes().to_vec();
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_integer_range_is_cut_at_equal_widths_past_its_low_end() {
        let keys = |lo, hi, parts| -> Vec<i64> {
            equal_width(lo, hi, parts)
                .into_iter()
                .map(|k| match k[0] {
                    Value::Integer(i) => i,
                    _ => unreachable!(),
                })
                .collect()
        };
        assert_eq!(keys(1, 100, 4), vec![26, 51, 76]);
        // Fewer values than parts: no key twice, none at the low end.
        assert_eq!(keys(5, 6, 4), vec![6]);
        assert_eq!(keys(7, 7, 3), Vec::<i64>::new());
        assert_eq!(keys(1, 100, 1), Vec::<i64>::new());
        // The whole of i64 does not overflow.
        assert_eq!(keys(i64::MIN, i64::MAX, 2), vec![0]);
    }

    fn group(seg: usize, currency: Value, rows: u64, hash: i128, sum: i128) -> Result<Group> {
        Ok(Group {
            seg,
            currency,
            rows,
            notes: 0,
            hash,
            sums: vec![(rows, sum)],
        })
    }

    #[test]
    fn groups_fold_into_their_segments_with_money_by_currency_in_value_order() {
        let t = |s: &str| Value::Text(s.to_string());
        let out = fold(
            "t",
            2,
            1,
            vec![
                group(1, t("USD"), 2, 5, 700),
                group(0, t("USD"), 1, 3, 100),
                group(1, t("EUR"), 1, -2, 50),
                group(1, t("USD"), 1, 1, 1),
            ],
        )
        .unwrap();
        assert_eq!((out[0].rows, out[1].rows), (1, 4));
        assert_eq!(out[1].digest, 4i128.to_le_bytes().to_vec());
        let money: Vec<(Value, Vec<(u64, i128)>)> = out[1]
            .money
            .iter()
            .map(|m| (m.currency.clone(), m.sums.clone()))
            .collect();
        assert_eq!(
            money,
            vec![(t("EUR"), vec![(1, 50)]), (t("USD"), vec![(3, 701)])]
        );
        // Without money columns no group is listed.
        let plain = fold("t", 1, 0, vec![group(0, Value::Null, 3, 9, 0)]).unwrap();
        assert!(plain[0].money.is_empty());
    }

    #[test]
    fn a_segment_past_the_bounds_is_an_error_naming_the_table() {
        let err = fold("orders", 2, 0, vec![group(2, Value::Null, 1, 1, 0)]).unwrap_err();
        assert!(err.to_string().contains("'orders'"), "{err}");
    }
}
