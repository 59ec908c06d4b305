// Live pages (picnic/live.py). A page's partial re-fetches itself on `sse:changed` from the
// stream its `[sse-connect]` ancestor opened. While that stream is open, the partial's own
// "every 2s" poll is only a safety net: at most one poll per SAFETY_MS goes out (an event lost
// on the way is still picked up). When the stream is closed or failing (no EventSource, a WSGI
// server, a proxy that buffers), the poll runs at its full rate again.
(function () {
  "use strict";
  var SAFETY_MS = 15000;

  function markOpen(event, open) {
    var wrapper = event.target;
    if (!wrapper || !wrapper.dataset) return;
    if (open) {
      wrapper.dataset.liveOpen = "1";
      wrapper.dataset.liveLast = String(Date.now());
    } else {
      delete wrapper.dataset.liveOpen;
    }
  }

  document.addEventListener("htmx:sseOpen", function (event) { markOpen(event, true); });
  document.addEventListener("htmx:sseError", function (event) { markOpen(event, false); });
  document.addEventListener("htmx:sseClose", function (event) { markOpen(event, false); });

  document.addEventListener("htmx:confirm", function (event) {
    var wrapper = event.target.closest && event.target.closest("[sse-connect]");
    if (!wrapper) return;
    var now = Date.now();
    // An event (an SSE message, a click) asks for the request: it always goes out.
    var isPoll = !event.detail.triggeringEvent;
    if (isPoll && wrapper.dataset.liveOpen && now - Number(wrapper.dataset.liveLast || 0) < SAFETY_MS) {
      event.preventDefault();
      return;
    }
    wrapper.dataset.liveLast = String(now);
  });
})();
