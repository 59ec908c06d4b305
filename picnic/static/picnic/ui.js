// The staff pages' small behaviours, no library: copy buttons ([data-copy]) and keyboard
// shortcuts: "/" focuses the search box, j/k (or ↓/↑) move through the rows of a list
// ([data-nav-list] tr[data-key]) and Enter opens the row's first link.
(function () {
  "use strict";
  function typing(target) {
    var tag = target && target.tagName;
    return tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || (target && target.isContentEditable);
  }
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("button[data-copy]");
    if (!button || !navigator.clipboard) return;
    navigator.clipboard.writeText(button.getAttribute("data-copy")).then(function () {
      button.setAttribute("data-copied", "");
      var was = button.textContent;
      button.textContent = "copied";
      setTimeout(function () { button.textContent = was; button.removeAttribute("data-copied"); }, 1500);
    });
  });
  function rows() {
    return Array.prototype.slice.call(document.querySelectorAll("[data-nav-list] tr[data-key]"));
  }
  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey || typing(event.target)) return;
    if (event.key === "/") {
      var search = document.querySelector("input[type=search]");
      if (search) { event.preventDefault(); search.focus(); search.select(); }
      return;
    }
    var down = event.key === "j" || event.key === "ArrowDown";
    var up = event.key === "k" || event.key === "ArrowUp";
    var list = rows();
    if (!list.length) return;
    var current = list.findIndex(function (row) { return row.classList.contains("cursor"); });
    if (event.key === "Enter" && current >= 0) {
      var link = list[current].querySelector("a[href]");
      if (link) { event.preventDefault(); link.click(); }
      return;
    }
    if (!down && !up) return;
    event.preventDefault();
    var next = current < 0 ? 0 : Math.min(Math.max(current + (down ? 1 : -1), 0), list.length - 1);
    if (current >= 0) list[current].classList.remove("cursor");
    list[next].classList.add("cursor");
    list[next].setAttribute("aria-current", "true");
    if (current >= 0 && current !== next) list[current].removeAttribute("aria-current");
    list[next].scrollIntoView({ block: "nearest" });
  });
})();
