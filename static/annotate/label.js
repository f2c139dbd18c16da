// Keyboard labeling for BiasLab. No third-party code.
//
// Every form marked data-keyboard-form gets its keys from the page (data-key, data-toggle-key):
//
// - single-question screens (data-layout="single"): one key per choice; the key press posts the
//   form with fetch and swaps in the server-rendered partial of the next item, which the previous
//   response already preloaded. A choice that needs a reason (data-requires-reason) opens the
//   reason field first: Enter saves, Esc cancels.
// - multi-question screens (data-layout="multi"): a toggle question's key switches its answer
//   (yes ↔ no); a choice key answers the active question (highlighted; ↑ ↓ move it) — or the
//   next question that has that key — and moves on; Enter saves every answer at once.
// - the box check (object studies, a multi-question screen): the detector's boxes are drawn
//   over the image, one highlighted at a time; Y confirms and N rejects the highlighted box and
//   moves on to the next unanswered one, ← → (↑ ↓) move the highlight, / jumps to the
//   "missed objects" field (COCO names suggested as you type, after every comma), and Enter
//   saves once every box has its answer.
// - other keyboard forms (the dispute screen): a key submits the form normally.
//
// Z goes back one item. + (or =) and - zoom the image (fit, 100 %, 200 %), 0 fits it again,
// Shift+arrows or a drag pan it; a study's own answer keys win over these. Without JavaScript the
// same forms work as plain posts.
(function () {
  "use strict";

  let inFlight = false; // ignore key presses while answers are being saved
  let shownAt = performance.now(); // when the current item was painted
  let pending = null; // the button waiting for its reason

  function region() {
    return document.getElementById("label-region");
  }

  function keyboardForm() {
    return document.querySelector("form[data-keyboard-form]");
  }

  function layout(form) {
    return form ? form.getAttribute("data-layout") || "" : "";
  }

  function isTyping(target) {
    return target && (target.tagName === "INPUT" && !["radio", "checkbox", "button", "submit"].includes(target.type) || target.tagName === "TEXTAREA" || target.isContentEditable);
  }

  // Resolve once the frame showing the images has been painted: after they are decoded, the
  // next animation frame renders them, and a task queued from that frame runs after the paint.
  function afterNextPaint() {
    return new Promise((resolve) =>
      requestAnimationFrame(() => {
        const channel = new MessageChannel();
        channel.port1.onmessage = () => resolve();
        channel.port2.postMessage(null);
      })
    );
  }

  function whenPainted(img) {
    const loaded = img.complete
      ? Promise.resolve()
      : new Promise((resolve) => {
          img.addEventListener("load", resolve, { once: true });
          img.addEventListener("error", resolve, { once: true });
        });
    return loaded.then(() => (img.decode ? img.decode().catch(() => undefined) : undefined));
  }

  function markShown() {
    const r = region();
    const images = r ? Array.from(r.querySelectorAll("img.shown-image")) : [];
    const current = document.getElementById("current-image");
    const done = () => {
      shownAt = performance.now();
      document.dispatchEvent(
        new CustomEvent("label:shown", { detail: { itemId: current && current.dataset.itemId } })
      );
    };
    Promise.all(images.map(whenPainted)).then(afterNextPaint).then(done);
    activateQuestion(firstOpenQuestion());
    startBoxCheck();
  }

  // --- single-question screens: the reason field ------------------------------------------

  function reasonBox(form) {
    return form.querySelector(".reason");
  }

  function openReason(form, button) {
    pending = button;
    const box = reasonBox(form);
    if (!box) return;
    box.classList.add("open");
    const input = box.querySelector("input");
    input.focus();
    input.select();
  }

  function closeReason(form) {
    pending = null;
    const box = reasonBox(form);
    if (!box) return;
    box.classList.remove("open");
    const input = box.querySelector("input");
    input.value = "";
    input.blur();
  }

  // --- multi-question screens: questions, the active one, toggles --------------------------

  function questions() {
    const r = region();
    return r ? Array.from(r.querySelectorAll("fieldset.question")) : [];
  }

  function choiceQuestions() {
    return questions().filter((q) => q.querySelector("input[type=radio][data-key]"));
  }

  function activeQuestion() {
    const r = region();
    return r ? r.querySelector("fieldset.question.active") : null;
  }

  function activateQuestion(fieldset) {
    questions().forEach((q) => q.classList.toggle("active", q === fieldset));
  }

  function firstOpenQuestion() {
    const open = choiceQuestions();
    return open.find((q) => !q.querySelector("input[type=radio]:checked")) || open[0] || null;
  }

  function nextChoiceQuestion(after) {
    const list = choiceQuestions();
    const rest = list.slice(list.indexOf(after) + 1);
    return rest.find((q) => !q.querySelector("input[type=radio]:checked")) || rest[0] || after;
  }

  function toggle(fieldset) {
    const radios = Array.from(fieldset.querySelectorAll("input[type=radio]"));
    if (!radios.length) return;
    const at = radios.findIndex((radio) => radio.checked);
    radios[(at + 1) % radios.length].checked = true;
    fieldset.classList.add("touched");
  }

  // A choice key: the active question's choice with that key, else the first question after
  // it (then before it) that has one. Several questions may share a key ("s" = same).
  function answerByKey(key) {
    const list = choiceQuestions();
    if (!list.length) return false;
    const active = activeQuestion() || list[0];
    const start = Math.max(0, list.indexOf(active));
    const order = list.slice(start).concat(list.slice(0, start));
    for (const fieldset of order) {
      const radio = fieldset.querySelector('input[type=radio][data-key="' + CSS.escape(key) + '"]');
      if (radio) {
        radio.checked = true;
        activateQuestion(nextChoiceQuestion(fieldset));
        return true;
      }
    }
    return false;
  }

  function moveActive(step) {
    const list = choiceQuestions();
    if (!list.length) return;
    const at = list.indexOf(activeQuestion());
    activateQuestion(list[Math.min(list.length - 1, Math.max(0, at + step))]);
  }

  // --- the box check: one box highlighted, Y / N, arrows ---------------------------------
  //
  // The radios of the box list (one pair per box, what a browser without JavaScript posts) stay
  // the source of truth; the highlight and the colours of the drawn boxes follow them.

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
  function boxesComplete() {
    const missing = firstUnanswered(0);
    if (missing === -1) return true;
    setActiveBox(missing);
    const left = boxRows().filter((row) => !boxAnswer(row)).length;
    showError("Box " + (missing + 1) + " has no answer yet (" + left + " unanswered): press Y or N for each box.");
    return false;
  }

  function submitMulti(form) {
    if (inFlight || !boxesComplete()) return;
    post(form, null);
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

  // --- zoom: fit, 100 %, 200 % of the image's own pixels -----------------------------------
  //
  // The level lives on the zoom root (the label region, or a review screen's images), so the
  // next item — a fresh region — starts at "fit" again. Every image of the item zooms together
  // and a pair (seed photo and edit) pans together, so the same spot of both is in view. The
  // image keeps its aspect ratio and its frame (.zoom-viewport) scrolls; the page never does.

  const ZOOM_LEVELS = ["fit", 1, 2];
  const ZOOM_NAMES = { fit: "Fit", 1: "100 %", 2: "200 %" };
  const ZOOM_KEYS = { "+": 1, "=": 1, "-": -1, "0": 0 };

  function zoomRoot() {
    return region() || document.querySelector("[data-zoom-root]");
  }

  function zoomViewports() {
    const root = zoomRoot();
    return root ? Array.from(root.querySelectorAll("[data-zoom-viewport]")) : [];
  }

  function zoomLevel() {
    const root = zoomRoot();
    const value = root ? root.getAttribute("data-zoom") : null;
    return value && value !== "fit" ? Number(value) : "fit";
  }

  // The image's own width: its decoded width, else (a file that failed to load) the width
  // stored at import; 0 when neither is known, and the image then stays fitted.
  function ownWidth(img) {
    return img.naturalWidth || Number(img.getAttribute("width")) || 0;
  }

  // The point of the image at the centre of a frame, as fractions of the image.
  function viewCentre(viewport) {
    return [
      (viewport.scrollLeft + viewport.clientWidth / 2) / Math.max(1, viewport.scrollWidth),
      (viewport.scrollTop + viewport.clientHeight / 2) / Math.max(1, viewport.scrollHeight),
    ];
  }

  function setZoom(level) {
    const root = zoomRoot();
    const viewports = zoomViewports();
    if (!root || !viewports.length) return false;
    const centres = viewports.map(viewCentre); // keep the spot looked at in the middle
    root.setAttribute("data-zoom", String(level));
    root.classList.toggle("zoomed", level !== "fit");
    viewports.forEach((viewport, index) => {
      const img = viewport.querySelector("img");
      if (!img) return;
      const width = ownWidth(img);
      img.style.width = level === "fit" || !width ? "" : width * level + "px";
      if (level === "fit") return;
      viewport.scrollLeft = centres[index][0] * viewport.scrollWidth - viewport.clientWidth / 2;
      viewport.scrollTop = centres[index][1] * viewport.scrollHeight - viewport.clientHeight / 2;
    });
    const state = root.querySelector("[data-zoom-state]");
    if (state) state.textContent = ZOOM_NAMES[level];
    return true;
  }

  function stepZoom(step) {
    if (step === 0) return setZoom("fit");
    const at = ZOOM_LEVELS.indexOf(zoomLevel());
    return setZoom(ZOOM_LEVELS[Math.min(ZOOM_LEVELS.length - 1, Math.max(0, at + step))]);
  }

  function cycleZoom() {
    const at = ZOOM_LEVELS.indexOf(zoomLevel());
    return setZoom(ZOOM_LEVELS[(at + 1) % ZOOM_LEVELS.length]);
  }

  // Shift+arrows move every frame a quarter of its size (the scroll handler keeps a pair level).
  function panZoom(key) {
    const viewports = zoomViewports();
    if (zoomLevel() === "fit" || !viewports.length) return false;
    const dx = key === "arrowleft" ? -1 : key === "arrowright" ? 1 : 0;
    const dy = key === "arrowup" ? -1 : key === "arrowdown" ? 1 : 0;
    viewports.forEach((viewport) => {
      viewport.scrollLeft += (dx * viewport.clientWidth) / 4;
      viewport.scrollTop += (dy * viewport.clientHeight) / 4;
    });
    return true;
  }

  // A pair pans together: a frame scrolled by the user, a drag or the keys brings the other to
  // the same place (as fractions of what each can scroll). Setting an equal value fires nothing,
  // so the two frames settle at once.
  function onScroll(event) {
    const source = event.target;
    if (!(source instanceof Element) || !source.matches("[data-zoom-viewport]")) return;
    const fx = source.scrollLeft / Math.max(1, source.scrollWidth - source.clientWidth);
    const fy = source.scrollTop / Math.max(1, source.scrollHeight - source.clientHeight);
    zoomViewports().forEach((viewport) => {
      if (viewport === source) return;
      const left = Math.round(fx * (viewport.scrollWidth - viewport.clientWidth));
      const top = Math.round(fy * (viewport.scrollHeight - viewport.clientHeight));
      if (Math.abs(viewport.scrollLeft - left) > 1) viewport.scrollLeft = left;
      if (Math.abs(viewport.scrollTop - top) > 1) viewport.scrollTop = top;
    });
  }

  // Dragging a zoomed image pans it (the mouse's answer to Shift+arrows).
  let drag = null;

  function onPointerDown(event) {
    const viewport = event.target.closest && event.target.closest("[data-zoom-viewport]");
    if (!viewport || zoomLevel() === "fit" || event.button !== 0) return;
    event.preventDefault(); // no native image drag, no text selection
    drag = { viewport: viewport, x: event.clientX, y: event.clientY, left: viewport.scrollLeft, top: viewport.scrollTop };
    viewport.classList.add("dragging");
  }

  function onPointerMove(event) {
    if (!drag) return;
    drag.viewport.scrollLeft = drag.left - (event.clientX - drag.x);
    drag.viewport.scrollTop = drag.top - (event.clientY - drag.y);
  }

  function onPointerUp() {
    if (!drag) return;
    drag.viewport.classList.remove("dragging");
    drag = null;
  }

  function onZoomKey(event, key) {
    if (event.shiftKey && key.indexOf("arrow") === 0 && panZoom(key)) {
      event.preventDefault();
      return true;
    }
    if (!(key in ZOOM_KEYS) || !zoomViewports().length) return false;
    event.preventDefault();
    stepZoom(ZOOM_KEYS[key]);
    return true;
  }

  function onZoomClick(event) {
    const control = event.target.closest && event.target.closest("[data-zoom-step], [data-zoom-cycle], [data-zoom-fit]");
    if (!control) return false;
    event.preventDefault();
    if (control.hasAttribute("data-zoom-cycle")) {
      cycleZoom();
    } else if (control.hasAttribute("data-zoom-fit")) {
      setZoom("fit");
    } else {
      stepZoom(Number(control.getAttribute("data-zoom-step")));
    }
    return true;
  }

  // --- talking to the server ----------------------------------------------------------------

  // ``reasonFor``: the value of a choice that needs a reason, when that answer's save was
  // refused — the field is reopened with the focus in it, so what the annotator types next is
  // the reason, never label keys (an "m" in "man in a suit" must not label the next item).
  function swap(html, failed, reasonFor) {
    const old = region();
    const holder = document.createElement("div");
    holder.innerHTML = html.trim();
    const fresh = holder.querySelector("#label-region");
    if (!fresh) {
      throw new Error("unexpected response");
    }
    old.replaceWith(fresh);
    pending = null; // the old buttons are gone
    if (failed && reasonFor) {
      const form = keyboardForm();
      const button = form && form.querySelector('button[data-answer][value="' + CSS.escape(reasonFor) + '"]');
      if (button) openReason(form, button);
    }
    markShown();
  }

  function showError(message) {
    const r = region();
    let p = r.querySelector("p.error");
    if (!p) {
      p = document.createElement("p");
      p.className = "error";
      p.setAttribute("role", "alert");
      r.querySelector(".label-head").after(p);
    }
    p.textContent = message;
  }

  // Fetch a partial (GET link or POST form) and put it in place of the label region. A
  // failure keeps the same form, and so the same request_id: pressing the key again retries
  // and the server stores the answers once.
  function load(url, options, reasonFor) {
    inFlight = true;
    const headers = { "HX-Request": "true", "HX-Current-URL": window.location.href };
    return fetch(url, Object.assign({ headers: headers, credentials: "same-origin", cache: "no-store" }, options))
      .then((response) => {
        const elsewhere = response.headers.get("HX-Redirect");
        if (elsewhere) {
          window.location.href = elsewhere; // the server ends this screen (a panel quota reached)
          return null;
        }
        if (response.redirected && new URL(response.url).pathname.indexOf("/accounts/login") === 0) {
          window.location.href = response.url; // session ended: log in again
          return null;
        }
        if (response.status === 403) {
          throw new Error("You may not label this study any more.");
        }
        return response.text().then((html) => swap(html, !response.ok, reasonFor));
      })
      .catch((err) => showError((err && err.message ? err.message : "Network error") + " — press the key again to retry."))
      .finally(() => {
        inFlight = false;
      });
  }

  // A reason belongs to an answer that asks for one ("other"). A reason still in its field —
  // typed for "other", then Z (back) and another answer — is not sent with that answer (the
  // server drops it too).
  function dropStaleReasons(form, data, button) {
    if (layout(form) === "single") {
      const input = form.querySelector(".reason input");
      if (input && !(button && button.hasAttribute("data-requires-reason"))) data.delete(input.name);
      return;
    }
    form.querySelectorAll("fieldset.question").forEach((fieldset) => {
      const input = fieldset.querySelector(".question-reason input");
      const chosen = fieldset.querySelector("input[type=radio]:checked");
      if (input && !(chosen && chosen.hasAttribute("data-requires-reason"))) data.delete(input.name);
    });
  }

  function post(form, button) {
    const data = new FormData(form);
    if (button && button.name) data.set(button.name, button.value);
    dropStaleReasons(form, data, button);
    data.set("duration_ms", String(Math.max(0, Math.round(performance.now() - shownAt))));
    const reasonFor = button && button.hasAttribute("data-requires-reason") ? button.value : null;
    return load(form.action, { method: "POST", body: data }, reasonFor);
  }

  function activate(form, button) {
    if (form.hasAttribute("data-async")) {
      post(form, button);
    } else {
      inFlight = true;
      form.requestSubmit(button);
    }
  }

  function press(form, button) {
    if (button.tagName === "A") {
      if (form && form.hasAttribute("data-async")) {
        load(button.href, { method: "GET" });
      } else {
        window.location.href = button.href;
      }
      return;
    }
    if (button.hasAttribute("data-requires-reason")) {
      const box = reasonBox(form);
      const input = box && box.querySelector("input");
      if (input && input.value.trim() === "") {
        openReason(form, button);
        return;
      }
    }
    activate(form, button);
  }

  function onTypingKey(event, form) {
    const multi = layout(form) === "multi";
    const target = pending || (form && form.querySelector("[data-requires-reason]"));
    if (!multi && form && event.target.closest(".reason") && target) {
      if (event.key === "Enter") {
        event.preventDefault();
        if (inFlight) return;
        if (event.target.value.trim() === "") {
          // Refuse here: the focus stays in the field, so typing goes on into the reason.
          showError("Type a short reason first, then Enter (Esc cancels).");
          return;
        }
        activate(form, target);
      } else if (event.key === "Escape") {
        event.preventDefault();
        closeReason(form);
      }
      return;
    }
    if (multi && form.contains(event.target) && event.key === "Enter") {
      // Enter in a text answer saves the whole screen, as it does anywhere else on it.
      event.preventDefault();
      submitMulti(form);
      return;
    }
    if (event.key === "Escape" || (event.key === "Enter" && form && form.contains(event.target))) {
      // Leave a note field, so the next key sets an answer. Enter must not submit the form
      // natively: that would pick the first button (an answer nobody chose).
      event.preventDefault();
      event.target.blur();
    }
  }

  function onMultiKey(event, form, key) {
    if (key === "enter") {
      event.preventDefault();
      submitMulti(form);
      return true;
    }
    if (key === "arrowdown" || key === "arrowup") {
      event.preventDefault();
      moveActive(key === "arrowdown" ? 1 : -1);
      return true;
    }
    const r = region();
    const toggled = r.querySelector('fieldset[data-toggle-key="' + CSS.escape(key) + '"]');
    if (toggled) {
      event.preventDefault();
      toggle(toggled);
      return true;
    }
    if (key.length === 1 && answerByKey(key)) {
      event.preventDefault();
      return true;
    }
    return false;
  }

  function onKeyDown(event) {
    if (event.repeat || event.ctrlKey || event.metaKey || event.altKey) return;
    const form = keyboardForm();
    if (isTyping(event.target)) {
      onTypingKey(event, form);
      return;
    }
    if (inFlight) {
      event.preventDefault();
      return;
    }
    const key = event.key.toLowerCase();
    // Shift+arrows pan a zoomed image before the box check or the questions take the arrows.
    if (event.shiftKey && key.indexOf("arrow") === 0 && onZoomKey(event, key)) return;
    if (form && layout(form) === "multi" && region() && region().contains(form)) {
      if (onBoxKey(event, key) || onMultiKey(event, form, key)) return;
    }
    const scope = region() || document;
    const button = scope.querySelector('button[data-key="' + CSS.escape(key) + '"], a[data-key="' + CSS.escape(key) + '"]');
    if (!button) {
      onZoomKey(event, key); // only keys no answer uses reach the zoom
      return;
    }
    event.preventDefault();
    press(form, button);
  }

  // Clicks on the labeling buttons also go through fetch, so mouse and keys behave alike.
  function onClick(event) {
    if (onZoomClick(event)) return;
    const form = keyboardForm();
    if (!form || !form.hasAttribute("data-async")) return;
    const fieldset = event.target.closest("fieldset.question");
    if (fieldset && choiceQuestions().includes(fieldset)) activateQuestion(fieldset);
    const boxRow = event.target.closest("[data-box-check] .box-row");
    if (boxRow) setActiveBox(boxRows().indexOf(boxRow));
    const target = event.target.closest("button[data-answer], button[data-submit], a[data-key]");
    if (!target || !region() || !region().contains(target)) return;
    event.preventDefault();
    if (inFlight) return;
    if (target.hasAttribute("data-submit")) {
      submitMulti(form);
    } else {
      press(form, target);
    }
  }

  // A box answered with the mouse recolours its drawn box like a key press does.
  function onChange(event) {
    if (event.target.closest && event.target.closest("[data-box-check]")) paintBoxes();
  }

  function onInput(event) {
    if (event.target.matches && event.target.matches("input[data-class-list]")) suggestNames(event.target);
  }

  // The guidelines frame (a first visit opens it; it scrolls) ends between two lines of its text,
  // never across one: its height, at most the stylesheet's, is cut to the last whole line.
  function lineBoxes(body) {
    const boxes = [];
    const walker = document.createTreeWalker(body, NodeFilter.SHOW_TEXT);
    const range = document.createRange();
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      if (!node.textContent.trim()) continue;
      range.selectNodeContents(node);
      for (const rect of range.getClientRects()) boxes.push(rect);
    }
    for (const el of body.querySelectorAll("kbd")) boxes.push(el.getBoundingClientRect());
    return boxes;
  }

  function fitGuidelines() {
    const details = document.getElementById("guidelines");
    const body = details && details.querySelector(".guidelines-body");
    if (!body) return;
    body.style.maxHeight = "";
    if (!details.open || body.scrollHeight <= body.clientHeight) return;
    const top = body.getBoundingClientRect().top + body.clientTop - body.scrollTop;
    const lines = lineBoxes(body).map((r) => [r.top - top, r.bottom - top]);
    let cut = body.clientHeight;
    for (let moved = true; moved; ) {
      moved = false;
      for (const [lineTop, lineBottom] of lines) {
        if (lineTop < cut - 0.5 && lineBottom > cut + 0.5) {
          cut = lineTop;
          moved = true;
        }
      }
    }
    if (cut > 0) body.style.maxHeight = Math.floor(cut) + "px";
  }

  document.documentElement.classList.add("js");
  const guidelines = document.getElementById("guidelines");
  if (guidelines) guidelines.addEventListener("toggle", fitGuidelines);
  window.addEventListener("resize", fitGuidelines);
  fitGuidelines();
  document.addEventListener("keydown", onKeyDown);
  document.addEventListener("click", onClick);
  document.addEventListener("change", onChange);
  document.addEventListener("input", onInput);
  document.addEventListener("scroll", onScroll, true); // scroll does not bubble: capture it
  document.addEventListener("pointerdown", onPointerDown);
  document.addEventListener("pointermove", onPointerMove);
  document.addEventListener("pointerup", onPointerUp);
  document.addEventListener("pointercancel", onPointerUp);
  markShown();
})();
