//! The journal's runs merged into one page: each engine reads each image
//! table of a page as one range of its primary key (a run, in seq order),
//! and the page is the runs merged by seq, cut at a number of entries or of
//! bytes. Written once for every engine; an engine brings its runs and how
//! an entry of them becomes a [`super::JournalEntry`].

use std::collections::VecDeque;

use anyhow::Result;

/// A page taken from runs: the entries, and how many bytes their images
/// hold.
pub(crate) struct Merged<U> {
    pub entries: Vec<U>,
    pub bytes: usize,
}

/// Takes the entries of `runs` (each in seq order) in seq order, each
/// through `take`, until `limit` are taken or their images reach `budget`
/// bytes (the entry that reaches it is the last taken).
pub(crate) fn merge_runs<T, U>(
    runs: &mut [VecDeque<T>],
    limit: usize,
    budget: usize,
    seq: impl Fn(&T) -> i64,
    size: impl Fn(&T) -> usize,
    mut take: impl FnMut(T) -> Result<U>,
) -> Result<Merged<U>> {
    let mut entries = Vec::with_capacity(limit.min(4096));
    let mut bytes = 0usize;
    while entries.len() < limit && bytes < budget {
        let Some(next) = runs
            .iter_mut()
            .filter(|r| !r.is_empty())
            .min_by_key(|r| r.front().map_or(i64::MAX, &seq))
        else {
            break;
        };
        let Some(e) = next.pop_front() else {
            break;
        };
        bytes = bytes.saturating_add(size(&e));
        entries.push(take(e)?);
    }
    Ok(Merged { entries, bytes })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs(r: &[&[i64]]) -> Vec<VecDeque<i64>> {
        r.iter().map(|s| s.iter().copied().collect()).collect()
    }

    #[test]
    fn runs_merge_in_seq_order_up_to_the_limit() -> Result<()> {
        let mut r = runs(&[&[1, 4, 7], &[2, 3, 9], &[], &[5]]);
        let m = merge_runs(&mut r, 5, usize::MAX, |&s| s, |_| 0, Ok)?;
        assert_eq!(m.entries, [1, 2, 3, 4, 5]);
        let rest = merge_runs(&mut r, 10, usize::MAX, |&s| s, |_| 0, Ok)?;
        assert_eq!(rest.entries, [7, 9]);
        Ok(())
    }

    #[test]
    fn a_page_ends_with_the_entry_that_reaches_the_budget() -> Result<()> {
        let mut r = runs(&[&[1, 3], &[2, 4]]);
        let m = merge_runs(&mut r, 10, 25, |&s| s, |_| 10, |s| Ok(s * 10))?;
        assert_eq!((m.entries, m.bytes), (vec![10, 20, 30], 30));
        Ok(())
    }
}
