"""The table of where named programs, agencies and laws live (shared.programs): what it names, and that it does
not mistake the ordinary wording of questions the corpus answers for a rule it does not hold."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from shared.citations import find_citations
from shared.programs import NOT_FEDERAL, PROGRAM_HOMES, named_homes

EVAL = Path(__file__).resolve().parents[1] / "eval"


@pytest.mark.parametrize("question, family, title", [
    # heldout24 and heldout25's blind misses (session 11)
    ("When I picked up my prescriptions, the pharmacist chatted with my wife about what I'm taking. Isn't that a "
     "privacy violation?", "hipaa", 45),
    ("Born in 1961 - when do I hit full retirement age for Social Security?", "ssa", 20),
    ("Under the FAA's Part 107 rules, when can I fly a small drone over people?", "aviation", 14),
    ("What must a public company disclose on Form 8-K after a cyber incident?", "securities", 17),
    ("How many days does a bank have to investigate an unauthorized debit card charge?", "banking", 12),
    ("What's the OSHA exposure limit for respirable crystalline silica?", "osha", 29),
    ("What warning label goes on indoor tanning beds?", "radiological", 21),
    ("How do I notify FDA of a new dietary ingredient?", "supplement-ndi", 21),
    ("What safe handling instructions go on packages of raw ground beef?", "fsis", 9),
    ("Does Medicare cover a power wheelchair?", "medicare", 42),
    ("How many take-home methadone doses can a new patient get?", "public-health", 42),
    ("What are the Nutrition Facts font rules for food sold in Canada?", "foreign", NOT_FEDERAL),
    ("Does Prop 65 require a cancer warning on coffee?", "state-law", NOT_FEDERAL),
    ("Can a SNAP retailer be fined instead of disqualified?", "snap", 7),
    ("can i put up a sign saying $5 minimum for EBT like i do for credit cards?", "snap", 7),  # EBT is how SNAP is paid
    ("Can the state take my late mother's house to pay back Medicaid?", "medicaid", 42),
    ("Does Medicare need a 3-day hospital stay before covering rehab in a nursing home?", "medicare", 42),
    ("What's the rule for putting a kosher symbol on a label?", "no-rule", NOT_FEDERAL),
    ("What are the cottage food rules for selling jam from home?", "state-law", NOT_FEDERAL),
    ("How do I register our clinical trial on ClinicalTrials.gov?", "public-health", 42),
    ("What costs can a university charge to a federal grant?", "grants", 2),
    ("alcohol cutoff for labeling a beer non-alcoholic", "atf", 27),
    ("P-EBT benefit amount per child per school day", "p-ebt", 7),
    ("How much do kids get from Summer EBT (SUN Bucks)?", "summer-ebt", 7),
    ("Can my restaurant deduct the food we donate to the food bank on our federal taxes?", "irs", 26),
    # heldout31 and heldout32's not_found questions that went through (session 14)
    ("About how many pharmacies in the US are registered with the DEA right now?", "general-knowledge", NOT_FEDERAL),
    ("Can you give me five easy dinner ideas using the canned chicken and rice from my CSFP box?",
     "general-knowledge", NOT_FEDERAL),
    # heldout33 and heldout34's, after their blind runs (session 14)
    ("how do i reheat leftover fried clams so they stay crispy", "general-knowledge", NOT_FEDERAL),
    ("How do I get limburger cheese smell out of my fridge?", "general-knowledge", NOT_FEDERAL),
    ("About how many people donate plasma in the US each year?", "general-knowledge", NOT_FEDERAL),
    ("What's the latest on the court fight over Georgia's Medicaid work requirement program?", "events", NOT_FEDERAL),
    ("In Texas do pharmacists have to check the state prescription monitoring program before filling hydrocodone?",
     "state-law", NOT_FEDERAL),
    ("Do I need a Wisconsin cheesemaker license to make gorgonzola on my farm?", "state-law", NOT_FEDERAL),
    ("We're exporting peanut butter to South Korea. What do Korean authorities require on the label?", "foreign",
     NOT_FEDERAL),
    ("Does Medicare make me pay for the first 3 pints of blood if I need a transfusion?", "medicare", 42),
    ("Does Medicaid have to give my mom rides to her dialysis appointments?", "medicaid", 42),
    ("does medicare part b pay for acupuncture for lower back pain", "medicare", 42),
])
def test_a_named_program_is_found_with_its_home(question, family, title):
    found = {home.family: home for home, _ in named_homes(question)}
    assert family in found and found[family].title == title


@pytest.mark.parametrize("question, parts", [
    ("I got a denial on a Medicare Part B claim. How many days do I have to ask for a redetermination?", ("405",)),
    ("How much is the Medicare Part A inpatient deductible she'll owe for the hospital stay?", ("409", "410")),
    ("How much is the Part B premium if I enroll late?", ("406", "407", "408")),
])
def test_a_medicare_question_finds_the_part_that_answers_it(question, parts):
    (home, _), = [(h, s) for h, s in named_homes(question) if h.family == "medicare"]
    assert home.parts == parts


def test_one_home_per_family_the_specific_one_first():
    (home, said), = [(h, s) for h, s in named_homes("What is the SNAP gross income limit for a family of four?")
                     if h.family == "snap"]
    assert home.parts == ("273",) and "income limit" in said
    (home, _), = named_homes("Is there a Medicaid copay for a preferred drug?")
    assert home.parts == ("436", "447")


def test_homes_read_as_cfr_references():
    by_name = {h.name: h for h in PROGRAM_HOMES}
    assert by_name["Medicare Part D (prescription drug coverage)"].home == "42 CFR part 423"
    assert by_name["federal tax rules (IRS)"].home == "26 CFR"
    assert by_name["another country's own rules"].home == "no part of the CFR"


def _rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (EVAL / name).read_text().splitlines() if line.strip()]


SETS = ("dataset.jsonl", "heldout.jsonl", "heldout2.jsonl", "heldout3.jsonl", "heldout4.jsonl", "heldout5.jsonl",
        "heldout6.jsonl", "heldout7.jsonl", "heldout8.jsonl", "heldout9.jsonl", "heldout10.jsonl", "heldout11.jsonl", "heldout12.jsonl", "heldout13.jsonl", "heldout14.jsonl", "heldout15.jsonl", "heldout16.jsonl", "heldout17.jsonl", "heldout18.jsonl",
        "heldout19.jsonl", "heldout20.jsonl", "heldout21.jsonl", "heldout22.jsonl", "heldout23.jsonl", "heldout24.jsonl",
        "heldout25.jsonl", "heldout26.jsonl", "heldout27.jsonl", "heldout28.jsonl",
        "heldout29.jsonl", "heldout30.jsonl", "heldout31.jsonl", "heldout32.jsonl",
        "heldout33.jsonl", "heldout34.jsonl", "heldout35.jsonl", "heldout36.jsonl", "heldout37.jsonl",
        "heldout38.jsonl", "heldout39.jsonl", "heldout40.jsonl", "heldout41.jsonl", "heldout42.jsonl")


@pytest.mark.parametrize("dataset", SETS)
def test_answerable_questions_never_name_only_rules_the_corpus_does_not_hold(dataset):
    rows = [r for name in SETS for r in _rows(name)]
    # every part a gold section is in is held; a home is held when one of its parts is
    held_parts = {(int(ref.split()[0]), ref.split()[2].split(".")[0]) for r in rows for ref in r["gold"]}
    held_titles = {t for t, _ in held_parts}

    def held(home) -> bool:
        return home.title in held_titles and (not home.parts or any((home.title, p) in held_parts
                                                                    for p in home.parts))

    wrong = []
    for row in _rows(dataset):
        # a question citing a section asks what that section says, whatever else it names (the gate reads it)
        if row["kind"] == "not_found" or any(c.section for c in find_citations(row["question"])):
            continue
        homes = [h for h, _ in named_homes(row["question"])]
        if homes and not any(held(h) for h in homes):
            wrong.append((row["id"], row["question"], [h.name for h in homes]))
    assert wrong == []


@pytest.mark.parametrize("question, name", [
    ("How many minutes should I boil an egg to get a jammy yolk?", "cooking and kitchen know-how"),
    ("Was Jif peanut butter recalled in 2022, and which lot codes were affected?",
     "a particular product's recall or enforcement history (news, not regulation)"),
    ("What are the requirements for popular names like the Produce Safety Rule?", "the Produce Safety Rule"),
    # heldout15's blind misses
    ("How long does an opened tub of cream cheese stay safe in the fridge?", "cooking and kitchen know-how"),
    ("How do I make ricotta at home with whole milk and lemon juice?", "cooking and kitchen know-how"),
    ("When was the FDA first created, and who was its first commissioner?",
     "who holds an office, and an agency's history (news and history, not regulation)"),
    ("Who is the current DEA Administrator?",
     "who holds an office, and an agency's history (news and history, not regulation)"),
    ("How many stores were permanently disqualified from SNAP for trafficking last fiscal year?",
     "counts of people or businesses in a program (statistics, not regulation)"),
    ("how do I apply for food stamps online in Texas, what website do I use?",
     "where to find a particular store, office or website (a locator, not regulation)"),
    # the last full run's misses (session 11)
    ("Which companies currently hold orphan-drug designations for cystic fibrosis treatments?",
     "which businesses hold, make or sell something (market facts, not regulation)"),
    ("Who makes the store-brand peanut butter at Aldi?",
     "which businesses hold, make or sell something (market facts, not regulation)"),
    ("Which brands of peanut butter at Walmart actually meet the 90 percent peanuts rule?",
     "a particular product's recall or enforcement history (news, not regulation)"),
    ("What's an easy way to make ricotta at home from whole milk?", "cooking and kitchen know-how"),
    ("I make strawberry jam in my home kitchen and want to sell it at our farmers market. Do I need a license or "
     "an inspection first?", "a state's or a locality's own law"),
    # heldout26's blind misses
    ("I've been taking a diphenhydramine sleep aid every night for a year. Is that doing long-term damage?",
     "whether a food or medicine is healthy or safe for someone (health advice, not regulation)"),
    ("My dad is diabetic but loves white chocolate. Would it be OK for him to have some after dinner?",
     "whether a food or medicine is healthy or safe for someone (health advice, not regulation)"),
    ("We're starting a small hard cider company. How do we get our label approved?",
     "firearms, explosives and alcohol tax rules (ATF, TTB)"),
])
def test_general_knowledge_news_and_popular_rule_names_have_homes(question, name):
    assert name in [h.name for h, _ in named_homes(question)]


@pytest.mark.parametrize("question", [
    "What must a firm's recall strategy include?",  # recall rules are held (21 CFR part 7)
    "How long may shell eggs be held before they must be refrigerated at 45 degrees?",
    # "keep taking it" is a dose question, not storage (heldout15's blind false refusal)
    "What's the standard dose in an OTC diphenhydramine sleep aid, and how long can you keep taking it?",
    "How long does a DEA registration stay valid?",
    "When was the section last amended?",
    "Who is the responsible person for a recall?",
    "Which pharmacies have to keep a logbook of pseudoephedrine sales?",  # a duty, not a market fact
    "Which companies must register their food facility with FDA?",
    "What firms are required to file a registration?",
    "Which stores can accept SNAP benefits?",
])
def test_rule_questions_about_recalls_and_eggs_are_not_general_knowledge(question):
    assert not [h for h, _ in named_homes(question) if h.family in ("general-knowledge", "events")]


def test_fresh_apple_cider_is_juice_not_alcohol():
    assert not [h for h, _ in named_homes("I press apple cider at my farm stand. Do I need a warning label?")
                if h.family == "atf"]


def test_what_homemade_food_must_contain_is_not_left_to_state_law():
    """The State licenses a home kitchen; what the jam must contain is the federal standard's, whoever makes it."""
    question = "I'm a home canner selling homemade strawberry jam at the farmers market. How much fruit must it contain?"
    assert not [h for h, _ in named_homes(question) if h.family == "state-law"]


@pytest.mark.parametrize("question, name, held_title", [
    # session 12's paired questions: FDA's own rules whose questions name another regulator's words
    ("Under the US-EU mutual recognition agreement, how long does an EU authority have to send FDA a preapproval "
     "inspection report?", "mutual recognition of inspections between FDA and foreign authorities", 21),
    ("Can tallow-derived ingredients go into cosmetics under the mad cow (prohibited cattle materials) rule?",
     "prohibited cattle materials in human food and cosmetics", 21),
    ("how long does a trucking company keep driver food safty training records after the driver quits?",
     "sanitary transportation of human and animal food", 21),
    ("What temperature must a carrier keep frozen food at in transit?",
     "sanitary transportation of human and animal food", 21),
    # session 13's paired questions: FDA's part 60 extends a drug's patent; a food load is cargo, whoever hauls it
    ("For patent term restoration, what does FDA look at to decide whether a drug company exercised due diligence?",
     "patent term restoration for FDA-regulated products", 21),
    ("Our trucking company signed a contract making us responsible for sanitary conditions on food loads. When do "
     "our drivers have to get food safety training?", "sanitary transportation of human and animal food", 21),
    # heldout31/32: the State's Part B buy-in and DEA's take-back rule, whoever they serve
    ("My mom is a QMB and the state pays her Part B premium through the buy-in. When does that buy-in coverage "
     "start?", "State buy-in of Medicare Part B premiums", 42),
    ("Our nursing home has a drug take-back receptacle run by our contract pharmacy. When do a resident's leftover "
     "meds go in?", "disposal of controlled substances (take-back, collection receptacles, mail-back)", 21),
    # ... while the other regulator's own questions keep their homes
    ("How long is the patent term for a new kitchen gadget I invented?", "patents, trademarks and copyrights", 37),
    ("Is this color additive approved in the EU?", "another country's own rules", 0),
    ("Is dog food covered by the mad cow feed ban?", "animal food and feed rules (including the ruminant feed ban)",
     21),
    ("How many hours can a truck driver hauling frozen food drive in a day?",
     "transportation rules (FMCSA, PHMSA, NHTSA, FRA, FTA)", 49),
])
def test_fda_rules_named_in_another_regulators_words_keep_their_own_home(question, name, held_title):
    homes = {h.name: h.title for h, _ in named_homes(question)}
    assert homes.get(name) == held_title, homes


def test_a_statute_section_numbered_8_something_is_not_section_8_housing():
    assert not named_homes("How long must a cosmetics exporter keep records for products exported under section "
                           "801(e)(1)?")
    assert "housing rules (HUD)" in [h.name for h, _ in named_homes("Can SNAP count my Section 8 voucher as income?")]


def test_a_food_truck_is_a_kitchen_not_food_transportation():
    homes = [h.name for h, _ in named_homes("what permits does a food truck need from the city health department")]
    assert "sanitary transportation of human and animal food" not in homes
    assert "a state's or a locality's own law" in homes


@pytest.mark.parametrize("question, name", [
    ("How many people in the US donated blood last year?",
     "counts of people or businesses in a program (statistics, not regulation)"),
    ("We're using a friend as a known sperm donor through a clinic. What donor screening is required?",
     "human cells, tissues and tissue-based products"),
    ("We sell a subscription with a free trial that auto-renews. What cancellation rules apply?",
     "FTC trade regulation rules"),
])
def test_heldout29_and_30_misses_have_homes(question, name):
    assert name in [h.name for h, _ in named_homes(question)]


@pytest.mark.parametrize("question, name", [
    ("roughly what percent of medicaid enrollees are children",
     "what share of a program's people are of a kind (statistics, not regulation)"),
    ("How many CSFP participants are there nationwide?",
     "what share of a program's people are of a kind (statistics, not regulation)"),
    ("What does a tube of hydrocortisone cream cost at Walgreens?",
     "what something costs in stores (retail prices, which no regulation sets)"),
    ("what's the average price of a gallon of whole milk", "what something costs in stores (retail prices, which no "
                                                            "regulation sets)"),
    ("Help me brainstorm a slogan for our cheese shop", "names, slogans and other creative help (not a regulation "
                                                        "question)"),
    ("Ants keep showing up in the pantry where I keep my CSFP box. How can I get rid of them?",
     "keeping pests out of a home or garage (household know-how)"),
    ("can our high school vending machine sell diet soda", "the National School Lunch Program"),
    ("Sugar limits for Smart Snacks sold at a school bake sale?", "the National School Lunch Program"),
    ("What leakage limits apply to a medical x-ray tube housing?",
     "radiation-emitting electronic products (lasers, tanning, microwaves, X-ray)"),
    ("When will the Medicaid program go broke?",
     "whether a program's trust fund will run out of money (a forecast, not regulation)"),
    ("I'm a nurse thinking of filing a qui tam case over Medicare billing. What's my share?",
     "a whistleblower's (qui tam) suit and award under the False Claims Act, which a statute (31 U.S.C. 3730) sets, "
     "not these regulations"),
])
def test_heldout35_and_36_misses_have_homes(question, name):
    assert name in [h.name for h, _ in named_homes(question)]


@pytest.mark.parametrize("question", [
    "What share of the administrative costs does FNS pay a tribal organization?",
    "What percentage of households must a State agency review each year?",
    "How much does it cost to register a drug establishment with FDA?",
    "Must a food plant keep pests out of its warehouse?",
])
def test_shares_costs_and_pests_a_rule_sets_are_not_general_knowledge(question):
    assert not [h for h, _ in named_homes(question) if h.family in ("general-knowledge", "events", "statutes")]


@pytest.mark.parametrize("question, name", [
    ("What share of plasma donors are first-timers?",
     "what share of a program's people are of a kind (statistics, not regulation)"),
    ("Has FDA just approved a generic for this inhaler?",
     "who holds an office, and an agency's history (news and history, not regulation)"),
    ("Can I put money in a health savings account while on Medicare?", "federal tax rules (IRS)"),
    ("what can i use as a substitute for buttermilk in this recipe", "cooking and kitchen know-how"),
    ("What do people usually make with farmer cheese?", "cooking and kitchen know-how"),
    ("Does our deli manager need ServSafe?", "a state's or a locality's own law"),
    ("what does AB 418 ban in candy", "a state's or a locality's own law"),
    ("How much can a shopper get from Double Up Food Bucks with SNAP?",
     "nutrition incentive matches at markets (Double Up Food Bucks, GusNIP grants), which grant terms and local "
     "programs set, not SNAP's regulations"),
    ("Can a custom-exempt plant sell the beef it cuts?",
     "USDA FSIS meat, poultry and egg product inspection and labeling"),
])
def test_heldout37_and_38_misses_have_homes(question, name):
    assert name in [h.name for h, _ in named_homes(question)]


def test_a_state_that_still_requires_something_is_ruling():
    from shared.programs import states_ruling

    assert states_ruling("Does Ohio still require a prescription for codeine cough syrup?") == ["Ohio"]


def test_how_fast_a_managed_care_plan_pays_claims_is_held_medicaid_payment_rule():
    assert "Medicaid managed care" not in [h.name for h, _ in named_homes(
        "How fast must Medicaid managed care organizations pay clean claims?")]
    assert "Medicaid managed care" in [h.name for h, _ in named_homes(
        "What network adequacy standards apply to Medicaid managed care plans?")]


def test_a_donor_count_a_rule_sets_is_not_a_statistic():
    assert not [h for h, _ in named_homes("How many donors must a blood bank test each year for HIV?")
                if h.family == "general-knowledge"]
