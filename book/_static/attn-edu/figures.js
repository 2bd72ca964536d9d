/* attn-edu book: draw plotly figures only when a reader is about to see them.
 *
 * The book build (book/_ext/attn_edu_book.py) turns each figure's inline script into
 * <script type="text/x-attn-edu-plotly" data-div="ID">, which the browser does not run,
 * and loads this file (deferred) on pages that have figures. Here, when a figure comes
 * within about a third of a screen of the viewport, plotly.js is loaded (once, from the URL in this
 * script's data-plotly attribute, relative to this script) and the figure's script is run. Nothing blocks the
 * text, and a page read only at its top never downloads plotly.js.
 *
 * Every slider of a drawn figure also gets a native <input type="range"> (visually
 * hidden until it has the keyboard focus) that moves the slider step by step, so the
 * figures can be explored with the keyboard and a screen reader.
 *
 * window.attnEduFigures.drawAll() draws every figure now (used before printing, and by
 * the browser test); .whenDrawn() resolves when every requested figure is drawn.
 */
(function () {
  "use strict";
  var me = document.currentScript;
  // data-plotly is relative to this script's own URL (pages live at several depths)
  var plotlySrc = me && new URL(me.getAttribute("data-plotly"), me.src).href;
  var loading = null;
  var pending = [];

  function loadPlotly() {
    if (window.Plotly) return Promise.resolve();
    if (!loading) {
      loading = new Promise(function (resolve, reject) {
        var s = document.createElement("script");
        s.src = plotlySrc;
        s.async = true;
        s.onload = resolve;
        s.onerror = function () { reject(new Error("plotly.js failed to load: " + plotlySrc)); };
        document.head.appendChild(s);
      });
    }
    return loading;
  }

  function whenPlotted(div, timeoutMs) {
    return new Promise(function (resolve) {
      var waited = 0;
      (function poll() {
        if (div._fullLayout && div.querySelector(".main-svg")) return resolve(true);
        if ((waited += 50) > timeoutMs) return resolve(false);
        setTimeout(poll, 50);
      })();
    });
  }

  /* ---------------------------------------------------------------- keyboard sliders */
  function clickStep(div, sliderIndex, step) {
    var group = div.querySelectorAll(".slider-container .slider-group")[sliderIndex] ||
                div.querySelector(".slider-container");
    if (!group) return;
    var ticks = group.querySelectorAll(".slider-tick-rect");  // one per (visible) step
    var rail = group.querySelector(".slider-rail-touch-rect");
    if (!rail) return;
    var r = rail.getBoundingClientRect();
    var x;
    if (ticks.length > step) {
      var t = ticks[step].getBoundingClientRect();
      x = t.left + t.width / 2;
    } else {
      var n = div.layout.sliders[sliderIndex].steps.length;
      x = r.left + (n > 1 ? step / (n - 1) : 0) * r.width;
    }
    var y = r.top + r.height / 2;
    var opts = {bubbles: true, cancelable: true, clientX: x, clientY: y, view: window, button: 0};
    rail.dispatchEvent(new MouseEvent("mousedown", opts));
    rail.dispatchEvent(new MouseEvent("mouseup", opts));
  }

  function addSliderKeys(div) {
    var sliders = (div.layout && div.layout.sliders) || [];
    var after = div;  // the inputs follow the figure in the sliders' order
    sliders.forEach(function (slider, i) {
      var steps = slider.steps || [];
      if (steps.length < 2) return;
      var prefix = ((slider.currentvalue || {}).prefix || "").replace(/[\s:=]+$/, "");
      var title = div.getAttribute("data-title") || "the figure above";
      var input = document.createElement("input");
      input.type = "range";
      input.min = "0";
      input.max = String(steps.length - 1);
      input.step = "1";
      input.value = String(slider.active || 0);
      input.className = "attn-edu-slider-keys";
      input.setAttribute("aria-label", (prefix ? prefix + ": " : "") + "slider of " + title);
      var label = function () {
        var s = steps[Number(input.value)] || {};
        input.setAttribute("aria-valuetext", String(s.label == null ? input.value : s.label));
      };
      label();
      input.addEventListener("input", function () {
        label();
        clickStep(div, i, Number(input.value));
      });
      if (div.on) {
        div.on("plotly_sliderchange", function (e) {
          if (e && e.slider === slider) return;
          var active = div.layout.sliders[i].active;
          if (active != null && String(active) !== input.value) { input.value = String(active); label(); }
        });
      }
      after.parentNode.insertBefore(input, after.nextSibling);
      after = input;
    });
  }

  /* ---------------------------------------------------------------- drawing */
  function draw(script) {
    if (script._attnDrawn) return script._attnDrawn;
    var div = document.getElementById(script.getAttribute("data-div"));
    script._attnDrawn = loadPlotly().then(function () {
      var s = document.createElement("script");
      s.text = script.text;
      script.parentNode.insertBefore(s, script.nextSibling);
      return div ? whenPlotted(div, 30000) : false;
    }).then(function (ok) {
      if (ok) addSliderKeys(div);
      return ok;
    });
    pending.push(script._attnDrawn);
    return script._attnDrawn;
  }

  var scripts = Array.prototype.slice.call(
    document.querySelectorAll('script[type="text/x-attn-edu-plotly"]'));

  function drawAll() { scripts.forEach(draw); return Promise.all(pending); }

  window.attnEduFigures = {
    drawAll: drawAll,
    whenDrawn: function () { return Promise.all(pending); }
  };
  window.addEventListener("beforeprint", drawAll);

  if (!("IntersectionObserver" in window)) { drawAll(); return; }
  var observer = new IntersectionObserver(function (entries) {
    entries.forEach(function (entry) {
      if (!entry.isIntersecting) return;
      observer.unobserve(entry.target);
      draw(entry.target._attnScript);
    });
  }, {rootMargin: "300px 0px"});  // a third of a phone screen ahead: not drawn before it nears
  scripts.forEach(function (script) {
    var div = document.getElementById(script.getAttribute("data-div"));
    if (!div) return;
    div._attnScript = script;
    observer.observe(div);
  });
})();
