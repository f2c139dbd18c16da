// Keyboard labeling for BiasLab, on top of htmx (the form's hx-post and Back one's hx-get swap
// in the server's partial of the next item). Every form marked data-keyboard-form gets its keys
// from the page (data-key, data-toggle-key); a key clicks its button or link, as the mouse does:
//
// - single-question screens (data-layout="single"): one key per choice. A choice that needs a
//   reason (data-requires-reason) opens the reason field first: Enter saves, Esc cancels.
// - multi-question screens (data-layout="multi"): a toggle question's key switches its answer
//   (yes ↔ no); a choice key answers the active question (highlighted; ↑ ↓ move it) — or the
//   next question that has that key — and moves on; Enter saves every answer at once. A question
//   kind's own script (boxes.js) is offered every key first, as a cancelable "label:key" event.
// - other keyboard forms (the dispute screen): a key submits the form normally.
//
// Keys no answer uses go on to zoom.js. Without JavaScript the same forms work as plain posts.
(function () {
  "use strict";

  let shownAt = performance.now(); // when the current item was painted
  let pending = null; // the button waiting for its reason
  let sentReason = null; // the answer needing a reason that the request in flight carries
  let leaving = false; // a plain form was submitted: the page is going away

  function region() {
    return document.getElementById("label-region");
  }

  function keyboardForm() {
    return document.querySelector("form[data-keyboard-form]");
  }

  function layout(form) {
    return form ? form.getAttribute("data-layout") || "" : "";
  }

  // Answers are being saved: htmx marks the element whose request is in flight.
  function busy() {
    return leaving || !!document.querySelector("#label-region .htmx-request");
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

  // --- talking to the server (htmx) ---------------------------------------------------------

  function showError(message) {
    const r = region();
    if (!r) return;
    let p = r.querySelector("p.error");
    if (!p) {
      p = document.createElement("p");
      p.className = "error";
      p.setAttribute("role", "alert");
      r.querySelector(".label-head").after(p);
    }
    p.textContent = message;
  }

  function fromRegion(event) {
    const r = region();
    return r && event.detail.elt && r.contains(event.detail.elt);
  }

  // What the form sends besides its fields: the time the item was on screen, and no reason
  // still in its field for an answer that does not ask for one — typed for "other", then Z
  // (back) and another answer (the server drops it too).
  function onConfigRequest(event) {
    const form = event.detail.elt;
    if (!form.matches("form[data-keyboard-form]")) return;
    const params = event.detail.parameters;
    const submitter = event.detail.triggeringEvent && event.detail.triggeringEvent.submitter;
    params.set("duration_ms", String(Math.max(0, Math.round(performance.now() - shownAt))));
    form.querySelectorAll(".reason input, .question-reason input").forEach((input) => {
      const fieldset = input.closest("fieldset.question"); // a multi-question screen's question
      const chosen = fieldset ? fieldset.querySelector("input[type=radio]:checked") : submitter;
      if (!(chosen && chosen.hasAttribute("data-requires-reason"))) params.delete(input.name);
    });
    sentReason = submitter && submitter.hasAttribute("data-requires-reason") ? submitter.value : null;
  }

  // A refused save (400: an answer is missing or wrong; 409: the form is stale) answers with
  // the label region re-shown with the error: swap it in like the next item.
  function onBeforeSwap(event) {
    const status = event.detail.xhr.status;
    if ((status === 400 || status === 409) && fromRegion(event)) {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    }
  }

  // The next item (or the same one re-shown with the server's error) is in place. When the
  // refused answer needed a reason, its field is reopened with the focus in it, so what the
  // annotator types next is the reason, never label keys (an "m" in "man in a suit" must not
  // label the next item).
  function onSettled(event) {
    if (event.target !== region()) return;
    pending = null; // the old buttons are gone
    const form = keyboardForm();
    if (event.detail.xhr && event.detail.xhr.status >= 400 && sentReason && form) {
      const button = form.querySelector('button[data-answer][value="' + CSS.escape(sentReason) + '"]');
      if (button) openReason(form, button);
    }
    sentReason = null;
    markShown();
  }

  // A failed request keeps the same form, and so the same request_id: pressing the key again
  // retries and the server stores the answers once.
  function onResponseError(event) {
    if (!fromRegion(event)) return;
    const status = event.detail.xhr.status;
    const message = status === 403 ? "You may not label this study any more." : "The server answered " + status + ".";
    showError(message + " — press the key again to retry.");
  }

  function onSendError(event) {
    if (fromRegion(event)) showError("Network error — press the key again to retry.");
  }

  // --- keys and clicks ------------------------------------------------------------------------

  function submit(form) {
    form.querySelector("button[data-submit]").click(); // keys.js's Enter, boxes.js may refuse it
  }

  function onTypingKey(event, form) {
    const multi = layout(form) === "multi";
    const target = pending || (form && form.querySelector("[data-requires-reason]"));
    if (!multi && form && event.target.closest(".reason") && target) {
      if (event.key === "Enter") {
        event.preventDefault();
        if (busy()) return;
        if (event.target.value.trim() === "") {
          // Refuse here: the focus stays in the field, so typing goes on into the reason.
          showError("Type a short reason first, then Enter (Esc cancels).");
          return;
        }
        target.click();
      } else if (event.key === "Escape") {
        event.preventDefault();
        closeReason(form);
      }
      return;
    }
    if (multi && form.contains(event.target) && event.key === "Enter") {
      // Enter in a text answer saves the whole screen, as it does anywhere else on it.
      event.preventDefault();
      submit(form);
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
      submit(form);
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
    if (busy()) {
      event.preventDefault();
      return;
    }
    if (event.defaultPrevented) return; // zoom.js panned (Shift+arrows)
    const key = event.key.toLowerCase();
    if (form && layout(form) === "multi" && region() && region().contains(form)) {
      const offered = new CustomEvent("label:key", { cancelable: true, detail: { key: key, event: event } });
      if (!document.dispatchEvent(offered) || onMultiKey(event, form, key)) return;
    }
    const scope = region() || document;
    const button = scope.querySelector('button[data-key="' + CSS.escape(key) + '"], a[data-key="' + CSS.escape(key) + '"]');
    if (!button) return; // zoom.js takes the keys no answer uses
    event.preventDefault();
    button.click();
  }

  // A choice that needs a reason opens its field first, whether clicked or pressed.
  function onClick(event) {
    const fieldset = event.target.closest && event.target.closest("#label-region fieldset.question");
    if (fieldset && choiceQuestions().includes(fieldset)) activateQuestion(fieldset);
    const button = event.target.closest && event.target.closest("#label-region button[data-requires-reason]");
    const form = keyboardForm();
    if (!button || !form || layout(form) !== "single") return;
    const box = reasonBox(form);
    const input = box && box.querySelector("input");
    if (input && input.value.trim() === "") {
      event.preventDefault();
      openReason(form, button);
    }
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
  document.addEventListener("submit", (event) => {
    leaving = leaving || !event.defaultPrevented; // htmx prevents the plain submit of its forms
  });
  document.addEventListener("htmx:configRequest", onConfigRequest);
  document.addEventListener("htmx:beforeSwap", onBeforeSwap);
  document.addEventListener("htmx:afterSettle", onSettled);
  document.addEventListener("htmx:responseError", onResponseError);
  document.addEventListener("htmx:sendError", onSendError);
  document.addEventListener("label:error", (event) => showError(event.detail));
  markShown();
})();
