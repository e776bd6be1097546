// mcpdrift review console: the only script. It listens to /events (server-
// sent events of verdicts) and keeps the page current without reloading:
// the fleet page fetches itself again and swaps in the fresh counts and
// rows; a review page says its server has moved. It never builds markup
// from data: fresh nodes come from the server's own escaped HTML.
"use strict";
(function () {
  var root = document.querySelector("[data-live]");
  if (!root || !window.EventSource) { return; }
  var live = document.getElementById("live");
  var es = new EventSource(root.getAttribute("data-live"));
  var pending = null;
  var dirty = false;

  es.addEventListener("ready", function () {
    if (live) { live.hidden = false; }
    document.body.setAttribute("data-live-ready", "1");
  });
  es.addEventListener("error", function () {
    if (live) { live.hidden = true; }
  });

  function refreshFleet() {
    pending = null;
    if (!dirty) { return; }
    dirty = false;
    fetch(window.location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) { if (!r.ok) { throw new Error(r.status); } return r.text(); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        ["counts", "rows"].forEach(function (id) {
          var fresh = doc.getElementById(id);
          var old = document.getElementById(id);
          if (fresh && old) { old.replaceWith(document.importNode(fresh, true)); }
        });
        document.body.setAttribute("data-refreshed", String(Date.now()));
      })
      .catch(function () { dirty = true; });
  }

  es.addEventListener("verdict", function (ev) {
    var v;
    try { v = JSON.parse(ev.data); } catch (e) { return; }
    if (root.id === "fleet") {
      dirty = true;
      if (!pending) { pending = setTimeout(refreshFleet, 250); }
      return;
    }
    if (root.getAttribute("data-tenant") === v.tenant && root.getAttribute("data-server") === v.server) {
      var moved = document.getElementById("moved");
      if (moved) { moved.hidden = false; }
    }
  });
})();
