-- The fence row guards itself: once written, no connection can change or
-- delete it (a lowered boundary would make replay skip entries). Only
-- `cutover fence off` lifts it, by dropping these first. Placeholders:
-- {{upd}} {{del}} (trigger names), {{table}} and {{message}} (a literal).
CREATE TRIGGER {{upd}} BEFORE UPDATE ON {{table}} BEGIN
    SELECT RAISE(ABORT, {{message}});
END;
CREATE TRIGGER {{del}} BEFORE DELETE ON {{table}} BEGIN
    SELECT RAISE(ABORT, {{message}});
END;
