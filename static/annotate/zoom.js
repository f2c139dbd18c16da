// Zoom of the item's image(s): fit, 100 %, 200 % of the image's own pixels. No third-party code.
//
// + (or =) and - zoom, 0 fits again, Shift+arrows or a drag pan; the zoom bar's buttons do the
// same. A screen's own answer keys win over these (keys.js takes them first and marks them
// used). The level lives on the zoom root ([data-zoom-root]: the label region, or a review
// screen's images), so the next item — a fresh region — starts at "fit" again. Every image of
// the item zooms together and a pair (seed photo and edit) pans together, so the same spot of
// both is in view. The image keeps its aspect ratio and its frame (.zoom-viewport) scrolls; the
// page never does.
(function () {
  "use strict";

  const ZOOM_LEVELS = ["fit", 1, 2];
  const ZOOM_NAMES = { fit: "Fit", 1: "100 %", 2: "200 %" };
  const ZOOM_KEYS = { "+": 1, "=": 1, "-": -1, "0": 0 };

  function zoomRoot() {
    return document.querySelector("[data-zoom-root]");
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

  // A key nothing took, not typed into a field.
  function usable(event) {
    const t = event.target;
    const typing = t && (t.tagName === "INPUT" && !["radio", "checkbox", "button", "submit"].includes(t.type) || t.tagName === "TEXTAREA" || t.isContentEditable);
    return !typing && !event.defaultPrevented && !event.repeat && !event.ctrlKey && !event.metaKey && !event.altKey;
  }

  // Shift+arrows pan a zoomed image before the box check or the questions take the arrows:
  // this listener runs in the capture phase, ahead of keys.js.
  function onPanKey(event) {
    const key = event.key.toLowerCase();
    if (usable(event) && event.shiftKey && key.indexOf("arrow") === 0 && panZoom(key)) event.preventDefault();
  }

  // The zoom keys: only keys nothing else used reach them (this listener is on window, after
  // every listener on the document).
  function onZoomKey(event) {
    const key = event.key.toLowerCase();
    if (!usable(event) || !(key in ZOOM_KEYS) || !zoomViewports().length) return;
    event.preventDefault();
    stepZoom(ZOOM_KEYS[key]);
  }

  function onZoomClick(event) {
    const control = event.target.closest && event.target.closest("[data-zoom-step], [data-zoom-cycle], [data-zoom-fit]");
    if (!control) return;
    event.preventDefault();
    if (control.hasAttribute("data-zoom-cycle")) {
      cycleZoom();
    } else if (control.hasAttribute("data-zoom-fit")) {
      setZoom("fit");
    } else {
      stepZoom(Number(control.getAttribute("data-zoom-step")));
    }
  }

  document.addEventListener("keydown", onPanKey, true);
  window.addEventListener("keydown", onZoomKey);
  document.addEventListener("click", onZoomClick);
  document.addEventListener("scroll", onScroll, true); // scroll does not bubble: capture it
  document.addEventListener("pointerdown", onPointerDown);
  document.addEventListener("pointermove", onPointerMove);
  document.addEventListener("pointerup", onPointerUp);
  document.addEventListener("pointercancel", onPointerUp);
})();
