// Sluice dashboard: regions that refresh themselves, the overview's charts, a re-send's progress, "select all".
// Every value reaches the page as text (textContent, or HTML the server escaped): nothing from the cluster is run.
"use strict";

function refreshRegions() {
  document.querySelectorAll("[data-refresh]").forEach(function (region) {
    const seconds = Math.max(parseFloat(region.dataset.refresh) || 5, 1);
    setInterval(function () {
      if (document.hidden) { return; }
      fetch(location.href, { headers: { "X-Refresh": region.id || "1" }, credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) {
          if (html === null) { return; }
          const doc = new DOMParser().parseFromString(html, "text/html");
          const fresh = doc.getElementById(region.id);
          if (fresh) { region.replaceChildren(...fresh.childNodes); }
        })
        .catch(function () { /* the next round tries again */ });
    }, seconds * 1000);
  });
}

const SVG = "http://www.w3.org/2000/svg";

function drawChart(svg, series, column, bytes) {
  const w = 600, h = 160, pad = 4;
  const keys = Object.keys(series);
  let tMin = Infinity, tMax = -Infinity, vMax = 0;
  keys.forEach(function (k) {
    series[k].forEach(function (p) { tMin = Math.min(tMin, p[0]); tMax = Math.max(tMax, p[0]); vMax = Math.max(vMax, p[column]); });
  });
  svg.replaceChildren();
  if (!isFinite(tMin)) { return; }
  const span = Math.max(tMax - tMin, 1), top = vMax > 0 ? vMax * 1.1 : 1;
  keys.forEach(function (k, i) {
    const line = document.createElementNS(SVG, "polyline");
    line.setAttribute("class", "c" + (i % 6));
    line.setAttribute("points", series[k].map(function (p) {
      return ((p[0] - tMin) / span * (w - 2 * pad) + pad).toFixed(1) + "," + (h - pad - p[column] / top * (h - 2 * pad)).toFixed(1);
    }).join(" "));
    svg.appendChild(line);
  });
  const label = svg.parentNode.querySelector(".max");
  if (label) { label.textContent = "max " + (bytes ? humanBytes(vMax) : vMax.toFixed(1)); }
}

function humanBytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return n.toFixed(i ? 1 : 0) + " " + units[i];
}

function charts() {
  const box = document.querySelector("[data-chart-source]");
  if (!box) { return; }
  const svgs = box.querySelectorAll("svg.chart");
  const legend = document.getElementById("chart-legend");
  const bytesColumn = parseInt(box.dataset.bytesSeries || "0", 10);
  function round() {
    fetch(box.dataset.chartSource, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (data) {
        if (!data) { return; }
        svgs.forEach(function (svg) {
          const column = parseInt(svg.dataset.series, 10);
          drawChart(svg, data.series, column, column === bytesColumn);
        });
        if (legend) {
          legend.replaceChildren(...Object.keys(data.series).map(function (k, i) {
            const li = document.createElement("li"); li.className = "c" + (i % 6); li.textContent = k; return li;
          }));
        }
        document.body.dataset.chartsDrawn = String(Date.now());
      })
      .catch(function () { /* the next round tries again */ });
  }
  round();
  setInterval(round, 5000);
}

function progress() {
  const box = document.querySelector("[data-progress]");
  if (!box) { return; }
  const timer = setInterval(function () {
    fetch(box.dataset.progress, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (job) {
        if (!job || !("running" in job)) { return; }
        ["resent", "skipped", "failed", "looked", "total"].forEach(function (k) {
          const el = box.querySelector("." + k);
          if (el && job[k] !== null && job[k] !== undefined) { el.textContent = String(job[k]); }
        });
        const state = box.querySelector(".running");
        if (state) { state.textContent = job.running ? "running" : (job.error ? "stopped: " + job.error : "finished"); }
        if (!job.running) { clearInterval(timer); }
      })
      .catch(function () { /* the next round tries again */ });
  }, 1000);
}

function selectAll() {
  const all = document.getElementById("select-all");
  if (!all) { return; }
  all.addEventListener("change", function () {
    document.querySelectorAll("input.pick").forEach(function (box) { box.checked = all.checked; });
  });
}

document.addEventListener("DOMContentLoaded", function () {
  refreshRegions();
  charts();
  progress();
  selectAll();
});
