// Odradek console: charts (uPlot) fed by the console's JSON series, refreshed every few seconds.
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
})();
