-- The HNSW indexes hold a model's ACTIVE rows only (shared.db.vector_index_predicate), no longer all of its rows.
-- Before, a staged row entered the graph at the COPY, again at its activation and again when superseded (each
-- UPDATE of status writes a new row version, and status is in a btree index, so no HOT update): a refresh of
-- title 21 inserted ~50,000 entries into the graphs for 17,000 rows, and superseded versions stayed in the graph
-- for every search to skip. Rebuild each existing index with the new predicate (same name; its model stays).
DO $$
DECLARE
    idx record;
    model text;
BEGIN
    FOR idx IN
        SELECT i.indexname, i.tablename, i.indexdef FROM pg_indexes i
        WHERE i.schemaname = current_schema() AND i.tablename IN ('sections', 'section_windows')
          AND i.indexdef LIKE '%USING hnsw%' AND i.indexdef NOT LIKE '%status%'
    LOOP
        model := substring(idx.indexdef FROM $re$embedding_model = '((?:[^']|'')*)'::text$re$);
        IF model IS NULL THEN
            RAISE EXCEPTION 'cannot read the model of HNSW index %: %', idx.indexname, idx.indexdef;
        END IF;
        EXECUTE format('DROP INDEX %I', idx.indexname);
        EXECUTE format('CREATE INDEX %I ON %I USING hnsw ((embedding::vector(%s)) vector_cosine_ops) '
                       'WHERE %I.status = ''active'' AND embedding_model = %L',
                       idx.indexname, idx.tablename,
                       substring(idx.indexdef FROM 'vector\((\d+)\)'), idx.tablename, replace(model, '''''', ''''));
    END LOOP;
END
$$;
