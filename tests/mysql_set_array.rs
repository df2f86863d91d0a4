//! A MySQL `SET` migrated into a PostgreSQL `text[]` (the DVD-rental
//! sample's `film.special_features`), through the binary: `init` drafts
//! `set_to_array` with the SET's labels, and the draft as it is carries the
//! column through check, load, the gate, the journal, the application's
//! writes through `psql` as a role that is not a superuser, the fence and
//! the replay back into MySQL, every figure compared with an oracle the
//! test writes out by hand. An array MySQL could not store (labels out of
//! the SET's order) is named by `watch` and refused by replay, the source
//! unchanged.

mod support;

use std::path::Path;
use std::process::{Command, Stdio};

use support::mysql::TestDb as MyDb;
use support::postgres::TestDb as PgDb;
use support::run::cutover_in;

const MY_SCHEMA: &str = "
CREATE TABLE film (
    film_id SMALLINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
    title VARCHAR(100) NOT NULL,
    special_features SET('Trailers','Commentaries','Deleted Scenes','Behind the Scenes') DEFAULT NULL
) ENGINE = InnoDB;
";

/// The application's rows; MySQL stores the last one's labels in
/// declaration order (`Commentaries,Behind the Scenes`).
const MY_ROWS: &str = "
INSERT INTO film (title, special_features) VALUES
    ('Academy', 'Trailers,Deleted Scenes'),
    ('Bride', NULL),
    ('Chamber', ''),
    ('Dinosaur', 'Behind the Scenes,Commentaries');
";

/// With a generated column as the sample's `film.fulltext`, which the
/// target computes and no step may write, compare as a difference or
/// replay.
const PG_TARGET: &str = "CREATE TABLE film (
    film_id integer PRIMARY KEY, title text NOT NULL, special_features text[],
    fulltext tsvector GENERATED ALWAYS AS (to_tsvector('simple', title)) STORED)";

/// The target after load, as PostgreSQL prints it.
const LOADED: &str = "1|Academy|{Trailers,\"Deleted Scenes\"}|Deleted Scenes
2|Bride||
3|Chamber|{}|
4|Dinosaur|{Commentaries,\"Behind the Scenes\"}|Behind the Scenes
";

/// What the application writes to PostgreSQL after the switch.
const PG_WRITES: &str = "
UPDATE film SET special_features = ARRAY['Trailers', 'Behind the Scenes'] WHERE film_id = 1;
INSERT INTO film VALUES (5, 'Egg', '{Commentaries}');
UPDATE film SET special_features = '{}' WHERE film_id = 2;
UPDATE film SET special_features = NULL WHERE film_id = 3;
DELETE FROM film WHERE film_id = 4;
";

/// The oracle: MySQL's films after the replay, `[labels]` or `null`.
const REPLAYED: &str = "1\tAcademy\t[Trailers,Behind the Scenes]
2\tBride\t[]
3\tChamber\tnull
5\tEgg\t[Commentaries]
";

struct Migration {
    my: MyDb,
    pg: PgDb,
    app_role: String,
    dir: tempfile::TempDir,
}

impl Migration {
    /// The source written by its application user, the target's table and
    /// application role, and the spec as `init` drafts it.
    fn new(test: &str) -> Option<Migration> {
        let my = MyDb::new(test)?;
        let pg = PgDb::new(test)?;
        my.exec(MY_SCHEMA);
        my.app_user().exec(MY_ROWS).expect("the application's rows");
        let app_role = format!("app_{}", pg.name.trim_start_matches("cutover_t_"));
        pg.client()
            .batch_execute(&format!(
                "{PG_TARGET};
                 CREATE ROLE {app_role} LOGIN;
                 GRANT SELECT, INSERT, UPDATE, DELETE ON film TO {app_role};"
            ))
            .expect("the target");
        let dir = tempfile::tempdir().expect("a folder");
        let spec = dir.path().join("spec.toml");
        // The id the target widens from SMALLINT UNSIGNED: accepted.
        support::init_and_decide(&my.url, &format!("{}?schema=public", pg.url), &spec);
        Some(Migration {
            my,
            pg,
            app_role,
            dir,
        })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The application's writes, through `psql` as its role.
    fn application_writes(&self, sql: &str) {
        self.pg.psql_as(&self.app_role, sql);
    }

    /// The target's films as `psql` prints them, with the second label.
    fn target(&self) -> String {
        let out = Command::new("psql")
            .args(["-X", "-q", "-A", "-t", "-d", &self.pg.url, "-c"])
            .arg(
                "SELECT film_id, title, special_features, special_features[2] FROM film ORDER BY 1",
            )
            .stdin(Stdio::null())
            .output()
            .expect("running psql");
        assert!(out.status.success());
        String::from_utf8(out.stdout).expect("UTF-8")
    }

    /// `status` passes and raises no alarm (the generated column is the
    /// target's own, not a column the spec forgot).
    fn status_is_quiet(&self) {
        let out = cutover_in(self.path(), &["status"]).expect(0);
        assert!(!out.all().contains("ALARM"), "{out}");
    }

    /// The target's generated column, by key.
    fn fulltext(&self) -> String {
        let out = Command::new("psql")
            .args(["-X", "-q", "-A", "-t", "-d", &self.pg.url, "-c"])
            .arg("SELECT film_id, fulltext FROM film ORDER BY 1")
            .stdin(Stdio::null())
            .output()
            .expect("running psql");
        assert!(out.status.success());
        String::from_utf8(out.stdout).expect("UTF-8")
    }

    /// The source's films, `[labels]` or `null`.
    fn source(&self) -> String {
        self.my.exec(
            "SELECT film_id, title, IFNULL(CONCAT('[', special_features, ']'), 'null')
             FROM film ORDER BY film_id",
        )
    }
}

#[test]
fn a_set_goes_to_a_text_array_and_back_exactly() {
    let Some(m) = Migration::new("set_array") else {
        return;
    };
    let draft = std::fs::read_to_string(m.path().join("spec.toml")).unwrap();
    assert!(
        draft.contains("transform = \"set_to_array\"")
            && draft.contains(
                "labels = [\"Trailers\", \"Commentaries\", \"Deleted Scenes\", \"Behind the Scenes\"]"
            ),
        "{draft}"
    );
    // The one decision: the hazards of the ids and titles the target
    // widens, accepted (`Migration::new`).
    assert!(
        draft.matches("# DECIDE:").count() == 1
            && draft.contains("#   film_id: range hazard")
            && draft
                .contains("\nsource_limit = { \"film_id\" = \"watch\", \"title\" = \"watch\" }")
            && draft.contains("film.fulltext is generated"),
        "{draft}"
    );
    let source_before = m.source();
    cutover_in(m.path(), &["check"]).expect(0);
    m.status_is_quiet();
    cutover_in(m.path(), &["load"]).expect(0);
    assert_eq!(m.target(), LOADED);
    cutover_in(m.path(), &["gate"]).expect(0);
    m.status_is_quiet();

    cutover_in(m.path(), &["journal", "install"]).expect(0);
    m.status_is_quiet();
    m.application_writes(PG_WRITES);
    cutover_in(m.path(), &["watch"]).expect(0);
    m.status_is_quiet();
    cutover_in(m.path(), &["replay", "--rehearse"]).expect(0);
    assert_eq!(m.source(), source_before, "the rehearsal wrote the source");
    cutover_in(m.path(), &["fence", "on"]).expect(0);
    m.status_is_quiet();
    let rep = cutover_in(m.path(), &["--format", "json", "replay"])
        .expect(0)
        .json();
    assert_eq!(rep["verdict"], "pass", "{rep}");
    assert_eq!(m.source(), REPLAYED);
    m.status_is_quiet();
    // The target computed the generated column of every row it holds.
    assert_eq!(
        m.fulltext(),
        "1|'academy':1\n2|'bride':1\n3|'chamber':1\n5|'egg':1\n"
    );
}

#[test]
fn an_array_out_of_the_sets_order_is_refused_before_the_source_is_written() {
    let Some(m) = Migration::new("set_array_order") else {
        return;
    };
    cutover_in(m.path(), &["load"]).expect(0);
    cutover_in(m.path(), &["journal", "install"]).expect(0);
    m.application_writes(
        "UPDATE film SET title = 'Academy II' WHERE film_id = 1;
         UPDATE film SET special_features = '{\"Behind the Scenes\",Trailers}' WHERE film_id = 2;",
    );
    cutover_in(m.path(), &["watch"])
        .expect(1)
        .assert_mentions(&["film", "Behind the Scenes"]);
    cutover_in(m.path(), &["fence", "on"]).expect(0);
    let before = m.source();
    let out = cutover_in(m.path(), &["replay"]).output();
    assert!(matches!(out.code, Some(1 | 2)), "{out}");
    out.assert_mentions(&["Behind the Scenes", "special_features"]);
    assert_eq!(m.source(), before, "a refused replay wrote the source");
}

/// Without `set_to_array` the SET's text goes to the array as it is,
/// which PostgreSQL does not take: `check` casts each value in the target
/// and refuses those rows, naming table, key, column and value, before a
/// load could stop part-way on them.
#[test]
fn check_refuses_what_the_target_would_not_cast() {
    let Some(m) = Migration::new("set_array_cast") else {
        return;
    };
    let spec = m.path().join("spec.toml");
    let draft = std::fs::read_to_string(&spec).unwrap();
    let copied: String = draft
        .lines()
        .filter(|l| !l.starts_with("transform = \"set_to_array\"") && !l.starts_with("labels = "))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&spec, copied).unwrap();
    let before = m.target();
    let rep = cutover_in(m.path(), &["--format", "json", "check"])
        .expect(1)
        .json();
    // Every row but the NULL one: the empty SET ('') is no array either.
    assert_eq!(rep["tables"][0]["invalid"], 3, "{rep:#}");
    assert_eq!(rep["tables"][0]["reversible"], 1, "{rep:#}");
    let text = cutover_in(m.path(), &["check"]).expect(1);
    text.assert_mentions(&[
        "film",
        "special_features",
        "Trailers,Deleted Scenes",
        "malformed array literal",
    ]);
    assert_eq!(m.target(), before, "check wrote the target");
}
