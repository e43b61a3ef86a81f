// A figure wider than the text column runs on across the right margin (book.css); while one is
// on screen, the in-page contents in that margin fold away, as sphinx-book-theme does for
// full-width cells (its own observer watches only tagged cells, so it never sees these).
document.addEventListener("DOMContentLoaded", () => {
  const toc = document.querySelector("div.bd-sidebar-secondary");
  if (!toc || !("IntersectionObserver" in window)) return;
  const shown = new Set();
  const wide = (img) => img.getBoundingClientRect().width > img.parentElement.clientWidth + 1;
  const observer = new IntersectionObserver((entries) => {
    for (const e of entries) {
      if (e.isIntersecting && wide(e.target)) shown.add(e.target);
      else shown.delete(e.target);
    }
    toc.classList.toggle("hide", shown.size > 0);
  }, { rootMargin: "0px 0px -33% 0px" });
  document.querySelectorAll(".bd-article div.cell_output > img").forEach((img) => {
    observer.observe(img);
    // its width is known once it has loaded: observing again reports it afresh
    if (!img.complete) img.addEventListener("load", () => { observer.unobserve(img); observer.observe(img); });
  });
});

// The claims scorecard (book/claims.md): filter the cards by part, verdict and substrate.
document.addEventListener("DOMContentLoaded", () => {
  const box = document.getElementById("claim-filters");
  if (!box) return;
  const cards = Array.from(document.querySelectorAll(".claim-card"));
  const keys = ["part", "verdict", "substrate"];
  const pick = {};
  for (const k of keys) {
    const sel = document.createElement("select");
    sel.setAttribute("aria-label", `filter by ${k}`);
    const values = Array.from(new Set(cards.map((c) => c.dataset[k])));
    sel.innerHTML = `<option value="">every ${k}</option>` +
      values.map((v) => `<option>${v}</option>`).join("");
    sel.addEventListener("change", () => {
      pick[k] = sel.value;
      for (const c of cards) {
        c.style.display = keys.every((q) => !pick[q] || c.dataset[q] === pick[q]) ? "" : "none";
      }
    });
    box.appendChild(sel);
  }
});
