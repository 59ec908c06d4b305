// End-user pages write times in the zone stored with the user (UTC until the browser has told
// it), as core/l10n.py's format_datetime: "6 de dez. de 2026 09:32 BRT", the IANA name only
// on hover. When the browser's own zone is not the page's (a first visit, a trip), this
// rewrites every <time data-local> (its text) and <time data-local-title> (its hover text) in
// the browser's zone, in the same shape, so that a page never shows two clocks; and tells the
// server the browser's zone (stored with the user, used from the next page on). When the zones
// agree the server's text stays as written. Without JavaScript the server's text stays.
(function () {
  "use strict";
  var lang = document.documentElement.lang || undefined;
  var zone, dateTime;
  try {
    zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
    dateTime = new Intl.DateTimeFormat(lang, { dateStyle: "medium", timeStyle: "short" });
  } catch (e) {
    return;
  }

  function zonePart(options, when) {
    var parts = new Intl.DateTimeFormat(lang, options).formatToParts(when);
    for (var i = 0; i < parts.length; i++) {
      if (parts[i].type === "timeZoneName") return parts[i].value;
    }
    return "";
  }

  // The zone's short name in the page's language ("BRT", "CET"), else its offset written
  // "UTC−03:00" (as the server writes it), never "GMT-3".
  function zoneName(when) {
    var name = zonePart({ timeZoneName: "short" }, when);
    if (/^[A-Za-z]+$/.test(name)) return name;
    try {
      var offset = zonePart({ timeZoneName: "longOffset" }, when);  // "GMT-03:00", "GMT"
      return /^GMT([+-]00:00)?$/.test(offset) ? "UTC" : offset.replace("GMT", "UTC").replace("-", "\u2212");
    } catch (e) {
      return name;
    }
  }

  function written(when) {
    return dateTime.format(when) + " " + zoneName(when);
  }

  function pageZone() {
    return document.body ? document.body.getAttribute("data-time-zone") : null;
  }

  function rewrite(root) {
    if (!zone || zone === pageZone()) return;
    var times = (root || document).querySelectorAll("time[data-local], time[data-local-title]");
    for (var i = 0; i < times.length; i++) {
      var when = new Date(times[i].getAttribute("datetime"));
      if (isNaN(when.getTime())) continue;
      if (times[i].hasAttribute("data-local")) {
        times[i].textContent = written(when);
        times[i].title = zone;
      } else {
        times[i].title = written(when);
      }
    }
  }

  // htmx swaps the live partials in: each new piece of page is rewritten as it arrives.
  document.addEventListener("htmx:load", function (event) { rewrite(event.target); });
  document.addEventListener("DOMContentLoaded", function () {
    rewrite(document);
    var root = document.body, url = root.getAttribute("data-time-zone-url");
    if (!url || !zone || zone === pageZone()) return;
    var token = document.querySelector("input[name=csrfmiddlewaretoken]");
    var body = new URLSearchParams({ time_zone: zone });
    fetch(url, { method: "POST", body: body, credentials: "same-origin",
      headers: { "X-CSRFToken": token ? token.value : "" } }).then(function (answer) {
      if (answer.ok) root.setAttribute("data-time-zone", zone);
    });
  });
})();
