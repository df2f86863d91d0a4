//! RUNBOOK.md, executed.
//!
//! Each part of the runbook that can be practised starts with a line
//!
//! ```text
//! Practise this part: cutover drill --keep rehearsal --stop-after STEP
//! ```
//!
//! and everything after it, up to the next such line, belongs to that part.
//! For each part this test runs that drill into a temporary folder, then every
//! command of the part's `sh` code blocks, in order, in the kept folder, and
//! asserts the exit code the runbook documents (`# exits 1` or `# exits 2` at
//! the end of a line; 0 otherwise). A runbook whose commands no longer do what
//! it says fails here, and so does one that silently loses a step.

mod support;

use std::path::Path;

use support::{Dir, Output, cutover};

const RUNBOOK: &str = include_str!("../RUNBOOK.md");
const PRACTISE: &str = "Practise this part: ";
const STEPS: &[&str] = &[
    "setup", "check", "load", "gate", "journal", "writes", "fence", "replay",
];

/// One documented command.
#[derive(Debug)]
struct Cmd {
    /// 1-based line in RUNBOOK.md.
    line: usize,
    /// The arguments after `cutover` (none for a step that is not cutover's).
    args: Vec<String>,
    /// The exit code the runbook promises.
    exits: i32,
    /// A step that is not a cutover command.
    other: Option<Other>,
}

/// What a part does besides running cutover: the application's SQL on a
/// database of the folder (a ```` ```sql target.db ```` block, run through
/// Python's `sqlite3` as the application would), or the spec as the
/// operator edits it (a ```` ```toml spec.toml ```` block: the whole file).
#[derive(Debug)]
enum Other {
    Sql { db: String, script: String },
    Spec(String),
}

/// One practisable part.
#[derive(Debug)]
struct Part {
    line: usize,
    stop_after: String,
    commands: Vec<Cmd>,
}

/// Parses one command line of an `sh` block.
fn parse_command(line_no: usize, line: &str) -> Result<Cmd, String> {
    let at = |why: String| format!("RUNBOOK.md line {line_no}: {why}: {line:?}");
    let (command, comment) = match line.find(" #") {
        Some(i) => (line[..i].trim(), Some(line[i + 2..].trim())),
        None => (line.trim(), None),
    };
    let exits = match comment.and_then(|c| c.strip_prefix("exits")) {
        None => 0,
        Some(rest) => {
            let digits: String = rest
                .trim_start()
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            let code: i32 = digits
                .parse()
                .map_err(|_| at("`# exits` must be followed by a number".into()))?;
            if code == 0 {
                return Err(at("`# exits 0` is the default; leave it out".into()));
            }
            code
        }
    };
    // The runner splits on whitespace; anything the shell would interpret
    // would make the runbook mean something else than what is tested.
    if let Some(c) = command.chars().find(|c| "'\"`$|&;<>(){}\\*?~".contains(*c)) {
        return Err(at(format!(
            "shell syntax {c:?} is not allowed in a runbook command"
        )));
    }
    let mut words = command.split_whitespace();
    if words.next() != Some("cutover") {
        return Err(at("a command must start with `cutover `".into()));
    }
    let args: Vec<String> = words.map(str::to_string).collect();
    if !args
        .windows(2)
        .any(|w| w[0] == "--spec" && w[1] == "spec.toml")
    {
        return Err(at("a command must use `--spec spec.toml`".into()));
    }
    Ok(Cmd {
        line: line_no,
        args,
        exits,
        other: None,
    })
}

/// Splits the runbook into its practisable parts.
fn parse(text: &str) -> Result<Vec<Part>, String> {
    let mut parts: Vec<Part> = Vec::new();
    let mut block: Option<String> = None;
    // The body of a `sql DB` or `toml spec.toml` block, from its line.
    let mut body: Option<(usize, String)> = None;
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let line = raw.trim();
        if let Some(info) = line.strip_prefix("```") {
            block = match block {
                None => {
                    let info = info.trim();
                    if info.starts_with("sql ") || info == "toml spec.toml" {
                        body = Some((n, String::new()));
                    }
                    Some(info.to_string())
                }
                Some(info) => {
                    if let Some((at, text)) = body.take() {
                        let other = match info.strip_prefix("sql ") {
                            Some(db) => Other::Sql {
                                db: db.trim().to_string(),
                                script: text,
                            },
                            None => Other::Spec(text),
                        };
                        let part = parts.last_mut().ok_or_else(|| {
                            format!("RUNBOOK.md line {at}: a `{info}` block before the first `{PRACTISE}` line")
                        })?;
                        part.commands.push(Cmd {
                            line: at,
                            args: Vec::new(),
                            exits: 0,
                            other: Some(other),
                        });
                    }
                    None
                }
            };
            continue;
        }
        if let Some((_, text)) = &mut body {
            text.push_str(raw);
            text.push('\n');
            continue;
        }
        match &block {
            None => {
                if let Some(rest) = line.strip_prefix(PRACTISE) {
                    // The sync part practises on the customers drill.
                    let rest = rest.replacen("--scenario customers ", "", 1);
                    let customers = rest.len() != line.strip_prefix(PRACTISE).map_or(0, str::len);
                    let step = rest
                        .strip_prefix("cutover drill --keep rehearsal --stop-after ")
                        .filter(|s| STEPS.contains(s))
                        .ok_or_else(|| {
                            format!(
                                "RUNBOOK.md line {n}: write exactly `{PRACTISE}cutover drill --keep rehearsal --stop-after STEP` with STEP one of {}: {line:?}",
                                STEPS.join(", ")
                            )
                        })?;
                    parts.push(Part {
                        line: n,
                        stop_after: if customers {
                            format!("{step} --scenario customers")
                        } else {
                            step.to_string()
                        },
                        commands: Vec::new(),
                    });
                }
            }
            Some(info) if info == "sh" => {
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                let cmd = parse_command(n, line)?;
                let part = parts.last_mut().ok_or_else(|| {
                    format!("RUNBOOK.md line {n}: an `sh` block before the first `{PRACTISE}` line")
                })?;
                part.commands.push(cmd);
            }
            Some(_) => {}
        }
    }
    if block.is_some() {
        return Err("RUNBOOK.md ends inside a code block".into());
    }
    Ok(parts)
}

fn parts() -> Vec<Part> {
    parse(RUNBOOK).unwrap_or_else(|e| panic!("{e}"))
}

/// `cutover ARGS` in `cwd`, with a crash point when `fault` says so.
fn run_in(args: &[String], cwd: &Path, fault: Option<&str>) -> Output {
    let mut cmd = cutover(args);
    cmd.current_dir(cwd);
    if let Some(f) = fault {
        cmd.env("CUTOVER_FAULT", f);
    }
    cmd.output()
}

/// Runs a step that is not cutover's in the part's folder.
fn run_other(other: &Other, dir: &Path) -> Result<(), String> {
    match other {
        Other::Spec(text) => std::fs::write(dir.join("spec.toml"), text)
            .map_err(|e| format!("writing spec.toml: {e}")),
        Other::Sql { db, script } => {
            let (code, out) = support::python(
                dir,
                "import sqlite3, sys\ncon = sqlite3.connect(sys.argv[1], isolation_level=None)\ncon.executescript(sys.argv[2])\nprint('ok')\n",
                &[db.as_str(), script.as_str()],
            );
            if code == 0 {
                Ok(())
            } else {
                Err(format!("the application's SQL on {db} failed: {out}"))
            }
        }
    }
}

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

/// Leaves the drill's folder at `step` and returns its path.
fn rehearsal(tmp: &Path, step: &str) -> Result<std::path::PathBuf, String> {
    let dir = tmp.join("rehearsal");
    let args = words(&format!(
        "drill --keep {} --stop-after {step}",
        dir.to_str().expect("a UTF-8 temporary path")
    ));
    let out = run_in(&args, tmp, None);
    if out.code != Some(0) {
        return Err(format!("the drill did not prepare the folder\n{out}"));
    }
    Ok(dir)
}

#[test]
fn runbook_has_its_parts_and_covers_every_step() {
    let parts = parts();
    assert!(
        parts.len() >= 3,
        "RUNBOOK.md has {} practisable parts; it needs at least 3",
        parts.len()
    );
    for p in &parts {
        assert!(
            !p.commands.is_empty(),
            "the part at RUNBOOK.md line {} has no `sh` commands",
            p.line
        );
    }
    let all: Vec<String> = parts
        .iter()
        .flat_map(|p| &p.commands)
        .map(|c| c.args.join(" "))
        .collect();
    for needed in [
        "check",
        "load",
        "gate",
        "journal install",
        "fence on",
        "replay",
        "status",
    ] {
        assert!(
            all.iter().any(|c| c.starts_with(&format!("{needed} "))),
            "RUNBOOK.md no longer practises `cutover {needed}`"
        );
    }
    // The rehearsal is part of the procedure, and it must block.
    assert!(
        parts.iter().flat_map(|p| &p.commands).any(|c| c
            .args
            .contains(&"--inject-mismatch".to_string())
            && c.args[0] == "gate"
            && c.exits == 1),
        "RUNBOOK.md must practise `cutover gate --inject-mismatch` with `# exits 1`"
    );
}

#[test]
fn parser_reads_the_documented_format() {
    let text = "intro\n```sh\ncutover status --spec spec.toml\n```\nPractise this part: cutover drill --keep rehearsal --stop-after load\n\n```sh\n# a comment\ncutover gate --spec spec.toml\n\ncutover gate --spec spec.toml --inject-mismatch   # exits 1\n```\n```text\nnot run\n```\n";
    assert!(parse(text).unwrap_err().contains("before the first"));
    let text = text.replacen("```sh\ncutover status --spec spec.toml\n```\n", "", 1);
    let parts = parse(&text).unwrap();
    assert_eq!(parts.len(), 1);
    assert_eq!(parts[0].stop_after, "load");
    let got: Vec<(String, i32)> = parts[0]
        .commands
        .iter()
        .map(|c| (c.args.join(" "), c.exits))
        .collect();
    assert_eq!(
        got,
        vec![
            ("gate --spec spec.toml".to_string(), 0),
            ("gate --spec spec.toml --inject-mismatch".to_string(), 1),
        ]
    );
    assert!(parse_command(1, "cutover gate").is_err());
    assert!(parse_command(1, "sqlite3 target.db --spec spec.toml").is_err());
    assert!(parse_command(1, "cutover gate --spec spec.toml | tee x").is_err());
    assert!(parse_command(1, "cutover gate --spec spec.toml # exits x").is_err());
    assert!(
        parse("Practise this part: cutover drill --keep rehearsal --stop-after lunch\n").is_err()
    );
    // The application's SQL and the spec as edited are steps of the part.
    let text = "Practise this part: cutover drill --keep rehearsal --stop-after writes\n```sql target.db\nALTER TABLE t ADD COLUMN c;\n```\n```toml spec.toml\n[source]\n```\n```toml\nnot a step\n```\n```sh\ncutover status --spec spec.toml   # exits 1\n```\n";
    let parts = parse(text).unwrap();
    let steps: Vec<String> = parts[0]
        .commands
        .iter()
        .map(|c| match &c.other {
            Some(Other::Sql { db, script }) => format!("sql {db}: {script}"),
            Some(Other::Spec(t)) => format!("spec: {t}"),
            None => c.args.join(" "),
        })
        .collect();
    assert_eq!(
        steps,
        vec![
            "sql target.db: ALTER TABLE t ADD COLUMN c;\n",
            "spec: [source]\n",
            "status --spec spec.toml"
        ]
    );
}

#[test]
fn every_practisable_part_runs_as_documented() {
    let mut failures = Vec::new();
    for part in parts() {
        let tmp = Dir::new("runbook-part");
        let dir = match rehearsal(tmp.path(), &part.stop_after) {
            Ok(d) => d,
            Err(e) => {
                failures.push(format!("part at RUNBOOK.md line {}: {e}", part.line));
                continue;
            }
        };
        for cmd in &part.commands {
            if let Some(other) = &cmd.other {
                if let Err(e) = run_other(other, &dir) {
                    failures.push(format!(
                        "RUNBOOK.md line {} (part from line {}): {e}",
                        cmd.line, part.line
                    ));
                    break;
                }
                continue;
            }
            let out = run_in(&cmd.args, &dir, None);
            if out.code != Some(cmd.exits) {
                failures.push(format!(
                    "RUNBOOK.md line {} (part from line {}, after `--stop-after {}`) documents exit {}\n{out}",
                    cmd.line, part.line, part.stop_after, cmd.exits,
                ));
                // Later commands of the part build on this one.
                break;
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The Drills section's promise about `CUTOVER_FAULT`: the process exits 73
/// at the crash point, and a plain rerun finishes the job exactly once.
#[test]
fn crash_points_behave_as_the_runbook_says() {
    for point in ["mid-batch", "before-commit", "after-commit"] {
        assert!(
            RUNBOOK.contains(&format!("CUTOVER_FAULT={point}")),
            "RUNBOOK.md no longer documents CUTOVER_FAULT={point}"
        );
    }
    assert!(
        RUNBOOK.contains("73"),
        "RUNBOOK.md must give the crash exit code 73"
    );

    for (point, replayed_after_crash) in [
        ("mid-batch", "replayed 0 of 3"),
        ("before-commit", "replayed 0 of 3"),
        ("after-commit", "replayed 3 of 3"),
    ] {
        let tmp = Dir::new("runbook-crash");
        let dir = rehearsal(tmp.path(), "fence").unwrap_or_else(|e| panic!("{e}"));
        let run = |args: &str, fault: Option<&str>, code: i32| -> String {
            let args = words(args);
            let out = run_in(&args, &dir, fault);
            assert_eq!(out.code, Some(code), "CUTOVER_FAULT={point}\n{out}");
            out.stdout
        };
        // Two entries per batch; the replay commits whole, so after-commit
        // leaves every entry committed, its verdict not yet recorded.
        run("replay --spec spec.toml --batch 2", Some(point), 73);
        let status = run("status --spec spec.toml", None, 0);
        assert!(status.contains(replayed_after_crash), "{point}:\n{status}");
        let replay = run("replay --spec spec.toml", None, 0);
        assert!(
            replay.contains("rows=3, total_cents=3050, differences=0"),
            "{point}:\n{replay}"
        );
        let status = run("status --spec spec.toml", None, 0);
        assert!(status.contains("replayed 3 of 3"), "{point}:\n{status}");
        run("gate --spec spec.toml", None, 0);
        let again = run("replay --spec spec.toml --format json", None, 0);
        let again: serde_json::Value = serde_json::from_str(&again).expect("JSON");
        assert_eq!(
            again["applied"], 0,
            "{point}: a rerun applied something: {again}"
        );
    }
}
