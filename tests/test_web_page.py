"""The web page at `/`, driven in real headless Chromium against the running stack (`live_gateway`)."""
from __future__ import annotations

import json
import re
import shutil
import tempfile
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
SCREENSHOT = Path("/tmp/regs-page.png")
GOUDA = "How much milkfat must gouda cheese contain?"
FORKLIFT = "What are the OSHA rules for forklift operator training?"
ANSWER_TIMEOUT = 90

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing: apt-get install -y chromium"),
    pytest.mark.skipif(not CHROMEDRIVER.exists(),
                       reason=f"{CHROMEDRIVER} is missing: apt-get install -y chromium-driver"),
]

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install selenium)")
from selenium.common.exceptions import TimeoutException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@pytest.fixture(scope="module")
def browser():
    profile = tempfile.mkdtemp(prefix="regs-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                f"--user-data-dir={profile}", "--window-size=1280,1400"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture()
def page(browser, live_gateway):
    """A fresh load of the page, with its script initialised."""
    browser.get(live_gateway.rstrip("/") + "/")
    WebDriverWait(browser, 15).until(
        lambda d: d.execute_script("return document.documentElement.dataset.ready === 'true'"),
        "app.js did not initialise (CSP violation or script error?)")
    return browser


def text_of(driver, css: str) -> str:
    """Text content, hidden or not (Selenium's .text is empty for hidden elements)."""
    return driver.execute_script("var n = document.querySelector(arguments[0]); return n ? n.textContent : null;",
                                 css) or ""


def visible(driver, css: str) -> bool:
    found = driver.find_elements(By.CSS_SELECTOR, css)
    return bool(found) and found[0].is_displayed()


def severe_console_errors(driver) -> list[str]:
    try:
        logs = driver.get_log("browser")
    except Exception:  # noqa: BLE001 - not every driver exposes the log
        return []
    return [entry["message"] for entry in logs if entry.get("level") == "SEVERE"
            and "favicon.ico" not in entry["message"]]


def ask(driver, question: str, submit: str = "click") -> None:
    box = driver.find_element(By.ID, "question")
    box.clear()
    box.send_keys(question)
    if submit == "enter":
        box.send_keys(Keys.ENTER)
    else:
        driver.find_element(By.ID, "ask").click()


def wait_for_result(driver, status: str | None = None) -> None:
    """Wait until the result is rendered; fail at once, with the page's message, on an error."""
    def done(d):
        if visible(d, "#error"):
            return "error"
        got = d.execute_script("return document.getElementById('result').dataset.status || ''")
        return got or False

    try:
        outcome = WebDriverWait(driver, ANSWER_TIMEOUT, poll_frequency=0.25).until(done)
    except TimeoutException:
        pytest.fail(f"no result within {ANSWER_TIMEOUT}s; progress: {text_of(driver, '#progress')!r}")
    if outcome == "error":
        pytest.fail(f"the page shows an error: {text_of(driver, '#error')!r}")
    if status is not None:
        assert outcome == status, f"expected a {status} result, got {outcome}: {text_of(driver, '#result')[:600]!r}"


# ------------------------------------------------------------------------------------------------
def test_answer_tabs_confidence_model_and_section_viewer(page):
    driver = page
    ask(driver, GOUDA)
    WebDriverWait(driver, ANSWER_TIMEOUT, poll_frequency=0.25).until(
        lambda d: text_of(d, "#panel-plain").strip() or visible(d, "#error") or visible(d, "#refusal"))
    wait_for_result(driver, "answered")

    # the three tabs, each with content, switching by click
    for name in ("plain", "legal", "citations"):
        tab = driver.find_element(By.ID, f"tab-{name}")
        tab.click()
        assert tab.get_attribute("aria-selected") == "true"
        panel = driver.find_element(By.ID, f"panel-{name}")
        assert panel.is_displayed(), f"#panel-{name} is not shown after clicking its tab"
        assert panel.text.strip(), f"#panel-{name} is empty"
        others = [t for t in ("plain", "legal", "citations") if t != name]
        for other in others:
            assert driver.find_element(By.ID, f"tab-{other}").get_attribute("aria-selected") == "false"
            assert not driver.find_element(By.ID, f"panel-{other}").is_displayed()
    assert "46" in text_of(driver, "#panel-plain") or "46" in text_of(driver, "#panel-legal")

    # keyboard: arrow keys move between tabs
    driver.find_element(By.ID, "tab-plain").click()
    driver.find_element(By.ID, "tab-plain").send_keys(Keys.ARROW_RIGHT)
    assert driver.find_element(By.ID, "tab-legal").get_attribute("aria-selected") == "true"
    assert driver.switch_to.active_element.get_attribute("id") == "tab-legal"

    # legal tab: quotes as blockquotes with a verified / unverified marker
    quotes = driver.find_elements(By.CSS_SELECTOR, "#panel-legal blockquote")
    driver.save_screenshot(str(SCREENSHOT.with_name("regs-page-legal.png")))
    for quote in quotes:
        assert re.search(r"\d+ CFR \S+", quote.text), quote.text
        assert "verified" in quote.text, quote.text

    # citations
    citations = text_of(driver, "#panel-citations")
    assert "21 CFR 133.142" in citations, citations

    # confidence badge
    badge = driver.find_element(By.ID, "confidence")
    tier = badge.get_attribute("data-tier")
    assert tier in {"high", "medium", "low", "not_found"}, tier
    assert re.fullmatch(r"(high|medium|low|not found) · \d\.\d\d", badge.text.strip()), badge.text

    # the model that answered, never the requested one
    model = driver.find_element(By.ID, "model").text
    assert "extractive" in model, model
    assert re.search(r"answered by\s+extractive", model, re.IGNORECASE), model
    assert not re.search(r"answered by\s+(anthropic|claude)", model, re.IGNORECASE), model
    assert "anthropic" not in (driver.find_element(By.ID, "model").get_attribute("data-answered") or "")

    driver.find_element(By.ID, "tab-citations").click()
    driver.execute_script("window.scrollTo(0, 0)")
    driver.save_screenshot(str(SCREENSHOT))
    assert SCREENSHOT.stat().st_size > 10_000

    # open the cited section
    button = driver.find_element(By.CSS_SELECTOR, '#panel-citations button.ref[data-section="133.142"]')
    button.click()
    viewer = driver.find_element(By.ID, "section-viewer")
    WebDriverWait(driver, 20).until(
        lambda d: viewer.get_attribute("data-state") in ("loaded", "error"))
    assert viewer.get_attribute("data-state") == "loaded", viewer.text
    assert viewer.is_displayed()
    shown = viewer.text
    assert "Gouda cheese" in shown, shown
    assert "46 percent" in shown, shown
    assert driver.execute_script(
        "return getComputedStyle(document.getElementById('viewer-text')).whiteSpace") in ("pre-wrap", "pre-line")
    driver.save_screenshot(str(SCREENSHOT.with_name("regs-page-section.png")))
    # Escape closes the dialog and focus returns to the citation
    driver.switch_to.active_element.send_keys(Keys.ESCAPE)
    WebDriverWait(driver, 5).until(lambda d: not viewer.is_displayed())
    assert driver.switch_to.active_element.get_attribute("data-section") == "133.142"

    # the retrieved sections list is collapsed and lists what was retrieved
    retrieved = driver.find_element(By.ID, "retrieved")
    assert retrieved.get_attribute("open") is None
    assert "133.142" in text_of(driver, "#retrieved-list")

    assert severe_console_errors(driver) == []


def test_progress_records_the_streamed_steps(page):
    driver = page
    ask(driver, GOUDA, submit="enter")
    wait_for_result(driver, "answered")
    progress = driver.find_element(By.ID, "progress")
    seen = [s for s in (progress.get_attribute("data-seen") or "").split(",") if s]
    assert "retrieving" in seen, seen
    assert seen[-1] == "done", seen
    order = ["retrieving", "generating plain", "generating legal", "scoring", "done"]
    assert all(step in order for step in seen), seen
    assert seen == sorted(seen, key=order.index), f"steps out of order: {seen}"
    assert len(seen) >= 2
    done_steps = [li.get_attribute("data-step")
                  for li in driver.find_elements(By.CSS_SELECTOR, "#progress li.step.done")]
    assert "retrieving" in done_steps and "done" in done_steps, done_steps
    assert progress.get_attribute("data-state") == "done"


def test_refused_question_shows_reason_message_and_evidence(page):
    driver = page
    ask(driver, FORKLIFT)
    wait_for_result(driver, "refused")
    assert visible(driver, "#refusal")
    reason = driver.find_element(By.ID, "refusal-reason")
    assert reason.get_attribute("data-reason") == "not_found"
    assert reason.text == "Not found in this corpus"
    message = driver.find_element(By.ID, "refusal-message").text
    assert len(message) > 10, message
    assert not visible(driver, "#panel-plain")
    assert driver.find_element(By.ID, "confidence").get_attribute("data-tier") == "not_found"
    assert not re.search(r"answered by\s+(anthropic|claude)", driver.find_element(By.ID, "model").text, re.I)
    driver.save_screenshot(str(SCREENSHOT.with_name("regs-page-refused.png")))
    assert severe_console_errors(driver) == []


def test_too_short_question_is_refused_by_the_page_without_calling_the_api(page):
    driver = page
    driver.execute_script("""
        window.__calls = [];
        var original = window.fetch;
        window.fetch = function (url) { window.__calls.push(String(url)); return original.apply(this, arguments); };
    """)
    box = driver.find_element(By.ID, "question")
    box.send_keys("ab")
    assert driver.find_element(By.ID, "question-count").text.startswith("2 /")
    driver.find_element(By.ID, "ask").click()
    invalid = driver.find_element(By.ID, "question-invalid")
    WebDriverWait(driver, 5).until(lambda d: invalid.is_displayed())
    assert "at least 3 characters" in invalid.text
    assert box.get_attribute("aria-invalid") == "true"
    # Enter submits (and is refused the same way); Shift+Enter is a new line
    box.send_keys(Keys.ENTER)
    box.send_keys(Keys.SHIFT, Keys.ENTER)
    assert box.get_attribute("value") == "ab\n"
    assert driver.execute_script("return window.__calls") == []
    assert not visible(driver, "#progress")
    assert not visible(driver, "#result")
    # typing a valid question clears the message
    box.send_keys("c")
    WebDriverWait(driver, 5).until(lambda d: not invalid.is_displayed())


# ------------------------------------------------------------------------------------------------
# the page's handling of the wire (split chunks, CRLF, pings, HTTP errors), through a stubbed fetch
# ------------------------------------------------------------------------------------------------
STUB_FETCH = """
var chunks = arguments[0], status = arguments[1], headers = arguments[2];
var original = window.fetch;
window.fetch = function (url, options) {
  if (String(url).indexOf('/v1/query/stream') === -1) return original.apply(this, arguments);
  var encoder = new TextEncoder(), i = 0;
  var body = new ReadableStream({
    pull: function (controller) {
      if (i < chunks.length) { controller.enqueue(encoder.encode(chunks[i++])); }
      else { controller.close(); }
    }
  });
  return Promise.resolve(new Response(body, {status: status, headers: headers}));
};
"""


def canned_result() -> dict:
    return {
        "id": "stub", "status": "answered", "question": "q",
        "plain_english": "Plain <b>answer</b> line one.\nline two.",
        "legal": "Legal text.",
        "quotes": [{"text": "quoted <script>words</script>", "cfr_ref": "21 CFR 133.142", "paragraph": "(a)",
                    "verified": True},
                   {"text": "not in the text", "cfr_ref": "21 CFR 133.138", "paragraph": None, "verified": False}],
        "citations": [{"cfr_ref": "21 CFR 133.142", "title": 21, "part": "133", "section": "133.142",
                       "paragraph": None, "heading": "Gouda cheese."}],
        "confidence": {"score": 0.861, "tier": "high", "retrieval_score": 0.7, "citation_coverage": 1.0},
        "refusal": None,
        "model": {"requested": "anthropic/claude-haiku-4-5", "answered": "extractive/regs-extractive-1.0",
                  "fallback_reason": "no_api_key", "calls": []},
        "retrieved": [], "flags": [], "timings_ms": {"total": 1234.0},
    }


def test_stream_parsing_survives_split_chunks_crlf_and_pings(page):
    driver = page
    wire = ("event: status\r\ndata: {\"id\":\"s\",\"status\":\"retrieving\"}\r\n\r\n"
            ": ping\r\n\r\n"
            "event: status\r\ndata: {\"id\":\"s\",\"status\":\"generating plain\"}\n\n"
            f"event: result\r\ndata: {json.dumps(canned_result())}\r\n\r\n")
    cuts = [3, 14, 49, 50, 51, 60, 61, 90, 200, 333]  # across field names, between \r and \n, inside JSON
    pieces, last = [], 0
    for cut in cuts:
        pieces.append(wire[last:cut])
        last = cut
    pieces.append(wire[last:])
    driver.execute_script(STUB_FETCH, pieces, 200, {"Content-Type": "text/event-stream"})
    ask(driver, "a stubbed question")
    wait_for_result(driver, "answered")
    assert driver.find_element(By.ID, "progress").get_attribute("data-seen") == "retrieving,generating plain,done"
    plain = driver.find_element(By.ID, "panel-plain")
    assert "Plain <b>answer</b> line one." in plain.text  # escaped, not rendered as markup
    assert driver.find_elements(By.CSS_SELECTOR, "#panel-plain b, #panel-legal script") == []
    assert driver.find_element(By.ID, "model").text == (
        "Answered by extractive/regs-extractive-1.0 · requested anthropic/claude-haiku-4-5 · fallback: no_api_key")
    assert driver.find_element(By.ID, "confidence").text == "high · 0.86"
    driver.find_element(By.ID, "tab-legal").click()
    markers = [m.text for m in driver.find_elements(By.CSS_SELECTOR, "#panel-legal blockquote .verify")]
    assert markers == ["✓ verified", "unverified"]
    assert "21 CFR 133.142(a)" in driver.find_element(By.ID, "panel-legal").text


@pytest.mark.parametrize("status, body, headers, expected", [
    (429, {"detail": "rate limit of 60 requests per minute exceeded"}, {"Retry-After": "17"},
     ["429", "Rate limit of 60 requests per minute exceeded", "Try again in 17 seconds"]),
    (422, {"detail": "the question is too long: at most 2000 characters (it has 2400)"}, {},
     ["422", "too long"]),
    (504, {"detail": "the generate_plain stage missed its 60s deadline", "stage": "generate_plain"}, {},
     ["504", "generate_plain stage missed its 60s deadline", "Stage: generate_plain"]),
])
def test_http_errors_show_their_detail(page, status, body, headers, expected):
    driver = page
    driver.execute_script(STUB_FETCH, [json.dumps(body)], status, {"Content-Type": "application/json", **headers})
    ask(driver, "a stubbed question")
    WebDriverWait(driver, 10).until(lambda d: visible(d, "#error"))
    shown = driver.find_element(By.ID, "error").text
    for piece in expected:
        assert piece in shown, shown
    assert not visible(driver, "#result")
    assert driver.find_element(By.ID, "ask").is_enabled()


def test_error_event_in_the_stream_names_the_stage(page):
    driver = page
    wire = ("event: status\r\ndata: {\"id\":\"s\",\"status\":\"retrieving\"}\r\n\r\n"
            "event: error\r\ndata: {\"status\": 504, \"detail\": \"the retrieve stage missed its 60s deadline\", "
            "\"stage\": \"retrieve\"}\r\n\r\n")
    driver.execute_script(STUB_FETCH, [wire], 200, {"Content-Type": "text/event-stream"})
    ask(driver, "a stubbed question")
    WebDriverWait(driver, 10).until(lambda d: visible(d, "#error"))
    assert "retrieve stage missed its 60s deadline" in driver.find_element(By.ID, "error").text
    assert driver.find_element(By.ID, "progress").get_attribute("data-state") == "failed"
