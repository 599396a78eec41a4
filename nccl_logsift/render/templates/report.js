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
  document.documentElement.setAttribute("data-js", "ready");
})();
