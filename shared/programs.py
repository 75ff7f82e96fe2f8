"""Where the rules people name live: programs, agencies and laws, with the CFR title and parts that govern them.

A question about a rule the corpus does not hold must be answered by naming where that rule lives, not by the
nearest section that happens to share its words ("Medicare Part D late enrollment penalty" is 42 CFR 423, not
the Part B penalty in 42 CFR 408 that the corpus holds). Scoping (``shared.scoping``) looks every question up
here and marks each home held or not against the active corpus; the scorer's pre-generation gate refuses a
question that names only homes the corpus does not hold.

The table is general knowledge of the CFR (its list of titles and chapters and the agencies that write them,
and the best-known parts), not a list of questions: it covers the federal regulators people ask about, the
well-known parts of the titles this corpus holds in part (7, 9, 21, 42) that it does not hold, and the laws of
other countries and states, which no CFR part governs (title 0).

Patterns are case-insensitive unless they say ``(?-i:...)``. Within a family the first entry that matches wins,
so a specific entry comes before a general one ("SNAP income limits" is 7 CFR 273, not the SNAP parts held).
A pattern must not match the ordinary wording of the held parts: tests/test_programs.py runs every pattern
over the questions of the evaluation sets that the corpus does answer.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

NOT_FEDERAL = 0  # the "title" of another country's or a state's own law: nothing in the CFR governs it


@dataclass(frozen=True)
class ProgramHome:
    family: str
    name: str
    title: int
    parts: tuple[str, ...]  # empty: the whole title (or, for NOT_FEDERAL, nothing)
    pattern: re.Pattern

    @property
    def home(self) -> str:
        """Where the rule lives, as a CFR reference ("42 CFR part 423") or what stands in for one."""
        if self.title == NOT_FEDERAL:
            return "no part of the CFR"
        if len(self.parts) == 1:
            return f"{self.title} CFR part {self.parts[0]}"
        if self.parts:
            return f"{self.title} CFR parts {', '.join(self.parts)}"
        return f"{self.title} CFR"


# whether an expense is deductible, or a benefit taxable, is asked of tax law, whatever program it is for ("are
# Medicare premiums tax deductible", "deduct the food we donate ... on our federal taxes", "report my SNAP benefits as
# income on my federal tax return")
TAX_TREATMENT = (r"tax[- ]deducti\w+|\bdeduct\w*\b[^.?!]{0,80}\b(?:taxes|tax returns?|income tax\w*)|"
                 r"\b(?:taxes|tax returns?|income tax\w*)\b[^.?!]{0,60}\bdeduct|"
                 # whether a benefit is income to the IRS: "report my SNAP benefits as income on my tax return"
                 r"\btaxable\b|\b(?:on|in) (?:my|our|your|his|her|their|a|the) (?:federal |state )?(?:income )?tax returns?\b|"
                 r"\bpay (?:federal |state )?(?:income )?tax(?:es)? on\b|"
                 # a tax credit is the tax code's: "does SNAP reduce the earned income tax credit"
                 r"\b(?:earned income (?:tax )?credit|eitc|child tax credit|(?:premium|work opportunity) tax credit)\b|"
                 r"\bon (?:my|our|your|his|her|their) taxes\b|"
                 # what a health savings account may take or pay for is the tax code's (26 U.S.C. 223)
                 r"\b(?:hsa|health savings accounts?)\b")
_TAX_TREATMENT = re.compile(TAX_TREATMENT, re.I)


def asks_tax_treatment(question: str) -> bool:
    """Whether the question asks how taxes treat something: an expense deductible, a benefit taxable."""
    return _TAX_TREATMENT.search(question) is not None


def _p(family: str, name: str, title: int, parts: tuple[str, ...], pattern: str) -> ProgramHome:
    return ProgramHome(family, name, title, parts, re.compile(pattern, re.I | re.S))


# other countries, as questions name them ("the uk", "south korea"); "europe" for the EU's rules
_COUNTRIES = ("canada|mexico|australia|japan|china|india|europe|uk|united kingdom|germany|france|italy|brazil|"
              "south korea|korea|taiwan|vietnam|philippines|thailand|singapore|indonesia|malaysia|israel|"
              "saudi arabia|uae|united arab emirates|switzerland|netherlands|ireland|new zealand|south africa|"
              "argentina|chile|colombia|peru|russia|turkey|egypt|nigeria")
# a count or share a rule sets follows its noun with a duty: "how many donors must a blood bank test"
_A_RULE_SETS = r"(?:must|have to|has to|needs?|(?:is |are )?required|may|can|should|shall)"
_PESTS = r"(?:mice|rats|mouse|rodents|roaches|cockroaches|ants|pests|weevils|moths|bugs|squirrels|raccoons)"
_US_STATES = ("alabama|alaska|arizona|arkansas|california|colorado|connecticut|delaware|florida|georgia|hawaii|idaho|"
              "illinois|indiana|iowa|kansas|kentucky|louisiana|maine|maryland|massachusetts|michigan|minnesota|"
              "mississippi|missouri|montana|nebraska|nevada|new hampshire|new jersey|new mexico|new york|"
              "north carolina|north dakota|ohio|oklahoma|oregon|pennsylvania|rhode island|south carolina|"
              "south dakota|tennessee|texas|utah|vermont|virginia|washington state|west virginia|wisconsin|wyoming")

PROGRAM_HOMES: tuple[ProgramHome, ...] = (
    # ------------------------------------------------------------------ title 7: food and nutrition, agriculture
    _p("wic", "WIC (the Special Supplemental Nutrition Program for Women, Infants, and Children)", 7, ("246",),
       r"\bwic\b|women,? infants,? and children"),
    _p("school-meals", "the National School Lunch Program", 7, ("210",),
       r"school lunch|\bnslp\b|\bfree lunch(?:es)?\b|"
       r"(?:free|reduced[- ]price) (?:or|and|versus|vs\.?) (?:free|reduced[- ]price) (?:school )?(?:lunch|meals?)|"
       # what schools may sell outside the meal (7 CFR 210.11): "Smart Snacks", the vending machines
       r"\bsmart snacks?\b|\bcompetitive foods?\b|\bschool (?:vending|cafeterias?|meals?|snacks?)\b|"
       r"\bvending machines? (?:at|in) (?:a |the |my |our )?schools?\b"),
    _p("school-meals", "the School Breakfast Program", 7, ("220",), r"school breakfast"),
    _p("cacfp", "the Child and Adult Care Food Program", 7, ("226",), r"child and adult care food|\bcacfp\b"),
    _p("sfsp", "the Summer Food Service Program", 7, ("225",), r"summer food service|summer meals? for kids"),
    _p("fdpir", "the Food Distribution Program on Indian Reservations", 7, ("253",),
       r"food distribution program on indian reservations|\bfdpir\b"),
    _p("fmnp", "the WIC and Senior Farmers' Market Nutrition Programs", 7, ("248", "249"),
       r"farmers'? market nutrition|\bsfmnp\b"),
    # children's grocery benefits on an EBT card, not SNAP ("EBT" alone names SNAP)
    _p("p-ebt", "Pandemic EBT (P-EBT)", 7, ("284",), r"\bp-?ebt\b|pandemic[- ](?:ebt|electronic benefits? transfer)"),
    _p("summer-ebt", "Summer EBT (SUN Bucks)", 7, ("292",), r"summer[- ]ebt|\bsun ?bucks\b"),
    _p("snap", "SNAP household eligibility (income and resource limits, students, work rules, benefit amounts)", 7,
       ("273",),
       r"\b(?:snap|food stamps?)\b.*\b(?:income limits?|gross (?:monthly )?income|resource limits?|assets?|college|"
       r"students?|able-bodied|abawds?|work requirements?)\b|\b(?:income limits?|resource limits?|assets?|college "
       r"students?|able-bodied|abawds?)\b.*\b(?:snap|food stamps?)\b|"
       r"(?:am i|are we|is (?:my|our) (?:family|household)|can (?:i|we|my \w+)) (?:\w+ ){0,3}(?:get|receive|qualify for)"
       r" (?:snap|food stamps?)(?! benefits? (?:replaced|back|reissued))|maximum (?:monthly )?(?:snap |food stamp )?allotments?|"
       r"(?:snap|food stamp) benefit amounts?|how many months\b.{0,60}\b(?:snap|food stamps?)\b|"
       r"\b(?:snap|food stamps?)\b.{0,60}\btime limits?\b|maximum (?:monthly )?(?:snap|food stamp) benefits?"),
    _p("snap", "SNAP", 7, ("271", "272", "274", "275", "276", "277", "278", "279", "280"),
       r"\bsnap\b|food stamps?|supplemental nutrition assistance|(?<!p-)(?<!pandemic )(?<!summer )\bebt\b"),
    _p("csfp", "the Commodity Supplemental Food Program", 7, ("247",), r"\bcsfp\b|commodity supplemental food|\b(?:senior|elderly) food box(?:es)?\b"),
    # the popular names of rules the corpus holds: a name like "the Produce Safety Rule" appears nowhere in the CFR
    # text, so without these a question that uses it looks like it names something the corpus lacks
    _p("produce-safety", "the Produce Safety Rule", 21, ("112",), r"produce safety rule|\bproduce rule\b"),
    _p("preventive-controls", "the Preventive Controls for Human Food rule", 21, ("117",),
       r"preventive controls? (?:for human food|rule)|\bpchf\b"),
    _p("juice-haccp", "juice HACCP", 21, ("120",), r"juice haccp"),
    _p("seafood-haccp", "seafood HACCP", 21, ("123",), r"seafood haccp|fish(?:ery)? haccp"),
    _p("lacf", "the low-acid canned food rules", 21, ("113",), r"\blacf\b|low[- ]acid canned foods?"),
    _p("food-defense", "the intentional adulteration (food defense) rule", 21, ("121",),
       r"intentional adulteration|food defense plans?"),
    _p("egg-safety", "the Egg Safety Rule", 21, ("118",), r"egg safety rule"),
    _p("cmea", "the retail rules for pseudoephedrine and ephedrine (Combat Methamphetamine Epidemic Act)", 21,
       ("1314",), r"combat methamphetamine|\bcmea\b"),
    _p("nepa", "FDA's environmental review procedures (NEPA)", 21, ("25",),
       r"\b(?:fda|food and drug)\b.{0,80}\b(?:nepa|environmental (?:assessments?|impact statements?|reviews?))\b"),
    _p("nepa", "USDA's environmental review procedures (NEPA)", 7, ("1b",),
       r"\bnepa\b|environmental (?:assessments?|impact statements?)|categorical(?:ly)? exclu"),
    _p("tefap", "The Emergency Food Assistance Program", 7, ("251",),
       r"\btefap\b|emergency food assistance program"),
    _p("organic", "the National Organic Program", 7, ("205",),
       r"usda organic|national organic|made with organic|organic (?:seal|labels?|labeling|certif\w*|ingredients?|"
       r"products?|foods?|farm\w*|standards?)|(?:labeled|label it|sold as|certified) organic"),
    _p("bioengineered", "the National Bioengineered Food Disclosure Standard", 7, ("66",),
       r"bioengineered|\bgmos?\b|genetically (?:modified|engineered) (?:food|ingredient|crop)s?"),
    _p("cool", "country of origin labeling of meat, fish and produce (COOL)", 7, ("60", "65"),
       r"country[- ]of[- ]origin label\w*|\bcool\b (?:label\w*|rules?)"),
    _p("grading", "USDA grade standards (maple syrup, eggs, butter, beef, fruit and vegetables)", 7,
       ("51", "52", "56", "58"),
       r"\bgrades? (?:of|for) (?:maple|eggs?|butter|beef|honey|fruits?|vegetables?|apples?|potatoes?)|"
       r"(?:color|quality) grades?\b|grade (?:a|aa|b) (?:eggs|butter|maple)|usda grade|u\.s\. (?:no\. 1|fancy|choice|prime)|"
       r"usda (?:prime|choice) beef"),
    _p("crop-insurance", "federal crop insurance", 7, ("400", "457"), r"crop insurance|\brma\b|\bnap\b coverage"),
    _p("farm-programs", "Farm Service Agency loans and farm programs", 7, ("761", "762", "764", "765", "1400", "1412"),
       r"farm service agency|\bfsa\b (?:farm )?loans?|farm (?:ownership|operating) loans?|"
       r"(?:price loss|agriculture risk) coverage|dairy margin coverage|marketing assistance loans?"),
    _p("conservation", "USDA conservation programs (CRP, EQIP)", 7, ("1410", "1466"),
       r"conservation reserve program|\bcrp\b|\beqip\b|environmental quality incentives"),
    _p("marketing-orders", "marketing orders and produce trade (PACA)", 7, ("46", "900"),
       r"marketing orders?|\bpaca\b|perishable agricultural commodities"),
    _p("packers", "the Packers and Stockyards Act", 9, ("201",), r"packers and stockyards|livestock (?:auction|market)s?"),
    _p("hemp", "domestic hemp production", 7, ("990",), r"\bhemp\b"),
    _p("rural-development", "USDA Rural Development housing and business loans", 7, ("3550", "3555", "4279"),
       r"rural development|rural housing|usda (?:home |housing )?loans?|section 502 (?:direct|guaranteed)"),
    _p("plant-imports", "APHIS import rules for fruits, vegetables, plants and seeds", 7, ("319", "330"),
       r"\bimport\w*\b.{0,40}\b(?:fruits?|vegetables?|plants?|seeds?|soil)\b|"
       r"\b(?:fruits?|vegetables?|plants?|seeds?)\b.{0,40}\b(?:into the (?:u\.?s\.?|united states)|across the border)|"
       r"plant (?:pests?|quarantines?)|phytosanitary"),
    _p("aphis", "APHIS animal welfare, animal health and plant health rules", 9, ("1", "2", "3", "93"),
       r"\baphis\b|animal welfare act|horse protection act|livestock (?:imports?|disease)|"
       r"(?:import\w*|bring\w*) (?:a |my )?(?:dogs?|cats?|pets?|horses?|livestock|birds?)\b|"
       r"(?:dog|cat) breeders?|puppy mills?|zoos?\b|animal exhibitors?"),
    # ------------------------------------------------------------------ title 9: FSIS
    _p("fsis", "USDA FSIS meat, poultry and egg product inspection and labeling", 9, ("317", "381", "590"),
       r"\bfsis\b|meat inspection|poultry inspection|slaughter\w*|safe handling (?:instructions|labels?)|"
       r"(?:meat|poultry) (?:labels?|labeling|products? labels?|processing|plants?)|usda (?:inspected|inspection)|"
       r"raw (?:meat|poultry|ground beef|chicken|pork)|cured (?:meats?|pork|bacon|hams?)|egg products? inspection|"
       r"catfish inspection|custom[- ]exempt|custom (?:slaughter\w*|butcher\w*|processing|processed)"),
    # ------------------------------------------------------------------ title 21: parts held here and parts not
    _p("food-additives", "food additive and GRAS rules", 21, ("170", "172", "173", "174", "175", "176", "177", "178",
                                                            "182", "184", "186", "189"),
       r"\bgras\b(?!/e)|generally recognized as safe(?! and effective)|food additive (?:petitions?|approvals?|listings?)|"
       r"approved food additives?|(?:in)?direct (?:food )?additives?|"
       r"food contact (?:substances?|materials?|notifications?)|food packaging (?:materials?|chemicals?)|"
       r"\bbpa\b|bisphenol|\bpfas\b|prohibited (?:from use in|substances? in) (?:human )?food"),
    _p("supplement-ndi", "new dietary ingredient notifications", 21, ("190",),
       r"new dietary ingredients?|\bndi\b"),
    _p("animal-drugs", "the veterinary feed directive", 21, ("558",), r"veterinary feed directive|\bvfd\b"),
    _p("animal-drugs", "drug residue tolerances and withdrawal times in food animals", 21, ("556",),
       r"withdrawal (?:period|time)|drug residues? in (?:milk|meat|eggs)"),
    _p("animal-drugs", "good manufacturing practice for medicated feeds", 21, ("225", "226"), r"medicated feeds?"),
    # BSE in what people eat or put on: the prohibited cattle materials rules for food, supplements and cosmetics
    # (21 CFR 189.5, 700.27), not the feed ban ("tallow in cosmetics under the mad cow rule")
    _p("animal-drugs", "prohibited cattle materials in human food and cosmetics", 21, ("189", "700"),
       r"prohibited cattle materials?|"
       r"(?:mad cow|\bbse\b)[^.?!]{0,80}\b(?:cosmetics?|human food|dietary supplements?|lipsticks?|lotions?)\b|"
       r"\b(?:cosmetics?|human food|dietary supplements?|lipsticks?|lotions?)\b[^.?!]{0,80}(?:mad cow|\bbse\b)"),
    _p("animal-drugs", "animal food and feed rules (including the ruminant feed ban)", 21, ("500", "501", "507", "573",
                                                                                         "579", "589"),
       r"cattle feed|livestock feed|pet foods?|dog foods?|cat foods?|(?:dog|cat|pet) treats?|guaranteed analysis|"
       r"ruminant feed|mad cow|\bbse\b|"
       r"feed (?:additives?|mills?)"),
    _p("animal-drugs", "new animal drugs", 21, ("510", "514", "516"), r"new animal drug (?:applications?|approvals?)|\bnadas?\b|extra-?label (?:drug )?use"),
    _p("devices", "medical device premarket, quality system, labeling and reporting rules", 21,
       ("801", "803", "807", "814", "820", "830"),
       r"510\s*\(k\)|premarket (?:notification|approval)|quality (?:system|management system) (?:regulation|requirements)|"
       r"medical device (?:reports?|reporting|registration|listing|classification|labeling|establishment)|"
       r"device[- ]related deaths?|class (?:i|ii|iii|1|2|3) (?:medical )?devices?|unique device identifier|\budi\b|"
       r"hearing aids?|pacemakers?|(?:surgical|medical) implants?|software as a medical device|"
       r"device user facilit\w*|infusion pumps?|(?:device|pump|implant)s?\b[^.?!]{0,30}\bmalfunction\w*"),
    _p("radiological", "radiation-emitting electronic products (lasers, tanning, microwaves, X-ray)", 21,
       ("1000", "1002", "1010", "1020", "1030", "1040", "1050"),
       r"laser (?:products?|pointers?)|\blasers?\b|tanning (?:beds?|booths?|lamps?|devices?)|"
       r"sunlamps?|microwave ovens?|x-ray (?:machines?|equipment|systems?|units?|tubes?)|\b(?:dental|medical|"
       r"diagnostic) x-rays?\b|leakage radiation|ultrasonic therapy"),
    _p("mammography", "mammography facility standards (MQSA)", 21, ("900",), r"mammograph|\bmqsa\b"),
    _p("tobacco", "tobacco products", 21, ("1100", "1140", "1141", "1143"),
       r"cigarette (?:packages?|packs?|warnings?|labels?|sales|advertising|ads)|menthol|e-cigarettes?|"
       r"\bvap(?:e|es|ing)\b|tobacco|cigars?\b|nicotine pouches?|smokeless"),
    _p("communicable", "FDA's interstate communicable disease rules (raw milk, turtles, shellfish shipping)", 21,
       ("1240",), r"(?:sell|sale of|selling|ship\w*) (?:raw|unpasteurized) milk (?:across|interstate|to consumers)|"
                  r"small turtles|pet turtles"),
    _p("tissue", "human cells, tissues and tissue-based products", 21, ("1270", "1271"),
       r"human cells?,? tissues?|tissue (?:banks?|donors?|establishments?)|stem cell clinics?|"
       r"(?:sperm|egg|oocyte|embryo|semen|cornea|bone marrow|cord blood) (?:donors?|donations?|banks?)|\bhct/?ps?\b"),
    # DEA's disposal rule (take-back, collection receptacles, mail-back) whoever hosts it: a pharmacy, a nursing home
    _p("dea-disposal", "disposal of controlled substances (take-back, collection receptacles, mail-back)", 21, ("1317",),
       r"\btake[- ]backs?\b|\bcollection receptacles?\b|\bmail[- ]back\b|\binner liners?\b"),
    _p("dea", "DEA controlled substance rules", 21, ("1300", "1301", "1304", "1306", "1308"),
       r"\bdea\b|controlled substances?|schedule (?:i|ii|iii|iv|v)\b"),
    # ------------------------------------------------------------------ title 42: Medicare and Medicaid, public health
    _p("medicare", "the IRMAA income brackets and amounts (set by the Social Security Administration)", 20, ("418",),
       r"\birmaa\b[^.?!]{0,80}\b(?:brackets?|thresholds?|tiers?|income|how much|amounts?|surcharges?)\b|"
       r"\b(?:brackets?|thresholds?|tiers?|income|how much|amounts?)\b[^.?!]{0,80}\birmaa\b"),
    _p("medicare", "Medicare Advantage", 42, ("422",), r"medicare advantage|\bpart c\b|star ratings?"),
    _p("medicare", "Medicare Part D (prescription drug coverage)", 42, ("423",),
       r"\bpart d\b|prescription drug (?:plan|coverage)"),
    _p("medicare", "Medicare supplement (Medigap) policies", 42, ("403",),
       r"medigap|medicare supplement (?:insurance|polic\w+|plans?)"),
    # the State's buy-in pays Part B for its QMBs and Medicaid enrollees: 42 CFR 407, subpart C, whoever it covers
    _p("medicare-buy-in", "State buy-in of Medicare Part B premiums", 42, ("407",), r"\bbuy-ins?\b|\bstate buy[- ]in\b"),
    _p("medicare", "Medicare Savings Programs (QMB, SLMB, QI)", 42, ("435",),
       r"medicare savings programs?|\bqmbs?\b|qualified medicare beneficiar\w*|\bslmb\b|specified low-income"),
    _p("medicare", "Medicare coverage of items and services", 42, ("409", "410", "411", "414"),
       r"durable medical equipment|\bdme\b|wheelchairs?|telehealth|physician fee schedule|"
       # (Part A's payment for an alien back from abroad is 42 CFR 406.50's: "will Medicare Part A pay" stays)
       r"(?:does|will|would|can) medicare(?: part b)? (?:cover|pay)|medicare (?:coverage of|covers?\b)|ambulance|"
       r"advance beneficiary notice|\babn\b"),
    _p("medicare", "Medicare coverage of skilled nursing facility care (the 3-day hospital stay rule)", 42, ("409",),
       r"(?:3|three)-day (?:inpatient |hospital )*(?:stay|rule|admission)|"
       r"(?:how many |number of )?days (?:in|of) (?:a )?(?:skilled nursing|snf)\b|(?:cover\w*|pay\w*) (?:for )?(?:a |an |the )?"
       r"(?:skilled nursing|snf|nursing home) (?:care|stays?)|(?:skilled nursing|snf) (?:care|stays?) coverage"),
    _p("medicare", "Medicare hospital inpatient rules (two-midnight, observation status)", 42, ("412",),
       r"two-midnight|observation (?:status|stays?)"),
    _p("medicare", "Medicare hospice and home health", 42, ("418", "484"), r"hospice|home health"),
    _p("medicare", "Medicare claims appeals", 42, ("405",),
       r"medicare (?:claims? )?appeals?|appeal (?:a |my )?medicare|reconsideration by a qic|"
       r"\bredeterminations?\b.{0,120}\b(?:claims?|denials?|denied)\b|"
       r"\b(?:claims?|denials?|denied)\b.{0,120}\bredeterminations?\b"),
    # the deductibles are set in the benefit parts (inpatient: 42 CFR 409.82; Part B: 42 CFR 410.160), which the
    # entitlement and premium parts never state
    _p("medicare", "Medicare Part A and Part B deductibles and coinsurance", 42, ("409", "410"),
       r"\b(?:inpatient|hospital|part a|part b|medicare)\b[^.?!]{0,50}\b(?:deductibles?|coinsurance)\b|"
       r"\b(?:deductibles?|coinsurance)\b[^.?!]{0,50}\b(?:inpatient|hospital|part a|part b|medicare)\b|"
       r"\bpints? of blood\b|\bblood deductible\b"),
    _p("medicare", "Medicare Part A and Part B entitlement, enrollment and premiums", 42, ("406", "407", "408"),
       r"\bmedicare\b|\bpart [ab]\b"),
    _p("providers", "long-term care facility requirements", 42, ("483",),
       r"nursing (?:homes?|facilit\w+)|skilled nursing facilit"),
    _p("providers", "EMTALA (emergency medical treatment and labor)", 42, ("489",),
       r"\bemtala\b|emergency medical treatment and (?:active )?labor"),
    _p("providers", "hospital and clinic conditions of participation", 42, ("482", "485", "491"),
       r"conditions of participation|\bfqhcs?\b|federally qualified health|critical access|discharge planning"),
    _p("providers", "hospital price transparency", 45, ("180",), r"price transparency|standard charges"),
    _p("clia", "CLIA laboratory requirements", 42, ("493",), r"\bclia\b|clinical laborator(?:y|ies) improvement"),
    _p("fraud", "the Stark and anti-kickback rules", 42, ("411", "1001"), r"\bstark\b|anti-?kickback|self-referral"),
    _p("public-health", "CDC quarantine and foreign quarantine rules", 42, ("70", "71"),
       r"\bcdc\b|quarantine|isolation orders?|communicable diseases? (?:control|between states)"),
    _p("public-health", "opioid treatment program take-home and treatment standards (SAMHSA)", 42, ("8",),
       r"take-home (?:doses?|methadone|medications?)|methadone (?:clinics?|take-homes?)"),
    _p("public-health", "ClinicalTrials.gov registration and results reporting", 42, ("11",),
       r"clinicaltrials\.gov|clinical trials? registration|register (?:a |the |my |our )?clinical trials?|"
       r"(?:post|report|submit)\w* (?:trial )?results (?:information )?(?:to|on) clinicaltrials"),
    _p("public-health", "the Indian Health Service", 42, ("136",), r"indian health service|(?-i:\bIHS\b)"),
    _p("public-health", "the vaccine injury compensation program", 42, ("100",),
       r"vaccine injur\w+|vaccine (?:injury )?compensation"),
    _p("public-health", "the 340B drug pricing program", 42, ("10",), r"\b340b\b"),
    _p("public-health", "organ procurement and transplantation", 42, ("121", "486"),
       r"organ (?:transplant\w*|procurement|donation)|\boptn\b|transplant (?:lists?|waiting)"),
    _p("medicaid", "Medicaid eligibility in Guam, Puerto Rico and the Virgin Islands", 42, ("436",),
       r"\bguam\b|puerto ric\w+|virgin islands"),
    _p("medicaid", "Medicaid eligibility groups in the states", 42, ("435",),
       r"expansion (?:group|adults?)|adult group|medicaid expansion|"
       r"(?:am i|are we|is (?:my|our|he|she)|who is|who's|how (?:do|can) (?:i|we|you)) (?:\w+ ){0,3}(?:eligible for|qualify for) medicaid|"
       r"medicaid (?:eligibility|income limits?|asset limits?|spend-?down)"),
    _p("medicaid", "Medicaid estate recovery and liens", 42, ("433",),
       r"estate recovery|(?:go after|recover\w* (?:from|against)|claims? against|take) (?:\w+ ){0,3}(?:estate|house|home)\b"
       r"(?! health)|medicaid liens?"),
    _p("medicaid", "Medicaid eligibility for long-term care (transfers of assets, spousal impoverishment)", 42, ("435",),
       r"look-?back period|transfers? of assets|spousal impoverishment|community spouse"),
    _p("medicaid", "Medicaid home and community-based services", 42, ("441",),
       r"home and community[- ]based|\bhcbs\b|1915\s*\(c\)|personal care services"),
    # how fast an MCO pays a clean claim is 42 CFR 447.46, held here
    _p("medicaid", "Medicaid managed care", 42, ("438",),
       r"managed care(?![^.?!]{0,80}\b(?:clean claims?|claims? payments?|pay (?:\w+ ){0,2}claims?)\b)"),
    _p("medicaid", "Medicaid non-emergency medical transportation", 42, ("431", "440"),
       r"\bnemt\b|non-?emergency (?:medical )?transportation|"
       r"\bmedicaid\b[^.?!]{0,80}\b(?:rides?|transportation)\b(?=[^.?!]{0,40}\b(?:appointments?|doctors?|dialysis|"
       r"clinics?|visits?)\b)"),
    _p("medicaid", "CHIP (the Children's Health Insurance Program)", 42, ("457",),
       r"(?-i:\bCHIP\b)|children's health insurance"),
    _p("medicaid", "Medicaid", 42, ("436", "447"), r"\bmedicaid\b"),
    # ------------------------------------------------------------------ other titles: agencies and laws people name
    _p("grants", "federal grant rules (the Uniform Guidance)", 2, ("200",),
       r"uniform guidance|2 cfr (?:part )?200|federal grants?\b|grant (?:recipients?|awards?|applications?)|"
       r"single audits?|indirect cost rates?"),
    _p("opm", "federal employment, pay, leave and benefits (OPM)", 5, (),
       r"\bopm\b|office of personnel management|federal employees?\b|\bfehb\b|thrift savings plan|"
       r"federal (?:civil service|government jobs?)"),
    _p("immigration", "immigration and naturalization (DHS, USCIS)", 8, (),
       r"\buscis\b|immigra\w+|green cards?|\bh-1b\b|work (?:visas?|permits?)|naturaliz\w+|asylum|\bdaca\b|"
       r"(?-i:\bI-9\b)|\bi-9\b|employment eligibility verification|\be-verify\b|permanent residen\w+"),
    _p("nuclear", "nuclear and energy rules (NRC, DOE)", 10, (),
       r"\bnrc\b|nuclear (?:regulatory|power|reactors?|materials?|plants?)|radioactive materials? licen\w+|"
       r"energy conservation standards?|appliance efficiency|energy star"),
    _p("elections", "federal campaign finance (FEC)", 11, (),
       r"\bfec\b|federal election commission|campaign (?:finance|contributions?|donations?)|"
       r"political action committees?|super pacs?"),
    _p("banking", "banking and consumer finance rules (Federal Reserve, OCC, FDIC, CFPB)", 12, (),
       r"\bfdic\b|deposit insurance|(?-i:\bOCC\b)|national banks?|federal reserve|regulation (?:b|cc|dd|e|z|x)\b|"
       r"truth in (?:lending|savings)|\bcfpb\b|consumer financial protection|fair credit reporting|\bfcra\b|"
       r"equal credit opportunity|\becoa\b|\brespa\b|mortgage (?:servicing|disclosures?|lenders?)|debit cards?|"
       r"credit cards?|overdraft|electronic fund transfers?|\bhmda\b|community reinvestment|credit unions?|"
       r"payday loans?|debt collect\w+|credit reports?|bank (?:accounts?|deposits?)"),
    _p("sba", "Small Business Administration programs", 13, (),
       r"\bsba\b|small business administration|\b7\s*\(a\) loans?|hubzone|\b8\s*\(a\) (?:program|business\w*)|"
       r"disaster loans?|women-owned small business|size standards? for small business"),
    _p("aviation", "aviation rules (FAA, DOT airline consumer rules)", 14, (),
       r"\bfaa\b|\bdrones?\b|unmanned aircraft|\buas\b|remote pilot|airlines?|airline pilots?|pilot (?:certificates?|licen\w+)|aircraft|airports?|"
       r"flight attendants?|air carriers?|tarmac delays?|overbook\w*|bumped from (?:a|my) flight|checked bags?|"
       r"(?:on|board) (?:a |the )?(?:plane|flight)s?"),
    _p("commerce", "export controls and Commerce Department rules", 15, (),
       r"export (?:controls?|administration regulations|licen\w+)|(?-i:\bEAR\b)|(?-i:\bBIS\b)|entity list|\bnoaa\b|census bureau"),
    _p("ftc", "FTC trade regulation rules", 16, (),
       r"\bftc\b|made in usa|federal trade commission|funeral (?:rule|homes?)|franchise (?:rule|disclosure)|"
       r"care label\w*|textile (?:labels?|fiber)|telemarketing sales rule|do[- ]not[- ]call|\bcoppa\b|"
       r"children's online privacy|endorsements? guides?|fake reviews?|negative option|click to cancel|"
       r"auto-?renew\w*|automatic(?:ally)? renew\w*|free trials?"),
    _p("cpsc", "consumer product safety rules (CPSC)", 16, ("1500", "1303", "1220"),
       r"\bcpsc\b|consumer product safety|children's products?|\btoys?\b|\bcribs?\b|bike helmets?|"
       r"bicycle helmets?|mattress flammab\w+|lead[- ]based paint (?:on|in) (?:toys|furniture)|window blind cords?"),
    _p("securities", "securities and commodities rules (SEC, CFTC)", 17, (),
       r"(?-i:\bSEC\b)|securities and exchange|securities (?:laws?|offerings?|registration)|"
       r"form (?:8-k|10-k|10-q|s-1|adv)\b|regulation (?:d|s-k|s-x|fd|a\+?|crowdfunding|best interest)\b|\bcftc\b|"
       r"commodity futures|investment advis\w+|broker-dealers?|insider trading|crowdfunding|accredited investors?|"
       r"proxy (?:statements?|rules?)|public compan(?:y|ies)|stock exchange"),
    _p("ferc", "federal energy regulation (FERC)", 18, (),
       r"\bferc\b|federal energy regulatory|interstate (?:natural gas )?pipelines?|electric (?:transmission|utility) rates"),
    _p("customs", "customs, duties and import entry (CBP)", 19, (),
       r"\bcbp\b|customs (?:and border|dut(?:y|ies)|bonds?|brokers?|declarations?|rulings?)|\btariffs?\b|"
       r"harmonized tariff|dut(?:y|ies) on imports?|import dut(?:y|ies)|duty[- ]free|de minimis (?:entry|shipments?)"),
    _p("ssa", "Social Security benefits", 20, ("404", "416"),
       r"social security (?:disability (?:benefits|insurance|applications?|claims?)|retirement (?:age|benefits?)?|"
       r"checks?|payment amounts?|earnings (?:test|limits?))|(?:collecting|claiming|drawing) social security|"
       r"\b(?:full|normal) retirement age\b|(?:apply|applying) for social security|\bssdi\b|\bssi\b|supplemental security income"),
    _p("dol-benefits", "workers' compensation programs and foreign labor certification (DOL)", 20, ("655", "702", "718"),
       r"longshore|black lung|federal employees'? compensation|\bfeca\b|\bh-2a\b|\bh-2b\b|labor certification|"
       r"prevailing wage"),
    _p("state-dept", "passports, visas and arms export rules (State Department)", 22, (),
       r"passports?|\bvisas?\b|consular|\bitar\b|international traffic in arms"),
    _p("highways", "federal highway rules", 23, (), r"federal-aid highway|\bmutcd\b|highway (?:signs?|construction funds)"),
    _p("hud", "housing rules (HUD)", 24, (),
       r"\bhud\b|fair housing|section 8(?![\d.(])|housing choice vouchers?|public housing|\bfha\b|"
       r"housing and urban development|manufactured homes?|landlords?|tenants?|rental housing|"
       r"lead[- ]based paint disclosure"),
    _p("indian-affairs", "Indian affairs (BIA)", 25, (),
       r"bureau of indian affairs|(?-i:\bBIA\b)|tribal (?:lands?|trust|enrollment)|indian (?:gaming|lands|tribes?)"),
    _p("irs", "federal tax rules (IRS)", 26, (),
       r"\birs\b|internal revenue|section 179|(?-i:\bIRA\b)|required minimum distributions?|business meals|"
       r"form (?:w-2|w-4|w-9|1099\S*|8300|941|990|1040|1065|1120\S*)|income tax\w*|tax returns?|tax-exempt|"
       r"\b501\s*\(c\)|depreciat\w+|payroll tax\w*|estimated tax\w*|capital gains?|tax deducti\w+|"
       r"deduct\w* (?:on|from) (?:my|our|your) taxes|tax credits?|\bhsa\b|health savings accounts?|"
       r"\bdeduct (?:my|our|the) (?:home office|mileage|car|vehicle|expenses?)\b|home office deduction|" + TAX_TREATMENT),
    _p("atf", "firearms, explosives and alcohol tax rules (ATF, TTB)", 27, (),
       r"\batf\b|\bttb\b|firearms?|\bffl\b|guns?\b|ammunition|explosives?|silencers?|suppressors?|"
       r"wine labels?|(?<!root )\bbeers?\b|distilled spirits|alcohol (?:labels?|labeling|permits?|excise)|brewer(?:y|ies)|"
       r"winer(?:y|ies)|distiller(?:y|ies)|\bhard ciders?\b|\bcider(?:y|ies)\b|\bhard seltzers?\b|\bmeader(?:y|ies)\b"),
    _p("ada", "the Americans with Disabilities Act", 28, ("35", "36"),
       r"(?-i:\bADA\b)|americans with disabilities|wheelchair ramps?|accessible parking|service animals?"),
    _p("osha", "OSHA workplace safety and health standards", 29, ("1904", "1910", "1926"),
       r"\bosha\b|occupational safety and health|lockout|tagout|forklifts?|noise exposure|respirators?|"
       r"respiratory protection|fall protection|scaffold\w*|\bsilica\b|permissible exposure limits?|"
       r"hazard communication|safety data sheets?|confined spaces?|workplace (?:injur\w+|safety|illness\w*)|"
       r"construction sites?|first aid kits?"),
    _p("fmla", "the Family and Medical Leave Act", 29, ("825",), r"\bfmla\b|family and medical leave|maternity leave"),
    _p("flsa", "wage and hour rules (Fair Labor Standards Act)", 29, ("516", "541", "778", "785"),
       r"\bflsa\b|fair labor standards|overtime|minimum wage|tipped employees?|tip credit|child labor|"
       r"exempt (?:employees?|from overtime)|independent contractors?|wage and hour"),
    _p("labor-relations", "employee benefits and labor relations (ERISA, NLRA, COBRA)", 29, ("2510", "2550", "2590"),
       r"\berisa\b|401\s*\(k\)|pension plans?|retirement plans?|\bnlrb?\b|\bnlra\b|labor unions?|union (?:elections?|dues|organizing|members)|collective bargaining|"
       r"\bcobra\b|davis-bacon|service contract act|\bwarn act\b|mass layoffs?|plant closings?"),
    _p("eeoc", "employment discrimination rules (EEOC)", 29, ("1604", "1625", "1630"),
       r"\beeoc\b|equal employment opportunity|(?:workplace|employment|hiring|pay|age|pregnancy) discrimination|"
       r"sexual harassment|reasonable accommodations? (?:for|at) work"),
    _p("prisons", "federal prisons (Bureau of Prisons)", 28, ("540", "541", "545"),
       r"bureau of prisons|federal (?:prisons?|inmates?)|(?-i:\bBOP\b)|prison (?:visits?|visitation|mail)|inmates?"),
    _p("mining", "mine safety and offshore energy rules", 30, (),
       r"\bmsha\b|mine safety|coal mines?|offshore (?:oil|drilling|leases?|wind)|\bboem\b|\bbsee\b"),
    _p("treasury", "sanctions and anti-money-laundering rules (OFAC, FinCEN)", 31, (),
       r"\bofac\b|economic sanctions|sanctions (?:lists?|programs?)|specially designated nationals|\bfincen\b|money laundering|\baml\b|"
       r"suspicious activity reports?|currency transaction reports?|beneficial owner\w*|bank secrecy"),
    _p("defense", "military and defense rules (DoD, TRICARE)", 32, (),
       r"\bdod\b|department of defense|tricare|military (?:service|bases?|recruit\w*)|armed forces"),
    _p("coast-guard", "boating, navigation and waters rules (Coast Guard, Army Corps)", 33, (),
       r"coast guard|life jackets?|personal flotation|recreational boats?|boating|navigable waters|"
       r"wetlands?|army corps|section 404 permits?|dredg\w+"),
    _p("education", "education rules (FERPA, Title IX, federal student aid, IDEA)", 34, ("99", "106", "300", "668", "685"),
       r"\bferpa\b|title ix|student loans?|pell grants?|\bfafsa\b|financial aid|(?-i:\bIDEA\b)|special education|"
       r"borrower defense|public service loan forgiveness|\bpslf\b|student records|school districts?"),
    _p("parks", "national parks and forests", 36, (),
       r"national (?:parks?|forests?|monuments?)|campgrounds?|park service|forest service"),
    # FDA's own part on patents: the extension a drug's or device's patent gets for its regulatory review
    _p("ip", "patent term restoration for FDA-regulated products", 21, ("60",),
       r"patent term (?:restoration|extensions?)|regulatory review periods?|\bdue diligence (?:petition|hearing)s?\b"),
    _p("ip", "patents, trademarks and copyrights", 37, (),
       r"\buspto\b|patent (?:applications?|terms?|fees?|office|protection)|(?:file|get|filing) (?:a )?patents?|"
       r"trademarks? (?:registration|applications?)|register (?:a |my )?trademarks?|copyrights?"),
    _p("va", "veterans' benefits (VA)", 38, (),
       r"(?-i:\bVA\b)|veterans?|\bgi bill\b|disability ratings?|service[- ]connected"),
    _p("postal", "postal rules (USPS)", 39, (),
       r"postal service|\busps\b|mailbox\w*|postage|mail(?:ing)? (?:rates|standards)|po box\w*"),
    _p("epa", "EPA environmental rules", 40, (),
       r"\bepa\b|\bfifra\b|pesticide (?:tolerances?|residue tolerances?|registration|applicators?)|restricted[- ]use pesticides?|"
       r"lead-safe|"
       r"renovation, repair|clean air act|clean water act|\bnpdes\b|storm ?water|hazardous waste|\brcra\b|"
       r"superfund|\bcercla\b|emissions? standards?|greenhouse gas\w*|asbestos|\btsca\b|safe drinking water act|"
       r"public water systems?|tap water|radon|refrigerants?|underground storage tanks?|air pollution|"
       r"wastewater discharges?|oil spills?|environmental protection agency"),
    _p("contractors", "federal contracting rules (FAR, OFCCP)", 48, (),
       r"federal acquisition regulation|\bfar\b (?:clauses?|part)|government contracts?|federal contractors?|"
       r"\bofccp\b|affirmative action plans?|sam\.gov|set-asides?|\bgsa\b schedules?|subcontracting plans?"),
    _p("fema", "disaster assistance and flood insurance (FEMA)", 44, (),
       r"\bfema\b|flood insurance|\bnfip\b|disaster (?:assistance|relief) (?:grants?|for individuals)|"
       r"federal emergency management"),
    _p("hipaa", "the HIPAA privacy, security and breach notification rules", 45, ("160", "164"),
       r"\bhipaa\b|protected health information|(?-i:\bPHI\b)|breach notification|medical records? privacy|"
       r"\bprivacy (?:violations?|rights?|breach(?:es)?)\b|\bviolat\w* (?:my|our|his|her|their|a patient's) privacy\b|"
       r"(?:copy|copies|access to) (?:of )?(?:my |your |their |a patient's )?(?:medical|health) records?"),
    _p("aca", "the ACA health insurance marketplace", 45, ("155", "156"),
       r"health insurance marketplace|affordable care act|obamacare|premium tax credits?|healthcare\.gov|"
       r"open enrollment (?:period )?for (?:health|marketplace)|essential health benefits"),
    _p("hhs-programs", "HHS family programs (TANF, child support, Head Start, child care)", 45, ("260", "302", "1302", "98"),
       r"\btanf\b|temporary assistance for needy|child support|head start|child care (?:subsid\w+|development fund)|"
       r"\bccdf\b|welfare (?:benefits|to work)"),
    _p("hhs-research", "the Common Rule for human subjects research", 45, ("46",),
       r"common rule|45 cfr (?:part )?46|federally funded (?:human )?research"),
    _p("peace-corps", "the Peace Corps", 22, ("305",),
       r"peace corps (?:volunteers?'? )?(?:applications?|eligibility|service|benefits|medical clearance|readjustment)"),
    _p("selective-service", "Selective Service registration", 32, ("1615",),
       r"selective service|draft registration|register for the draft"),
    _p("maritime", "shipping and maritime rules", 46, (),
       r"merchant mariners?|vessel (?:documentation|inspections?)|ocean (?:freight|shipping|carriers?)|"
       r"federal maritime commission|cruise ships?"),
    _p("fcc", "communications rules (FCC)", 47, (),
       r"\bfcc\b|federal communications|robocalls?|\btcpa\b|closed caption\w*|broadcast\w*|amateur radio|"
       r"ham radio|spectrum (?:licen\w+|auctions?)|cell(?:ular)? (?:towers?|phones? carriers?)|net neutrality|\bcpni\b|\b911\b|"
       r"text messages? marketing|telephone (?:consumer|carriers?)"),
    _p("tsa", "airport and transportation security (TSA)", 49, ("1540", "1544"),
       r"\btsa\b|airport security|security checkpoints?|carry-on (?:bags?|luggage|liquids|items)|precheck"),
    # food carried by truck or rail is FDA's sanitary transportation rule (21 CFR part 1, subpart O), whoever drives
    _p("dot", "sanitary transportation of human and animal food", 21, ("1",),
       r"sanitary transportation|"
       # (a food truck is a mobile kitchen, and a driver's hours are DOT's whatever the load)
       r"^(?!.*\b(?:hours?|cdl|drug tests?|hazmat)\b)(?:.*\bfood (?:loads?|cargo|in transit)\b|.*"
       r"\b(?<!food )(?:truck\w*|carriers?|shippers?|loaders?|reefers?|trailers?|rail ?cars?)\b[^.?!]{0,60}\bfoods?\b"
       r"(?!\s+trucks?)|"
       r".*\bfoods?\b(?!\s+trucks?)[^.?!]{0,40}\b(?:truck\w*|carriers?|shippers?|loaders?|reefers?|trailers?|"
       r"rail ?cars?)\b)"),
    _p("dot", "transportation rules (FMCSA, PHMSA, NHTSA, FRA, FTA)", 49, ("171", "382", "391", "395", "571"),
       r"hours[- ]of[- ]service|truck (?:drivers?|driving)|trucking|commercial (?:driver|motor vehicle)s?|\bcdl\b|"
       r"\bfmcsa\b|hazardous materials? (?:shipping|transport\w*|tables?)|\bhazmat\b|\bphmsa\b|pipeline safety|"
       r"lithium[- ](?:ion )?batter(?:y|ies)|\bnhtsa\b|seat ?belts?|car seats?|child safety seats?|"
       r"vehicle (?:recalls?|safety standards)|airbags?|railroad (?:safety|crossings?)|(?-i:\bFRA\b)|transit (?:agenc\w+|systems?)|"
       r"(?:dot|drug and alcohol) testing (?:of|for) (?:drivers|employees)|dot drug tests?|long-haul"),
    _p("wildlife", "fish, wildlife and marine rules (FWS, NMFS)", 50, (),
       r"endangered species (?:act )?(?:permits?|listings?|list)|(?-i:\bESA\b)|migratory birds?|fish and wildlife service|hunting|eagle feathers?|"
       r"marine mammals?|\bnmfs\b|fishing (?:quotas?|permits?|seasons?)|commercial fishing|whales?|sea turtles?"),
    # ------------------------------------------------------------------ laws no CFR part governs
    _p("no-rule", "religious dietary certification (kosher, halal), which no federal regulation defines",
       NOT_FEDERAL, (), r"\bkosher\b|\bhalal\b"),
    _p("incentives", "nutrition incentive matches at markets (Double Up Food Bucks, GusNIP grants), which grant terms "
       "and local programs set, not SNAP's regulations", NOT_FEDERAL, (),
       r"\bdouble up(?: food)? bucks\b|\bgusnip\b|\bnutrition incentives?\b|\bfresh (?:bucks|match)\b"),
    # the agreements under which FDA and a foreign authority accept each other's inspections are U.S. rules
    # (21 CFR part 26), though the question names the other side ("how long does an EU authority have to send FDA ...")
    _p("foreign", "mutual recognition of inspections between FDA and foreign authorities", 21, ("26",),
       r"mutual recognition|\bmras?\b|\bu\.?s\.?[- ]eu\b|\beu[- ]u\.?s\.?\b"),
    _p("foreign", "another country's own rules", NOT_FEDERAL, (),
       r"health canada|\bcfia\b|\befsa\b|european (?:union|commission)|\beu(?:'s)?\b|\bmhra\b|"
       r"\bpdo\b|protected designation of origin|"
       r"(?:sold|marketed|sell|selling|rules?|laws?|regulations?|requirements?|legal|allowed|banned|approved) in "
       r"(?:the )?(?:" + _COUNTRIES + r")\b|"
       r"\bexport\w* (?:\w+ ){0,4}to (?:the )?(?:" + _COUNTRIES + r")\b|"
       r"\b(?:" + _COUNTRIES + r")(?:'s| law| rules| regulations)\b|"
       r"\b(?:canadian|mexican|australian|japanese|chinese|british|german|french|italian|brazilian|korean|taiwanese|"
       r"vietnamese|filipino|thai|israeli|swiss|dutch|irish|russian|turkish|indian|singaporean) (?:law|rules|"
       r"regulations|requirements|government|standards|grades?|grade names|grading|certification|authorities|"
       r"ministry|agency|customs)\b"),
    _p("general-knowledge", "cooking and kitchen know-how", NOT_FEDERAL, (),
       r"\bhow (?:long|many minutes) (?:should|do|does|to|can) (?:i |you |we )?"
       r"(?:boil|bake|roast|grill|fry|rest|cook)\b|"
       r"\b(?:jammy|runny|soft[- ]boiled|hard[- ]boiled) (?:yolk|egg)s?\b|\bresting (?:a |the )?steak\b|"
       r"\b(?:best way|how (?:should|do|can) (?:i|we|you)) (?:to )?store\b[^.?!]{0,60}\b(?:at home|homemade|after (?:i |you )?open"
       r"|opened|leftovers?|mou?ld)|\b(?:grows?|growing|get|gets|getting) mou?ldy?\b|"
       r"\bstill (?:good|safe)(?: to eat)?\b[^.?!]{0,40}\b(?:after|past)\b|\b(?:stays?|staying) good\b|\bgo(?:es)? bad\b|"
       # "keep taking it" is going on doing something, not storing
       r"\bhow long (?:can|should|will) (?:i|we|you) (?:keep(?!\s+\w+ing\b)|store|leave)\b|"
       r"\bhow long (?:does|do|will|would)\b[^.?!]{0,60}\b(?:stay|last|keep)s?(?: \w+)? (?:safe|good|fresh)\b|"
       r"\b(?:how (?:do|can|should) (?:i|we|you)|way to) make\b[^.?!]{0,60}\bat home\b|\brecipes? for\b|"
       r"\b(?:meal|dinner|lunch|breakfast|snack|supper|recipe|menu|cooking) (?:ideas|suggestions)\b|"
       r"\bhow (?:do|can|should|would) (?:i|we|you) (?:\w+ )?(?:reheat|temper|melt|whip|knead|soften)\b|"
       r"\bsubstitut\w*\b[^.?!]{0,60}\brecipe\b|\brecipe\b[^.?!]{0,60}\bsubstitut\w*|"
       r"\bwhat (?:do|can|should) (?:you|i|we|people) (?:actually |even |usually )?(?:do|make|cook|serve) with\b|"
       r"\b(?:smell|odou?r|stink|stain)s? out of\b|\bget rid of (?:the |that |this )?(?:smell|odou?r|stink)\b"),
    _p("general-knowledge", "nutrition science (what foods naturally contain, their health effects)", NOT_FEDERAL,
       (), r"\bnaturally (?:lowest|highest|low|high|rich) in\b|\blactose[- ]intoleran\w*|"
           r"\bhow many calories (?:are|is) (?:in|there in)\b|"
           r"\bwhat age (?:should|can|do) (?:i|we|you) (?:start|begin|introduce)\b|"
           r"\bprevent (?:a |an )?(?:peanut |food |nut )?allerg\w+"),
    _p("general-knowledge", "how long an agency takes in practice (processing times), which no regulation states",
       NOT_FEDERAL, (),
       r"\b(?:usually|typically|normally|on average|in practice)\b[^.?!]{0,50}?\btakes?\b|"
       r"\btakes?\b[^.?!]{0,50}?\b(?:usually|typically|normally|on average|in practice)\b"),
    _p("general-knowledge", "counts of people or businesses in a program (statistics, not regulation)",
       NOT_FEDERAL, (),
       r"\bhow many (?:people|persons|americans|households|families|stores|retailers|recipients|participants|"
       r"beneficiaries|pharmacies|companies|firms|seniors|children|kids)\b"
       r"(?: (?:in|across) (?:the )?(?:us|u\.s\.|united states|country|nation|state))? "
       r"(?:are|were|have been|got|get|receive|received)(?: (?:now|currently|actually))?"
       r"(?: \w+){0,2} (?:enrolled|participating|served|receiving|on|in|using|authorized|registered|licensed|"
       r"disqualified|fined|"
       r"sanctioned|approved|denied)\b|"
       # how many did something in a past year: "How many people in the US donated blood last year?"
       # (not a count a rule sets: "how many donors must a blood bank test each year")
       r"\bhow many (?:people|persons|americans|households|families|stores|retailers|pharmacies|companies|firms|"
       r"patients|donors)\b(?![^.?!]{0,60}\b" + _A_RULE_SETS + r"\b)"
       r"[^.?!]{0,60}\b(?:last year|in (?:19|20)\d\d|(?:each|every|per) year|annually)\b"),
    _p("general-knowledge", "what share of a program's people are of a kind (statistics, not regulation)",
       NOT_FEDERAL, (),
       # "what share of SNAP recipients are 60 or older", not "what share of the admin costs does FNS pay" nor
       # "what percentage of households must be screened" (a share a rule sets)
       r"\b(?:what|which) (?:share|percent(?:age)?|proportion|fraction|portion) of (?:all )?(?:[\w-]+ ){0,3}"
       r"(?:recipients|participants|beneficiaries|enrollees|households|people|americans|seniors|users|patients|"
       r"consumers|adults|children|kids|donors)\b(?! " + _A_RULE_SETS + r")|"
       r"\bhow many\b[^.?!]{0,60}\bnationwide\b|\bnationwide\b[^.?!]{0,30}\b(?:are|were) (?:enrolled|on|receiving)\b"),
    _p("general-knowledge", "what something costs in stores (retail prices, which no regulation sets)", NOT_FEDERAL, (),
       r"\bcosts?\b[^.?!]{0,40}\b(?:at (?:cvs|walgreens|walmart|target|costco|rite aid|kroger|amazon|a warehouse store|"
       r"a seafood counter|the (?:store|pharmacy|drugstore|grocery(?: store)?|supermarket))|these days|"
       r"without insurance|wholesale|at retail)\b|"
       r"\b(?:usually|typically|normally|roughly) costs?\b|\b(?:average|retail|street|typical|going|shelf|wholesale) prices?\b"),
    _p("general-knowledge", "names, slogans and other creative help (not a regulation question)", NOT_FEDERAL, (),
       r"\b(?:suggest|come up with|brainstorm|think of|help me (?:write|name|pick|choose|brainstorm))\b[^.?!]{0,40}"
       r"\b(?:names?|slogans?|taglines?|logos?|jingles?|captions?)\b|\bcatchy\b"),
    _p("general-knowledge", "keeping pests out of a home or garage (household know-how)", NOT_FEDERAL, (),
       r"\b" + _PESTS + r"\b[^?]{0,120}\bhow (?:do|can|should) (?:i|we) (?:keep (?:them|it|those|these) out|get rid of|"
       r"stop|kill)\b|\bhow (?:do|can|should) (?:i|we) (?:keep|get rid of|kill|repel)\b[^.?!]{0,30}\b" + _PESTS + r"\b"),
    _p("events", "whether a program's trust fund will run out of money (a forecast, not regulation)", NOT_FEDERAL, (),
       r"\brun(?:ning)? out of (?:money|funds|funding|cash)\b|\bgo(?:ing)? (?:broke|bankrupt)\b|\binsolven\w+|"
       r"\btrust funds? (?:run|running|runs|will run) (?:out|dry)\b"),
    _p("statutes", "a whistleblower's (qui tam) suit and award under the False Claims Act, which a statute "
       "(31 U.S.C. 3730) sets, not these regulations", NOT_FEDERAL, (),
       r"\bfalse claims act\b|\bqui tam\b|\bwhistle-?blower(?:'s)? (?:awards?|rewards?|share|cut|percentage)\b"),
    _p("events", "who holds an office, and an agency's history (news and history, not regulation)", NOT_FEDERAL, (),
       r"\bwho (?:is|was) (?:the )?(?:current|first|new|acting|last|previous)\b|"
       r"\bwhen (?:was|were|did) (?:the )?(?:\w+ ){0,3}(?:first )?(?:created|founded|established|set up)\b|"
       # what an agency did lately is news: "did FDA recently approve a new painkiller"
       r"\b(?:did|has|have) (?:the )?(?:fda|usda|dea|cms|fns|hhs)\b[^.?!]{0,20}\b(?:recently|just|finally|lately)\b|"
       r"\brecently approved\b"),
    _p("events", "court cases and the latest developments (news, not regulation)", NOT_FEDERAL, (),
       r"\bwhat'?s the latest (?:on|with|in)\b|\bany (?:news|updates?) on\b|"
       r"\bcourt (?:fights?|battles?|challenges?|cases?|rulings?)\b|\blawsuits? (?:over|against|challenging)\b"),
    _p("events", "a particular product's recall or enforcement history (news, not regulation)", NOT_FEDERAL, (),
       r"\b(?:was|were|has|have|got)\b(?: \w+){0,6} recalled\b|\bwhich lot (?:codes|numbers)\b|"
       r"\b(?:ever|has|have|did|was|were)\b[^.?!]{0,60}\bwarning letters?\b|\bform 483s?\b|\b483 observations?\b|"
       r"\b(?:which|what) (?:\w+ ){0,3}(?:were|was|got|have been|has been) (?:fined|penalized|sanctioned|sued|shut down)\b|"
       # whether one product on the market complies: a test result, not a rule
       r"\b(?:actually|really) (?:meets?|compl(?:y|ies)|satisf(?:y|ies)) (?:with )?(?:the )?(?:[\w%-]+ ){0,4}"
       r"(?:standards?|rules?|requirements?|definition)\b"),
    _p("events", "which businesses hold, make or sell something (market facts, not regulation)", NOT_FEDERAL, (),
       # "which companies hold orphan designations", not "which companies must register" (a duty the rules state)
       r"\b(?:which|what) (?:\w+ ){0,2}(?:companies|brands|manufacturers|makers|firms|retailers|stores|pharmacies|"
       r"labs|suppliers|distributors)\b(?:[ ,]+(?:currently|now|already|actually|still|today|in \w+))*[ ,]+"
       r"(?:hold|have(?! to\b)|make|sell|carry|stock|offer|meet|use|own|produce|are (?:registered|approved|licensed|certified|"
       r"designated|authorized))\b|"
       r"\bwho (?:makes|sells|manufactures|produces|holds|owns)\b"),
    _p("general-knowledge", "whether a food or medicine is healthy or safe for someone (health advice, not regulation)",
       NOT_FEDERAL, (),
       r"\b(?:is|are)\b[^.?!]{0,60}\b(?:healthier|healthiest|better for (?:you|me|my \w+|kids|children))\b|"
       r"\b(?:is it|are they) safe (?:to eat|to drink|for (?:my|a|kids|children|babies|pregnant))\b|"
       r"\b(?:long[- ]term|lasting|permanent) (?:damage|harm)\b|\b(?:ok|okay|fine|alright)\b[^.?!]{0,30}\bto (?:have|eat|drink)\b|"
       r"\bsafe to eat\b[^.?!]{0,40}\b(?:while|when|during) (?:pregnant|pregnancy|breastfeeding|nursing)\b|"
       r"\bhow many (?:cans|servings|cups|eggs|glasses)\b[^.?!]{0,20}\b(?:a|per) (?:day|week)\b[^.?!]{0,20}\b(?:okay|ok|safe|healthy)\b"),
    _p("general-knowledge", "where to find a particular store, office or website (a locator, not regulation)",
       NOT_FEDERAL, (),
       r"\b(?:which|where)\b[^.?!]{0,50}\b(?:near|around|close to) (?:me|downtown|my (?:house|home|apartment))\b|"
       r"\bwhat (?:website|web ?site|url|app|phone number)\b"),
    _p("general-knowledge", "the federal poverty guidelines themselves (published each year by HHS, not in the CFR)",
       NOT_FEDERAL, (),
       r"\bwhat (?:are|is) (?:the )?(?:current |latest |this year'?s |new )?(?:federal )?poverty (?:guidelines?|levels?|lines?)\b"),
    _p("general-knowledge", "how a drug acts in the body (pharmacology), which no regulation states", NOT_FEDERAL,
       (), r"\bhalf[- ]li(?:fe|ves)\b|\bstays? in (?:your|my|his|her|the) (?:system|body|blood(?:stream)?)\b|"
           r"\bmechanism of action\b|\bhow (?:is|are|does|do) (?:\w+ ){1,3}metaboli[sz]ed\b|"
           r"\bsafe to (?:take|use|mix|combine)\b[^.?!]{0,60}\b(?:together|with)\b"),
    _p("state-law", "a state's or a locality's own law", NOT_FEDERAL, (),
       r"prop(?:osition)? 65|\bcalifornia(?:'s)? (?:law|rules|regulations)|cottage food|"
       # selling food made at home needs the State's or county's license, permit or inspection, whatever the food
       r"\b(?:homemade|home-made|home[- ]baked|home[- ]canned|home[- ]cooked|(?:my|our|her|his) (?:home )?kitchen|"
       r"from (?:my|our|her|his) (?:home|house))\b(?=[^?]*\b(?:licen[cs]e[ds]?|permits?|inspect(?:ion|ed|or)s?|"
       r"certified kitchen|commercial kitchen)\b)|"
       r"\bnyc\b|new york city|\b(?:city|county|municipal|local) (?:laws?|ordinances?|health (?:codes?|departments?))\b|"
       r"(?:the )?(?:fda )?food code\b|restaurant (?:health )?inspections?|health inspectors?|food trucks? (?:permits?|licen\w+|inspections?|rules|laws|regulations)|"
       r"food handler(?:'s|s)? (?:cards?|permits?|licen\w+)|\bservsafe\b|\bfood (?:safety|manager)(?:'s)? "
       r"certificat\w*|"
       # a State's bill: "California's SB 1383", "AB 418"
       r"\b(?:SB|AB)\s?\d{2,4}\b|prescription (?:drug )?monitoring programs?|\bpdmps?\b|"
       r"(?:marijuana|cannabis) dispensar(?:y|ies)|liquor licen\w+|business licen\w+|zoning|"
       r"\b(?:" + _US_STATES + r")(?:'s)? (?:laws?|statutes?|licens\w+ (?:boards?|laws?))\b|"
       # a license a State issues: "a Wisconsin cheesemaker license"
       r"\b(?:" + _US_STATES + r")(?:'s)? (?:[\w-]+ ){0,2}licen[cs]es?\b"),
)


def named_homes(question: str) -> list[tuple[ProgramHome, str]]:
    """The programs, agencies and laws the question names, one per family (the first entry of a family that
    matches), each with the words that named it."""
    found: list[tuple[ProgramHome, str]] = []
    families: set[str] = set()
    for home in PROGRAM_HOMES:
        if home.family in families:
            continue
        match = home.pattern.search(question)
        if match is not None:
            families.add(home.family)
            found.append((home, match.group(0)[:80]))
    return found


US_STATES = (
    "Alabama", "Alaska", "Arizona", "Arkansas", "California", "Colorado", "Connecticut", "Delaware", "Florida",
    "Georgia", "Hawaii", "Idaho", "Illinois", "Indiana", "Iowa", "Kansas", "Kentucky", "Louisiana", "Maine",
    "Maryland", "Massachusetts", "Michigan", "Minnesota", "Mississippi", "Missouri", "Montana", "Nebraska", "Nevada",
    "New Hampshire", "New Jersey", "New Mexico", "New York", "North Carolina", "North Dakota", "Ohio", "Oklahoma",
    "Oregon", "Pennsylvania", "Rhode Island", "South Carolina", "South Dakota", "Tennessee", "Texas", "Utah",
    "Vermont", "Virginia", "Washington", "West Virginia", "Wisconsin", "Wyoming", "District of Columbia",
)
# the territories hold their own Medicaid and nutrition figures as States do (42 CFR part 436, 7 CFR part 285)
US_TERRITORIES = ("Puerto Rico", "Guam", "U.S. Virgin Islands", "US Virgin Islands", "Virgin Islands",
                  "American Samoa", "Northern Mariana Islands")
_STATE_NAMES = "|".join(sorted((re.escape(s) for s in US_STATES), key=len, reverse=True))
_HOLDER_NAMES = "|".join(sorted((re.escape(s) for s in US_STATES + US_TERRITORIES), key=len, reverse=True))
# a State as the holder or recipient of something ("Texas's allotment", "slots assigned to Michigan", "the limit for
# Ohio"), not where the asker is ("a pharmacy in Ohio", "after the storm in Louisiana": the federal rule applies
# there as everywhere) nor a word describing a product ("Florida oranges")
_STATE_AS_HOLDER = re.compile(
    rf"\b(?:to|for)\s+(?:the\s+state\s+of\s+|the\s+)?(?P<a>{_HOLDER_NAMES})\b(?!\s+(?:residents?|households?|"
    rf"families|businesses|stores?|pharmac\w+|hospitals?|farms?|companies))|\b(?P<b>{_HOLDER_NAMES})(?:'s|\u2019s)|"
    # the place the asked figure is for, at the end of the question ("the Medicaid copay for a visit in Georgia?")
    rf"\bin\s+(?:the\s+state\s+of\s+|the\s+)?(?P<c>{_HOLDER_NAMES})\s*(?:this year|right now|now|today|currently)?"
    rf"\s*\?|"
    # a State's own program ("New York Medicaid charges", "Florida Medicaid pays"); a territory's Medicaid is the
    # federal part 436 ("in Guam or Puerto Rico Medicaid, can the limit ...")
    rf"\b(?P<d>{_STATE_NAMES})(?:'s|\u2019s)?\s+(?:medicaid|snap|wic|chip|csfp)\b",
    re.I,
)


_CANONICAL_STATE = {s.lower(): s for s in US_STATES + US_TERRITORIES}


# a State as the one making the rule ("does Texas require a doctor's note", "is it legal to sell raw milk in
# Pennsylvania"): that is the State's own law or policy, which a federal section answers only if it names the State
_STATE_RULING = re.compile(
    rf"\b(?:does|do|can|will|would|could|did|may)\s+(?:the\s+state\s+of\s+)?(?P<a>{_STATE_NAMES})\s+"
    rf"(?:(?:still|now|also|even|really|actually)\s+)?(?:require|make|let|allow|permit|ban|prohibit|charge|set|cap|limit|have\s+(?:a|its\s+own|any))\b|"
    rf"\b(?:legal|illegal|allowed|permitted|banned|against\s+the\s+law)\b[^.?!]{{0,60}}?\bin\s+(?:the\s+state\s+of\s+)?"
    rf"(?P<b>{_STATE_NAMES})\s*(?:[?.!,;]|$)",  # the clause ends there: "legal for my pharmacy in Ohio to sell" is not
    re.I,
)


def states_ruling(question: str) -> list[str]:
    """The U.S. States whose own rule the question asks about ("does Texas require …", "legal … in Ohio")."""
    found = [_CANONICAL_STATE[(m.group("a") or m.group("b")).lower()] for m in _STATE_RULING.finditer(question)]
    return list(dict.fromkeys(found))


def states_named(question: str) -> list[str]:
    """The U.S. States the question asks about as the holder of something ("Michigan's caseload", "the amount
    for Texas"), canonical names."""
    found = [_CANONICAL_STATE[(m.group("a") or m.group("b") or m.group("c") or m.group("d")).lower()]
             for m in _STATE_AS_HOLDER.finditer(question)]
    return list(dict.fromkeys(found))
