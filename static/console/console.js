// agentconsole: what every page does. The top bar's live counts (pending confirmations, open
// handoffs) for operators and reviewers, from /ws/console/; when the socket keeps failing, a poll
// of /api/queues/ every 10 s instead. Plain JS, no data ever inserted as HTML.
(function () {
  "use strict";

  function showCounts(counts) {
    document.querySelectorAll("[data-count]").forEach(function (el) {
      var value = counts[el.getAttribute("data-count")];
      if (typeof value !== "number") return;
      el.textContent = String(value);
      el.hidden = value === 0;
      el.setAttribute("aria-label", value + " waiting");
    });
  }

  function setLive(text) {
    var el = document.querySelector("[data-live-status]");
    if (!el) return;
    el.textContent = text;
    el.hidden = !text;
  }

  function poll() {
    fetch("/api/queues/", { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (body) { if (body) showCounts(body); })
      .catch(function () {});
  }

  function watchQueues() {
    var failures = 0;
    var pollTimer = null;
    function connect() {
      var scheme = location.protocol === "https:" ? "wss://" : "ws://";
      var ws = new WebSocket(scheme + location.host + "/ws/console/");
      ws.onopen = function () {
        failures = 0;
        setLive("live");
        if (pollTimer) { clearInterval(pollTimer); pollTimer = null; }
        // A page script (queue.js) may ask for more on this socket: it hears "console:open"
        // on every (re)connect with a send function, and "console:message" for every frame.
        document.dispatchEvent(new CustomEvent("console:open", {
          detail: { send: function (obj) { if (ws.readyState === 1) ws.send(JSON.stringify(obj)); } }
        }));
      };
      ws.onmessage = function (msg) {
        var data;
        try { data = JSON.parse(msg.data); } catch (e) { return; }
        if (data && data.type === "queues") showCounts(data);
        if (data && data.type) document.dispatchEvent(new CustomEvent("console:message", { detail: data }));
      };
      ws.onclose = function (ev) {
        if (ev.code >= 4400 && ev.code < 4500) { setLive(""); return; } // refused: don't retry
        failures += 1;
        if (failures >= 3 && !pollTimer) {
          setLive("polling");
          poll();
          pollTimer = setInterval(poll, 10000);
        }
        setTimeout(connect, Math.min(30000, 500 * Math.pow(2, failures)));
      };
    }
    connect();
  }

  document.addEventListener("DOMContentLoaded", function () {
    if (document.body.hasAttribute("data-watch-queues")) watchQueues();
  });

  // A form or button with data-confirm="question" asks before it acts.
  document.addEventListener("submit", function (ev) {
    var form = ev.target;
    var question = form.getAttribute && form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) ev.preventDefault();
  }, true);
})();
