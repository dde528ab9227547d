// Every picture of the site (notebook outputs, figures) fits its column, and one that had to be shrunk to
// fit says so and opens at full size on a click: a full-window view that scrolls (or drags) to pan, zooms
// with its buttons or + and -, opens the picture by itself in a new tab, and closes on Escape or x.
(function () {
  "use strict";
  const PICTURES = ".jupyter-wrapper .jp-OutputArea-output img, .md-typeset img";

  function mark(img) {
    if (!img.naturalWidth || img.closest("a")) return; // a linked picture keeps its link
    const shown = img.getBoundingClientRect().width;
    const shrunk = shown > 0 && img.naturalWidth > shown * 1.05;
    img.classList.add("toynet-zoomable");
    img.title = "Click to see the picture at full size";
    let hint = img.nextElementSibling;
    if (!(hint && hint.classList.contains("toynet-zoom-hint"))) hint = null;
    if (shrunk && !hint) {
      hint = document.createElement("div");
      hint.className = "toynet-zoom-hint";
      img.insertAdjacentElement("afterend", hint);
    }
    if (shrunk) hint.textContent = `Shown at ${Math.round((100 * shown) / img.naturalWidth)}%: click the picture to see it at full size.`;
    else if (hint) hint.remove();
  }

  function markAll() {
    document.querySelectorAll(PICTURES).forEach((img) => {
      if (img.complete) mark(img);
      else img.addEventListener("load", () => mark(img), { once: true });
    });
  }

  async function standaloneUrl(src) {
    if (!src.startsWith("data:")) return src; // a file of the site: open it as it is
    const blob = await (await fetch(src)).blob(); // browsers refuse to open data: addresses in a tab
    return URL.createObjectURL(blob);
  }

  function open(img) {
    const box = document.createElement("div");
    box.className = "toynet-lightbox";
    box.setAttribute("role", "dialog");
    box.setAttribute("aria-label", "The picture at full size");
    box.innerHTML =
      '<div class="toynet-lightbox__bar">' +
      '<button type="button" data-zoom="0.8" title="Zoom out (-)">&minus;</button>' +
      '<span class="toynet-lightbox__scale"></span>' +
      '<button type="button" data-zoom="1.25" title="Zoom in (+)">+</button>' +
      '<button type="button" data-zoom="1" title="Full size (0)">actual size</button>' +
      '<button type="button" data-zoom="fit" title="Fit the window">fit</button>' +
      '<a class="toynet-lightbox__tab" target="_blank" rel="noopener">open in a new tab</a>' +
      '<button type="button" class="toynet-lightbox__close" title="Close (Esc)">&times; close</button>' +
      "</div>" +
      '<div class="toynet-lightbox__stage"></div>';
    const stage = box.querySelector(".toynet-lightbox__stage");
    const big = new Image();
    big.src = img.currentSrc || img.src;
    big.alt = img.alt;
    stage.appendChild(big);
    const label = box.querySelector(".toynet-lightbox__scale");
    let scale = 1;
    const zoom = (value) => {
      scale = Math.min(8, Math.max(0.05, value));
      big.style.width = `${Math.round(img.naturalWidth * scale)}px`;
      label.textContent = `zoom ${Math.round(scale * 100)}%`;
    };
    const fit = () => zoom(Math.min(1, (stage.clientWidth - 16) / img.naturalWidth, (stage.clientHeight - 16) / img.naturalHeight));
    const close = () => {
      box.remove();
      document.removeEventListener("keydown", keys);
    };
    const keys = (e) => {
      if (e.key === "Escape") close();
      else if (e.key === "+" || e.key === "=") zoom(scale * 1.25);
      else if (e.key === "-") zoom(scale * 0.8);
      else if (e.key === "0") zoom(1);
    };
    box.querySelector(".toynet-lightbox__bar").addEventListener("click", (e) => {
      const button = e.target.closest("button");
      if (!button) return;
      if (button.classList.contains("toynet-lightbox__close")) close();
      else if (button.dataset.zoom === "fit") fit();
      else if (button.dataset.zoom === "1") zoom(1);
      else zoom(scale * Number(button.dataset.zoom));
    });
    stage.addEventListener("click", (e) => {
      if (e.target === stage) close(); // a click beside the picture closes it
    });
    let drag = null; // pan by dragging, as well as by scrolling
    stage.addEventListener("pointerdown", (e) => {
      if (e.target !== big) return;
      drag = { x: e.clientX, y: e.clientY, left: stage.scrollLeft, top: stage.scrollTop };
      stage.setPointerCapture(e.pointerId);
      e.preventDefault();
    });
    stage.addEventListener("pointermove", (e) => {
      if (!drag) return;
      stage.scrollLeft = drag.left - (e.clientX - drag.x);
      stage.scrollTop = drag.top - (e.clientY - drag.y);
    });
    stage.addEventListener("pointerup", () => (drag = null));
    document.addEventListener("keydown", keys);
    document.body.appendChild(box);
    zoom(1); // full size: the point of opening it
    standaloneUrl(big.src).then((url) => (box.querySelector(".toynet-lightbox__tab").href = url));
  }

  document.addEventListener("click", (e) => {
    const img = e.target.closest && e.target.closest("img.toynet-zoomable");
    if (img && !e.defaultPrevented) open(img);
  });
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", markAll);
  else markAll();
  let resize;
  window.addEventListener("resize", () => {
    clearTimeout(resize);
    resize = setTimeout(markAll, 200);
  });
})();
