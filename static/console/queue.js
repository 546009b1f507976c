// The confirmation queue's keys: j/k move the selection, a/d approve/decline the selected item
// after a confirm step (a dialog that names the tool and the run, and takes the reason). The
// dialog only fills in and submits the item's own form, so the page works the same without JS.
// Plain JS; page text is only ever set with textContent.
(function () {
  "use strict";

  var items = [];
  var current = -1;
  var pending = null; // {item, action} while the dialog is open

  function select(index, focus) {
    if (!items.length) return;
    current = Math.max(0, Math.min(items.length - 1, index));
    items.forEach(function (item, i) {
      var on = i === current;
      item.classList.toggle("is-selected", on);
      if (on) item.setAttribute("aria-current", "true");
      else item.removeAttribute("aria-current");
    });
    if (focus) {
      items[current].focus();
      items[current].scrollIntoView({ block: "nearest" });
    }
  }

  function typing(target) {
    var tag = target && target.tagName;
    return tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" ||
      (target && target.isContentEditable);
  }

  function describe(item) {
    var title = item.querySelector("h2");
    var goal = item.querySelector("dd a");
    return (title ? title.textContent.replace(/\s+/g, " ").trim() : "this proposal") +
      (goal ? ' — run "' + goal.textContent.trim() + '"' : "");
  }

  function openDialog(action) {
    var dialog = document.getElementById("q-confirm");
    var item = items[current];
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

  // A click on Decline with no reason: say so beside the field instead of a round trip.
  function onSubmit(ev) {
    var form = ev.target;
    if (!form.hasAttribute || !form.hasAttribute("data-q-form")) return;
    if (!ev.submitter || !ev.submitter.hasAttribute("data-q-decline")) return;
    var reason = form.querySelector("[data-q-reason]");
    if (reason.value.trim()) return;
    ev.preventDefault();
    reason.setCustomValidity("A decline needs a reason.");
    reason.reportValidity();
    reason.addEventListener("input", function () { reason.setCustomValidity(""); }, { once: true });
  }

  document.addEventListener("DOMContentLoaded", function () {
    items = Array.prototype.slice.call(document.querySelectorAll("[data-confirmation-id]"));
    var hint = document.querySelector("[data-q-keys]");
    if (hint && items.length) hint.hidden = false;
    items.forEach(function (item, i) {
      item.addEventListener("focusin", function () { if (current !== i) select(i, false); });
    });
    select(0, false);
    document.addEventListener("keydown", onKey);
    document.addEventListener("submit", onSubmit);
    var dialog = document.getElementById("q-confirm");
    if (dialog) {
      dialog.querySelector("form").addEventListener("submit", confirmDialog);
      dialog.addEventListener("close", function () { pending = null; });
    }
  });
})();
