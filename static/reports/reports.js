// Dashboard filters: a changed select submits its form (htmx-boosted: only #results is swapped).
// Without JavaScript the form's Apply button does the same with a full page load.
(function () {
  "use strict";
  document.documentElement.classList.add("js");
  // Heatmap cells carry their colour in data-colour; setting it through the CSSOM keeps the page
  // within the Content-Security-Policy, which refuses inline style="…" attributes (config/csp.py).
  function paintHeatmap(root) {
    root.querySelectorAll("table.heat td[data-colour]").forEach(function (cell) {
      cell.style.backgroundColor = cell.dataset.colour;
    });
  }
  paintHeatmap(document);
  document.addEventListener("htmx:load", function (event) {
    paintHeatmap(event.target);
  });
  document.addEventListener("change", function (event) {
    const select = event.target.closest(".report-filters select");
    if (select) select.form.requestSubmit();
  });
})();
