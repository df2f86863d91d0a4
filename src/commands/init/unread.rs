//! The columns `init` leaves out of its draft because cutover does not read
//! their values (MySQL's spatial types): a source column goes in the
//! table's `ignore` list and a target column is left to its default, each
//! with a `DECIDE` saying what that costs, so that the rest of the table,
//! and of the database, is drafted and carried.

use std::fmt::Write as _;

use super::draft::lit;
use crate::db::ColumnInfo;

/// The columns cutover reads, and the names of those it does not with why.
pub(super) fn split(cols: &[ColumnInfo]) -> (Vec<ColumnInfo>, Vec<(String, String)>) {
    let read = cols
        .iter()
        .filter(|c| c.unread.is_none())
        .cloned()
        .collect();
    let unread = cols
        .iter()
        .filter_map(|c| c.unread.clone().map(|why| (c.name.clone(), why)))
        .collect();
    (read, unread)
}

/// The `ignore` line of source table `st`: the columns cutover does not
/// read, and a commented line adding those without a target column
/// (`unmatched`), which is the operator's decision.
pub(super) fn ignore(
    st: &str,
    unread: &[(String, String)],
    unmatched: &[String],
    toml: &mut String,
    to_decide: &mut usize,
) {
    let mut names: Vec<String> = unread.iter().map(|(n, _)| lit(n)).collect();
    if !unread.is_empty() {
        *to_decide += 1;
        let _ = writeln!(
            toml,
            "# DECIDE: these source columns are of a type whose values cutover does not read; they are\n# ignored, so they are neither migrated nor checked, and a row a rollback inserts into the\n# source gets NULL or the column's default there. Carry them by other means, or drop them:"
        );
        for (name, why) in unread {
            let _ = writeln!(toml, "#   {st}.{name}: {why}");
        }
        let _ = writeln!(toml, "ignore = [{}]", names.join(", "));
    }
    if !unmatched.is_empty() {
        *to_decide += 1;
        names.extend(unmatched.iter().map(|c| lit(c)));
        let _ = writeln!(
            toml,
            "# DECIDE: these source columns have no target column. Map each to a target column, or\n# drop them by removing the # below{} (the migration is then irreversible for them):\n# ignore = [{}]",
            if unread.is_empty() {
                ""
            } else {
                " in place of the ignore line above"
            },
            names.join(", ")
        );
    }
}

/// The entries of target table `tt`'s columns cutover does not read: each
/// left to the target's default.
pub(super) fn left_to_default(
    tt: &str,
    unread: &[(String, String)],
    toml: &mut String,
    to_decide: &mut usize,
) {
    for (name, why) in unread {
        *to_decide += 1;
        let _ = writeln!(
            toml,
            "\n# DECIDE: target column {tt}.{name} is not read by cutover ({why}).\n# It is left to the target's default: load writes nothing into it (a NOT NULL column without\n# a default refuses the load), the gate does not compare it, a rollback does not carry it.\n[[tables.columns]]\ntarget = {}\ndefault = true",
            lit(name)
        );
    }
}
