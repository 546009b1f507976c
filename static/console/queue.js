// The confirmation queue: a compact list and the selected item's card (issue 24 item 2).
// - j/k move along the list, Enter opens a row; a/d approve/decline the card shown, after a
//   confirm step (a dialog that names the tool and the run, and takes the reason). The dialog
//   only fills in and submits the card's own form, so the page works the same without JS.
// - On a wide screen a row opens beside the list without a reload (the server renders the
//   detail: /confirmations/<id>/detail/); on a phone the link opens the item on its own view.
// - Live: on /ws/console/ (console.js owns the socket) the page asks to watch its filters; the
//   server says which rows arrived (their HTML is fetched: /confirmations/rows/) and which left
//   (with the words to show, in a toast). A row under the pointer or the focus never moves:
//   a change at or above it (a row that left is struck out with its note; a new row waits)
//   happens once the pointer and the focus leave the list. Page text is set with textContent;
//   HTML only ever comes from our own server's templates.
(function () {
  "use strict";

  var rows = [];
  var current = -1;
  var pending = null; // {item, action} while the dialog is open
  var hovered = null;
  var send = null;
  var later = 0;
  var toastTimer = null;

  function list() { return document.querySelector("[data-q-rows]"); }
  function card() { return document.querySelector("[data-q-detail] [data-confirmation-id]"); }
  function refresh() { rows = Array.prototype.slice.call(document.querySelectorAll("[data-q-row]")); }
  function wide() { return window.matchMedia("(min-width: 901px)").matches; }

  function select(index, focus) {
    refresh();
    if (!rows.length) return;
    current = Math.max(0, Math.min(rows.length - 1, index));
    if (focus) {
      var link = rows[current].querySelector("[data-q-open]");
      link.focus();
      link.scrollIntoView({ block: "nearest" });
    }
  }

  function typing(target) {
    var tag = target && target.tagName;
    return tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" ||
      (target && target.isContentEditable);
  }

  // --- the detail pane ------------------------------------------------------------------------

  function fragment(html) {
    var t = document.createElement("template");
    t.innerHTML = html; // our server's own template output (no script: CSP forbids inline)
    return t.content;
  }

  function markSelected(id) {
    refresh();
    rows.forEach(function (row) {
      var on = row.getAttribute("data-q-row") === id;
      row.classList.toggle("is-selected", on);
      var link = row.querySelector("[data-q-open]");
      if (on) link.setAttribute("aria-current", "true"); else link.removeAttribute("aria-current");
    });
  }

  function open(link) {
    var id = link.getAttribute("data-q-open");
    var query = list().getAttribute("data-q-query");
    var url = "/confirmations/" + encodeURIComponent(id) + "/detail/" + (query ? "?" + query : "");
    fetch(url, { credentials: "same-origin" })
      .then(function (r) { if (!r.ok) throw new Error(String(r.status)); return r.text(); })
      .then(function (html) {
        var body = document.querySelector("[data-q-detail-body]");
        body.replaceChildren(fragment(html));
        markSelected(id);
        history.replaceState(null, "", link.href);
        var shown = card();
        if (shown) shown.focus({ preventScroll: true });
      })
      .catch(function () { location.href = link.href; });
  }

  function onClick(ev) {
    var link = ev.target.closest && ev.target.closest("[data-q-open]");
    if (!link || ev.button !== 0 || ev.ctrlKey || ev.metaKey || ev.shiftKey || !wide()) return;
    ev.preventDefault();
    open(link);
  }

  // --- deciding (the card's own form) ---------------------------------------------------------

  function describe(item) {
    var title = item.querySelector("h2");
    var goal = item.querySelector("dd a");
    return (title ? title.textContent.replace(/\s+/g, " ").trim() : "this proposal") +
      (goal ? ' — run "' + goal.textContent.trim() + '"' : "");
  }

  function openDialog(action) {
    var dialog = document.getElementById("q-confirm");
    var item = card();
    if (!dialog || !item || typeof dialog.showModal !== "function") return;
    // An item this person may only decline (they approved it already: four eyes) has no Approve.
    if (action === "approve" && !item.querySelector("[data-q-approve]")) return;
    pending = { item: item, action: action };
    var approve = action === "approve";
    dialog.querySelector("[data-q-title]").textContent =
      approve ? "Approve this proposal?" : "Decline this proposal?";
    dialog.querySelector("[data-q-what]").textContent = describe(item);
    dialog.querySelector("[data-q-args]").textContent =
      item.querySelector("[data-q-exact]").textContent;
    dialog.querySelector("[data-q-warn]").hidden = !item.querySelector("[data-q-untrusted]");
    // The exact bytes hold tags where secrets were masked: say so again, as the card does.
    var masked = item.querySelector("[data-q-masked]");
    var note = dialog.querySelector("[data-q-masked-note]");
    note.textContent = masked ? masked.textContent.replace(/\s+/g, " ").trim() : "";
    note.hidden = !masked;
    dialog.querySelector("[data-q-help]").textContent = approve
      ? "Optional when approving; recorded with the decision."
      : "Required: say why you decline it.";
    dialog.querySelector("[data-q-ok]").textContent = approve ? "Yes, approve" : "Yes, decline";
    dialog.querySelector("[data-q-dialog-error]").hidden = true;
    var reason = dialog.querySelector("textarea");
    reason.value = item.querySelector("[data-q-reason]").value;
    dialog.showModal();
    (approve ? dialog.querySelector("[data-q-ok]") : reason).focus();
  }

  function confirmDialog(ev) {
    var dialog = document.getElementById("q-confirm");
    if (!pending || !ev.submitter || !ev.submitter.hasAttribute("data-q-ok")) return;
    var reason = dialog.querySelector("textarea");
    if (pending.action === "decline" && !reason.value.trim()) {
      ev.preventDefault(); // stays open: a decline needs a reason
      dialog.querySelector("[data-q-dialog-error]").hidden = false;
      reason.focus();
      return;
    }
    var item = pending.item;
    item.querySelector("[data-q-reason]").value = reason.value;
    var button = item.querySelector(pending.action === "approve" ? "[data-q-approve]" : "[data-q-decline]");
    pending = null;
    // After the dialog closes (this submit closes it): the item's own form, by its own button.
    setTimeout(function () { item.querySelector("[data-q-form]").requestSubmit(button); }, 0);
  }

  function onKey(ev) {
    if (ev.ctrlKey || ev.metaKey || ev.altKey || typing(ev.target)) return;
    var dialog = document.getElementById("q-confirm");
    if (dialog && dialog.open) return;
    var key = ev.key;
    if (key === "j") select(current + 1, true);
    else if (key === "k") select(current - 1, true);
    else if (key === "a") openDialog("approve");
    else if (key === "d") openDialog("decline");
    else return;
    ev.preventDefault();
  }

  // A click on Decline (one or all) with no reason: say so beside the field, no round trip.
  function onSubmit(ev) {
    var form = ev.target;
    if (!form.hasAttribute) return;
    var one = form.hasAttribute("data-q-form") && ev.submitter && ev.submitter.hasAttribute("data-q-decline");
    var all = form.hasAttribute("data-q-batch-form") && ev.submitter && ev.submitter.hasAttribute("data-q-batch-decline");
    if (!one && !all) return;
    var reason = form.querySelector(one ? "[data-q-reason]" : "[data-q-batch-reason]");
    if (reason.value.trim()) return;
    ev.preventDefault();
    reason.setCustomValidity("A decline needs a reason.");
    reason.reportValidity();
    reason.addEventListener("input", function () { reason.setCustomValidity(""); }, { once: true });
  }

  // --- live updates -----------------------------------------------------------------------------

  function anchor() {
    var focused = document.activeElement && document.activeElement.closest
      ? document.activeElement.closest("[data-q-row]") : null;
    return hovered || focused;
  }

  // Changes at or above the row under the pointer or the focus wait until the person leaves
  // the list (it would move under them); changes below it happen at once (nothing moves).
  var deferred = [];

  function atOrAbove(row) {
    var a = anchor();
    return !!a && (row === a || !!(row.compareDocumentPosition(a) & Node.DOCUMENT_POSITION_FOLLOWING));
  }

  function settle() {
    if (anchor() || !deferred.length) return;
    var todo = deferred;
    deferred = [];
    todo.forEach(function (fn) { fn(); });
  }

  function note(text) {
    var el = document.querySelector("[data-q-note]");
    if (!el) return;
    el.textContent = text; // a toast: fixed at the bottom, it moves no row
    el.hidden = !text;
    clearTimeout(toastTimer);
    if (text) toastTimer = setTimeout(function () { el.hidden = true; }, 15000);
  }

  function watch() {
    var el = list();
    if (!send || !el) return;
    refresh();
    send({
      type: "queue.watch",
      query: el.getAttribute("data-q-query") || "",
      shown: rows.map(function (r) { return r.getAttribute("data-q-row"); }),
      since: el.getAttribute("data-q-since") || ""
    });
  }

  function removed(items) {
    var said = [];
    items.forEach(function (item) {
      said.push(item.tool_name + " (run " + item.run_id.slice(0, 12) + "…): " + item.note);
      var shown = card();
      if (shown && shown.getAttribute("data-confirmation-id") === item.id) {
        var warn = document.createElement("p");
        warn.className = "alert alert-warn";
        warn.setAttribute("role", "status");
        warn.setAttribute("data-q-gone-note", "");
        warn.textContent = "This confirmation left the queue: " + item.note + ". Its buttons no longer apply.";
        shown.prepend(warn);
        shown.querySelectorAll("button").forEach(function (b) { b.disabled = true; });
      }
      var row = document.querySelector('[data-q-row="' + CSS.escape(item.id) + '"]');
      if (!row) return;
      if (atOrAbove(row)) {
        // Struck out in place at its own height: the note takes the line the run and age had.
        row.style.height = row.getBoundingClientRect().height + "px"; // CSSOM: allowed by CSP
        row.classList.add("is-gone");
        var span = document.createElement("span");
        span.className = "q-row-gone-note";
        span.textContent = item.note;
        row.querySelector("[data-q-open]").appendChild(span);
        deferred.push(function () { row.remove(); });
      } else {
        row.remove();
      }
    });
    note(said.join("; "));
  }

  function place(row) {
    var el = list();
    var key = row.getAttribute("data-q-sort");
    refresh();
    var next = null;
    for (var i = 0; i < rows.length; i++) {
      if (rows[i].getAttribute("data-q-sort") > key) { next = rows[i]; break; }
    }
    var first = el.getAttribute("data-q-first-page") === "1";
    var last = el.getAttribute("data-q-last-page") === "1";
    if ((next && next === rows[0] && !first) || (!next && !last)) return false; // another page
    row.classList.add("is-new");
    var insert = function () { el.insertBefore(row, next && next.isConnected ? next : null); };
    if (next && atOrAbove(next)) deferred.push(insert); else insert();
    return true;
  }

  function added(items) {
    var el = list();
    if (!el || !items.length) return;
    var query = el.getAttribute("data-q-query");
    var ids = items.map(function (i) { return "id=" + encodeURIComponent(i.id); }).join("&");
    fetch("/confirmations/rows/?" + (query ? query + "&" : "") + ids, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : ""; })
      .then(function (html) {
        var shown = 0;
        Array.prototype.slice.call(fragment(html).querySelectorAll("[data-q-row]")).forEach(function (row) {
          if (document.querySelector('[data-q-row="' + CSS.escape(row.getAttribute("data-q-row")) + '"]')) return;
          if (place(row)) shown += 1; else later += 1;
        });
        var empty = document.querySelector("[data-q-empty]");
        if (empty && shown) empty.hidden = true;
        var words = [];
        if (shown) words.push(shown + " new waiting, marked at the left edge");
        if (later) words.push(later + " new on other pages");
        if (words.length) note(words.join("; ") + ".");
      })
      .catch(function () {});
  }

  document.addEventListener("console:open", function (ev) { send = ev.detail.send; watch(); });
  document.addEventListener("console:message", function (ev) {
    var data = ev.detail;
    if (data.type === "queue.removed") removed(data.items || []);
    else if (data.type === "queue.added") added(data.items || []);
  });

  document.addEventListener("DOMContentLoaded", function () {
    refresh();
    // On a phone the filters fold away (their summary says when some are set); open without
    // JS, so nothing is out of reach.
    var box = document.querySelector("[data-q-filter-box]");
    if (box && !wide()) box.open = false;
    var hint = document.querySelector("[data-q-keys]");
    if (hint && rows.length) hint.hidden = false;
    var el = list();
    if (el) {
      el.addEventListener("mouseover", function (ev) { hovered = ev.target.closest("[data-q-row]"); });
      el.addEventListener("mouseleave", function () { hovered = null; settle(); });
      el.addEventListener("focusout", function () { setTimeout(settle, 0); });
      el.addEventListener("focusin", function (ev) {
        refresh();
        var row = ev.target.closest("[data-q-row]");
        if (row) current = rows.indexOf(row);
      });
      el.addEventListener("click", onClick);
    }
    document.addEventListener("keydown", onKey);
    document.addEventListener("submit", onSubmit);
    var dialog = document.getElementById("q-confirm");
    if (dialog) {
      dialog.querySelector("form").addEventListener("submit", confirmDialog);
      dialog.addEventListener("close", function () { pending = null; });
    }
  });
})();
