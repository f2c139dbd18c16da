// Dashboard filters: a changed select submits its form (htmx-boosted: only #results is swapped).
// Without JavaScript the form's Apply button does the same with a full page load.
(function () {
  "use strict";
  document.documentElement.classList.add("js");
  document.addEventListener("change", function (event) {
    const select = event.target.closest(".report-filters select");
    if (select) select.form.requestSubmit();
  });
})();
