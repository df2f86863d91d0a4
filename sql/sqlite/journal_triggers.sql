-- Journal triggers for one table. Placeholders, filled by src/db/sqlite.rs with
-- quoted identifiers and literals only: {{ins}} {{upd}} {{del}} (trigger
-- names), {{table}}, {{name}} (the spec's table name as a literal),
-- {{new_key}} {{old_key}} (key column lists), {{key_same}} (OLD.k IS NEW.k for
-- every key column) and {{new_image}} {{old_image}} (json_object argument
-- lists).
CREATE TRIGGER IF NOT EXISTS {{ins}} AFTER INSERT ON {{table}} BEGIN
    INSERT INTO _cutover_journal (tbl, op, key, new)
    VALUES ({{name}}, 'insert', json_array({{new_key}}), json_object({{new_image}}));
END;
CREATE TRIGGER IF NOT EXISTS {{upd}} AFTER UPDATE ON {{table}} BEGIN
    INSERT INTO _cutover_journal (tbl, op, key, old_key, old, new)
    VALUES ({{name}}, 'update', json_array({{new_key}}),
                        CASE WHEN {{key_same}} THEN NULL ELSE json_array({{old_key}}) END,
            json_object({{old_image}}), json_object({{new_image}}));
END;
CREATE TRIGGER IF NOT EXISTS {{del}} AFTER DELETE ON {{table}} BEGIN
    INSERT INTO _cutover_journal (tbl, op, key, old)
    VALUES ({{name}}, 'delete', json_array({{old_key}}), json_object({{old_image}}));
END;
