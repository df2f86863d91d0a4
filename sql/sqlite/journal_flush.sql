{{delete_pending}}
    DELETE FROM {{pending}} WHERE rowid = (SELECT min(rowid) FROM {{pending}});
