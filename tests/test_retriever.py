"""Scoping (citations in every common form, title hints, heading-named subjects) and hybrid retrieval over a
real ingested corpus in real PostgreSQL+pgvector, plus the planner checks (EXPLAIN through asyncpg)."""
from __future__ import annotations

import pytest

from shared import db
from shared.citations import find_citations, normalize_ref
from shared.messages import RetrieveRequest
from shared.scoping import Catalog, CatalogEntry, scope_question


@pytest.mark.parametrize("text, expected", [
    ("What does 21 CFR 101.9(c)(1) require?", [(21, "101", "101.9", "(c)(1)")]),
    ("See 21 C.F.R. § 101.9 for labels", [(21, "101", "101.9", None)]),
    ("Under § 211.113, what controls apply?", [(None, "211", "211.113", None)]),
    ("What is section 110.80 of title 21 about?", [(21, "110", "110.80", None)]),
    ("What are the requirements in part 1301?", [(None, "1301", None, None)]),
    ("what does 7 CFR 1b.4 exclude", [(7, "1b", "1b.4", None)]),
    ("42 CFR § 406.13", [(42, "406", "406.13", None)]),
    ("title 21, section 133.142", [(21, "133", "133.142", None)]),
    ("21 CFR Part 133 and 21 CFR 1308.12(b)(1)(i)", [(21, "133", None, None), (21, "1308", "1308.12", "(b)(1)(i)")]),
    ("The 2024 rule says 45 percent", []),
])
def test_citation_forms(text, expected):
    assert [(c.title, c.part, c.section, c.paragraph) for c in find_citations(text)] == expected


def test_section_ranges_and_normalisation():
    (cite,) = find_citations("Explain §§ 205.300–205.303")
    assert (cite.section, cite.range_end) == ("205.300", "205.303")
    assert normalize_ref("§ 205.301(a)(1)", 7) == "7 CFR 205.301"
    assert normalize_ref("21 C.F.R. § 101.9(c)(1)") == "21 CFR 101.9"


def _catalog() -> Catalog:
    rows = [
        (21, "133", "133.142", "Gouda cheese"), (21, "133", "133.113", "Cheddar cheese"),
        (21, "133", "133.138", "Edam cheese"), (21, "133", "133.106", "Blue cheese"),
        (21, "131", "131.170", "Eggnog"), (21, "160", "160.180", "Egg yolks"),
        (42, "436", "436.520", "Age requirements for the aged"), (42, "406", "406.13", "Individual who has end-stage renal disease"),
        (7, "1b", "1b.4", "Exclusion of agency activities from environmental review"),
        (21, "205", "205.300", "Use of the term organic"), (21, "205", "205.301", "Product composition"),
        (21, "205", "205.303", "Packaged products labeled"),
    ]
    return Catalog([CatalogEntry(f"{t} CFR {s}", t, p, s, h) for t, p, s, h in rows])


def test_scope_resolves_citations_and_reports_missing_ones():
    catalog = _catalog()
    scope = scope_question("Compare 21 CFR 133.142(a) with § 133.113 and 21 CFR 999.1", catalog)
    assert [(c.title, c.section, c.paragraph, c.exists) for c in scope.citations] == [
        (21, "133.142", "(a)", True), (21, "133.113", None, True)]
    assert [c.raw for c in scope.missing_citations] == ["21 CFR 999.1"]
    ranged = scope_question("What do §§ 205.300–205.303 say?", catalog)
    assert [c.section for c in ranged.citations] == ["205.300", "205.301", "205.303"]


@pytest.mark.parametrize("text, expected", [
    ("what does 1306.04 say", [("1306.04", None, True)]),
    ("is 133.113(a)(2) the cheddar one?", [("133.113", "(a)(2)", True)]),
    ("see 21 CFR 1306.04 and 1306.05", [("1306.04", None, False), ("1306.05", None, True)]),
    # figures, versions, readings, dates and phone numbers are not sections
    ("I take 12.5 mg twice a day", []), ("it costs $133.50", []), ("costs 133.50 dollars", []),
    ("12.5% milkfat", []), ("98.6 degrees F", []), ("a range of 10.2-11.4", []), ("version 10.2", []),
    ("my A1C was about 10.2", []), ("dated 12.25.2025", []), ("call 555.1234", []), ("pH 4.6 or lower", []),
])
def test_bare_section_numbers_only_on_request(text, expected):
    assert [(c.section, c.paragraph, c.bare) for c in find_citations(text, bare=True)] == expected
    assert all(not c.bare for c in find_citations(text))


def test_scope_keeps_a_bare_section_number_only_when_the_corpus_holds_it():
    catalog = _catalog()
    scope = scope_question("what does 133.142 say about moisture?", catalog)
    assert [(c.title, c.section, c.exists) for c in scope.citations] == [(21, "133.142", True)]
    # a number alone that no held section has is a figure: neither cited nor reported missing
    figure = scope_question("is 133.50 too much for gouda?", catalog)
    assert figure.citations == [] and figure.missing_citations == []
    # written as a citation, the same number is a citation the corpus lacks
    assert [c.raw for c in scope_question("what does § 133.50 say?", catalog).missing_citations] == ["§ 133.50"]


def test_scope_title_hints_and_titles_not_held():
    catalog = _catalog()
    assert 42 in scope_question("When does Medicare Part B start?", catalog).titles
    assert 7 in scope_question("Can a SNAP retailer be fined?", catalog).titles
    assert 21 in scope_question("Does the FDA regulate this?", catalog).titles
    assert scope_question("What does 40 CFR 60.5 require?", catalog).unsupported_titles == [40]


def test_scope_names_the_sibling_the_question_is_about():
    catalog = _catalog()
    gouda = scope_question("How much milkfat does gouda need?", catalog)
    assert [s.cfr_refs for s in gouda.subjects] == [["21 CFR 133.142"]]
    eggnog = scope_question("How much egg yolk has to be in eggnog?", catalog)
    assert "21 CFR 131.170" in [r for s in eggnog.subjects for r in s.cfr_refs]


def _family_catalog() -> Catalog:
    """Real sibling headings of parts 133, 336 and 1308, where the family words ("cheese") name nothing."""
    rows = [
        ("133", "133.195", "Swiss and emmentaler cheese"), ("133", "133.196", "Swiss cheese for manufacturing"),
        ("133", "133.165", "Parmesan and reggiano cheese"), ("133", "133.149", "Gruyere cheese"),
        ("133", "133.169", "Pasteurized process cheese"),
        ("133", "133.170", "Pasteurized process cheese with fruits, vegetables, or meats"),
        ("133", "133.173", "Pasteurized process cheese food"),
        ("133", "133.174", "Pasteurized process cheese food with fruits, vegetables, or meats"),
        ("133", "133.124", "Cold-pack cheese food"), ("133", "133.113", "Cheddar cheese"),
        ("133", "133.142", "Gouda cheese"), ("133", "133.155", "Mozzarella cheese and scamorza cheese"),
        ("133", "133.156", "Low-moisture mozzarella and scamorza cheese"),
        ("336", "336.10", "Antiemetic active ingredients"), ("336", "336.50", "Labeling of antiemetic drug products"),
        ("336", "336.80", "Professional labeling"), ("336", "336.1", "Scope"),
        ("1308", "1308.11", "Schedule I"), ("1308", "1308.12", "Schedule II"), ("1308", "1308.15", "Schedule V"),
        ("1308", "1308.49", "Temporary scheduling"),
    ]
    return Catalog([CatalogEntry(f"21 CFR {s}", 21, p, s, h) for p, s, h in rows])


@pytest.mark.parametrize("question, first, others", [
    # the general standard, named in full by one of its alternative names, before the narrower one
    ("How old does Swiss cheese have to be, and how much fat?", "21 CFR 133.195", {"21 CFR 133.196"}),
    ("Max moisture allowed in parmesan?", "21 CFR 133.165", set()),
    ("What's the minimum age for gruyere?", "21 CFR 133.149", set()),
    # the longest heading named in full ("food" included), not the shorter one it contains
    ("Pasteurized process cheese food: moisture and fat limits?", "21 CFR 133.173", {"21 CFR 133.174"}),
    ("What moisture range does regular mozzarella have to fall in?", "21 CFR 133.155", {"21 CFR 133.156"}),
    # "ingredients" names the OTC "active ingredients" section
    ("Which ingredients are allowed in OTC motion sickness (antiemetic) products?", "21 CFR 336.10",
     {"21 CFR 336.50"}),
    ("Is psilocybin still Schedule I?", "21 CFR 1308.11", set()),
])
def test_scope_ranks_the_sibling_the_question_names_in_full_first(question, first, others):
    scope = scope_question(question, _family_catalog())
    ranked = sorted(((c, r) for s in scope.subjects for r, c in zip(s.cfr_refs, s.coverage)), reverse=True)
    assert ranked and ranked[0][1] == first, scope.subjects
    coverage = {r: c for c, r in ranked}
    assert all(coverage.get(r, 0.0) < coverage[first] for r in others), scope.subjects
    assert "21 CFR 1308.12" not in {r for _, r in ranked}  # "Schedule I" is not "Schedule II"


def test_scope_specific_only_for_a_full_name():
    scope = scope_question("How old does Swiss cheese have to be?", _family_catalog())
    specific = {r for s in scope.subjects if s.specific for r in s.cfr_refs}
    assert specific == {"21 CFR 133.195"}


# ------------------------------------------------------------------------------------------------
# against the real store
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
async def searcher(settings, corpus):
    from services.retriever.search import Searcher

    pool = await db.create_pool(settings.database_url, max_size=4)
    yield Searcher(pool, settings)
    await pool.close()


async def test_a_named_sibling_lands_first_in_every_mode(searcher):
    for mode in ("hybrid", "dense", "fulltext"):
        result = await searcher.search(RetrieveRequest(question="What is the minimum milkfat for gouda?", mode=mode))
        assert result.hits[0].cfr_ref == "21 CFR 133.142", mode
        assert "subject" in result.hits[0].matched_by


async def test_a_rare_name_the_embedding_model_does_not_know_still_names_its_section(searcher):
    # MiniLM puts "asiago old"'s own section far from a question on its curing (0.21), below the floor a heading
    # word matched by accident must clear; a rare name's floor is lower (heldout32, blind)
    result = await searcher.search(RetrieveRequest(
        question="To call our wheel 'asiago old' instead of medium, how long does it have to cure and what's the "
                 "moisture ceiling?"))
    assert not any("set aside" in note for note in result.scope.notes), result.scope.notes
    top = {h.cfr_ref: h for h in result.hits[:3]}
    assert "21 CFR 133.104" in top and "subject" in top["21 CFR 133.104"].matched_by
    assert top["21 CFR 133.104"].similarity < 0.30


async def test_hits_carry_similarity_ranks_and_metadata(searcher):
    result = await searcher.search(RetrieveRequest(question="When can someone with kidney failure get Medicare?",
                                                   top_k=5))
    assert len(result.hits) == 5 and result.top_k == 5
    assert [h.rank for h in result.hits] == [1, 2, 3, 4, 5]
    assert len({h.cfr_ref for h in result.hits}) == 5  # one hit per section
    assert result.hits[0].cfr_ref == "42 CFR 406.13"
    for hit in result.hits:
        assert hit.similarity is not None and -1 <= hit.similarity <= 1
        assert hit.status == "active" and hit.text and hit.version_id
    assert result.hits[0].score >= result.hits[-1].score


async def test_cited_sections_come_first_even_when_the_words_point_elsewhere(searcher):
    result = await searcher.search(RetrieveRequest(question="Tell me about gouda under 7 CFR 1b.4"))
    assert result.hits[0].cfr_ref == "7 CFR 1b.4"
    assert "citation" in result.hits[0].matched_by


async def test_scoping_off_and_bad_input(searcher):
    plain = await searcher.search(RetrieveRequest(question="What does 21 CFR 133.142 say?", scoping=False))
    assert plain.scope.citations == []
    empty = await searcher.search(RetrieveRequest(question="?!"))
    assert empty.hits == [] and empty.empty_reason
    huge = await searcher.search(RetrieveRequest(question="cheese " * 5000))
    assert huge.hits


async def test_searching_with_another_embedding_model_is_a_clear_error(settings, corpus):
    from services.retriever.search import Searcher, SearchError

    class OtherModel:
        model_name = "some-other-model"
        dim = 384

    pool = await db.create_pool(settings.database_url, max_size=2)
    try:
        with pytest.raises(SearchError, match="embedded with"):
            await Searcher(pool, settings, embedder=OtherModel()).catalog()
    finally:
        await pool.close()


async def test_a_changed_corpus_is_picked_up_in_the_background_while_the_old_catalog_serves(settings, corpus,
                                                                                             monkeypatch):
    import asyncio

    from services.retriever.search import Searcher

    pool = await db.create_pool(settings.database_url, max_size=2)
    try:
        searcher = Searcher(pool, settings)
        first = await searcher.catalog()
        release = asyncio.Event()
        real_rows = db.catalog_rows

        async def slow_rows(conn):
            await release.wait()  # a slow rebuild, as at 85,000 sections
            rows = await real_rows(conn)
            return rows[: len(rows) // 2]

        monkeypatch.setattr(db, "catalog_rows", slow_rows)
        monkeypatch.setattr(db, "active_signature", lambda conn: _signature_changed())
        searcher._checked_at = 0.0
        assert await asyncio.wait_for(searcher.catalog(), 1.0) is first  # no stall: the old one serves
        result = await asyncio.wait_for(searcher.search(RetrieveRequest(question="minimum milkfat for gouda?")), 10)
        assert result.hits  # searches go on meanwhile
        release.set()
        await asyncio.wait_for(searcher._reloading, 10)
        assert len((await searcher.catalog()).entries) == len(first.entries) // 2
    finally:
        await pool.close()


async def _signature_changed():
    return ("changed",)


async def test_dense_query_plan_uses_the_partial_hnsw_index_even_as_a_prepared_statement(searcher, settings):
    """pgvector traps: a parameterised model name would not match the partial index; a generic plan of a
    prepared statement must still use it. Checked with EXPLAIN through asyncpg."""
    embedder = searcher.embedder
    vector = embedder.embed_queries(["milkfat in cheese"])[0]
    dim = len(vector)
    model = embedder.model_name
    sql = (f"SELECT w.section_id FROM section_windows w WHERE {db.active_rows('w')} AND w.embedding_model = "
           f"{db.sql_literal(model)} ORDER BY w.embedding::vector({dim}) <=> $1::vector({dim}) LIMIT 40")
    conn = await db.connect(settings.database_url)
    try:
        await conn.execute("ANALYZE section_windows")
        # the test corpus is small, so a scan + sort is cheapest: ask whether the planner CAN use the index
        await conn.execute("SET enable_seqscan = off")
        await conn.execute("SET enable_bitmapscan = off")
        await conn.execute("SET plan_cache_mode = force_generic_plan")
        plan = "\n".join(r[0] for r in await conn.fetch("EXPLAIN " + sql, vector))
        assert db.vector_index_name("section_windows", model, dim) in plan, plan
        statement = await conn.prepare("EXPLAIN " + sql)
        generic = "\n".join(r[0] for r in await statement.fetch(vector))
        assert db.vector_index_name("section_windows", model, dim) in generic, generic
    finally:
        await conn.close()


async def test_hnsw_returns_as_many_rows_as_asked_under_the_active_filter(searcher, settings):
    """Without iterative scans an HNSW scan stops at ef_search candidates (40 by default) whatever the LIMIT;
    the production query must return the LIMIT it asks for."""
    embedder = searcher.embedder
    vector = embedder.embed_queries(["milkfat in cheese"])[0]
    conn = await db.connect(settings.database_url)
    try:
        active = await conn.fetchval(f"SELECT count(*) FROM section_windows w WHERE {db.active_rows('w')}")
        await conn.execute("SET enable_seqscan = off")
        await conn.execute("SET enable_bitmapscan = off")
        rows = await db.dense_window_search(conn, vector, embedder.model_name, len(vector), 240, ef_search=40)
        sections = await conn.fetchval(
            f"SELECT count(DISTINCT section_id) FROM (SELECT section_id FROM section_windows w WHERE "
            f"{db.active_rows('w')} ORDER BY w.embedding::vector({len(vector)}) <=> $1::vector({len(vector)}) "
            f"LIMIT {min(240, active)}) x", vector)
        assert len(rows) >= 0.9 * sections
    finally:
        await conn.close()


@pytest.mark.parametrize("question, names", [
    ("Is there an FDA standard for Greek yogurt — like a minimum protein content it has to hit?", ["Greek yogurt"]),
    ("Does FDA have a standard of identity for feta? Looking for the minimum milkfat.", ["feta"]),
    ('Our bakery wants to call a loaf "multigrain." Is there a federal rule for it?', ["multigrain"]),
    ('What makes a yogurt legally "Greek"?', ["yogurt", "Greek"]),
    ("We strain our yogurt and want to call it Greek yogurt. What protein does it need?", ["Greek yogurt"]),
    ("What's the minimum oil content before I can't call it mayonnaise anymore?", ["mayonnaise"]),
    ("What are we allowed to call it on the carton?", []),
    ("minimum almond content to call a product almond butter", ["almond butter"]),
    ("Does feta cheese have an FDA standard of identity?", []),
])
def test_the_food_a_question_asks_the_standard_of_is_a_name_to_check(question, names):
    from shared.scoping import defined_names

    assert defined_names(question) == names


def test_question_names_are_proper_names_and_acronyms():
    from shared.scoping import question_names

    assert question_names("What are the income limits for the Medicare Savings Programs like QMB?") == [
        "Medicare Savings Programs", "QMB"]
    assert question_names("Is alprazolam (Xanax) a Schedule IV drug?") == []  # a numeral is not a name
    assert question_names("How do I ask the Office of National Drug Control Policy for its records?") == [
        "Office of National Drug Control Policy"]
    # an agency's acronym before a name is the agency's, not part of the name; before one word, or after, it is
    assert question_names("Does the FDA Salmonella Enteritidis egg rule apply to a 2,500-hen farm?") == [
        "Salmonella Enteritidis", "FDA"]
    assert question_names("Who is the current FDA Commissioner?") == ["FDA Commissioner"]
    assert question_names("How much diphenhydramine is in one Tylenol PM caplet?") == ["Tylenol PM"]


async def test_names_no_active_section_mentions_are_reported(searcher):
    result = await searcher.search(RetrieveRequest(question="What does HIPAA say about Social Security benefits?"))
    assert sorted(result.scope.names) == ["HIPAA", "Social Security"]
    assert result.scope.absent_names == ["HIPAA"]
    assert any("HIPAA" in note for note in result.scope.notes)


def test_the_cfrs_old_spellings_are_matched():
    catalog = Catalog([CatalogEntry("21 CFR 168.140", 21, "168", "168.140", "Maple sirup"),
                       CatalogEntry("21 CFR 168.110", 21, "168", "168.110", "Dextrose anhydrous")])
    scope = scope_question("What's the minimum sugar solids for maple syrup?", catalog)
    assert [r for s in scope.subjects for r in s.cfr_refs] == ["21 CFR 168.140"]


def test_a_heading_named_as_the_measured_attribute_is_not_the_subject():
    catalog = Catalog([CatalogEntry(f"21 CFR {s}", 21, "163", s, h) for s, h in [
        ("163.111", "Chocolate liquor"), ("163.130", "Milk chocolate"), ("163.123", "Sweet chocolate"),
        ("163.124", "White chocolate"), ("163.135", "Buttermilk chocolate"), ("163.140", "Skim milk chocolate")]])
    scope = scope_question("How much chocolate liquor does milk chocolate have to contain?", catalog)
    coverage = {r: c for s in scope.subjects for r, c in zip(s.cfr_refs, s.coverage)}
    assert coverage["21 CFR 163.130"] > coverage["21 CFR 163.111"]
    assert not any(s.specific for s in scope.subjects if "21 CFR 163.111" in s.cfr_refs)
    # named alone, the same heading is the subject
    alone = scope_question("What is chocolate liquor?", catalog)
    assert [r for s in alone.subjects for r in s.cfr_refs][:1] == ["21 CFR 163.111"]


async def test_a_result_list_can_leave_the_section_text_out(searcher):
    question = "How much milkfat does gouda need?"
    full = await searcher.search(RetrieveRequest(question=question))
    bare = await searcher.search(RetrieveRequest(question=question, include_text=False))
    assert [h.cfr_ref for h in bare.hits] == [h.cfr_ref for h in full.hits] and full.hits[0].text
    assert all(h.text == "" and h.paragraphs == [] and h.heading for h in bare.hits)
    assert len(bare.model_dump_json()) < len(full.model_dump_json()) / 3


async def test_a_variety_the_corpus_has_no_standard_for_is_reported_absent(searcher):
    feta = await searcher.search(RetrieveRequest(question="Does feta cheese have a standard, and how much milkfat?"))
    assert "feta" in feta.scope.names and feta.scope.absent_names == ["feta"]
    gouda = await searcher.search(RetrieveRequest(question="How much milkfat does gouda cheese need?"))
    assert "gouda" in gouda.scope.names and gouda.scope.absent_names == []
    assert "chees" in (await searcher.catalog()).variety_heads


@pytest.mark.parametrize("question, programs", [
    ("What's the SNAP gross monthly income limit for a household of four?",
     ["SNAP household eligibility (income and resource limits, students, work rules, benefit amounts)"]),
    ("Can a SNAP retailer be fined instead of disqualified?", ["SNAP"]),
    ("What is the Medicare Part D late enrollment penalty?", ["Medicare Part D (prescription drug coverage)"]),
    ("Is my kid eligible for CHIP?", ["CHIP (the Children's Health Insurance Program)"]),
    # words that only look like a program name
    ("Can potato chips be labeled low fat?", []),
    ("What organic solvents may remain in a drug product?", []),
    ("Which OTC smoking deterrent ingredients were found not effective for quitting cigarettes?", []),
])
def test_scope_names_the_program_a_question_is_about(question, programs):
    catalog = Catalog([CatalogEntry("7 CFR 278.6", 7, "278", "278.6", "Disqualification of retail food stores"),
                       CatalogEntry("42 CFR 407.47", 42, "407", "407.47", "Enrollment penalty")])
    scope = scope_question(question, catalog)
    assert [p.name for p in scope.programs] == programs
    assert all(p.held == (p.name == "SNAP") for p in scope.programs)


async def test_coverage_counts_the_questions_words_a_section_holds_by_where_it_holds_them(searcher):
    question = "What is the milkfat content of gouda cheese?"
    await searcher.catalog()  # the document frequencies the shares are weighted by
    async with searcher.pool.acquire() as conn:
        ids = await db.active_ids_for_refs(conn, ["21 CFR 133.142", "7 CFR 1b.4"])
        lexemes = await db.question_lexemes(conn, question)
        coverage = await searcher.coverage(conn, list(ids.values()), lexemes)
        # a word the corpus does not have tells no section from another: it changes no share
        assert await searcher.coverage(conn, list(ids.values()), lexemes + ["zzznotaword"]) == coverage
    gouda_text, gouda_hierarchy, gouda_heading = coverage[ids["21 CFR 133.142"]]
    nepa_text, nepa_hierarchy, nepa_heading = coverage[ids["7 CFR 1b.4"]]
    assert gouda_text == pytest.approx(1.0) and nepa_text < 0.3  # milkfat, content, gouda, cheese: all in its text
    assert 0 < gouda_heading < gouda_text and nepa_heading == 0  # "Gouda cheese" holds two of the words
    assert gouda_hierarchy > 0 and nepa_hierarchy == 0  # "cheese" is in part 133's heading, not in part 1b's


async def test_the_second_stage_adds_coverage_and_subject_to_the_normalised_fused_score(searcher):
    from services.retriever.search import FusionWeights, Searcher

    question = "What is the moisture limit for cheddar cheese and how is it measured?"
    plain = Searcher(searcher.pool, searcher.settings,
                     weights=FusionWeights(text_coverage=0, hierarchy_coverage=0, rerank_subject=0))
    first = await plain.search(RetrieveRequest(question=question, top_k=20, include_text=False))
    second = await searcher.search(RetrieveRequest(question=question, top_k=20, include_text=False))
    w = searcher.weights
    assert (w.text_coverage, w.hierarchy_coverage, w.rerank_subject) != (0, 0, 0)
    async with searcher.pool.acquire() as conn:
        ids = await db.active_ids_for_refs(conn, [h.cfr_ref for h in first.hits])
        coverage = await searcher.coverage(conn, list(ids.values()), await db.question_lexemes(conn, question))
    best = first.hits[0].score
    expected = {h.cfr_ref: h.score / best + w.text_coverage * coverage[ids[h.cfr_ref]][0]
                + w.hierarchy_coverage * coverage[ids[h.cfr_ref]][1] + w.rerank_subject * ("subject" in h.matched_by)
                for h in first.hits}
    assert {h.cfr_ref for h in second.hits} == set(expected)
    for hit in second.hits:
        assert hit.score == pytest.approx(expected[hit.cfr_ref], abs=1e-5)
    assert [h.score for h in second.hits] == sorted((h.score for h in second.hits), reverse=True)
    assert second.hits[0].cfr_ref == "21 CFR 133.113"


def test_everyday_words_are_also_searched_in_the_cfrs_words():
    from shared.scoping import cfr_wording

    assert cfr_wording("What's the copay at the ER for my kid?") == ["cost sharing", "emergency department",
                                                                     "child children"]
    assert cfr_wording("How much Sudafed can I buy?") == ["pseudoephedrine"]
    assert cfr_wording("What is the premium for Part A?") == []
    assert cfr_wording("Is a fine imposed?") == ["civil money penalty"]
    assert cfr_wording("Can I refine the process?") == []  # whole words only


async def test_the_search_reads_the_cfrs_words_for_everyday_ones(searcher):
    result = await searcher.search(RetrieveRequest(question="When can I sign up for premium-free hospital insurance?"))
    assert "also searched for: enroll enrollment" in result.scope.notes
    off = await searcher.search(RetrieveRequest(question="When can I sign up for premium-free hospital insurance?",
                                                scoping=False))
    assert not any(n.startswith("also searched for") for n in off.scope.notes)


def test_common_drug_brands_are_searched_by_the_generic_names_the_schedules_use():
    from shared.scoping import cfr_wording

    assert cfr_wording("Can my Klonopin be refilled?") == ["clonazepam"]
    assert cfr_wording("Is Ritalin schedule II?") == ["methylphenidate"]
    assert cfr_wording("Sonata the musical form") == []  # the brand only in a drug context


def test_a_hyphened_word_describing_a_thing_is_not_a_variety_name():
    names = ("Gouda", "Cheddar", "Edam", "Blue", "Colby", "Swiss", "Brick", "Muenster", "Cold-pack")
    catalog = Catalog([CatalogEntry(f"21 CFR 133.{100 + i}", 21, "133", f"133.{100 + i}", f"{n} cheese")
                       for i, n in enumerate(names)])  # "cheese" heads many headings: a variety head
    assert "feta" in catalog.variety_words("Is there a standard for feta cheese?")
    assert "cold-pack" in catalog.variety_words("What goes into cold-pack cheese?")
    for question in ("Is a skin-lightening cheese wash allowed?", "Can a reduced-sodium cheese be sold?",
                     "Is sugar-free cheese a thing?"):
        assert catalog.variety_words(question) == [], question
