// nccl-logsift report: small conveniences only; the page is complete without script.
(function () {
  "use strict";
  function all(selector) { return Array.prototype.slice.call(document.querySelectorAll(selector)); }
  function on(id, handler) { var el = document.getElementById(id); if (el) { el.addEventListener("click", handler); } }
  on("expand-all", function () { all("details.finding").forEach(function (d) { d.open = true; }); });
  on("collapse-all", function () { all("details.finding").forEach(function (d) { d.open = false; }); });
  all("button[data-behind]").forEach(function (button) {
    button.addEventListener("click", function () {
      var table = document.getElementById(button.getAttribute("data-behind"));
      if (!table) { return; }
      var only = table.classList.toggle("only-behind");
      button.textContent = only ? "show every row" : "only rows behind the front";
    });
  });
  // A culprit chip jumps to the first grid row of that rank and flashes it.
  all("a.chip[data-rank]").forEach(function (chip) {
    chip.addEventListener("click", function (event) {
      var row = document.querySelector("tr[data-ranks~='" + chip.getAttribute("data-rank") + "']");
      if (!row) { return; }
      event.preventDefault();
      row.scrollIntoView({ block: "center" });
    });
  });
  // The fleet page's job list: show the rows that match every filter.
  var list = document.getElementById("job-list");
  if (list) {
    var value = function (id) { return document.getElementById(id).value.trim(); };
    var filter = function () {
      var kind = value("filter-kind"), status = value("filter-status"), host = value("filter-host").toLowerCase();
      var from = value("filter-from"), to = value("filter-to"), shown = 0, rows = all("#job-list tbody tr");
      rows.forEach(function (row) {
        var date = row.getAttribute("data-date");
        var match = (!kind || row.getAttribute("data-kinds").split(" ").indexOf(kind) >= 0)
          && (!status || row.getAttribute("data-status") === status)
          && (!host || row.getAttribute("data-hosts").toLowerCase().indexOf(host) >= 0)
          && (!from || (date && date >= from)) && (!to || (date && date <= to));
        row.hidden = !match;
        shown += match ? 1 : 0;
      });
      document.getElementById("filter-count").textContent = shown + " of " + rows.length + " job(s)";
    };
    // Filters can be given in the address (fleet.html#kind=rank_behind&host=node-07), to link a view.
    var names = { kind: "filter-kind", status: "filter-status", host: "filter-host", from: "filter-from", to: "filter-to" };
    location.hash.replace(/^#/, "").split("&").forEach(function (pair) {
      var parts = pair.split("="), id = names[decodeURIComponent(parts[0])];
      if (id && parts.length === 2) { document.getElementById(id).value = decodeURIComponent(parts[1]); }
    });
    Object.keys(names).forEach(function (key) {
      document.getElementById(names[key]).addEventListener("input", filter);
    });
    filter();
  }
  // How the page lays out at this window's width, for its tests (tests/render/test_html_browser.py): whether
  // it runs wider than the window, and how many evidence locations (path:line) would be cut, every finding open.
  var closed = all("details:not([open])");
  closed.forEach(function (d) { d.open = true; });
  var wide = document.documentElement.scrollWidth > window.innerWidth;
  var cut = all(".evidence .loc").filter(function (el) { return el.scrollWidth > el.clientWidth + 1; }).length;
  closed.forEach(function (d) { d.open = false; });
  document.documentElement.setAttribute("data-layout", (wide ? "overflows" : "fits") + " cut-locations-" + cut);
  document.documentElement.setAttribute("data-js", "ready");
})();
