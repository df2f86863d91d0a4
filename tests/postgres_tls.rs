//! Connections as production servers want them, against the local server
//! (`ssl = on`, the system's self-signed snakeoil certificate, issued to
//! `localhost`): each `sslmode` through `cutover check`, whose report says
//! what `pg_stat_ssl` says of its session; a verification that fails is
//! exit 2 with one line naming the server, the mode and what failed; the
//! whole drill over `sslmode=require`; and a run with passwords in the URL
//! and the environment that never prints either. The "other CA" is made
//! here with rcgen, so no key is kept in the repository.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use support::postgres::TestDb;

const SNAKEOIL: &str = "/etc/ssl/certs/ssl-cert-snakeoil.pem";

fn cutover(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cutover"));
    c.args(args);
    // The tests' own environment must not choose for them.
    for v in [
        "PGHOST",
        "PGPORT",
        "PGUSER",
        "PGPASSWORD",
        "PGDATABASE",
        "PGSSLMODE",
        "PGSSLROOTCERT",
        "PGSSLCERT",
        "PGSSLKEY",
        "PGPASSFILE",
    ] {
        c.env_remove(v);
    }
    c.envs(envs.iter().copied());
    c.output().expect("running cutover")
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A spec in `dir` whose source is the drill's SQLite file and whose target
/// is a schema the drill made on the server (kept until the database goes).
fn spec_on_server(db: &TestDb, dir: &Path, target: &str) -> PathBuf {
    let out = cutover(
        &[
            "drill",
            "--keep",
            dir.to_str().expect("a UTF-8 path"),
            "--stop-after",
            "setup",
            "--target",
            target,
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let _ = db;
    dir.join("spec.toml")
}

/// The spec's target URL with its TLS parameters replaced by `tls` (the
/// schema kept), and its host by `host` when given.
fn retarget(spec: &Path, tls: &str, host: Option<&str>) {
    let s = std::fs::read_to_string(spec).expect("the spec");
    let mut out = String::new();
    for line in s.lines() {
        if let Some(url) = line
            .strip_prefix("url = \"postgres")
            .and_then(|u| u.strip_suffix('"'))
        {
            let url = format!("postgres{url}");
            let (base, query) = url.split_once('?').expect("the drill names a schema");
            let schema = query
                .split('&')
                .find(|p| p.starts_with("schema="))
                .expect("schema=");
            let mut base = base.to_string();
            if let Some(h) = host {
                base = base.replace("@127.0.0.1:", &format!("@{h}:"));
            }
            let sep = if tls.is_empty() { "" } else { "&" };
            out.push_str(&format!("url = \"{base}?{tls}{sep}{schema}\"\n"));
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    std::fs::write(spec, out).expect("writing the spec");
}

/// `check --format json`: its exit code, the target's connection line and
/// stderr.
fn check(spec: &Path) -> (Option<i32>, String, String, Output) {
    let out = cutover(
        &[
            "--format",
            "json",
            "check",
            "--spec",
            spec.to_str().expect("UTF-8"),
        ],
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let connection = doc["target"]["connection"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    (out.status.code(), connection, stderr, out)
}

/// A CA of its own, unrelated to the server's certificate.
fn another_ca(dir: &Path) -> PathBuf {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "another CA");
    let key = rcgen::KeyPair::generate().expect("a key");
    let cert = params.self_signed(&key).expect("a certificate");
    let path = dir.join("another-ca.pem");
    std::fs::write(&path, cert.pem()).expect("writing the CA");
    path
}

/// Exit 2 and exactly one line on stderr, holding every one of `words`.
fn one_line_failure(code: Option<i32>, stderr: &str, words: &[&str], out: &Output) {
    assert_eq!(code, Some(2), "{}", text(out));
    assert_eq!(stderr.trim_end().lines().count(), 1, "{}", text(out));
    for w in words {
        assert!(stderr.contains(w), "'{w}' missing from: {stderr}");
    }
}

#[test]
fn each_sslmode_does_what_libpq_does_against_the_local_server() {
    let Some(db) = TestDb::new("tls_modes") else {
        return;
    };
    let mut c = db.client();
    let ssl: String = c.query_one("SHOW ssl", &[]).expect("SHOW ssl").get(0);
    assert_eq!(ssl, "on", "the test server runs with TLS");
    assert!(Path::new(SNAKEOIL).exists(), "{SNAKEOIL}");
    let dir = tempfile::tempdir().expect("a folder");
    let kept = dir.path().join("kept");
    let spec = spec_on_server(&db, &kept, &format!("{}?sslmode=require", db.url));

    // require: encrypted, as the server's pg_stat_ssl says, not verified.
    let (code, conn, _, out) = check(&spec);
    assert_eq!(code, Some(0), "{}", text(&out));
    assert!(conn.contains("encrypted (TLS"), "{conn}");
    assert!(conn.contains("sslmode=require"), "{conn}");
    assert!(conn.contains("not verified"), "{conn}");

    // disable: plaintext.
    retarget(&spec, "sslmode=disable", None);
    let (code, conn, _, out) = check(&spec);
    assert_eq!(code, Some(0), "{}", text(&out));
    assert!(conn.contains("NOT encrypted"), "{conn}");

    // prefer, the default: encrypted when the server accepts TLS.
    retarget(&spec, "", None);
    let (code, conn, _, out) = check(&spec);
    assert_eq!(code, Some(0), "{}", text(&out));
    assert!(
        conn.contains("encrypted (TLS") && conn.contains("sslmode=prefer"),
        "{conn}"
    );

    // verify-ca with the server's certificate as the root: the chain holds
    // (the host name, 127.0.0.1, is not the certificate's, and need not be).
    retarget(
        &spec,
        &format!("sslmode=verify-ca&sslrootcert={SNAKEOIL}"),
        None,
    );
    let (code, conn, _, out) = check(&spec);
    assert_eq!(code, Some(0), "{}", text(&out));
    assert!(conn.contains("chain verified"), "{conn}");

    // verify-ca with another CA: unknown CA, one line, exit 2.
    let other = another_ca(dir.path());
    retarget(
        &spec,
        &format!("sslmode=verify-ca&sslrootcert={}", other.display()),
        None,
    );
    let (code, _, stderr, out) = check(&spec);
    one_line_failure(
        code,
        &stderr,
        &["127.0.0.1:5432", "sslmode=verify-ca", "unknown CA"],
        &out,
    );

    // verify-full at 127.0.0.1: the certificate names localhost only.
    retarget(
        &spec,
        &format!("sslmode=verify-full&sslrootcert={SNAKEOIL}"),
        None,
    );
    let (code, _, stderr, out) = check(&spec);
    one_line_failure(
        code,
        &stderr,
        &[
            "127.0.0.1:5432",
            "sslmode=verify-full",
            "hostname mismatch",
            "localhost",
        ],
        &out,
    );

    // verify-full at localhost, the certificate's name: chain and name hold.
    if db.url.contains("@127.0.0.1:") {
        retarget(
            &spec,
            &format!("sslmode=verify-full&sslrootcert={SNAKEOIL}"),
            Some("localhost"),
        );
        let (code, conn, _, out) = check(&spec);
        assert_eq!(code, Some(0), "{}", text(&out));
        assert!(conn.contains("chain and host name verified"), "{conn}");
    }

    // verify-full with no root certificate anywhere: refused before
    // connecting, saying what to give.
    retarget(&spec, "sslmode=verify-full", None);
    let out = cutover(
        &["check", "--spec", spec.to_str().expect("UTF-8")],
        &[("HOME", dir.path().to_str().expect("UTF-8"))],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    one_line_failure(out.status.code(), &stderr, &["sslrootcert"], &out);

    // A client certificate is presented when asked for; its key must be
    // private to its owner.
    let key = rcgen::KeyPair::generate().expect("a key");
    let cert = rcgen::CertificateParams::new(vec!["cutover".to_string()])
        .expect("params")
        .self_signed(&key)
        .expect("a certificate");
    let (crt, pem) = (dir.path().join("client.crt"), dir.path().join("client.key"));
    std::fs::write(&crt, cert.pem()).expect("writing");
    std::fs::write(&pem, key.serialize_pem()).expect("writing");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&pem, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        retarget(
            &spec,
            &format!(
                "sslmode=require&sslcert={}&sslkey={}",
                crt.display(),
                pem.display()
            ),
            None,
        );
        let out = cutover(&["check", "--spec", spec.to_str().expect("UTF-8")], &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        one_line_failure(out.status.code(), &stderr, &["sslkey", "0600"], &out);
        std::fs::set_permissions(&pem, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    }
    let (code, conn, _, out) = check(&spec);
    assert_eq!(code, Some(0), "{}", text(&out));
    assert!(conn.contains("encrypted (TLS"), "{conn}");
}

/// The runbook, whole, with the target reached over TLS.
#[test]
fn the_drill_runs_with_the_target_over_tls() {
    let Some(db) = TestDb::new("tls_drill") else {
        return;
    };
    let url = format!("{}?sslmode=require", db.url);
    let out = cutover(&["--format", "json", "drill", "--target", &url], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let rep: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(rep["verdict"], "pass", "{rep}");
}

/// A password in the spec's URL (and another in PGPASSWORD) is never
/// printed: not on stdout or stderr, in text or JSON, not in either
/// report format, not in an error; `check` warns of the one in the URL.
#[test]
fn no_output_of_a_run_shows_a_password() {
    let Some(db) = TestDb::new("tls_passwords") else {
        return;
    };
    const URL_PW: &str = "Url-S3cret-pw";
    const ENV_PW: &str = "Env-S3cret-pw";
    let dir = tempfile::tempdir().expect("a folder");
    let with_pw = db
        .url
        .replacen("://root@", &format!("://root:{URL_PW}@"), 1)
        .replacen("://postgres@", &format!("://postgres:{URL_PW}@"), 1);
    assert!(with_pw.contains(URL_PW), "{with_pw}");
    let target = format!("{with_pw}?sslmode=require");
    let kept = dir.path().join("kept");
    let spec = spec_on_server(&db, &kept, &target);
    let spec_s = spec.to_str().expect("UTF-8").to_string();
    let env = [("PGPASSWORD", ENV_PW)];
    let mut outputs: Vec<(String, Vec<u8>)> = Vec::new();
    let reports = dir.path();
    let mut run = |args: Vec<String>, want: Option<i32>| {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = cutover(&a, &env);
        if let Some(w) = want {
            assert_eq!(out.status.code(), Some(w), "{args:?}\n{}", text(&out));
        }
        outputs.push((format!("{args:?} stdout"), out.stdout));
        outputs.push((format!("{args:?} stderr"), out.stderr));
    };
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let report = |name: &str| reports.join(name).display().to_string();
    for format in ["table", "json"] {
        run(
            s(&["--format", format, "check", "--spec", &spec_s]),
            Some(0),
        );
    }
    run(s(&["load", "--spec", &spec_s]), Some(0));
    for (format, file) in [("table", "gate.json"), ("json", "gate.md")] {
        run(
            s(&[
                "--format",
                format,
                "gate",
                "--spec",
                &spec_s,
                "--report",
                &report(file),
            ]),
            Some(0),
        );
    }
    run(s(&["journal", "install", "--spec", &spec_s]), Some(0));
    run(s(&["fence", "on", "--spec", &spec_s]), Some(0));
    for (format, file) in [("table", "replay.md"), ("json", "replay.json")] {
        run(
            s(&[
                "--format",
                format,
                "replay",
                "--spec",
                &spec_s,
                "--report",
                &report(file),
            ]),
            Some(0),
        );
    }
    for format in ["table", "json"] {
        run(
            s(&["--format", format, "status", "--spec", &spec_s]),
            Some(0),
        );
        run(
            s(&["--format", format, "fence", "status", "--spec", &spec_s]),
            None,
        );
    }
    // The drill with the password in its --target, and both reports.
    for (format, file) in [("table", "drill.md"), ("json", "drill.json")] {
        run(
            s(&[
                "--format",
                format,
                "drill",
                "--target",
                &target,
                "--report",
                &report(file),
            ]),
            Some(0),
        );
    }
    // Errors: a server that is not there, a database that is not there, a
    // bad parameter, a spec the drill refuses.
    let nowhere = target.replace(":5432/", ":1/");
    let missing = with_pw.replace(&db.name, "no_such_database_here");
    for bad in [
        nowhere.as_str(),
        missing.as_str(),
        &format!("{with_pw}?sslmode=sometimes"),
        &format!("{with_pw}?schema=public"),
    ] {
        for format in ["table", "json"] {
            run(s(&["--format", format, "drill", "--target", bad]), Some(2));
        }
        run(
            s(&[
                "init",
                "--source",
                "sqlite://x.db",
                "--target",
                bad,
                "--out",
                &report("init.toml"),
            ]),
            Some(2),
        );
    }
    for f in [
        "gate.json",
        "gate.md",
        "replay.json",
        "replay.md",
        "drill.json",
        "drill.md",
    ] {
        let bytes = std::fs::read(reports.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert!(!bytes.is_empty(), "{f}");
        outputs.push((f.to_string(), bytes));
    }
    for (what, bytes) in &outputs {
        let t = String::from_utf8_lossy(bytes);
        assert!(!t.contains(URL_PW), "{what} shows the URL's password:\n{t}");
        assert!(!t.contains(ENV_PW), "{what} shows PGPASSWORD:\n{t}");
    }
    // check said where the password is, and how to move it out.
    let check_text = String::from_utf8_lossy(&outputs[0].1);
    assert!(
        check_text.contains("holds a password") && check_text.contains("PGPASSWORD"),
        "{check_text}"
    );
    let check_json: serde_json::Value =
        serde_json::from_slice(&outputs[2].1).expect("check's JSON");
    assert!(
        check_json["warnings"][0]
            .as_str()
            .is_some_and(|w| w.contains("holds a password")),
        "{check_json}"
    );
}

/// Nothing to install: the binary links no OpenSSL.
#[cfg(target_os = "linux")]
#[test]
fn the_binary_links_no_openssl() {
    let Ok(out) = Command::new("ldd")
        .arg(env!("CARGO_BIN_EXE_cutover"))
        .output()
    else {
        println!("skipping: no ldd");
        return;
    };
    let libs = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{libs}");
    assert!(
        !libs.contains("libssl") && !libs.contains("libcrypto"),
        "{libs}"
    );
}
