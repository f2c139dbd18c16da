// The box check of object studies (a multi-question screen): the detector's boxes are drawn
// over the image, one highlighted at a time; Y confirms and N rejects the highlighted box and
// moves on to the next unanswered one, ← → (↑ ↓) move the highlight, / jumps to the "missed
// objects" field (COCO names suggested as you type, after every comma), and Enter saves once
// every box has its answer. No third-party code.
//
// The radios of the box list (one pair per box, what a browser without JavaScript posts) stay
// the source of truth; the highlight and the colours of the drawn boxes follow them. keys.js
// hands this script every key of the screen first ("label:key"); it takes those it uses.
(function () {
  "use strict";

  function region() {
    return document.getElementById("label-region");
  }

  let activeBox = -1; // index of the highlighted box; -1 when every box has its answer

  function boxRows() {
    const r = region();
    return r ? Array.from(r.querySelectorAll("[data-box-check] .box-row")) : [];
  }

  function boxAnswer(row) {
    const checked = row.querySelector("input[type=radio]:checked");
    return checked ? checked.value : "";
  }

  function firstUnanswered(from) {
    const rows = boxRows();
    for (let step = 0; step < rows.length; step++) {
      const index = (from + step) % rows.length;
      if (!boxAnswer(rows[index])) return index;
    }
    return -1;
  }

  function paintBoxes() {
    const r = region();
    if (!r) return;
    const rows = boxRows();
    rows.forEach((row, index) => {
      row.classList.toggle("active", index === activeBox);
      row.setAttribute("data-answer", boxAnswer(row));
    });
    r.querySelectorAll(".box-overlay .box").forEach((shape) => {
      const index = Number(shape.getAttribute("data-box"));
      shape.classList.toggle("active", index === activeBox);
      shape.setAttribute("data-answer", rows[index] ? boxAnswer(rows[index]) : "");
    });
    r.classList.toggle("boxes-done", rows.length > 0 && activeBox === -1);
  }

  function setActiveBox(index) {
    activeBox = index;
    paintBoxes();
    const row = boxRows()[index];
    if (row && row.scrollIntoView) row.scrollIntoView({ block: "nearest" });
  }

  function startBoxCheck() {
    const r = region();
    const rows = boxRows();
    if (r) r.classList.toggle("box-check-live", rows.length > 0);
    activeBox = rows.length ? firstUnanswered(0) : -1;
    paintBoxes();
  }

  function moveBox(step) {
    const rows = boxRows();
    if (!rows.length) return;
    if (activeBox === -1) {
      setActiveBox(step > 0 ? 0 : rows.length - 1);
    } else {
      setActiveBox(Math.min(rows.length - 1, Math.max(0, activeBox + step)));
    }
  }

  // Y / N on the highlighted box, then on to the next box without an answer (none: the
  // highlight goes away and the screen says Enter saves).
  function answerBox(key) {
    const rows = boxRows();
    const row = rows[activeBox];
    if (!row) return false;
    const radio = row.querySelector('input[type=radio][data-box-key="' + CSS.escape(key) + '"]');
    if (!radio) return false;
    radio.checked = true;
    setActiveBox(firstUnanswered(activeBox + 1));
    return true;
  }

  function classInput() {
    const r = region();
    return r ? r.querySelector("input[data-class-list]") : null;
  }

  function onBoxKey(event, key) {
    const rows = boxRows();
    if (!rows.length && !classInput()) return false;
    if (key === "/" && classInput()) {
      event.preventDefault();
      classInput().focus();
      return true;
    }
    if (!rows.length) return false;
    if (key === "arrowright" || key === "arrowdown" || key === "arrowleft" || key === "arrowup") {
      event.preventDefault();
      moveBox(key === "arrowright" || key === "arrowdown" ? 1 : -1);
      return true;
    }
    if (key.length === 1 && answerBox(key)) {
      event.preventDefault();
      return true;
    }
    return false;
  }

  // Saving needs an answer for every box: say which one is missing instead of a round trip.
  function onClick(event) {
    const row = event.target.closest && event.target.closest("[data-box-check] .box-row");
    if (row) setActiveBox(boxRows().indexOf(row));
    if (!event.target.closest || !event.target.closest("#label-region button[data-submit]")) return;
    const missing = firstUnanswered(0);
    if (missing === -1) return;
    event.preventDefault();
    setActiveBox(missing);
    const left = boxRows().filter((row) => !boxAnswer(row)).length;
    const message = "Box " + (missing + 1) + " has no answer yet (" + left + " unanswered): press Y or N for each box.";
    document.dispatchEvent(new CustomEvent("label:error", { detail: message }));
  }

  // A datalist suggests for the whole field; in a comma-separated list the suggestions must
  // complete the last name, so each option is prefixed with what comes before the last comma.
  const classNames = new WeakMap();

  function suggestNames(input) {
    const list = document.getElementById(input.getAttribute("list") || "");
    if (!list) return;
    if (!classNames.has(list)) classNames.set(list, Array.from(list.options).map((option) => option.value));
    const at = input.value.lastIndexOf(",");
    const prefix = at === -1 ? "" : input.value.slice(0, at + 1).replace(/\s*$/, " ");
    if (list.getAttribute("data-prefix") === prefix) return;
    list.setAttribute("data-prefix", prefix);
    list.replaceChildren(
      ...classNames.get(list).map((name) => {
        const option = document.createElement("option");
        option.value = prefix + name;
        return option;
      })
    );
  }

  document.addEventListener("label:key", (event) => {
    if (onBoxKey(event.detail.event, event.detail.key)) event.preventDefault();
  });
  document.addEventListener("click", onClick);
  // A box answered with the mouse recolours its drawn box like a key press does.
  document.addEventListener("change", (event) => {
    if (event.target.closest && event.target.closest("[data-box-check]")) paintBoxes();
  });
  document.addEventListener("input", (event) => {
    if (event.target.matches && event.target.matches("input[data-class-list]")) suggestNames(event.target);
  });
  document.addEventListener("htmx:afterSettle", startBoxCheck); // the next item's boxes
  startBoxCheck();
})();
