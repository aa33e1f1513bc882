// Odradek console: charts (uPlot) fed by the console's JSON series, refreshed every few seconds; and the
// confirmation of dangerous forms.
//
// Nothing a page shows (a group id, a topic, a principal, a header) is ever written into JavaScript: the
// templates put such values in data- attributes (HTML-escaped by Jinja), and this script reads them as
// strings. The console's Content-Security-Policy forbids on* handler attributes (script-src-attr 'none'),
// so a value that did land in one would not run either.
(function () {
  "use strict";
  function chart(el, url, series, scales) {
    var width = Math.max(320, el.clientWidth - 12);
    var opts = { width: width, height: 220, series: [{}].concat(series), scales: scales || { x: { time: true } },
                 axes: [{}, { size: 70 }] };
    var plot = null;
    function draw() {
      fetch(url, { credentials: "same-origin" }).then(function (r) { return r.json(); }).then(function (data) {
        if (data.error) { el.setAttribute("data-error", data.error); return; }
        var cols = [data.t].concat(series.map(function (s) { return data[s.key]; }));
        el.setAttribute("data-points", String(data.t.length));
        if (plot === null) { plot = new uPlot(opts, cols, el); } else { plot.setData(cols); }
      }).catch(function (e) { el.setAttribute("data-error", String(e)); });
    }
    draw();
    setInterval(draw, (Number(el.dataset.every) || 5) * 1000);
  }
  window.odradekChart = chart;

  // <div class="chart" data-series-url="..." data-series='[{"key": ..., "label": ...}]'>: a chart declared
  // by the page, its URL and series read as data.
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll(".chart[data-series-url]").forEach(function (el) {
      chart(el, el.dataset.seriesUrl, JSON.parse(el.dataset.series || "[]"));
    });
  });

  // <form data-confirm="Delete group X?">: the browser's confirm() with that text, as text; no confirm, no post.
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (form instanceof HTMLFormElement && form.hasAttribute("data-confirm") &&
        !window.confirm(form.getAttribute("data-confirm"))) {
      event.preventDefault();
    }
  }, true);
})();
