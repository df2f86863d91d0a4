-- The fence row guards itself: once written, no statement can change,
-- delete or replace it (a lowered boundary would make replay skip entries;
-- INSERT OR REPLACE deletes without firing a delete trigger, so a second
-- insert is refused too). Only `cutover fence off` lifts it, by dropping
-- these first. Placeholders: {{ins}} {{upd}} {{del}} (trigger names),
-- {{table}} and {{message}} (a literal).
CREATE TRIGGER {{ins}} BEFORE INSERT ON {{table}} WHEN EXISTS (SELECT 1 FROM {{table}}) BEGIN
    SELECT RAISE(ABORT, {{message}});
END;
CREATE TRIGGER {{upd}} BEFORE UPDATE ON {{table}} BEGIN
    SELECT RAISE(ABORT, {{message}});
END;
CREATE TRIGGER {{del}} BEFORE DELETE ON {{table}} BEGIN
    SELECT RAISE(ABORT, {{message}});
END;
