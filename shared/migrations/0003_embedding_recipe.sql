-- How a version's sections were cut into embedding windows (words / stride / cap). A re-ingest reuses a stored
-- embedding only when both the section's content and this recipe are unchanged: windows cut another way are
-- different vectors. Versions written before this column existed were all cut with the then (and still)
-- default recipe.
ALTER TABLE corpus_versions ADD COLUMN embedding_recipe text;
UPDATE corpus_versions SET embedding_recipe = 'windows 150/120/24';
