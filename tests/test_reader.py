"""The scorer's answer reader (a local cross-encoder over the handed sections' passages) and the pre-gate step
that refuses when no passage reads as an answer. Real model, real retrievals of the shipped corpus
(tests/data/reader_cases.json: what the production retriever returned for these eval questions)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from shared.config import Settings
from shared.messages import Hit, PreGateRequest, RetrieveResult
from services.scorer.confidence import ScorerThresholds
from services.scorer.gates import pre_gate
from services.scorer.reader import AnswerReader, closest_passages, passages, shared_reader
from services.scorer.service import Scorer
from services.scorer.support import split_sentences

CASES = json.loads((Path(__file__).parent / "data" / "reader_cases.json").read_text())["cases"]


def case(name: str) -> tuple[str, RetrieveResult]:
    c = CASES[name]
    return c["question"], RetrieveResult.model_validate(c["retrieval"])


@pytest.fixture(scope="module")
def reader() -> AnswerReader:
    return shared_reader()


def hit_of(retrieval: RetrieveResult, ref: str) -> Hit:
    return next(h for h in retrieval.hits if h.cfr_ref == ref)


def test_passages_carry_the_heading_and_overlap_by_one_sentence():
    _, retrieval = case("shell_eggs_answered")
    hit = retrieval.hits[0]
    windows = passages(hit, max_words=40)
    assert len(windows) > 1
    assert all(w.startswith(f"{hit.cfr_ref} {hit.heading}: ") for w in windows)
    bodies = [w.split(": ", 1)[1] for w in windows]
    sentences = split_sentences(hit.text)
    for a, b in zip(bodies, bodies[1:]):  # the sentence at each seam is in both windows
        assert any(a.endswith(x) and b.startswith(x) for x in sentences), (a[-80:], b[:80])
    assert all(any(x in b for b in bodies) for x in sentences)  # nothing of the section is left unread
    empty = hit.model_copy(update={"text": ""})
    assert passages(empty) == [f"{hit.cfr_ref} {hit.heading}"]


def test_only_the_passages_sharing_most_question_words_are_read():
    question, retrieval = case("shell_eggs_answered")
    hit = max(retrieval.hits, key=lambda h: len(passages(h)))
    every = passages(hit)
    assert len(every) > 4
    chosen = closest_passages(question, hit, 4)
    assert len(chosen) == 4 and chosen == [p for p in every if p in chosen]  # in the section's order
    eggs = hit_of(retrieval, "21 CFR 115.50")
    assert len(passages(eggs)) > 4 and any("45 °F" in p for p in closest_passages(question, eggs, 4))


def test_a_held_subject_that_does_not_state_the_fact_is_refused_as_not_found(reader):
    # DEA registration of bulk manufacturers is held; which companies hold one is stated nowhere: the rules see
    # well-matched sections, reading them shows none names a grower
    question, retrieval = case("dea_marijuana_growers_not_stated")
    without = pre_gate(question, retrieval)
    assert without.proceed  # every rule lets it through
    res = pre_gate(question, retrieval, reader=reader)
    assert not res.proceed and res.refusal.reason == "not_found"
    assert res.refusal.message.startswith("The best-matching sections (")
    assert "none of them states an answer to “Which companies are currently registered with DEA" in res.refusal.message
    first = res.refusal.evidence[0]
    assert first.cfr_ref in [h.cfr_ref for h in without.sections[:3]]
    assert first.detail.startswith("closest passage, read as an answer with probability 0.")
    assert f"(below {ScorerThresholds().reader_min_probability:.2f})" in first.detail
    assert first.version_id and first.source_date and first.status == "active"
    assert res.signals["answer_probability"] < ScorerThresholds().reader_min_probability


def test_a_question_a_passage_answers_proceeds_with_the_same_sections(reader):
    question, retrieval = case("parmesan_aging_answered")  # cured not less than 10 months: 21 CFR 133.165
    without = pre_gate(question, retrieval)
    res = pre_gate(question, retrieval, reader=reader)
    assert res.proceed, res.refusal
    assert [h.cfr_ref for h in res.sections] == [h.cfr_ref for h in without.sections]
    assert res.signals["answer_probability"] >= ScorerThresholds().reader_min_probability
    # the passage that states the answer reads as one on its own (the reader's best passage of the three sections
    # may be another: a "How long is the certification period" passage of 7 CFR 247.16 reads higher, eval/README.md
    # "Session 9")
    parmesan = next(h for h in res.sections if h.cfr_ref == "21 CFR 133.165")
    answering = [p for p in passages(parmesan) if "10 months" in p]
    assert answering and max(reader.probabilities(question, answering)) >= ScorerThresholds().reader_min_probability


def test_the_thresholds_are_what_decide(reader):
    question, retrieval = case("parmesan_aging_answered")
    p = pre_gate(question, retrieval, reader=reader).signals["answer_probability"]
    strict = ScorerThresholds(reader_min_probability=min(1.0, p + 0.01))
    assert pre_gate(question, retrieval, strict, reader=reader).refusal.reason == "not_found"
    # with a relevance bound, a question whose words and meaning match at least that well is not read at all
    question, retrieval = case("shell_eggs_answered")
    relevance = pre_gate(question, retrieval).signals["relevance"]
    bounded = ScorerThresholds(reader_max_relevance=relevance, reader_min_probability=1.0)
    res = pre_gate(question, retrieval, bounded, reader=reader)
    assert res.proceed and "answer_probability" not in res.signals
    read_all = ScorerThresholds(reader_min_probability=1.0, reader_max_relevance=None)
    assert pre_gate(question, retrieval, read_all, reader=reader).refusal.reason == "not_found"


def test_a_cited_section_is_read_as_asked_without_the_reader(reader):
    question, retrieval = case("cited_section_read_as_asked")  # "... what does 1306.04 say"
    res = pre_gate(question, retrieval, reader=reader)
    assert res.proceed and res.sections[0].cfr_ref == "21 CFR 1306.04"
    assert "answer_probability" not in res.signals


def test_reader_scores_the_answering_passage_above_an_unrelated_one(reader):
    question, retrieval = case("shell_eggs_answered")
    answering = reader.read(question, [retrieval.hits[0]]).probability
    _, other = case("dea_marijuana_growers_not_stated")
    unrelated = reader.read(question, [other.hits[0]]).probability
    assert answering > ScorerThresholds().reader_min_probability > unrelated


def test_the_readers_read_together_give_a_passage_the_lowest_of_their_probabilities(reader):
    from services.scorer.reader import WEIGHTS

    question, retrieval = case("shell_eggs_answered")
    texts = closest_passages(question, retrieval.hits[0], 4)
    each = reader.each_probabilities(question, texts)
    assert len(reader.models) == len(each) == len(WEIGHTS) == 2
    assert reader.probabilities(question, texts) == [min(ps) for ps in zip(*each)]
    assert each[0] != each[1]  # two readers, not one read twice
    assert AnswerReader(WEIGHTS[1]).probabilities(question, texts) == pytest.approx(each[1], abs=1e-6)


@pytest.mark.parametrize("name", ["shell_eggs_answered", "dea_marijuana_growers_not_stated"])
def test_reading_with_both_readers_finds_the_passage_reading_every_passage_would(reader, name):
    """``read`` asks the second reader only about the passages the first puts above the best so far; the answer is
    the one reading every passage with both gives."""
    question, retrieval = case(name)
    sections = retrieval.hits[:3]
    texts = [(h.cfr_ref, p) for h in sections for p in closest_passages(question, h, 4)]
    every = reader.probabilities(question, [p for _, p in texts])
    best = max(range(len(texts)), key=every.__getitem__)
    reading = reader.read(question, sections, 4)
    assert reading.probability == pytest.approx(every[best], abs=1e-5)
    assert (reading.cfr_ref, reading.passage) == texts[best]


def test_the_strict_reader_refuses_a_well_matched_question_no_passage_answers(reader):
    # "the maximum sodium in canned tomato juice" matches the tomato juice standard in every word (relevance above
    # the bound: the two readers are not asked); the standard allows salt and states no sodium limit
    question, retrieval = case("tomato_juice_sodium_not_stated")
    th = ScorerThresholds()
    without = pre_gate(question, retrieval)
    assert without.proceed and without.signals["relevance"] >= th.reader_max_relevance
    assert without.sections[0].cfr_ref == "21 CFR 156.145"
    res = pre_gate(question, retrieval, reader=reader)
    assert not res.proceed and res.refusal.reason == "not_found"
    assert "answer_probability" not in res.signals
    assert res.signals["strict_answer_probability"] < th.reader_strict_min_probability
    detail = res.refusal.evidence[0].detail
    assert detail.startswith("closest passage, read as an answer by the strict reader with probability 0.0")
    assert f"(below {th.reader_strict_min_probability:.2f})" in detail
    # its answerable twin (the soluble solids of juice from concentrate, which the standard states) proceeds
    question, retrieval = case("tomato_juice_solids_answered")
    res = pre_gate(question, retrieval, reader=reader)
    assert res.proceed, res.refusal
    assert res.signals["strict_answer_probability"] >= th.reader_strict_min_probability
    # the threshold decides, and without a strict reader only the two readers' rule is left
    _, retrieval = case("tomato_juice_sodium_not_stated")
    lenient = ScorerThresholds(reader_strict_min_probability=0.0)
    assert pre_gate("What's the maximum sodium allowed in canned tomato juice?", retrieval, lenient,
                    reader=reader).proceed


def test_the_strict_reader_is_optional_and_reads_what_the_two_read(reader):
    from services.scorer.reader import STRICT_WEIGHTS, WEIGHTS

    question, retrieval = case("tomato_juice_sodium_not_stated")
    sections = retrieval.hits[:3]
    assert AnswerReader(WEIGHTS, strict=None).read_strict(question, sections) is None
    strict = reader.read_strict(question, sections)
    texts = [p for h in sections for p in closest_passages(question, h, 4)]
    alone = AnswerReader(STRICT_WEIGHTS, strict=None).probabilities(question, texts)
    assert strict.probability == pytest.approx(max(alone), abs=1e-5)
    assert strict.passage in texts


def test_weights_that_do_not_fit_the_base_model_are_a_clear_error(tmp_path):
    import torch
    from safetensors.torch import save_file

    bogus = tmp_path / "bogus.safetensors"
    save_file({"not.a.bert.tensor": torch.zeros(2)}, str(bogus))
    with pytest.raises(ValueError, match="do not fit all-MiniLM-L6-v2"):
        AnswerReader(bogus)
    with pytest.raises(FileNotFoundError, match="answer reader weights not found"):
        AnswerReader(tmp_path / "missing.safetensors")


async def test_scorer_asks_the_reader_unless_it_is_switched_off(reader):
    from prometheus_client import REGISTRY

    question, retrieval = case("dea_marijuana_growers_not_stated")
    seen = REGISTRY.get_sample_value("regs_answer_reader_probability_count") or 0.0
    on = await Scorer(Settings(), reader=reader).pre(PreGateRequest(question=question, retrieval=retrieval))
    assert on.refusal is not None and on.refusal.reason == "not_found"
    assert REGISTRY.get_sample_value("regs_answer_reader_probability_count") == seen + 1
    assert REGISTRY.get_sample_value("regs_answer_reader_probability_bucket", {"le": "0.22"}) >= 1
    off_scorer = Scorer(Settings(answer_reader=False))
    assert off_scorer.answer_reader() is None
    assert (await off_scorer.pre(PreGateRequest(question=question, retrieval=retrieval))).proceed
    # the thresholds follow the settings
    assert Scorer(Settings(reader_min_probability=0.0)).thresholds.reader_min_probability == 0.0
    assert Scorer(Settings(reader_strict_min_probability=0.3)).thresholds.reader_strict_min_probability == 0.3
    # the strict reader's reading is counted too
    strict_seen = REGISTRY.get_sample_value("regs_strict_reader_probability_count") or 0.0
    question, retrieval = case("tomato_juice_sodium_not_stated")
    res = await Scorer(Settings(), reader=reader).pre(PreGateRequest(question=question, retrieval=retrieval))
    assert res.refusal is not None and res.refusal.reason == "not_found"
    assert REGISTRY.get_sample_value("regs_strict_reader_probability_count") == strict_seen + 1
    assert REGISTRY.get_sample_value("regs_strict_reader_probability_bucket", {"le": "0.1"}) >= 1


def test_training_pairs_label_fact_passages_positive_and_the_rest_negative():
    from eval.train_reader import training_pairs

    q_eggs, eggs = case("shell_eggs_answered")
    q_caf, caffeine = case("dea_marijuana_growers_not_stated")
    q_rx, cited = case("cited_section_read_as_asked")
    rows = [
        {"question": q_eggs, "kind": "fact", "gold": ["21 CFR 115.50"], "facts": ["not greater than 7.2 °C (45 °F)"],
         "sections": eggs.hits[:3], "gold_hits": [hit_of(eggs, "21 CFR 115.50")]},
        {"question": q_caf, "kind": "not_found", "gold": [], "facts": [], "sections": caffeine.hits[:3], "gold_hits": []},
        {"question": q_rx, "kind": "citation", "gold": ["21 CFR 1306.04"], "facts": ["issued for a legitimate medical purpose"],
         "sections": cited.hits[:2], "gold_hits": [hit_of(cited, "21 CFR 1306.04")]},
    ]
    pairs = training_pairs(rows)
    eggs_pos = [p for q, p, label in pairs if q == q_eggs and label == 1]
    assert eggs_pos and all("45 °F" in p for p in eggs_pos)
    caf = [(p, label) for q, p, label in pairs if q == q_caf]
    assert len(caf) == sum(min(2, len(passages(h))) for h in caffeine.hits[:3])  # two of each of three sections
    assert not any(label for _, label in caf)
    eggs_neg = [p for q, p, label in pairs if q == q_eggs and label == 0]
    assert any(p.startswith("21 CFR 1306.04") for p in eggs_neg)  # another question's answer, another part
    assert not any(p.startswith("21 CFR 115.50") for p in eggs_neg)
    # with the fact-removed negatives (below), the gold section is a negative only without its answer
    with_removed = [p for q, p, label in training_pairs(rows, fact_removed=True) if q == q_eggs and label == 0]
    assert [p for p in with_removed if p.startswith("21 CFR 115.50")]
    assert all("45 °F" not in p for p in with_removed if p.startswith("21 CFR 115.50"))
    assert len(training_pairs(rows, off_topic=False)) == len(pairs) - 2
    # a not_found question the rules let through is read as production reads it: four passages of five sections
    hard = [dict(rows[1], outcome="proceed", sections=caffeine.hits[:5])]
    assert len(training_pairs(hard, off_topic=False, subject_swap=False)) == sum(
        min(4, len(passages(h))) for h in caffeine.hits[:5])


def test_subject_swapped_negatives_ask_the_answering_passage_about_a_neighbour():
    from eval.train_reader import training_pairs

    question, retrieval = case("parmesan_aging_answered")
    gold = next(h for h in retrieval.hits if h.cfr_ref == "21 CFR 133.165")
    row = {"question": question, "kind": "fact", "gold": [gold.cfr_ref], "facts": ["not less than 10 months"],
           "sections": retrieval.hits[:5], "gold_hits": [gold]}
    swapped = [(q, p) for q, p, label in training_pairs([row], off_topic=False) if q != question]
    assert swapped and all("10 months" in p and p.startswith("21 CFR 133.165") for _, p in swapped)
    for q, _ in swapped:  # the same question about a word of another handed section's heading, not parmesan
        word = q[question.lower().index("parmesan"):].split()[0]
        assert word.lower() != "parmesan" and q == re.sub(r"(?i)\bparmesan\b", word, question)
    assert not [q for q, _, label in training_pairs([row], off_topic=False, subject_swap=False) if q != question]


def test_fact_removed_negatives_are_the_gold_section_without_the_answering_sentences():
    from eval.train_reader import training_pairs

    question, retrieval = case("parmesan_aging_answered")
    gold = next(h for h in retrieval.hits if h.cfr_ref == "21 CFR 133.165")
    row = {"question": question, "kind": "fact", "gold": [gold.cfr_ref], "facts": ["not less than 10 months"],
           "sections": retrieval.hits[:5], "gold_hits": [gold]}
    with_them = training_pairs([row], off_topic=False, subject_swap=False, fact_removed=True)
    without = training_pairs([row], off_topic=False, subject_swap=False)
    removed = [p for p in with_them if p not in without]
    assert len(removed) == 1
    q, passage, label = removed[0]
    assert q == question and label == 0 and passage.startswith("21 CFR 133.165 Parmesan")
    assert "10 months" not in passage and len(passage.split()) >= 12
    # a question asking two things, or one without a figure, is still partly answered by what is left
    for other in ({"kind": "multi"}, {"facts": ["cured"]}, {"cited": True}):
        assert training_pairs([{**row, **other}], off_topic=False, subject_swap=False, fact_removed=True) == \
            training_pairs([{**row, **other}], off_topic=False, subject_swap=False)


def test_a_story_shaped_question_the_relevance_rule_would_refuse_is_answered_when_a_passage_plainly_answers(reader):
    question, retrieval = case("power_outage_food_loss_rescued")  # lost SNAP food in a power outage: 7 CFR 274.6
    without = pre_gate(question, retrieval)
    assert without.refusal is not None and without.refusal.reason == "not_found"
    assert without.signals["relevance"] < ScorerThresholds().not_found_min_similarity
    res = pre_gate(question, retrieval, reader=reader)
    assert res.proceed, res.refusal
    assert res.signals["rescue_probability"] >= ScorerThresholds().reader_rescue_probability
    assert "7 CFR 274.6" in [h.cfr_ref for h in res.sections[:3]]
    strict = ScorerThresholds(reader_rescue_probability=1.0)
    assert pre_gate(question, retrieval, strict, reader=reader).refusal.reason == "not_found"


def test_a_question_no_passage_plainly_answers_stays_refused(reader):
    question, retrieval = case("salmonella_symptoms_not_rescued")  # how long food poisoning lasts: medicine, not rules
    res = pre_gate(question, retrieval, reader=reader)
    assert res.refusal is not None and res.refusal.reason == "not_found"
    assert res.refusal.message.startswith("No regulation in this corpus addresses")
    assert res.signals["rescue_probability"] < ScorerThresholds().reader_rescue_probability
