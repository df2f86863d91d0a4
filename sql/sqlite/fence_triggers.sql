-- Fence triggers for one table: every insert, update and delete, from any
-- connection of any process, aborts. Placeholders: {{ins}} {{upd}} {{del}}
-- (trigger names), {{table}} and {{message}} (a literal).
CREATE TRIGGER IF NOT EXISTS {{ins}} BEFORE INSERT ON {{table}} BEGIN
    SELECT RAISE(ABORT, {{message}});
END;
CREATE TRIGGER IF NOT EXISTS {{upd}} BEFORE UPDATE ON {{table}} BEGIN
    SELECT RAISE(ABORT, {{message}});
END;
CREATE TRIGGER IF NOT EXISTS {{del}} BEFORE DELETE ON {{table}} BEGIN
    SELECT RAISE(ABORT, {{message}});
END;
