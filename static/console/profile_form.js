// agentconsole: the profile form's grant rows (runs/views/grant_rows.py). "Add a grant" and "Add a
// constraint" clone the page's own <template> and number its fields; "Remove" takes a row out.
// Field names only change; nothing is inserted as HTML. Without this script the page still
// works: its blank grant row and blank constraint lines add one each per save.
(function () {
  "use strict";

  var ATTRS = ["name", "id", "for"];

  function renumber(root, token, n) {
    root.querySelectorAll("*").forEach(function (el) {
      ATTRS.forEach(function (attr) {
        var value = el.getAttribute(attr);
        if (value && value.indexOf(token) !== -1) {
          el.setAttribute(attr, value.split(token).join(String(n)));
        }
      });
      if (el.tagName === "TEMPLATE") renumber(el.content, token, n);
    });
  }

  function reveal(root) {
    root.querySelectorAll(
      "[data-add-grant], [data-remove-grant], [data-add-constraint], [data-remove-constraint]"
    ).forEach(function (button) { button.hidden = false; });
  }

  function nextIndex(list) {
    var n = parseInt(list.getAttribute("data-next-index"), 10) || 0;
    list.setAttribute("data-next-index", String(n + 1));
    return n;
  }

  function add(list, template, token) {
    var fragment = template.content.cloneNode(true);
    renumber(fragment, token, nextIndex(list));
    var row = fragment.firstElementChild;
    list.appendChild(fragment);
    reveal(row);
    var first = row.querySelector("select, input");
    if (first) first.focus();
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("button") : null;
    if (!button) return;
    if (button.hasAttribute("data-add-grant")) {
      var editor = button.closest("[data-grant-editor]");
      add(editor.querySelector("[data-grant-rows]"),
          editor.querySelector("template[data-grant-template]"), "__i__");
    } else if (button.hasAttribute("data-add-constraint")) {
      var box = button.closest(".grant-constraints");
      add(box.querySelector("[data-constraint-rows]"),
          box.querySelector("template[data-constraint-template]"), "__j__");
    } else if (button.hasAttribute("data-remove-grant")) {
      button.closest("[data-grant-row]").remove();
    } else if (button.hasAttribute("data-remove-constraint")) {
      button.closest("[data-constraint-row]").remove();
    }
  });

  document.querySelectorAll("[data-grant-editor]").forEach(reveal);
})();
