    INSERT INTO _cutover_journal (img, op) SELECT {{img}}, 'delete' FROM {{pending}} WHERE {{guard}} ORDER BY rowid LIMIT 1;
    INSERT INTO {{old}} (rowid, {{cols}}) SELECT last_insert_rowid(), {{cols}} FROM {{pending}} WHERE {{guard}} ORDER BY rowid LIMIT 1;
    DELETE FROM {{pending}} WHERE rowid = (SELECT min(rowid) FROM {{pending}}) AND {{guard}};
