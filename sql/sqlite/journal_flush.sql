    INSERT INTO _cutover_journal (img, op) SELECT {{img}}, 'delete' FROM {{pending}} WHERE {{guard}} ORDER BY rowid LIMIT 1;
{{old_from_pending}}
    DELETE FROM {{pending}} WHERE rowid = (SELECT min(rowid) FROM {{pending}}) AND {{guard}};
