// End-user pages write times in the zone stored with the user (UTC until the browser has told
// it). This rewrites each <time data-local> (its text) and <time data-local-title> (its hover
// text) in the browser's own time zone and the page's language, to the second, and tells the
// server the browser's zone when it differs from the page's (stored with the user, used from
// the next page on). Without JavaScript the server's text stays.
(function () {
  "use strict";
  var format;
  try {
    format = new Intl.DateTimeFormat(document.documentElement.lang || undefined, {
      dateStyle: "medium", timeStyle: "long",
    });
  } catch (e) {
    return;
  }

  function rewrite(root) {
    var times = (root || document).querySelectorAll("time[data-local], time[data-local-title]");
    for (var i = 0; i < times.length; i++) {
      var when = new Date(times[i].getAttribute("datetime"));
      if (isNaN(when.getTime())) continue;
      var text = format.format(when);
      if (times[i].hasAttribute("data-local")) {
        times[i].textContent = text;
        times[i].title = times[i].getAttribute("datetime");
      } else {
        times[i].title = text;
      }
    }
  }

  // htmx swaps the live partials in: each new piece of page is rewritten as it arrives.
  document.addEventListener("htmx:load", function (event) { rewrite(event.target); });
  document.addEventListener("DOMContentLoaded", function () {
    rewrite(document);
    var root = document.body, url = root.getAttribute("data-time-zone-url");
    var zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
    if (!url || !zone || zone === root.getAttribute("data-time-zone")) return;
    var token = document.querySelector("input[name=csrfmiddlewaretoken]");
    var body = new URLSearchParams({ time_zone: zone });
    fetch(url, { method: "POST", body: body, credentials: "same-origin",
      headers: { "X-CSRFToken": token ? token.value : "" } }).then(function (answer) {
      if (answer.ok) root.setAttribute("data-time-zone", zone);
    });
  });
})();
