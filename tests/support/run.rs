//! Running programs: the built `cutover` binary ([`Cmd`], [`Output`]), and
//! the other processes some tests need (Python's `sqlite3`, `sh`).
//!
//! Modelled on ripgrep's `tests/util.rs`: a command that exits with a code the
//! test did not expect panics with the command, its folder, the status and
//! everything it printed, so a failure explains itself in CI logs.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The exit code of a `CUTOVER_FAULT` crash point.
pub const FAULT_EXIT: i32 = 73;

/// `cutover ARGS` run in the test's own working directory (the drill and
/// `--help` need no folder); `Dir::command` runs one in a folder.
pub fn cutover<S: AsRef<OsStr>>(args: &[S]) -> Cmd {
    let mut c = Cmd::new(None);
    for a in args {
        c.arg(a);
    }
    c
}

/// `cutover ARGS --spec spec.toml` run in `dir`: a scenario that keeps its
/// own folder (its databases on a server) rather than a `Dir`.
pub fn cutover_in<S: AsRef<OsStr>>(dir: &Path, args: &[S]) -> Cmd {
    let mut c = Cmd::new(Some(dir));
    for a in args {
        c.arg(a);
    }
    c.arg("--spec").arg("spec.toml");
    c
}

/// One run of the binary, not started yet.
pub struct Cmd {
    cwd: Option<PathBuf>,
    args: Vec<OsString>,
    envs: Vec<(String, String)>,
}

impl Cmd {
    pub(super) fn new(cwd: Option<&Path>) -> Cmd {
        Cmd {
            cwd: cwd.map(Path::to_path_buf),
            args: Vec::new(),
            // Lock tests wait half a second, not ten.
            envs: vec![("CUTOVER_BUSY_TIMEOUT_MS".into(), "500".into())],
        }
    }

    pub fn arg(&mut self, a: impl AsRef<OsStr>) -> &mut Cmd {
        self.args.push(a.as_ref().to_os_string());
        self
    }

    pub fn env(&mut self, key: &str, value: &str) -> &mut Cmd {
        self.envs.push((key.into(), value.into()));
        self
    }

    /// Runs somewhere other than the folder.
    pub fn current_dir(&mut self, cwd: &Path) -> &mut Cmd {
        self.cwd = Some(cwd.to_path_buf());
        self
    }

    fn build(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_cutover"));
        c.args(&self.args);
        if let Some(cwd) = &self.cwd {
            c.current_dir(cwd);
        }
        // Whatever the developer's shell sets, the test decides.
        c.env_remove("CUTOVER_FAULT");
        for (k, v) in &self.envs {
            c.env(k, v);
        }
        c
    }

    /// The command as a shell would show it.
    pub fn shown(&self) -> String {
        let mut s: Vec<String> = self.envs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        s.push("cutover".into());
        s.extend(self.args.iter().map(|a| a.to_string_lossy().into_owned()));
        s.join(" ")
    }

    /// Runs to the end, whatever the exit code.
    pub fn output(&self) -> Output {
        let out = self
            .build()
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", self.shown()));
        Output {
            command: self.shown(),
            cwd: self
                .cwd
                .clone()
                .unwrap_or_else(|| std::env::current_dir().unwrap_or_default()),
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Runs to the end; panics with everything it printed unless it exits
    /// with `code`.
    #[track_caller]
    pub fn expect(&self, code: i32) -> Output {
        let out = self.output();
        if out.code != Some(code) {
            panic!("expected exit code {code}\n{out}");
        }
        out
    }

    /// Starts it in the background, output discarded (crash tests kill it).
    pub fn spawn(&self) -> Child {
        self.build()
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", self.shown()))
    }

    /// Starts it in the background, stdout discarded and stderr kept for a
    /// run that ends by itself to explain a failure.
    pub fn spawn_keeping_stderr(&self) -> Child {
        self.build()
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", self.shown()))
    }
}

/// What one run of the binary did.
pub struct Output {
    pub command: String,
    pub cwd: PathBuf,
    /// `None` when a signal ended it.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    /// stdout parsed as exactly one JSON document (trailing whitespace only).
    #[track_caller]
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not exactly one JSON document: {e}\n{self}"))
    }

    /// stdout and stderr together, for "the message names X" checks.
    pub fn all(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
    }

    /// Panics unless stdout or stderr contains every one of `parts`.
    #[track_caller]
    pub fn assert_mentions(&self, parts: &[&str]) {
        let all = self.all();
        let missing: Vec<&&str> = parts.iter().filter(|p| !all.contains(**p)).collect();
        assert!(
            missing.is_empty(),
            "the output does not mention {missing:?}\n{self}"
        );
    }
}

impl fmt::Display for Output {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "\ncommand: {}", self.command)?;
        writeln!(f, "cwd:     {}", self.cwd.display())?;
        writeln!(
            f,
            "status:  {}",
            self.code
                .map_or("killed by a signal".to_string(), |c| format!("exit {c}"))
        )?;
        writeln!(f, "---- stdout ----\n{}", self.stdout)?;
        write!(f, "---- stderr ----\n{}", self.stderr)
    }
}

/// Panics if a run of the binary panicked: exit 101 or Rust's panic message.
#[track_caller]
pub fn assert_no_panic(out: &Output) {
    assert!(
        out.code != Some(101) && !out.stderr.contains("panicked"),
        "the binary panicked\n{out}"
    );
}

/// Runs a Python snippet in another OS process: `python3 -c SCRIPT ARGS…`.
/// Returns (exit code, stdout + stderr).
pub fn python(cwd: &Path, script: &str, args: &[&str]) -> (i32, String) {
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .output()
        .expect("python3 is installed on the test machine");
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// A Python program that runs one SQL statement on a database in its own
/// process and commits; it prints `ok`, or the error and exits 3.
pub const PY_WRITE: &str = r#"
import sqlite3, sys
con = sqlite3.connect(sys.argv[1], timeout=2)
try:
    con.execute(sys.argv[2])
    con.commit()
except sqlite3.Error as e:
    print("error:", e)
    sys.exit(3)
print("ok")
"#;

/// Runs a shell script (`sh -c`) in `cwd`; returns (exit code, stdout +
/// stderr). The environment variable `CUTOVER` holds the binary's path.
pub fn sh(cwd: &Path, script: &str) -> (i32, String) {
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(cwd)
        .env("CUTOVER", env!("CARGO_BIN_EXE_cutover"))
        .env("CUTOVER_BUSY_TIMEOUT_MS", "500")
        .env_remove("CUTOVER_FAULT")
        .stdin(Stdio::null())
        .output()
        .expect("sh is installed on the test machine");
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}
