// End-user pages write times in UTC (the server knows no zone of theirs). This rewrites each
// <time data-local> (its text) and <time data-local-title> (its hover text) in the browser's
// own time zone and the page's language, to the second. Without JavaScript the UTC text stays.
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
  document.addEventListener("DOMContentLoaded", function () { rewrite(document); });
})();
