// Draws every <canvas data-chart="ID"> from the JSON chart spec in the element #ID
// (built by service/console/charts.py), on load and after each htmx swap. No inline
// script anywhere: the Content Security Policy allows scripts from this origin only.
"use strict";

(function () {
  const drawn = new WeakMap();

  function draw(canvas) {
    const source = document.getElementById(canvas.dataset.chart);
    if (!source || typeof Chart === "undefined") return;
    const spec = JSON.parse(source.textContent);
    if (drawn.has(canvas)) drawn.get(canvas).destroy();
    const chart = new Chart(canvas, {
      type: spec.type,
      data: { labels: spec.labels, datasets: spec.datasets },
      options: {
        animation: false,
        responsive: true,
        plugins: { title: { display: Boolean(spec.title), text: spec.title } },
        scales: { x: { stacked: spec.stacked }, y: { stacked: spec.stacked, beginAtZero: true } },
      },
    });
    drawn.set(canvas, chart);
  }

  function drawAll(root) {
    root.querySelectorAll("canvas[data-chart]").forEach(draw);
  }

  document.addEventListener("DOMContentLoaded", function () {
    drawAll(document);
  });
  document.addEventListener("htmx:afterSwap", function (event) {
    drawAll(event.detail.elt.parentElement || document);
  });
})();
