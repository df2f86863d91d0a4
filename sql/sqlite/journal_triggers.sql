-- Journal triggers for one table. Filled in by src/db/sqlite/capture.rs with
-- quoted identifiers only: {{ins}} {{upd}} {{del}} {{pre_ins}} {{pre_upd}}
-- (trigger names), {{table}}, {{pending}} (the table's pending rows),
-- {{cols}} (c1, c2, ...), {{cols_of_table}}, {{insert}} {{update}}
-- {{delete}} (the statements that write one entry: a row of the table's
-- journal table, and of its further parts when it is wider than one part
-- holds), {{conflict}} (rows of the table that NEW collides with on the key
-- or a UNIQUE index), {{not_old}} (the row is not OLD), {{moved}} (the key or
-- a UNIQUE column changed), {{old_is}} (a pending row is OLD), {{flush}}
-- (pending rows journaled as deletes, unrolled once per UNIQUE constraint),
-- {{flush_ins}} {{flush_upd}} (the names of the triggers that run it).
--
-- An entry is first listed in _cutover_journal_entries (seq, img, op): its
-- seq is one more than the largest seq listed, and its image rows take the
-- same seq (last_insert_rowid()). SQLite has one writer at a time, so the
-- sequence is global and in commit order; a trigger names no other table's
-- journal, so its cost does not grow with the number of journaled tables. The bodies call no function but max(), coalesce() and
-- last_insert_rowid(), which every SQLite since 3.31 allows under
-- trusted_schema=OFF, and pass columns straight through, so a value is
-- journaled exactly as stored. One row per change keeps the cost to the
-- application's write low (BENCHMARKS.md, "Journal write overhead").
--
-- REPLACE (and UPDATE OR REPLACE) deletes colliding rows without firing
-- delete triggers when recursive_triggers is off. The BEFORE triggers keep
-- the rows the new row collides with in {{pending}}; the AFTER trigger
-- journals those still pending as deletes, before the write itself. With
-- recursive_triggers on, the delete trigger journals them and takes them
-- out of {{pending}}. A write that is ignored or fails journals nothing: its
-- AFTER trigger never runs, and the next BEFORE trigger starts afresh.
--
-- SQLite fires the triggers of one event newest first, so the flush
-- triggers, created last, journal the deletes before the write's own entry;
-- `journal install` always recreates all of a table's triggers together, in
-- this order. Kept apart, they cost an ordinary write only their WHEN.
CREATE TRIGGER {{pre_ins}} BEFORE INSERT ON {{table}} BEGIN
    DELETE FROM {{pending}};
    INSERT INTO {{pending}} ({{cols}}) SELECT {{cols_of_table}} FROM {{table}} WHERE {{conflict}};
END;
CREATE TRIGGER {{pre_upd}} BEFORE UPDATE ON {{table}} WHEN {{moved}} BEGIN
    DELETE FROM {{pending}};
    INSERT INTO {{pending}} ({{cols}}) SELECT {{cols_of_table}} FROM {{table}} WHERE ({{conflict}}) AND {{not_old}};
END;
CREATE TRIGGER {{ins}} AFTER INSERT ON {{table}} BEGIN
{{insert}}
END;
CREATE TRIGGER {{upd}} AFTER UPDATE ON {{table}} BEGIN
{{update}}
END;
CREATE TRIGGER {{del}} AFTER DELETE ON {{table}} BEGIN
    DELETE FROM {{pending}} WHERE {{old_is}};
{{delete}}
END;
CREATE TRIGGER {{flush_ins}} AFTER INSERT ON {{table}} WHEN EXISTS (SELECT 1 FROM {{pending}}) BEGIN
{{flush}}
END;
CREATE TRIGGER {{flush_upd}} AFTER UPDATE ON {{table}} WHEN {{moved}} AND EXISTS (SELECT 1 FROM {{pending}}) BEGIN
{{flush}}
END;
