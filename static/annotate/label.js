// Keyboard labeling for BiasLab. No third-party code.
//
// Every form marked data-keyboard-form gets one key per button (data-key). On the labeling
// screen (data-async) a key press posts the form with fetch and swaps in the server-rendered
// partial of the next image, which the previous response already preloaded; elsewhere (the
// dispute screen) it submits the form normally. A label that needs a reason (data-requires-reason)
// opens the reason field first: Enter saves, Esc cancels. Without JavaScript the same forms
// work as plain posts.
(function () {
  "use strict";

  let inFlight = false; // ignore key presses while a label is being saved
  let shownAt = performance.now(); // when the current image was painted
  let pending = null; // the button waiting for its reason

  function region() {
    return document.getElementById("label-region");
  }

  function keyboardForm() {
    return document.querySelector("form[data-keyboard-form]");
  }

  function isTyping(target) {
    return target && (target.tagName === "INPUT" || target.tagName === "TEXTAREA" || target.isContentEditable);
  }

  // Resolve once the frame showing ``img`` has been painted: after it is decoded, the next
  // animation frame renders it, and a task queued from that frame runs after the paint.
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
    return loaded
      .then(() => (img.decode ? img.decode().catch(() => undefined) : undefined))
      .then(afterNextPaint);
  }

  function markShown() {
    const img = document.getElementById("current-image");
    const done = () => {
      shownAt = performance.now();
      document.dispatchEvent(new CustomEvent("label:shown", { detail: { imageId: img && img.dataset.imageId } }));
    };
    if (img) {
      whenPainted(img).then(done);
    } else {
      done();
    }
  }

  function reasonBox(form) {
    return form.querySelector(".reason");
  }

  function openReason(form, button) {
    pending = button;
    const box = reasonBox(form);
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

  // ``reasonFor``: the value of a label that needs a reason, when that label's save was
  // refused — the field is reopened with the focus in it, so what the annotator types next is
  // the reason, never label keys (an "m" in "man in a suit" must not label the next image).
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
      const button = form && form.querySelector('button[name=value][value="' + CSS.escape(reasonFor) + '"]');
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
  // and the server stores the label once.
  function load(url, options, reasonFor) {
    inFlight = true;
    const headers = { "HX-Request": "true", "HX-Current-URL": window.location.href };
    return fetch(url, Object.assign({ headers: headers, credentials: "same-origin" }, options))
      .then((response) => {
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

  function submitLabel(form, button) {
    const data = new FormData(form);
    data.set("value", button.value);
    data.set("duration_ms", String(Math.max(0, Math.round(performance.now() - shownAt))));
    const reasonFor = button.hasAttribute("data-requires-reason") ? button.value : null;
    return load(form.action, { method: "POST", body: data }, reasonFor);
  }

  function activate(form, button) {
    if (form.hasAttribute("data-async")) {
      submitLabel(form, button);
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
      const input = reasonBox(form).querySelector("input");
      if (input.value.trim() === "") {
        openReason(form, button);
        return;
      }
    }
    activate(form, button);
  }

  function onKeyDown(event) {
    if (event.repeat || event.ctrlKey || event.metaKey || event.altKey) return;
    const form = keyboardForm();
    if (isTyping(event.target)) {
      const target = pending || (form && form.querySelector("[data-requires-reason]"));
      if (form && event.target.closest(".reason") && target) {
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
      } else if (event.key === "Escape" || (event.key === "Enter" && form && form.contains(event.target))) {
        // Leave a note field, so the next key sets a label. Enter must not submit the form
        // natively: that would pick the first button (a label nobody chose).
        event.preventDefault();
        event.target.blur();
      }
      return;
    }
    if (inFlight) {
      event.preventDefault();
      return;
    }
    const key = event.key.toLowerCase();
    const scope = region() || document;
    const button = scope.querySelector('[data-key="' + CSS.escape(key) + '"]');
    if (!button) return;
    event.preventDefault();
    press(form, button);
  }

  // Clicks on the labeling buttons also go through fetch, so mouse and keys behave alike.
  function onClick(event) {
    const form = keyboardForm();
    if (!form || !form.hasAttribute("data-async")) return;
    const target = event.target.closest("button[name=value], a[data-key]");
    if (!target || !region() || !region().contains(target)) return;
    event.preventDefault();
    if (!inFlight) press(form, target);
  }

  document.documentElement.classList.add("js");
  document.addEventListener("keydown", onKeyDown);
  document.addEventListener("click", onClick);
  markShown();
})();
