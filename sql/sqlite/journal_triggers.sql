-- Journal triggers for one table. Filled in by src/db/sqlite/journal.rs with
-- quoted identifiers only: {{ins}} {{upd}} {{del}} {{pre_ins}} {{pre_upd}}
-- (trigger names), {{table}}, {{img}} (the table's image id, an integer),
-- {{pending}} (its pending table), {{cols}} (c1, c2, ...), {{new_image}}
-- {{old_image}} (the statements that write NEW or OLD into the image tables,
-- one per part of at most 1,000 columns), {{conflict}} (rows
-- of the table that NEW collides with on the key or a UNIQUE index),
-- {{not_old}} (the row is not OLD), {{moved}} (the key or a UNIQUE column
-- changed), {{old_is}} (a pending row is OLD), {{flush}} (pending rows
-- journaled as deletes, unrolled once per UNIQUE constraint).
--
-- The bodies call no function but last_insert_rowid(), which every SQLite
-- since 3.31 allows under trusted_schema=OFF, and pass columns straight
-- through, so a value is journaled exactly as stored.
--
-- REPLACE (and UPDATE OR REPLACE) deletes colliding rows without firing
-- delete triggers when recursive_triggers is off. The BEFORE triggers keep
-- the rows the new row collides with in {{pending}}; the AFTER trigger
-- journals those still pending as deletes, before the write itself. With
-- recursive_triggers on, the delete trigger journals them and takes them
-- out of {{pending}}. A write that is ignored or fails journals nothing: its
-- AFTER trigger never runs, and the next BEFORE trigger starts afresh.
CREATE TRIGGER {{pre_ins}} BEFORE INSERT ON {{table}} BEGIN
    DELETE FROM {{pending}};
    INSERT INTO {{pending}} ({{cols}}) SELECT {{cols_of_table}} FROM {{table}} WHERE {{conflict}};
END;
CREATE TRIGGER {{pre_upd}} BEFORE UPDATE ON {{table}} WHEN {{moved}} BEGIN
    DELETE FROM {{pending}};
    INSERT INTO {{pending}} ({{cols}}) SELECT {{cols_of_table}} FROM {{table}} WHERE ({{conflict}}) AND {{not_old}};
END;
CREATE TRIGGER {{ins}} AFTER INSERT ON {{table}} BEGIN
{{flush_ins}}
    INSERT INTO _cutover_journal (img, op) VALUES ({{img}}, 'insert');
{{new_image}}
END;
CREATE TRIGGER {{upd}} AFTER UPDATE ON {{table}} BEGIN
{{flush_upd}}
    INSERT INTO _cutover_journal (img, op) VALUES ({{img}}, 'update');
{{old_image}}
{{new_image}}
END;
CREATE TRIGGER {{del}} AFTER DELETE ON {{table}} BEGIN
    DELETE FROM {{pending}} WHERE {{old_is}};
    INSERT INTO _cutover_journal (img, op) VALUES ({{img}}, 'delete');
{{old_image}}
END;
