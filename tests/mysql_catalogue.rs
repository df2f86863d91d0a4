//! The MySQL/MariaDB catalogue as the engine reads it: tables, columns in
//! declaration order with their types, defaults and generated-ness, keys
//! and what their collations make equal, foreign keys both ways, triggers
//! in order, and `AUTO_INCREMENT`, each compared with the schema this test
//! declares.

mod support;

use anyhow::Result;
use cutover::db::Access;
use cutover::db::mysql::MySql;
use cutover::db::mysql::catalogue::{ForeignKey, Generated, key_equality};
use support::mysql::TestDb;

const SCHEMA: &str = "
CREATE TABLE parent (
  id INT AUTO_INCREMENT PRIMARY KEY,
  code VARCHAR(10) COLLATE utf8mb4_general_ci NOT NULL,
  email VARCHAR(50) COLLATE utf8mb4_nopad_bin,
  tag VARCHAR(10) COLLATE utf8mb4_bin,
  note TEXT,
  UNIQUE KEY code_u (code),
  UNIQUE KEY email_u (email),
  UNIQUE KEY tag_u (tag),
  UNIQUE KEY note_prefix (note(10))
) ENGINE=InnoDB;
CREATE TABLE child (
  id BIGINT UNSIGNED NOT NULL,
  line SMALLINT NOT NULL,
  parent_id INT,
  note VARCHAR(20) DEFAULT 'x''s',
  total DECIMAL(12,2) NOT NULL DEFAULT 0.00,
  doubled DECIMAL(13,2) AS (total * 2) VIRTUAL,
  stored_c INT AS (line + 1) STORED,
  created TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  j JSON,
  PRIMARY KEY (line, id),
  CONSTRAINT child_parent FOREIGN KEY (parent_id) REFERENCES parent (id) ON DELETE CASCADE ON UPDATE SET NULL
) ENGINE=InnoDB;
CREATE TABLE grandchild (
  id INT PRIMARY KEY,
  c_line SMALLINT NOT NULL,
  c_id BIGINT UNSIGNED NOT NULL,
  up INT,
  CONSTRAINT gc_child FOREIGN KEY (c_line, c_id) REFERENCES child (line, id),
  CONSTRAINT gc_self FOREIGN KEY (up) REFERENCES grandchild (id) ON DELETE SET NULL
);
CREATE TABLE plain (a INT) ENGINE=MyISAM;
CREATE VIEW v AS SELECT id FROM parent;
CREATE TRIGGER p_bi_2 BEFORE INSERT ON parent FOR EACH ROW SET NEW.note = CONCAT(NEW.note, '!');
CREATE TRIGGER p_bi_1 BEFORE INSERT ON parent FOR EACH ROW PRECEDES p_bi_2 SET NEW.code = UPPER(NEW.code);
CREATE TRIGGER p_au AFTER UPDATE ON parent FOR EACH ROW SET @seen = 1;
";

fn names(v: &[impl AsRef<str>]) -> Vec<&str> {
    v.iter().map(AsRef::as_ref).collect()
}

#[test]
fn tables_columns_and_defaults_are_as_declared() -> Result<()> {
    let Some(db) = TestDb::new("catalogue_columns") else {
        return Ok(());
    };
    db.exec(SCHEMA);
    let e = MySql::open(&db.url, Access::Read, cutover::spec::Side::Source)?;
    let tables = e.tables()?;
    let t: Vec<(&str, Option<&str>)> = tables
        .iter()
        .map(|t| (t.name.as_str(), t.engine.as_deref()))
        .collect();
    assert_eq!(
        t,
        [
            ("child", Some("InnoDB")),
            ("grandchild", Some("InnoDB")),
            ("parent", Some("InnoDB")),
            ("plain", Some("MyISAM"))
        ],
        "views are not tables"
    );
    let cols = e.columns("child")?;
    assert_eq!(
        names(&cols.iter().map(|c| c.name.clone()).collect::<Vec<_>>()),
        [
            "id",
            "line",
            "parent_id",
            "note",
            "total",
            "doubled",
            "stored_c",
            "created",
            "j"
        ]
    );
    let by = |n: &str| cols.iter().find(|c| c.name == n).expect("a column");
    assert_eq!(
        (
            by("id").declared.as_str(),
            by("id").key_position,
            by("id").nullable
        ),
        ("bigint(20) unsigned", 2, false)
    );
    assert_eq!(by("line").key_position, 1);
    assert_eq!(by("parent_id").key_position, 0);
    assert_eq!(by("parent_id").default.as_deref(), Some("NULL"));
    assert_eq!(by("note").default.as_deref(), Some("'x''s'"));
    assert_eq!(by("total").default.as_deref(), Some("0.00"));
    assert_eq!(
        (by("total").numeric_precision, by("total").numeric_scale),
        (Some(12), Some(2))
    );
    assert_eq!(
        by("created").default.as_deref(),
        Some("current_timestamp(3)")
    );
    assert_eq!(by("created").datetime_precision, Some(3));
    assert_eq!(by("id").default, None);
    assert_eq!(
        by("doubled").generated,
        Some(Generated {
            // Under the session's ANSI_QUOTES the server quotes in double quotes.
            expression: "\"total\" * 2".into(),
            stored: false
        })
    );
    assert!(by("stored_c").generated.as_ref().is_some_and(|g| g.stored));
    assert!(by("note").generated.is_none());
    // MariaDB's JSON is a LONGTEXT (with a json_valid check).
    assert_eq!(by("j").data_type, "longtext");
    let p = e.columns("parent")?;
    assert!(p[0].auto_increment && !p[1].auto_increment);
    assert_eq!(p[1].collation.as_deref(), Some("utf8mb4_general_ci"));
    assert_eq!(p[1].charset.as_deref(), Some("utf8mb4"));
    assert_eq!(p[1].max_length, Some(10));
    let err = format!("{:#}", e.columns("nope").expect_err("no such table"));
    assert!(
        err.contains("table 'nope' does not exist") && err.contains(&db.name),
        "{err}"
    );
    Ok(())
}

#[test]
fn keys_say_which_collations_fold_values_into_one_key() -> Result<()> {
    let Some(db) = TestDb::new("catalogue_keys") else {
        return Ok(());
    };
    db.exec(SCHEMA);
    let e = MySql::open(&db.url, Access::Read, cutover::spec::Side::Source)?;
    let keys = e.keys("parent")?;
    assert_eq!(
        names(&keys.iter().map(|k| k.name.clone()).collect::<Vec<_>>()),
        ["PRIMARY", "code_u", "email_u", "note_prefix", "tag_u"]
    );
    assert!(keys[0].primary && !keys[1].primary);
    assert_eq!(keys[0].columns(), Some(vec!["id"]));
    let prefix = &keys[3];
    assert_eq!(prefix.parts[0].prefix, Some(10));
    assert_eq!(
        prefix.columns(),
        None,
        "a prefix key is not a key on the whole value"
    );
    let why = |k: usize| key_equality(keys[k].parts[0].collation.as_deref());
    assert_eq!(why(0), None, "an integer key is exact");
    assert_eq!(why(2), None, "utf8mb4_nopad_bin is exact");
    let ci = why(1).expect("utf8mb4_general_ci folds case");
    assert!(ci.contains("'a' and 'A' are one key"), "{ci}");
    let pad = why(4).expect("utf8mb4_bin pads");
    assert!(pad.contains("'a' and 'a '"), "{pad}");
    // What the report means, as the application meets it.
    let app = db.app_user();
    app.exec("INSERT INTO parent (code, email, tag) VALUES ('a', 'a@x', 't')")
        .expect("a row");
    let dup = app
        .exec("INSERT INTO parent (code, email, tag) VALUES ('A', 'A@x', 'u')")
        .expect_err("'A' is the key 'a'");
    assert!(
        dup.contains("Duplicate entry") && dup.contains("code_u"),
        "{dup}"
    );
    let dup = app
        .exec("INSERT INTO parent (code, email, tag) VALUES ('b', 'b@x', 't ')")
        .expect_err("'t ' is the key 't'");
    assert!(dup.contains("tag_u"), "{dup}");
    app.exec("INSERT INTO parent (code, email, tag) VALUES ('c', 'a@x ', 'v')")
        .expect("a NO PAD key keeps 'a@x ' apart from 'a@x'");
    let folds: Vec<(String, bool)> = keys
        .iter()
        .flat_map(|k| k.folding())
        .map(|(c, why)| (c, why.contains("first 10")))
        .collect();
    assert_eq!(
        folds,
        [
            ("code".into(), false),
            ("note".into(), true),
            ("tag".into(), false)
        ]
    );
    let child = e.keys("child")?;
    assert_eq!(child.len(), 1);
    assert_eq!(child[0].columns(), Some(vec!["line", "id"]));
    Ok(())
}

#[test]
fn foreign_keys_both_ways_triggers_in_order_and_auto_increment() -> Result<()> {
    let Some(db) = TestDb::new("catalogue_fks") else {
        return Ok(());
    };
    db.exec(SCHEMA);
    // A table of another database referring to this one's.
    let Some(other) = TestDb::new("catalogue_fks_other") else {
        return Ok(());
    };
    other.exec(&format!(
        "CREATE TABLE ext (id INT PRIMARY KEY, p INT, FOREIGN KEY ext_p (p) REFERENCES `{}`.parent (id) ON DELETE RESTRICT)",
        db.name
    ));
    let e = MySql::open(&db.url, Access::Read, cutover::spec::Side::Source)?;
    let fk = e.foreign_keys("child")?;
    assert_eq!(
        fk.declared,
        [ForeignKey {
            name: "child_parent".into(),
            database: db.name.clone(),
            table: "child".into(),
            columns: vec!["parent_id".into()],
            parent_database: db.name.clone(),
            parent_table: "parent".into(),
            parent_columns: vec!["id".into()],
            on_delete: "CASCADE".into(),
            on_update: "SET NULL".into(),
        }]
    );
    assert_eq!(fk.referring.len(), 1);
    let gc = &fk.referring[0];
    assert_eq!(
        (gc.name.as_str(), gc.table.as_str()),
        ("gc_child", "grandchild")
    );
    assert_eq!(gc.columns, ["c_line", "c_id"]);
    assert_eq!(gc.parent_columns, ["line", "id"]);
    assert_eq!(
        (gc.on_delete.as_str(), gc.on_update.as_str()),
        ("RESTRICT", "RESTRICT")
    );
    let parent = e.foreign_keys("parent")?;
    assert!(parent.declared.is_empty());
    let referring: Vec<(&str, &str)> = parent
        .referring
        .iter()
        .map(|f| (f.database.as_str(), f.table.as_str()))
        .collect();
    assert_eq!(
        referring,
        [(db.name.as_str(), "child"), (other.name.as_str(), "ext")]
    );
    let own = e.foreign_keys("grandchild")?;
    assert_eq!(own.declared.len(), 2);
    assert_eq!(own.referring.len(), 1, "its own self-reference");
    assert_eq!(own.referring[0].name, "gc_self");

    let triggers = e.triggers("parent")?;
    let t: Vec<(&str, &str, &str, u32)> = triggers
        .iter()
        .map(|t| {
            (
                t.name.as_str(),
                t.timing.as_str(),
                t.event.as_str(),
                t.order,
            )
        })
        .collect();
    assert_eq!(
        t,
        [
            ("p_au", "AFTER", "UPDATE", 1),
            ("p_bi_1", "BEFORE", "INSERT", 1),
            ("p_bi_2", "BEFORE", "INSERT", 2)
        ]
    );
    assert!(triggers[1].statement.contains("UPPER(NEW.code)"));
    assert!(e.triggers("child")?.is_empty());

    assert_eq!(e.auto_increment("parent")?, Some(1));
    db.app_user()
        .exec("INSERT INTO parent (code) VALUES ('a'), ('b'), ('c'); INSERT INTO parent (id, code) VALUES (41, 'd')")
        .expect("rows");
    assert_eq!(e.auto_increment("parent")?, Some(42));
    assert_eq!(e.auto_increment("child")?, None);
    assert!(e.auto_increment("nope").is_err());
    Ok(())
}
