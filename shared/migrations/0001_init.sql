-- regs schema v1: versioned CFR sections, their embedding windows, corpus versions and ingest runs.
CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE corpus_versions (
    version_id      bigserial PRIMARY KEY,
    title           integer     NOT NULL,
    status          text        NOT NULL CHECK (status IN ('staged', 'active', 'superseded', 'failed')),
    source          text        NOT NULL,
    source_date     text,
    embedding_model text        NOT NULL,
    embedding_dim   integer     NOT NULL,
    section_count   integer     NOT NULL DEFAULT 0,
    run_id          text,
    checks          jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at      timestamptz NOT NULL DEFAULT now(),
    activated_at    timestamptz,
    superseded_at   timestamptz
);
-- at most one active and one staged version per title
CREATE UNIQUE INDEX corpus_versions_one_active ON corpus_versions (title) WHERE status = 'active';
CREATE UNIQUE INDEX corpus_versions_one_staged ON corpus_versions (title) WHERE status = 'staged';

CREATE TABLE ingest_runs (
    run_id      text PRIMARY KEY,
    title       integer,
    source      text        NOT NULL,
    parts       text[],
    state       text        NOT NULL CHECK (state IN ('queued', 'running', 'succeeded', 'failed')),
    message     text        NOT NULL DEFAULT '',
    error       text,
    counts      jsonb       NOT NULL DEFAULT '{}'::jsonb,
    done        integer     NOT NULL DEFAULT 0,
    total       integer     NOT NULL DEFAULT 0,
    version_ids bigint[]    NOT NULL DEFAULT '{}',
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);
-- a duplicate concurrent ingest of one title is refused by a per-title advisory lock (released if the
-- ingesting process dies), not by this table
CREATE INDEX ingest_runs_started ON ingest_runs (started_at DESC);

CREATE TABLE sections (
    id               bigserial PRIMARY KEY,
    version_id       bigint  NOT NULL REFERENCES corpus_versions (version_id) ON DELETE CASCADE,
    status           text    NOT NULL CHECK (status IN ('staged', 'active', 'superseded', 'failed')),
    title            integer NOT NULL,
    chapter          text,
    subchapter       text,
    part             text    NOT NULL,
    part_heading     text,
    subpart          text,
    subject_group    text,
    section          text    NOT NULL,
    kind             text    NOT NULL DEFAULT 'section' CHECK (kind IN ('section', 'appendix')),
    heading          text    NOT NULL,
    agency           text,
    cfr_ref          text    NOT NULL,
    text             text    NOT NULL,
    paragraphs       jsonb   NOT NULL DEFAULT '[]'::jsonb,
    source_note      text,
    editorial_notes  jsonb   NOT NULL DEFAULT '[]'::jsonb,
    reserved         boolean NOT NULL DEFAULT false,
    removed          boolean NOT NULL DEFAULT false,
    content_hash     text    NOT NULL,
    source           text    NOT NULL,
    source_date      text,
    embedding        vector,
    embedding_model  text,
    tsv              tsvector GENERATED ALWAYS AS (
        setweight(to_tsvector('english', coalesce(heading, '')), 'A') ||
        setweight(to_tsvector('english', coalesce(part_heading, '') || ' ' || coalesce(subpart, '') || ' ' ||
                                         coalesce(subject_group, '')), 'B') ||
        setweight(to_tsvector('english', coalesce(text, '')), 'D')
    ) STORED,
    UNIQUE (version_id, cfr_ref)
);
CREATE INDEX sections_status_title_part_section ON sections (status, title, part, section);
CREATE INDEX sections_tsv ON sections USING gin (tsv);
CREATE INDEX sections_cfr_ref ON sections (cfr_ref, status);
CREATE INDEX sections_hash ON sections (content_hash);

-- Long sections are embedded as several overlapping windows; a section scores as its best window.
-- status and embedding_model are copied here so the HNSW scan can filter without a join.
CREATE TABLE section_windows (
    section_id      bigint  NOT NULL REFERENCES sections (id) ON DELETE CASCADE,
    version_id      bigint  NOT NULL,
    status          text    NOT NULL,
    title           integer NOT NULL,
    window_no       integer NOT NULL,
    embedding_model text    NOT NULL,
    embedding       vector  NOT NULL,
    PRIMARY KEY (section_id, window_no)
);
CREATE INDEX section_windows_status ON section_windows (status, title);
