//! Golden files: texts the tests pin (drill transcripts, `--help` pages),
//! compared line by line and rewritten on request with `UPDATE_GOLDEN=1`.

use std::path::{Path, PathBuf};

/// A path inside the repository (`fixtures/orders/drill.golden`).
pub fn repo_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// Whether golden files are being rewritten (`UPDATE_GOLDEN=1`).
pub fn updating() -> bool {
    std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1")
}

/// The first line where two texts differ, for a readable failure.
pub fn first_difference(expected: &str, actual: &str) -> String {
    let (e, a): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), actual.lines().collect());
    for i in 0..e.len().max(a.len()) {
        let (x, y) = (e.get(i), a.get(i));
        if x != y {
            return format!(
                "line {}:\n  expected: {}\n  actual:   {}",
                i + 1,
                x.copied().unwrap_or("<end of text>"),
                y.copied().unwrap_or("<end of text>")
            );
        }
    }
    "only line endings differ".to_string()
}

/// Compares `actual` with the golden file at `path`, or rewrites it under
/// `UPDATE_GOLDEN=1`; `test` is the `--test` name that rewrites it.
#[track_caller]
pub fn assert_golden(path: &Path, actual: &str, test: &str) {
    if updating() {
        std::fs::write(path, actual).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        return;
    }
    let expected = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}; create it with UPDATE_GOLDEN=1", path.display()));
    assert!(
        expected == actual,
        "the output differs from {}: {}\n\nfull output:\n{actual}\nif the change is intended, run `UPDATE_GOLDEN=1 cargo test --test {test}` and review the diff",
        path.display(),
        first_difference(&expected, actual)
    );
}
