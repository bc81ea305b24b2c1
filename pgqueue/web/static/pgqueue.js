// pgqueue dashboard: refresh the overview's live region in place, every N seconds.
// Written for pgqueue (MIT, like the rest of the package); no library. Without JavaScript the
// page still works: it is complete as the server renders it, and a reload refreshes it.
(function () {
  "use strict";
  // The job list's "select all" box: shown only where this script runs (hidden otherwise).
  var boxes = document.querySelectorAll("input[data-select-all]");
  Array.prototype.forEach.call(boxes, function (all) {
    var name = all.getAttribute("data-select-all");
    var form = all.form || all.closest("form");
    all.hidden = false;
    all.addEventListener("change", function () {
      var items = (form || document).querySelectorAll('input[type="checkbox"][name="' + name + '"]');
      Array.prototype.forEach.call(items, function (box) {
        box.checked = all.checked;
      });
    });
  });

  var live = document.getElementById("live");
  if (!live || !window.fetch) return;
  var url = live.getAttribute("data-refresh-url");
  var seconds = Math.max(1, Number(live.getAttribute("data-refresh-seconds")) || 5);
  var status = document.getElementById("refresh-status");
  var busy = false;

  function editing() {
    // Never swap a form away while someone types into it (the purge age, say).
    var el = document.activeElement;
    return !!el && live.contains(el) && /^(INPUT|SELECT|TEXTAREA)$/.test(el.tagName);
  }

  function say(text, failed) {
    if (!status) return;
    status.textContent = text;
    status.className = failed ? "failed" : "";
  }

  function refresh() {
    if (busy || document.hidden || editing()) return;
    busy = true;
    fetch(url, { credentials: "same-origin", cache: "no-store", headers: { Accept: "text/html" } })
      .then(function (response) {
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.text();
      })
      .then(function (html) {
        live.innerHTML = html;
        live.setAttribute("data-refreshed", String(Date.now()));
        say("(updated " + new Date().toLocaleTimeString() + ")", false);
      })
      .catch(function (error) {
        say("(refresh failed: " + error.message + "; retrying)", true);
      })
      .then(function () {
        busy = false;
      });
  }

  window.setInterval(refresh, seconds * 1000);
  document.addEventListener("visibilitychange", function () {
    if (!document.hidden) refresh();
  });
})();
