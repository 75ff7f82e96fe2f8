-- An inverted index of the weighted tsvector: one row per (lexeme, section) with that lexeme's ts_rank in the
-- section. Full-text search then reads only the postings of the question's lexemes, highest weight first,
-- instead of ranking every section that matches any of them (17k of 85k for a common word).
-- Only active versions have postings: ingest writes them in the swap transaction and deletes the superseded
-- version's (superseded text is never searched by words). status/version/title are copied from the section, like
-- section_windows, so readers filter with the one active-rows predicate and without a join.
CREATE TABLE section_lexemes (
    lexeme     text    NOT NULL,
    section_id bigint  NOT NULL REFERENCES sections (id) ON DELETE CASCADE,
    version_id bigint  NOT NULL,
    status     text    NOT NULL,
    title      integer NOT NULL,
    weight     real    NOT NULL
);
CREATE INDEX section_lexemes_postings ON section_lexemes (lexeme, weight DESC) INCLUDE (section_id)
    WHERE status = 'active';
CREATE INDEX section_lexemes_section ON section_lexemes (section_id);
CREATE INDEX section_lexemes_version ON section_lexemes (version_id);

INSERT INTO section_lexemes (lexeme, section_id, version_id, status, title, weight)
SELECT u.lexeme, s.id, s.version_id, s.status, s.title, ts_rank(s.tsv, quote_literal(u.lexeme)::tsquery, 1)
FROM sections s, unnest(s.tsv) AS u
WHERE s.status = 'active';
