/* regs web page: ask a question, follow the streamed progress, show the answer.
   No framework, no build step. All data is written with textContent (never innerHTML). */
(function () {
  "use strict";

  var MIN_CHARS = 3;
  var MAX_CHARS = 2000;
  var STEPS = ["retrieving", "generating plain", "generating legal", "scoring", "done"];
  var STATUS_TEXT = {
    "retrieving": "Finding the relevant sections…",
    "generating plain": "Writing the plain-English answer…",
    "generating legal": "Writing the legal-language answer…",
    "scoring": "Checking quotes, citations and confidence…",
    "done": "Done."
  };
  var REASONS = {
    not_found: "Not found in this corpus",
    divergent: "Sources diverge",
    conflicting: "Conflicting provisions",
    stale: "Stale or superseded text",
    below_authority: "Below regulatory authority",
    unverified_quote: "A quote could not be verified",
    unsupported_figure: "A figure is not supported by the text",
    unsupported_claims: "Claims not supported by the text",
    provider_unavailable: "The answering model is unavailable"
  };
  var TIERS = { high: "high", medium: "medium", low: "low", not_found: "not found" };

  function $(id) { return document.getElementById(id); }

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
  }

  // ------------------------------------------------------------------ question box
  var form, question, counter, invalid, askButton;
  var controller = null;

  function trimmedLength() { return question.value.trim().length; }

  function validationMessage() {
    var n = trimmedLength();
    if (n < MIN_CHARS) return "Please enter a question of at least " + MIN_CHARS + " characters.";
    if (n > MAX_CHARS) return "The question is too long: at most " + MAX_CHARS + " characters (it has " + n + ").";
    return "";
  }

  function updateCounter() {
    var n = question.value.length;
    counter.textContent = n + " / " + MAX_CHARS;
    counter.classList.toggle("over", trimmedLength() > MAX_CHARS);
    if (!invalid.hidden && !validationMessage()) showInvalid("");
  }

  function showInvalid(message) {
    invalid.textContent = message;
    invalid.hidden = !message;
    question.setAttribute("aria-invalid", message ? "true" : "false");
  }

  // ------------------------------------------------------------------ progress
  var seen = [];

  function resetProgress() {
    seen = [];
    var progress = $("progress");
    progress.hidden = false;
    progress.dataset.seen = "";
    progress.dataset.state = "running";
    progress.querySelectorAll(".step").forEach(function (li) {
      li.className = "step";
      li.removeAttribute("aria-current");
    });
    $("progress-text").textContent = "Sending the question…";
  }

  function markStep(status) {
    var progress = $("progress");
    if (seen.indexOf(status) === -1) seen.push(status);
    progress.dataset.seen = seen.join(",");
    var index = STEPS.indexOf(status);
    progress.querySelectorAll(".step").forEach(function (li) {
      var i = STEPS.indexOf(li.dataset.step);
      li.removeAttribute("aria-current");
      if (index === -1) return;
      if (i < index) {
        li.className = "step " + (seen.indexOf(li.dataset.step) === -1 ? "skipped" : "done");
      } else if (i === index) {
        li.className = "step " + (status === "done" ? "done" : "active");
        li.setAttribute("aria-current", "step");
      } else {
        li.className = "step";
      }
    });
    if (STATUS_TEXT[status]) $("progress-text").textContent = STATUS_TEXT[status];
  }

  function failProgress() {
    var progress = $("progress");
    progress.dataset.state = "failed";
    var active = progress.querySelector(".step.active");
    if (active) active.className = "step failed";
    $("progress-text").textContent = "Stopped.";
  }

  // ------------------------------------------------------------------ errors
  function showError(title, detail) {
    var box = $("error");
    clear(box);
    box.appendChild(el("strong", "error-title", title));
    if (detail) box.appendChild(el("p", "error-detail", detail));
    box.hidden = false;
  }

  function hideError() {
    var box = $("error");
    clear(box);
    box.hidden = true;
  }

  function httpErrorTitle(status) {
    if (status === 422) return "The question was not accepted (422)";
    if (status === 429) return "Too many requests (429)";
    if (status === 504) return "A stage took too long (504)";
    if (status === 503) return "The service is unavailable (503)";
    if (status >= 500) return "The service failed (" + status + ")";
    return "The request failed (" + status + ")";
  }

  function detailText(detail) {
    if (detail === undefined || detail === null) return "";
    if (typeof detail === "string") return detail;
    if (Array.isArray(detail)) {  // FastAPI validation errors
      return detail.map(function (d) { return d && d.msg ? d.msg : JSON.stringify(d); }).join("; ");
    }
    return JSON.stringify(detail);
  }

  function problemMessage(status, body, retryAfter) {
    var parts = [];
    var detail = detailText(body && body.detail);
    if (detail) parts.push(detail.charAt(0).toUpperCase() + detail.slice(1) + ".");
    if (body && body.stage) parts.push("Stage: " + body.stage + ".");
    if (status === 429 && retryAfter) parts.push("Try again in " + retryAfter + " seconds.");
    if (body && body.request_id) parts.push("Request id: " + body.request_id + ".");
    return parts.join(" ");
  }

  // ------------------------------------------------------------------ SSE over fetch
  function SSEParser(onEvent) {
    this.buffer = "";
    this.onEvent = onEvent;
  }

  SSEParser.prototype.push = function (text) {
    this.buffer += text;
    // Normalise line endings; keep a trailing "\r" until we know whether "\n" follows it.
    var hold = "";
    if (this.buffer.charAt(this.buffer.length - 1) === "\r") {
      hold = "\r";
      this.buffer = this.buffer.slice(0, -1);
    }
    this.buffer = this.buffer.replace(/\r\n?/g, "\n");
    var blocks = this.buffer.split("\n\n");
    this.buffer = blocks.pop() + hold;
    for (var i = 0; i < blocks.length; i++) this.dispatch(blocks[i]);
  };

  SSEParser.prototype.end = function () {
    var rest = this.buffer.replace(/\r\n?/g, "\n");
    this.buffer = "";
    if (rest.trim()) this.dispatch(rest);
  };

  SSEParser.prototype.dispatch = function (block) {
    var type = "message";
    var data = [];
    var lines = block.split("\n");
    for (var i = 0; i < lines.length; i++) {
      var line = lines[i];
      if (!line || line.charAt(0) === ":") continue;  // blank or comment (": ping")
      var colon = line.indexOf(":");
      var field = colon === -1 ? line : line.slice(0, colon);
      var value = colon === -1 ? "" : line.slice(colon + 1);
      if (value.charAt(0) === " ") value = value.slice(1);
      if (field === "event") type = value;
      else if (field === "data") data.push(value);
    }
    if (!data.length) return;  // nothing to deliver (ping, keep-alive)
    this.onEvent(type, data.join("\n"));
  };

  function ask(text) {
    if (controller) controller.abort();
    controller = new AbortController();
    var mine = controller;
    hideError();
    hideResult();
    resetProgress();
    setBusy(true);
    var gotResult = false;
    var failed = false;

    function onEvent(type, data) {
      if (mine !== controller) return;
      var payload;
      try { payload = JSON.parse(data); } catch (e) { payload = null; }
      if (type === "status" && payload && payload.status) {
        markStep(payload.status);
      } else if (type === "result" && payload) {
        gotResult = true;
        markStep("done");
        $("progress").dataset.state = "done";
        renderResult(payload);
      } else if (type === "error") {
        failed = true;
        failProgress();
        var status = payload && payload.status ? payload.status : 500;
        showError(httpErrorTitle(status), problemMessage(status, payload || { detail: data }));
      }
    }

    fetch("/v1/query/stream", {
      method: "POST",
      headers: { "Content-Type": "application/json", "Accept": "text/event-stream" },
      body: JSON.stringify({ question: text }),
      signal: mine.signal
    }).then(function (response) {
      if (!response.ok) {
        var retryAfter = response.headers.get("Retry-After");
        return response.text().then(function (raw) {
          var body;
          try { body = JSON.parse(raw); } catch (e) { body = { detail: raw || response.statusText }; }
          failed = true;
          failProgress();
          showError(httpErrorTitle(response.status), problemMessage(response.status, body, retryAfter));
        });
      }
      if (!response.body || !response.body.getReader) {
        return response.text().then(function (raw) {
          var parser = new SSEParser(onEvent);
          parser.push(raw);
          parser.end();
        });
      }
      var reader = response.body.getReader();
      var decoder = new TextDecoder("utf-8");
      var parser = new SSEParser(onEvent);
      function pump() {
        return reader.read().then(function (chunk) {
          if (chunk.done) {
            parser.push(decoder.decode());
            parser.end();
            return;
          }
          parser.push(decoder.decode(chunk.value, { stream: true }));
          return pump();
        });
      }
      return pump();
    }).then(function () {
      if (mine !== controller) return;
      if (!gotResult && !failed) {
        failProgress();
        showError("The answer stream ended early", "The connection closed before an answer arrived. Please try again.");
      }
    }).catch(function (err) {
      if (mine !== controller || (err && err.name === "AbortError")) return;
      failProgress();
      showError("Could not reach the service", err && err.message ? err.message : String(err));
    }).then(function () {
      if (mine === controller) {
        controller = null;
        setBusy(false);
      }
    });
  }

  function setBusy(busy) {
    askButton.disabled = busy;
    askButton.textContent = busy ? "Asking…" : "Ask";
    $("main").setAttribute("aria-busy", busy ? "true" : "false");
  }

  // ------------------------------------------------------------------ result
  function hideResult() {
    $("result").hidden = true;
    $("refusal").hidden = true;
    $("answer").hidden = true;
    $("retrieved").hidden = true;
    ["panel-plain", "panel-legal", "panel-citations", "refusal-evidence", "retrieved-list", "model"].forEach(
      function (id) { clear($(id)); });
    $("confidence").textContent = "";
    $("timing").textContent = "";
  }

  function parseRef(ref) {
    var m = /^\s*(\d+)\s+CFR\s+(?:§\s*)?(\d+[A-Za-z]?\.[0-9A-Za-z.\-]+)/.exec(ref || "");
    return m ? { title: parseInt(m[1], 10), section: m[2] } : null;
  }

  function sectionButton(label, title, section, heading) {
    var button = el("button", "ref", label);
    button.type = "button";
    button.dataset.title = String(title);
    button.dataset.section = section;
    button.setAttribute("aria-haspopup", "dialog");
    button.title = "Open " + title + " CFR " + section + (heading ? " — " + heading : "");
    button.addEventListener("click", function () { openSection(title, section, button); });
    return button;
  }

  function refButton(ref, paragraph, heading) {
    var label = ref + (paragraph || "");
    var parsed = parseRef(ref);
    if (!parsed) return el("span", "ref-text", label);
    return sectionButton(label, parsed.title, parsed.section, heading);
  }

  function paragraphs(container, text) {
    var pieces = String(text || "").split(/\n{2,}/);
    pieces.forEach(function (piece) {
      if (piece.trim()) container.appendChild(el("p", "answer-text", piece.trim()));
    });
  }

  function renderConfidence(confidence) {
    var badge = $("confidence");
    var tier = confidence && confidence.tier ? confidence.tier : "not_found";
    var score = confidence && typeof confidence.score === "number" ? confidence.score : 0;
    badge.dataset.tier = tier;
    badge.className = "badge tier-" + tier.replace(/_/g, "-");
    badge.textContent = (TIERS[tier] || tier) + " · " + score.toFixed(2);
    badge.setAttribute("aria-label", "Confidence " + (TIERS[tier] || tier) + ", score " + score.toFixed(2));
  }

  function renderModel(model) {
    var node = $("model");
    clear(node);
    model = model || {};
    var answered = model.answered;
    var answeredList = answered ? answered.split(/\s*,\s*/) : [];
    node.dataset.answered = answered || "";
    if (answered) {
      node.appendChild(document.createTextNode("Answered by "));
      node.appendChild(el("strong", "model-name", answered));
    } else {
      node.appendChild(el("span", "model-none", "No model answered (nothing was generated)"));
    }
    if (model.requested && answeredList.indexOf(model.requested) === -1) {
      node.appendChild(el("span", "model-sep", " · "));
      node.appendChild(document.createTextNode((answered ? "requested " : "configured ") + model.requested));
    }
    if (model.fallback_reason) {
      node.appendChild(el("span", "model-sep", " · "));
      node.appendChild(document.createTextNode("fallback: " + model.fallback_reason));
    }
  }

  function renderRefusal(refusal) {
    $("refusal-reason").textContent = REASONS[refusal.reason] || String(refusal.reason || "refused");
    $("refusal-reason").dataset.reason = refusal.reason || "";
    $("refusal-message").textContent = refusal.message || "";
    var list = $("refusal-evidence");
    clear(list);
    (refusal.evidence || []).forEach(function (ev) {
      var li = el("li", "evidence-item");
      li.appendChild(refButton(ev.cfr_ref, null, ev.heading));
      if (ev.heading) li.appendChild(el("span", "heading", " " + ev.heading));
      var meta = [];
      if (ev.figures && ev.figures.length) meta.push("figures: " + ev.figures.join(", "));
      if (ev.source_date) meta.push("source date " + ev.source_date);
      if (ev.status && ev.status !== "active") meta.push(ev.status);
      if (meta.length) li.appendChild(el("span", "evidence-meta", " — " + meta.join(" · ")));
      if (ev.detail) li.appendChild(el("p", "evidence-detail", ev.detail));
      list.appendChild(li);
    });
    $("refusal-evidence-wrap").hidden = !(refusal.evidence && refusal.evidence.length);
    $("refusal").hidden = false;
  }

  function renderAnswer(result) {
    var plain = $("panel-plain");
    paragraphs(plain, result.plain_english || "");
    if (!plain.firstChild) plain.appendChild(el("p", "empty", "No plain-English answer."));

    var legal = $("panel-legal");
    paragraphs(legal, result.legal || "");
    if (!legal.firstChild) legal.appendChild(el("p", "empty", "No legal-language answer."));
    var quotes = result.quotes || [];
    if (quotes.length) {
      legal.appendChild(el("h3", "quotes-title", "Quotes from the regulation"));
      quotes.forEach(function (q) {
        var block = el("blockquote", "quote");
        block.appendChild(el("p", "quote-text", q.text));
        var foot = el("footer", "quote-foot");
        foot.appendChild(refButton(q.cfr_ref, q.paragraph));
        var verified = q.verified === true;
        var mark = el("span", "verify " + (verified ? "verified" : "unverified"),
                      verified ? "✓ verified" : "unverified");
        mark.title = verified ? "The quote was found verbatim in the section text"
                              : "The quote could not be matched to the section text";
        foot.appendChild(mark);
        block.appendChild(foot);
        legal.appendChild(block);
      });
    }

    var cites = $("panel-citations");
    var citations = result.citations || [];
    if (citations.length) {
      var list = el("ul", "citations");
      citations.forEach(function (c) {
        var li = el("li", "citation");
        li.appendChild(sectionButton(c.cfr_ref + (c.paragraph || ""), c.title, c.section, c.heading));
        if (c.heading) li.appendChild(el("span", "heading", c.heading));
        list.appendChild(li);
      });
      cites.appendChild(list);
    } else {
      cites.appendChild(el("p", "empty", "No citations."));
    }
    $("answer").hidden = false;
    selectTab($("tab-plain"), false);
  }

  function renderRetrieved(items) {
    var list = $("retrieved-list");
    clear(list);
    items = items || [];
    items.forEach(function (item) {
      var li = el("li", "retrieved-item");
      li.appendChild(refButton(item.cfr_ref, null, item.heading));
      li.appendChild(el("span", "heading", item.heading));
      var sim = typeof item.similarity === "number" ? "similarity " + item.similarity.toFixed(2) : "similarity n/a";
      li.appendChild(el("span", "retrieved-meta", "rank " + item.rank + " · " + sim));
      list.appendChild(li);
    });
    $("retrieved-summary").textContent = "Retrieved sections (" + items.length + ")";
    $("retrieved").hidden = !items.length;
    $("retrieved").open = false;
  }

  function renderResult(result) {
    hideResult();
    renderConfidence(result.confidence);
    renderModel(result.model);
    if (result.status === "refused" && result.refusal) {
      renderRefusal(result.refusal);
    } else if (result.status === "refused") {
      renderRefusal({ reason: "refused", message: "No answer was given.", evidence: [] });
    }
    if (result.status === "answered") renderAnswer(result);
    renderRetrieved(result.retrieved);
    var total = result.timings_ms && result.timings_ms.total;
    $("timing").textContent = typeof total === "number" ? "Took " + (total / 1000).toFixed(1) + " s." : "";
    $("result").dataset.status = result.status || "";
    $("result").hidden = false;
  }

  // ------------------------------------------------------------------ tabs
  function tabs() { return Array.prototype.slice.call(document.querySelectorAll('[role="tab"]')); }

  function selectTab(tab, focus) {
    tabs().forEach(function (t) {
      var on = t === tab;
      t.setAttribute("aria-selected", on ? "true" : "false");
      t.tabIndex = on ? 0 : -1;
      $(t.getAttribute("aria-controls")).hidden = !on;
    });
    if (focus) tab.focus();
  }

  function onTabKey(event) {
    var all = tabs();
    var i = all.indexOf(event.currentTarget);
    var next = null;
    if (event.key === "ArrowRight") next = all[(i + 1) % all.length];
    else if (event.key === "ArrowLeft") next = all[(i - 1 + all.length) % all.length];
    else if (event.key === "Home") next = all[0];
    else if (event.key === "End") next = all[all.length - 1];
    if (next) {
      event.preventDefault();
      selectTab(next, true);
    }
  }

  // ------------------------------------------------------------------ section viewer
  var viewerOpener = null;
  var viewerRequest = 0;

  function openSection(title, section, opener) {
    var dialog = $("section-viewer");
    viewerOpener = opener || null;
    var token = ++viewerRequest;
    $("viewer-title").textContent = title + " CFR " + section;
    $("viewer-meta").textContent = "";
    $("viewer-note").textContent = "";
    clear($("viewer-text"));
    $("viewer-status").textContent = "Loading…";
    dialog.dataset.state = "loading";
    dialog.dataset.ref = title + " CFR " + section;
    if (!dialog.open) {
      if (typeof dialog.showModal === "function") dialog.showModal();
      else dialog.setAttribute("open", "");
    }
    fetch("/v1/sections/" + encodeURIComponent(title) + "/" + encodeURIComponent(section),
          { headers: { "Accept": "application/json" } })
      .then(function (response) {
        return response.text().then(function (raw) {
          var body;
          try { body = JSON.parse(raw); } catch (e) { body = { detail: raw }; }
          return { ok: response.ok, status: response.status, body: body };
        });
      })
      .then(function (r) {
        if (token !== viewerRequest) return;
        if (!r.ok) {
          dialog.dataset.state = "error";
          $("viewer-status").textContent = "Could not load the section (" + r.status + "): " + detailText(r.body.detail);
          return;
        }
        var s = r.body;
        $("viewer-title").textContent = (s.cfr_ref || (title + " CFR " + section)) + (s.heading ? " — " + s.heading : "");
        var meta = [];
        if (s.agency) meta.push(s.agency);
        if (s.part_heading) meta.push(s.part_heading);
        if (s.source_date) meta.push("source date " + s.source_date);
        $("viewer-meta").textContent = meta.join(" · ");
        $("viewer-status").textContent = "";
        var text = $("viewer-text");
        clear(text);
        text.textContent = s.text || "(This section has no text.)";
        $("viewer-note").textContent = s.source_note ? s.source_note : "";
        dialog.dataset.state = "loaded";
        text.scrollTop = 0;
      })
      .catch(function (err) {
        if (token !== viewerRequest) return;
        dialog.dataset.state = "error";
        $("viewer-status").textContent = "Could not load the section: " + (err && err.message ? err.message : err);
      });
  }

  function closeSection() {
    var dialog = $("section-viewer");
    if (dialog.open) {
      if (typeof dialog.close === "function") dialog.close();
      else dialog.removeAttribute("open");
    }
  }

  // ------------------------------------------------------------------ wiring
  function init() {
    form = $("ask-form");
    question = $("question");
    counter = $("question-count");
    invalid = $("question-invalid");
    askButton = $("ask");

    question.addEventListener("input", updateCounter);
    question.addEventListener("keydown", function (event) {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        if (typeof form.requestSubmit === "function") form.requestSubmit();
        else form.dispatchEvent(new Event("submit", { cancelable: true }));
      }
    });
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      var message = validationMessage();
      if (message) {
        showInvalid(message);
        question.focus();
        return;
      }
      showInvalid("");
      ask(question.value.trim());
    });

    tabs().forEach(function (tab) {
      tab.addEventListener("click", function () { selectTab(tab, false); });
      tab.addEventListener("keydown", onTabKey);
    });

    var dialog = $("section-viewer");
    $("viewer-close").addEventListener("click", closeSection);
    dialog.addEventListener("click", function (event) {
      if (event.target === dialog) closeSection();  // click on the backdrop
    });
    dialog.addEventListener("close", function () {
      if (viewerOpener && document.body.contains(viewerOpener)) viewerOpener.focus();
      viewerOpener = null;
    });

    updateCounter();
    document.documentElement.dataset.ready = "true";
  }

  // Exposed for tests of the parser only.
  window.regsSSEParser = SSEParser;

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
