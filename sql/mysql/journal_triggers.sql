-- Journal triggers for one table on MySQL and MariaDB, one statement per
-- op, each ending with a line `END;`. Filled in by
-- src/db/mysql/capture.rs with quoted, database-qualified names only:
-- {{table}}, {{image}} (the table's image table for this column list),
-- {{seq}} (the seq counter, sql/mysql/journal_control.sql),
-- {{trg_insert}} {{trg_update}} {{trg_delete}} (the triggers, named after
-- the table's first image: trigger names are unique per database, and a
-- later image of the table replaces them in place), {{o_cols}}
-- {{n_cols}} (`o1`, `o2`, … and `n1`, `n2`, …), {{old}} {{new}}
-- (`OLD`.`col`, … and `NEW`.`col`, …), and {{order_insert}}
-- {{order_update}} {{order_delete}}: `PRECEDES <the application's first
-- AFTER trigger of the event>` or nothing, so the journal's entry of a
-- row is written before anything the application's AFTER triggers write
-- (docs/journal.md, "MySQL and MariaDB"). The text from `BEGIN` to `END`
-- is what information_schema.TRIGGERS keeps as ACTION_STATEMENT, and what
-- `stale_journal_triggers` compares.
--
-- Each change is one row of {{image}}: seq from {{seq}}, the connection
-- that wrote it, the op and the images, in columns of the table's own
-- types (CHAR and VARCHAR as LONGTEXT of the same character set and
-- collation, BINARY and VARBINARY as LONGBLOB, so a wide row's two images
-- fit the 65,535-byte row limit). AFTER triggers only: a row that
-- INSERT IGNORE skips, or an ON DUPLICATE KEY UPDATE turns into an update,
-- is journaled as what happened to it, never as what was asked; MariaDB
-- fires AFTER UPDATE for a row that UPDATE IGNORE skipped on a duplicate
-- key, which {{happened}} (a condition on OLD, NEW and the table read by
-- key) tells from a row really written, so nothing is recorded for it. A trigger
-- runs with the sql_mode it was created under (cutover's strict one), as
-- its definer.
CREATE TRIGGER {{trg_insert}} AFTER INSERT ON {{table}} FOR EACH ROW {{order_insert}}BEGIN
    INSERT INTO {{seq}} () VALUES ();
    INSERT INTO {{image}} (seq, conn, op, {{n_cols}})
    VALUES (LAST_INSERT_ID(), CONNECTION_ID(), 'insert', {{new}});
END;
CREATE TRIGGER {{trg_update}} AFTER UPDATE ON {{table}} FOR EACH ROW {{order_update}}BEGIN
    IF {{happened}} THEN
        INSERT INTO {{seq}} () VALUES ();
        INSERT INTO {{image}} (seq, conn, op, {{o_cols}}, {{n_cols}})
        VALUES (LAST_INSERT_ID(), CONNECTION_ID(), 'update', {{old}}, {{new}});
    END IF;
END;
CREATE TRIGGER {{trg_delete}} AFTER DELETE ON {{table}} FOR EACH ROW {{order_delete}}BEGIN
    INSERT INTO {{seq}} () VALUES ();
    INSERT INTO {{image}} (seq, conn, op, {{o_cols}})
    VALUES (LAST_INSERT_ID(), CONNECTION_ID(), 'delete', {{old}});
END;
