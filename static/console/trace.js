// agentconsole: a run's live trace (templates/console/runs/detail.html).
//
// 1. Connect to /ws/runs/<id>/trace/?after=<last sequence on the page> (runs/consumers.py): the
//    server replays what the page missed, then streams new events in order.
// 2. Each event is appended to the timeline once: anything at or below the last sequence seen is
//    a duplicate and dropped; a planner.output opens the next step's group (the rule of
//    runs/domain/timeline.py, whose summaries are mirrored below).
// 3. A dropped socket reconnects with after=<last seen>, so nothing is missed or repeated. After
//    three failed connections (or without WebSocket) the page polls /api/runs/<id>/events/
//    instead, and keeps trying the socket now and then.
// 4. State, version, budgets, observations, ledger, artifacts and the final answer are re-read
//    from the server's own page (debounced) and swapped in: the server renders, escaped.
// Data from events is only ever set as text, never as HTML.
(function () {
  "use strict";

  var root = document.querySelector("[data-run-page]");
  var trace = root && root.querySelector("[data-trace]");
  if (!trace) return;
  var runId = root.getAttribute("data-run-id");
  var last = parseInt(trace.getAttribute("data-last-sequence"), 10) || 0;
  var liveEl = root.querySelector("[data-trace-live]");
  var clockOffset = (parseInt(root.getAttribute("data-server-now-ms"), 10) || Date.now()) - Date.now();

  function setLive(text) { if (liveEl) liveEl.textContent = text; }

  // -- summaries (runs/domain/timeline.py) ---------------------------------------------------
  function v(d, k) { var x = d[k]; return x === null || x === undefined ? "?" : String(x); }
  function fmt(text) {
    return function (d) { return text.replace(/\{(\w+)\}/g, function (_, k) { return v(d, k); }); };
  }
  function layer(name, ok) {
    return function (d) {
      var r = d.result === undefined || d.result === null ? "passed" : String(d.result);
      return [ok.indexOf(r) >= 0 ? "ok" : "warn", "Gate · " + name + ": " + r];
    };
  }
  var SUMMARIES = {
    "run.created": ["info", fmt("Run created (planner {planner}, {grants} grants)")],
    "run.started": ["info", fmt("Run started")],
    "state.transitioned": ["info", fmt("State: {from} → {to}")],
    "planner.requested": ["info", fmt("Model asked ({endpoint}, {model}): waiting for its reply")],
    "planner.output": ["info", function (d) {
      var what = { tool: "a tool call", final: "a final answer" }[d.kind] || v(d, "kind");
      return "Planner proposed " + what + " (" + v(d, "source") + ")";
    }],
    "proposal.received": [null, function (d) {
      var text = "Proposal: " + v(d, "tool") + " v" + v(d, "version");
      var u = d.cites_untrusted || [];
      return u.length ? ["warn", text + ", derived from untrusted content (" + u.join(", ") + ")"]
        : ["info", text];
    }],
    "proposal.schema.validated": [null, layer("schema", ["passed"])],
    "policy.capability.checked": [null, layer("authorization", ["granted"])],
    "policy.confirmation.checked": [null, layer("confirmation", ["not-required", "confirmed"])],
    "proposal.rejected": ["bad", fmt("Gate · rejected at {layer}: {code}")],
    "proposal.waiting-confirmation": ["warn", fmt("Waiting for a confirmation ({code})")],
    "proposal.loop-detected": ["bad", fmt("Loop detected: {code} ({count} repeats)")],
    "confirmation.decided": [null, function (d) {
      var text = "Confirmation " + v(d, "decision") + " by " + v(d, "by");
      var names = Array.isArray(d.approved_by) ? d.approved_by : [];
      // Four eyes: name every approver (and who had approved an item then declined).
      if (names.length > 1 || (names.length && d.decision !== "approved")) {
        text += " (approved by " + names.join(", ") + ")";
      }
      return [d.decision === "approved" ? "ok" : "bad", text];
    }],
    "confirmation.approval-recorded": [null, function (d) {
      var count = Array.isArray(d.approved_by) ? d.approved_by.length : "?";
      return ["warn", "Approval " + count + " of " + v(d, "needed") + " by " + v(d, "by") +
        ": waiting for a second approver"];
    }],
    "tool.started": ["info", fmt("Tool {tool} v{version} started")],
    "tool.completed": [null, function (d) {
      var tone = d.status === "succeeded" ? "ok" : d.status === "unknown" ? "warn" : "bad";
      var text = "Tool " + v(d, "tool") + " " + v(d, "status") + " in " + v(d, "duration_ms") + " ms";
      return [tone, d.code ? text + " (" + d.code + ")" : text];
    }],
    "tool.retrying": ["warn", fmt("Tool {tool} retrying (attempt {attempt})")],
    "tool.recovered": ["warn", fmt("Tool {tool} recovered ({how})")],
    "tool.result.validated": [null, function (d) {
      if (d.valid === false) return ["bad", "Verification: output invalid"];
      return ["ok", "Verification: output valid, " +
        (d.verified ? "post-condition verified" : "no post-condition")];
    }],
    "tool.verification-failed": ["bad", fmt("Verification failed: {code}")],
    "final.validated": ["ok", function (d) {
      return "Final answer validated (cites " + ((d.citations || []).join(", ") || "nothing") + ")";
    }],
    "final.rejected": ["bad", fmt("Final answer rejected: {code}")],
    "run.cancel-requested": ["warn", fmt("Cancel requested by {by}")],
    "run.stopped": [null, function (d) {
      var tone = d.status === "completed" ? "ok" : d.status === "failed" ? "bad" : "warn";
      var text = "Run stopped: " + v(d, "reason") + " (" + v(d, "status") + ")";
      if (!d.outcome_flag) return [tone, text];
      // A completed run whose write did not take effect (runs/domain/writes.py): no success.
      var n = 0;
      ["writes_rejected", "writes_failed", "writes_unknown"].forEach(function (k) {
        if (typeof d[k] === "number") n += d[k];
      });
      return ["warn", text + ", " + n + " write" + (n === 1 ? "" : "s") + " not applied"];
    }],
    "handoff.opened": ["warn", fmt("Handoff opened: {reason}")],
    "handoff.claimed": ["info", fmt("Handoff claimed by {by}")],
    "handoff.resolved": ["info", fmt("Handoff resolved: {action} by {by}")],
    "run.values-erased": ["muted", fmt("Values erased at the user's request")]
  };

  function describe(ev) {
    var d = ev.details || {};
    var s = SUMMARIES[ev.event];
    if (!s) return ["muted", String(ev.event)];
    var out = s[1](d);
    return s[0] === null ? out : [s[0], out];
  }

  // -- the timeline --------------------------------------------------------------------------
  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function openGroup(step) {
    var section = el("section", "trace-step");
    section.setAttribute("data-step-group", typeof step === "number" ? String(step) : "run");
    section.appendChild(el("h3", "", typeof step === "number" ? "Step " + step : "Run"));
    section.appendChild(el("ol", "trace-events"));
    var empty = trace.querySelector("[data-trace-empty]");
    if (empty) empty.remove();
    trace.appendChild(section);
    return section;
  }

  function append(ev) {
    if (typeof ev.sequence !== "number" || ev.sequence <= last) return false; // duplicate
    var groups = trace.querySelectorAll(".trace-step");
    var group = groups[groups.length - 1];
    // A step opens at its model request (planner.requested) or, with no request before it, at
    // its planner.output (the rule of runs/domain/timeline.py build_timeline).
    var opens = ev.event === "planner.output" || ev.event === "planner.requested";
    var step = opens ? (ev.details || {}).step : null;
    if (!group || (opens && group.getAttribute("data-step-group") !== String(step))) {
      group = openGroup(step);
    }
    var out = describe(ev);
    var li = el("li", "trace-event trace-new tone-" + out[0]);
    li.setAttribute("data-seq", String(ev.sequence));
    li.setAttribute("data-event", String(ev.event));
    li.appendChild(el("span", "trace-seq mono", "#" + ev.sequence));
    li.appendChild(document.createTextNode(" "));
    li.appendChild(el("code", "trace-type", String(ev.event)));
    li.appendChild(document.createTextNode(" "));
    li.appendChild(el("span", "trace-summary", out[1]));
    var details = ev.details || {};
    var keys = Object.keys(details);
    if (keys.length) {
      // key=value words, as Entry.details_text: strings as they are, anything else as JSON.
      li.appendChild(el("span", "trace-details mono", keys.map(function (k) {
        var value = details[k];
        return k + "=" + (typeof value === "string" ? value : JSON.stringify(value));
      }).join(" ")));
    }
    group.querySelector(".trace-events").appendChild(li);
    last = ev.sequence;
    trace.setAttribute("data-last-sequence", String(last));
    return true;
  }

  function receive(events) {
    var added = 0;
    events.forEach(function (ev) { if (append(ev)) added += 1; });
    if (added) scheduleRefresh();
  }

  // -- the rest of the page, re-read from the server -----------------------------------------
  var refreshTimer = null;
  var refreshing = false;
  var again = false;

  function scheduleRefresh() {
    if (refreshTimer) return;
    refreshTimer = setTimeout(function () { refreshTimer = null; refresh(); }, 400);
  }

  function refresh() {
    if (refreshing) { again = true; return; }
    refreshing = true;
    fetch(location.pathname, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) { if (html) swap(new DOMParser().parseFromString(html, "text/html")); })
      .catch(function () {})
      .then(function () {
        refreshing = false;
        if (again) { again = false; scheduleRefresh(); }
      });
  }

  function swap(doc) {
    var fresh = doc.querySelector("[data-run-page]");
    if (!fresh) return;
    root.setAttribute("data-status", fresh.getAttribute("data-status") || "");
    root.setAttribute("data-finished", fresh.getAttribute("data-finished") || "false");
    doc.querySelectorAll("[data-live-section]").forEach(function (node) {
      var name = node.getAttribute("data-live-section");
      var mine = root.querySelector("[data-live-section='" + name + "']");
      if (!mine || mine.contains(document.activeElement)) return; // never under the user's hands
      mine.replaceWith(document.importNode(node, true));
    });
    // Step headlines (what each step came to), as the server sums them up.
    doc.querySelectorAll("[data-trace] .trace-step").forEach(function (step) {
      var key = step.getAttribute("data-step-group");
      var mine = trace.querySelectorAll(".trace-step[data-step-group='" + key + "'] > h3");
      var title = step.querySelector("h3");
      if (mine.length === 1 && title) mine[0].replaceWith(document.importNode(title, true));
    });
    if (finished()) setLive(socket ? "live · run finished" : "run finished");
  }

  function finished() {
    return root.getAttribute("data-finished") === "true"; // the server's word (machine.TERMINAL)
  }

  // Time left, counted down between server reads.
  function tick() {
    var box = root.querySelector("[data-time-budget]");
    if (!box || finished()) return;
    var deadline = parseInt(box.getAttribute("data-deadline-ms"), 10);
    var total = parseInt(box.getAttribute("data-total-ms"), 10) || 1;
    var left = Math.max(0, deadline - (Date.now() + clockOffset));
    var text = Math.floor(left / 1000) + " s left of " + Math.floor(total / 1000) + " s";
    var label = box.querySelector("[data-budget-text]");
    if (label) label.textContent = text;
    var bar = box.querySelector(".bar");
    if (bar) {
      bar.setAttribute("aria-label", "Time: " + text);
      // The fill's width is an SVG attribute: the page's CSP refuses style="" attributes.
      var fill = bar.querySelector("rect");
      var percent = Math.min(100, Math.round(100 * (total - left) / total));
      if (fill) fill.setAttribute("width", String(percent));
    }
  }
  setInterval(tick, 1000);

  // -- transport: the socket, the poll -------------------------------------------------------
  var socket = null;
  var failures = 0;
  var pollTimer = null;

  function poll() {
    fetch("/api/runs/" + encodeURIComponent(runId) + "/events/?limit=200&after=" + last, {
      credentials: "same-origin", headers: { Accept: "application/json" }
    })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (body) {
        if (!body) return;
        receive(body.results);
        if (body.next_after !== null) poll(); // more than a page behind: read on at once
      })
      .catch(function () {});
  }

  function startPolling() {
    if (pollTimer) return;
    setLive("polling");
    poll();
    pollTimer = setInterval(poll, 2000);
  }

  function stopPolling() {
    if (pollTimer) { clearInterval(pollTimer); pollTimer = null; }
  }

  function connect() {
    if (typeof WebSocket !== "function") { startPolling(); return; }
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    var url = scheme + location.host + "/ws/runs/" + encodeURIComponent(runId) + "/trace/?after=" + last;
    var ws = new WebSocket(url);
    var opened = false;
    var ended = ""; // the server's words when it closes the socket for good (its last frame)
    socket = ws;
    ws.onopen = function () { opened = true; failures = 0; stopPolling(); };
    ws.onmessage = function (msg) {
      var data;
      try { data = JSON.parse(msg.data); } catch (e) { return; }
      if (!data) return;
      if (data.type === "event") receive([data]);
      else if (data.type === "replayed") setLive(finished() ? "live · run finished" : "live");
      else if (data.type === "closed") ended = String(data.message || "");
    };
    ws.onclose = function (ev) {
      if (socket === ws) socket = null;
      if (ev.code >= 4400 && ev.code < 4500) { setLive(ended || "not available (" + ev.code + ")"); return; }
      if (!opened) failures += 1;
      if (failures >= 3) startPolling();
      else setLive("reconnecting…");
      // Resume after the last event seen: the server replays from there.
      setTimeout(connect, pollTimer ? 30000 : Math.min(10000, 250 * Math.pow(2, failures)));
    };
  }

  connect();
})();
