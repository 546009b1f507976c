// agentconsole: a run's live trace (templates/console/runs/detail.html).
//
// 1. Connect to /ws/runs/<id>/trace/?after=<last sequence on the page> (runs/consumers.py): the
//    server replays what the page missed, then streams new events in order.
// 2. Each event is appended to the timeline once: anything at or below the last sequence seen is
//    a duplicate and dropped; a planner.output opens the next step's group (the rule of
//    runs/domain/console/timeline.py). Each event comes with its summary and tone in the page's own
//    words (timeline.said): this script renders them and holds no wording of its own.
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

  // -- what an event says: the server's words (runs/domain/console/timeline.py), sent with each event --
  function describe(ev) {
    var tone = typeof ev.tone === "string" && /^[a-z]+$/.test(ev.tone) ? ev.tone : "muted";
    return [tone, typeof ev.summary === "string" ? ev.summary : String(ev.event)];
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
    // its planner.output (the rule of runs/domain/console/timeline.py build_timeline).
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
