-- Seconds each stage of an ingest run took (parse, embed, load, check, swap; summed over the run's titles), so
-- a slow run shows where its time went and the ingest benchmark reads the same numbers operators see.
ALTER TABLE ingest_runs ADD COLUMN timings jsonb NOT NULL DEFAULT '{}'::jsonb;
