//! `gate --mode digest` on MySQL (MariaDB here), through the binary: two
//! MySQL databases, and a MySQL source with a PostgreSQL target. The
//! application's rows are written through the `mariadb` client as a user
//! with ordinary grants, the PostgreSQL target's by the harness's own
//! client, each from the same formula computed by each server (never read
//! back through the tool). Each difference — a missing row, an extra row, a
//! changed value, a value differing only in a trailing space, a tab, its
//! case, NULL against the empty string, a cents amount and a mapped ENUM
//! that disagree — is planted alone, and then all together; digest mode
//! must report exactly the differences the test planted, the very
//! differences, counts and totals stream mode reports, with exit 1 (0 when
//! nothing was planted). Between MySQL and PostgreSQL the digests of the
//! two engines cannot be compared: the gate streams, and says so.

mod support;

use std::collections::BTreeSet;

use serde_json::Value as Json;
use support::mysql::TestDb as MyDb;
use support::postgres::TestDb as PgDb;
use support::run::cutover_in;

/// Rows of `orders`: enough for the gate to cut the table into many key
/// ranges, so that one difference is found by splitting, not by reading
/// the table.
const ROWS: i64 = 6000;

const SOURCE: &str = "CREATE TABLE orders (
    id INT NOT NULL PRIMARY KEY,
    dollars DECIMAL(12,2) NOT NULL,
    status ENUM('A','C') NOT NULL,
    note VARCHAR(40) COLLATE utf8mb4_general_ci,
    code VARBINARY(8),
    due DATE,
    at DATETIME(3)
) ENGINE = InnoDB;
CREATE TABLE tags (
    k VARCHAR(20) COLLATE utf8mb4_general_ci NOT NULL PRIMARY KEY,
    v INT NOT NULL
) ENGINE = InnoDB";

/// The source's rows, by the application, from MariaDB's `seq_1_to_N`.
fn source_rows() -> String {
    format!(
        "INSERT INTO orders SELECT seq, ((seq * 37) % 100000) / 100, IF(seq % 2, 'A', 'C'),
            CASE WHEN seq % 97 = 0 THEN NULL WHEN seq % 89 = 0 THEN '' ELSE CONCAT('n', seq) END,
            UNHEX(LPAD(HEX(seq), 4, '0')), DATE('2024-01-01') + INTERVAL seq DAY,
            TIMESTAMP('2024-01-01') + INTERVAL (seq * 1000) MICROSECOND
         FROM seq_1_to_{ROWS};
         INSERT INTO tags SELECT CONCAT(IF(seq % 2, 'k', 'K'), LPAD(seq, 5, '0')), seq FROM seq_1_to_{ROWS};"
    )
}

const MY_TARGET: &str = "CREATE TABLE orders (
    id INT NOT NULL PRIMARY KEY,
    cents BIGINT NOT NULL,
    status VARCHAR(10) NOT NULL,
    note VARCHAR(40) COLLATE utf8mb4_general_ci,
    code VARBINARY(8),
    due DATE,
    at DATETIME(3)
) ENGINE = InnoDB;
CREATE TABLE tags (
    k VARCHAR(20) COLLATE utf8mb4_general_ci NOT NULL PRIMARY KEY,
    v INT NOT NULL
) ENGINE = InnoDB";

/// The target's rows, as a load would have written them, computed by the
/// server from the same formula (cents straight from the integer).
fn my_target_rows() -> String {
    format!(
        "INSERT INTO orders SELECT seq, (seq * 37) % 100000, IF(seq % 2, 'active', 'closed'),
            CASE WHEN seq % 97 = 0 THEN NULL WHEN seq % 89 = 0 THEN '' ELSE CONCAT('n', seq) END,
            UNHEX(LPAD(HEX(seq), 4, '0')), DATE('2024-01-01') + INTERVAL seq DAY,
            TIMESTAMP('2024-01-01') + INTERVAL (seq * 1000) MICROSECOND
         FROM seq_1_to_{ROWS};
         INSERT INTO tags SELECT CONCAT(IF(seq % 2, 'k', 'K'), LPAD(seq, 5, '0')), seq FROM seq_1_to_{ROWS};"
    )
}

fn pg_target() -> String {
    format!(
        "CREATE TABLE orders (id bigint PRIMARY KEY, cents bigint NOT NULL, status text NOT NULL,
            note text, code bytea, due date, at timestamp);
         CREATE TABLE tags (k text PRIMARY KEY, v bigint NOT NULL);
         INSERT INTO orders SELECT s, (s * 37) % 100000, CASE WHEN s % 2 = 1 THEN 'active' ELSE 'closed' END,
            CASE WHEN s % 97 = 0 THEN NULL WHEN s % 89 = 0 THEN '' ELSE 'n' || s END,
            decode(lpad(to_hex(s), 4, '0'), 'hex'), date '2024-01-01' + s,
            timestamp '2024-01-01' + s * interval '1 millisecond'
         FROM generate_series(1, {ROWS}) s;
         INSERT INTO tags SELECT CASE WHEN s % 2 = 1 THEN 'k' ELSE 'K' END || lpad(s::text, 5, '0'), s
         FROM generate_series(1, {ROWS}) s;"
    )
}

fn spec(source: &str, target: &str) -> String {
    support::mysql::orders_spec(
        source,
        target,
        &["note", "code", "due", "at"],
        "\n[[tables]]\nname = \"tags\"\nkey = [\"k\"]\n\n[[tables.columns]]\nsource = \"v\"\ntarget = \"v\"\n",
    )
}

/// A difference as the test plants it: table, key, kind, column.
type Planted = (&'static str, String, &'static str, Option<&'static str>);

/// One planted difference: the writes on the source (as the application),
/// on a MySQL target and on a PostgreSQL target, and what the gate must
/// report.
struct Case {
    name: &'static str,
    source: &'static str,
    my_target: &'static str,
    pg_target: &'static str,
    planted: Vec<Planted>,
}

fn orders(key: i64, kind: &'static str, column: Option<&'static str>) -> Planted {
    ("orders", format!("[{key}]"), kind, column)
}

fn cases() -> Vec<Case> {
    // Row 291 is NULL in `note` (291 = 3 × 97), row 178 the empty string
    // (178 = 2 × 89); row 701 is odd, so 'A', 'active'.
    vec![
        Case {
            name: "a missing row",
            source: "",
            my_target: "DELETE FROM orders WHERE id = 100",
            pg_target: "DELETE FROM orders WHERE id = 100",
            planted: vec![orders(100, "missing", None)],
        },
        Case {
            name: "an extra row",
            source: "",
            my_target: "INSERT INTO orders VALUES (9000, 1, 'closed', 'x', NULL, NULL, NULL)",
            pg_target: "INSERT INTO orders VALUES (9000, 1, 'closed', 'x', NULL, NULL, NULL)",
            planted: vec![orders(9000, "extra", None)],
        },
        Case {
            name: "a changed date",
            source: "",
            my_target: "UPDATE orders SET due = due + INTERVAL 1 DAY WHERE id = 200",
            pg_target: "UPDATE orders SET due = due + 1 WHERE id = 200",
            planted: vec![orders(200, "changed", Some("due"))],
        },
        Case {
            name: "a trailing space",
            source: "",
            my_target: "UPDATE orders SET note = CONCAT(note, ' ') WHERE id = 300",
            pg_target: "UPDATE orders SET note = note || ' ' WHERE id = 300",
            planted: vec![orders(300, "changed", Some("note"))],
        },
        Case {
            name: "a trailing tab",
            source: "UPDATE orders SET note = CONCAT(note, '\\t') WHERE id = 400",
            my_target: "",
            pg_target: "",
            planted: vec![orders(400, "changed", Some("note"))],
        },
        Case {
            name: "a case",
            source: "",
            my_target: "UPDATE orders SET note = UPPER(note) WHERE id = 500",
            pg_target: "UPDATE orders SET note = upper(note) WHERE id = 500",
            planted: vec![orders(500, "changed", Some("note"))],
        },
        Case {
            name: "NULL against the empty string",
            source: "",
            my_target: "UPDATE orders SET note = '' WHERE id = 291; UPDATE orders SET note = NULL WHERE id = 178",
            pg_target: "UPDATE orders SET note = '' WHERE id = 291; UPDATE orders SET note = NULL WHERE id = 178",
            planted: vec![
                orders(178, "changed", Some("note")),
                orders(291, "changed", Some("note")),
            ],
        },
        Case {
            name: "cents that disagree with the DECIMAL",
            source: "UPDATE orders SET dollars = dollars + 0.01 WHERE id = 600",
            my_target: "UPDATE orders SET cents = cents - 1 WHERE id = 650",
            pg_target: "UPDATE orders SET cents = cents - 1 WHERE id = 650",
            planted: vec![
                orders(600, "changed", Some("cents")),
                orders(650, "changed", Some("cents")),
            ],
        },
        Case {
            name: "a mapped ENUM that disagrees",
            source: "UPDATE orders SET status = 'C' WHERE id = 703",
            my_target: "UPDATE orders SET status = 'closed' WHERE id = 701",
            pg_target: "UPDATE orders SET status = 'closed' WHERE id = 701",
            planted: vec![
                orders(701, "changed", Some("status")),
                orders(703, "changed", Some("status")),
            ],
        },
        Case {
            name: "a text key in byte order",
            source: "",
            my_target: "UPDATE tags SET v = v + 1 WHERE k = 'K00010'; DELETE FROM tags WHERE k = 'k00011'",
            pg_target: "UPDATE tags SET v = v + 1 WHERE k = 'K00010'; DELETE FROM tags WHERE k = 'k00011'",
            planted: vec![
                ("tags", "['K00010']".into(), "changed", Some("v")),
                ("tags", "['k00011']".into(), "missing", None),
            ],
        },
    ]
}

/// The gate's report in `mode` (JSON) and its exit code.
fn gate(dir: &std::path::Path, mode: &str) -> (Json, i32) {
    let out = cutover_in(
        dir,
        &[
            "gate",
            "--mode",
            mode,
            "--format",
            "json",
            "--max-diffs",
            "1000",
        ],
    )
    .output();
    let code = out.code.unwrap_or(-1);
    let text = &out.stdout;
    let json = serde_json::from_str(text)
        .unwrap_or_else(|e| panic!("gate --mode {mode}: {e}\n{text}\n{}", out.stderr));
    (json, code)
}

/// The differences of a report as planted: table, key, kind, column.
fn found(report: &Json) -> BTreeSet<(String, String, String, Option<String>)> {
    report["diffs"]
        .as_array()
        .expect("diffs")
        .iter()
        .map(|d| {
            let key = match &d["key"] {
                Json::Array(k) => format!(
                    "[{}]",
                    k.iter()
                        .map(|v| match v {
                            Json::String(s) => format!("'{s}'"),
                            other => other.to_string(),
                        })
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                other => other.to_string(),
            };
            (
                d["table"].as_str().expect("a table").to_string(),
                key,
                d["kind"].as_str().expect("a kind").to_string(),
                d["column"].as_str().map(str::to_string),
            )
        })
        .collect()
}

fn planted(case: &Case) -> BTreeSet<(String, String, String, Option<String>)> {
    case.planted
        .iter()
        .map(|(t, k, kind, c)| {
            (
                t.to_string(),
                k.clone(),
                kind.to_string(),
                c.map(str::to_string),
            )
        })
        .collect()
}

/// Stream and digest mode over `dir`'s spec: the same report, the planted
/// differences, exit 1 (0 with none); the digest's modes returned.
fn both_modes_agree(dir: &std::path::Path, case: &Case) -> Json {
    let (stream, s_code) = gate(dir, "stream");
    let (digest, d_code) = gate(dir, "digest");
    let want = planted(case);
    let expected_code = if want.is_empty() { 0 } else { 1 };
    assert_eq!(
        s_code, expected_code,
        "{}: stream exit\n{stream:#}",
        case.name
    );
    assert_eq!(
        d_code, expected_code,
        "{}: digest exit\n{digest:#}",
        case.name
    );
    assert_eq!(
        found(&stream),
        want,
        "{}: stream finds what was planted",
        case.name
    );
    assert_eq!(
        found(&digest),
        want,
        "{}: digest finds what was planted",
        case.name
    );
    for part in ["diffs", "tables", "summary", "verdict"] {
        assert_eq!(
            digest[part], stream[part],
            "{}: digest and stream report the same {part}",
            case.name
        );
    }
    digest["modes"].clone()
}

#[test]
fn digest_mode_between_two_mysql_databases_finds_what_stream_finds() {
    let mut all = Case {
        name: "every difference at once",
        source: "",
        my_target: "",
        pg_target: "",
        planted: Vec::new(),
    };
    let mut runs = vec![Case {
        name: "equal tables",
        source: "",
        my_target: "",
        pg_target: "",
        planted: Vec::new(),
    }];
    let cases = cases();
    for c in &cases {
        all.planted.extend(c.planted.iter().cloned());
    }
    runs.extend(cases);
    let joined = |f: fn(&Case) -> &'static str| {
        runs.iter()
            .map(f)
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(";\n")
    };
    let (all_source, all_target) = (joined(|c| c.source), joined(|c| c.my_target));
    for (i, case) in runs.iter().chain(std::iter::once(&all)).enumerate() {
        let Some(src) = MyDb::new(&format!("my_digest_src_{i}")) else {
            return;
        };
        src.exec(SOURCE);
        let src_app = src.app_user();
        src_app
            .exec(&source_rows())
            .expect("the application's rows");
        let Some(tgt) = MyDb::new(&format!("my_digest_tgt_{i}")) else {
            return;
        };
        tgt.exec(MY_TARGET);
        let app = tgt.app_user();
        app.exec(&my_target_rows()).expect("the target's rows");
        let (s, t) = if case.name == all.name {
            (all_source.as_str(), all_target.as_str())
        } else {
            (case.source, case.my_target)
        };
        if !s.is_empty() {
            src_app.exec(s).expect("the planted difference");
        }
        if !t.is_empty() {
            app.exec(t).expect("the planted difference");
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("spec.toml"),
            spec(&src_app.url(), &app.url()),
        )
        .unwrap();
        let modes = both_modes_agree(dir.path(), case);
        let modes = modes.as_array().expect("modes");
        assert_eq!(modes.len(), 2, "{}: {modes:?}", case.name);
        for m in modes {
            assert_eq!(m["mode"], "digest", "{}: {m}", case.name);
            let table = m["table"].as_str().unwrap();
            let differs = case.planted.iter().any(|p| p.0 == table) || case.name == all.name;
            let streamed = m["rows_streamed"].as_u64().unwrap();
            if differs {
                assert!(
                    m["segments_streamed"].as_u64().unwrap() >= 1,
                    "{}: {m}",
                    case.name
                );
                // Only the ranges that differ were read, not the table.
                assert!(streamed < ROWS as u64, "{}: {m}", case.name);
            } else {
                assert_eq!(streamed, 0, "{}: {m}", case.name);
            }
        }
    }
}

#[test]
fn between_mysql_and_postgresql_the_gate_streams_and_says_why() {
    let cases = cases();
    let pick = [
        &cases[0], &cases[1], &cases[3], &cases[4], &cases[6], &cases[7], &cases[8], &cases[9],
    ];
    let equal = Case {
        name: "equal tables",
        source: "",
        my_target: "",
        pg_target: "",
        planted: Vec::new(),
    };
    for (i, case) in std::iter::once(&equal).chain(pick).enumerate() {
        let Some(src) = MyDb::new(&format!("my_pg_digest_{i}")) else {
            return;
        };
        src.exec(SOURCE);
        let src_app = src.app_user();
        src_app
            .exec(&source_rows())
            .expect("the application's rows");
        let Some(pg) = PgDb::new(&format!("my_pg_digest_{i}")) else {
            return;
        };
        let mut client = pg.client();
        client.batch_execute(&pg_target()).unwrap();
        if !case.source.is_empty() {
            src_app.exec(case.source).expect("the planted difference");
        }
        if !case.pg_target.is_empty() {
            client.batch_execute(case.pg_target).unwrap();
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("spec.toml"),
            spec(&src_app.url(), &format!("{}?schema=public", pg.url)),
        )
        .unwrap();
        let modes = both_modes_agree(dir.path(), case);
        for m in modes.as_array().expect("modes") {
            assert_eq!(m["mode"], "stream", "{}: {m}", case.name);
            let why = m["reason"].as_str().unwrap_or("");
            assert!(
                why.contains("MySQL and PostgreSQL") && why.contains("different functions"),
                "{}: {m}",
                case.name
            );
        }
    }
}

#[test]
fn a_table_with_a_type_the_server_cannot_digest_exactly_is_streamed_saying_why() {
    let Some(src) = MyDb::new("my_digest_refused_src") else {
        return;
    };
    let Some(tgt) = MyDb::new("my_digest_refused_tgt") else {
        return;
    };
    let ddl = "CREATE TABLE readings (id INT PRIMARY KEY, r DOUBLE NOT NULL) ENGINE = InnoDB";
    src.exec(ddl);
    tgt.exec(ddl);
    let (a, b) = (src.app_user(), tgt.app_user());
    a.exec("INSERT INTO readings VALUES (1, 0.1), (2, 1e300), (3, -2.5)")
        .unwrap();
    // 0.1 + 2^-56 prints as 0.1 too, and is another double.
    b.exec("INSERT INTO readings VALUES (1, 0.1 + 1.3877787807814457e-17), (2, 1e300), (3, -2.5)")
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("spec.toml"),
        format!(
            "[source]\nurl = \"{}\"\n\n[target]\nurl = \"{}\"\n\n[[tables]]\nname = \"readings\"\nkey = [\"id\"]\n\n[[tables.columns]]\nsource = \"r\"\ntarget = \"r\"\n",
            a.url(),
            b.url()
        ),
    )
    .unwrap();
    let same = tgt.value("SELECT r = 0.1 FROM readings WHERE id = 1");
    let case = Case {
        name: "a DOUBLE",
        source: "",
        my_target: "",
        pg_target: "",
        planted: if same == "1" {
            Vec::new()
        } else {
            vec![("readings", "[1]".into(), "changed", Some("r"))]
        },
    };
    let modes = both_modes_agree(dir.path(), &case);
    let m = &modes[0];
    assert_eq!(m["mode"], "stream", "{m}");
    let why = m["reason"].as_str().unwrap_or("");
    assert!(why.contains("DOUBLE") && why.contains("'r'"), "{m}");
}

#[test]
fn a_long_text_is_told_apart_from_its_own_md5_and_from_a_one_byte_change() {
    let Some(src) = MyDb::new("my_digest_long_src") else {
        return;
    };
    let Some(tgt) = MyDb::new("my_digest_long_tgt") else {
        return;
    };
    let ddl =
        "CREATE TABLE docs (id INT PRIMARY KEY, body MEDIUMTEXT, blob_ MEDIUMBLOB) ENGINE = InnoDB";
    src.exec(ddl);
    tgt.exec(ddl);
    let (a, b) = (src.app_user(), tgt.app_user());
    // 40,000 bytes, past the 32 KiB a spelling holds whole.
    let rows =
        "INSERT INTO docs SELECT seq, REPEAT(CONCAT('d', seq, ' '), 40000 DIV (2 + LENGTH(seq))),
                    REPEAT(UNHEX('00FF'), 20000) FROM seq_1_to_40";
    a.exec(rows).unwrap();
    b.exec(rows).unwrap();
    // Row 3's text becomes `md5 ` and its own MD5 (what a spelling that
    // kept only the MD5 of a long value could not tell from it);
    // row 7's last byte changes; row 9's blob loses one byte.
    let long = src.value("SELECT LENGTH(body) > 32768 FROM docs WHERE id = 3");
    assert_eq!(long, "1", "the fixture's texts are long");
    let md5 = src.value("SELECT MD5(body) FROM docs WHERE id = 3");
    b.exec(&format!(
        "UPDATE docs SET body = 'md5 {md5}' WHERE id = 3;
         UPDATE docs SET body = CONCAT(LEFT(body, LENGTH(body) - 1), 'x') WHERE id = 7;
         UPDATE docs SET blob_ = LEFT(blob_, LENGTH(blob_) - 1) WHERE id = 9;"
    ))
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("spec.toml"),
        format!(
            "[source]\nurl = \"{}\"\n\n[target]\nurl = \"{}\"\n\n[[tables]]\nname = \"docs\"\nkey = [\"id\"]\n\n[[tables.columns]]\nsource = \"body\"\ntarget = \"body\"\n\n[[tables.columns]]\nsource = \"blob_\"\ntarget = \"blob_\"\n",
            a.url(),
            b.url()
        ),
    )
    .unwrap();
    let case = Case {
        name: "long values",
        source: "",
        my_target: "",
        pg_target: "",
        planted: vec![
            ("docs", "[3]".into(), "changed", Some("body")),
            ("docs", "[7]".into(), "changed", Some("body")),
            ("docs", "[9]".into(), "changed", Some("blob_")),
        ],
    };
    let modes = both_modes_agree(dir.path(), &case);
    assert_eq!(modes[0]["mode"], "digest", "{modes}");
}
