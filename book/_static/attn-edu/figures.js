/* attn-edu book: draw plotly figures only when a reader is about to see them, laid out for
 * the width they get, and operable with the keyboard.
 *
 * The book build (book/_ext/attn_edu_book.py) turns each figure's inline script into
 * <script type="text/x-attn-edu-plotly" data-div="ID">, which the browser does not run,
 * and loads this file (deferred) on pages that have figures. Here, when a figure comes
 * within about a third of a screen of the viewport, plotly.js is loaded (once, from the URL
 * in this script's data-plotly attribute, relative to this script) and the figure is drawn.
 * Nothing blocks the text, and a page read only at its top never downloads plotly.js.
 *
 * A phone layout. A figure narrower than NARROW_PX (a phone: 358 px of content at 390 px)
 * is drawn with a layout made for it, from its desktop layout, generically (no chapter
 * names a figure): its subplots stacked (two columns when the desktop had four or more),
 * every title wrapped to the width, the main title at the top, and everything that sat
 * beside or around the panels -- menus, sliders, the legend, notes in paper coordinates,
 * colour bars -- in one column below them, no toolbar, no drag-to-zoom (the page scrolls
 * under a finger). It is laid out twice: first from estimated text sizes, then from the
 * sizes plotly drew (measured boxes), so no two text boxes meet and all stay inside the
 * figure. The layout is chosen on load and again when the width crosses NARROW_PX or
 * changes (a phone turned); the figure keeps its state (menu, slider, frame) across.
 *
 * Keyboard. Every slider of a drawn figure gets a native <input type="range">, every
 * dropdown menu a <select>, every row of buttons (Play/Pause) native <button>s, after the
 * figure, visually hidden until they have the focus, named after what they control; they
 * run the same plotly commands as the figure's own controls and follow their state.
 *
 * "Back to top" (the theme's floating button) hides while a figure is under it.
 *
 * window.attnEduFigures.drawAll() draws every figure now (used before printing, and by
 * the browser test); .whenDrawn() resolves when every requested figure is drawn (and laid
 * out); .NARROW_PX is the width below which the phone layout is used.
 */
(function () {
  "use strict";
  var me = document.currentScript;
  // data-plotly is relative to this script's own URL (pages live at several depths)
  var plotlySrc = me && new URL(me.getAttribute("data-plotly"), me.src).href;
  var NARROW_PX = 600;
  var FONT = '"Open Sans", verdana, arial, sans-serif';
  var GAP = 10;           // px between two things stacked in the phone layout
  // the words this script writes (aria-labels, fallback labels), in the page's language:
  // the Chinese edition's pages are <html lang="zh-CN"> (tests/test_book_browser.py and
  // tests/test_zh_site.py hold the two tables to the same keys)
  var WORDS = {
    en: {figure: "the figure above", slider: "{what}slider of {title}", sliderWhat: "{what}: ",
         group: "{what} of {title}", buttons: "buttons", menu: "menu", button: "button {n}",
         option: "option {n}"},
    "zh-CN": {figure: "上方的图", slider: "{title}的{what}滑块", sliderWhat: "{what}", group: "{title}的{what}",
              buttons: "按钮", menu: "菜单", button: "按钮 {n}", option: "选项 {n}"}
  };
  var LANG = /^zh/i.test(document.documentElement.lang || "") ? "zh-CN" : "en";
  function say(key, args) {
    var text = WORDS[LANG][key];
    Object.keys(args || {}).forEach(function (k) { text = text.split("{" + k + "}").join(args[k]); });
    return text;
  }
  var loading = null;
  var pending = [];
  var drawn = [];         // {div, fig, config, mode, width}

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

  function clone(x) { return x === undefined ? undefined : JSON.parse(JSON.stringify(x)); }
  function num(x, dflt) { return typeof x === "number" && isFinite(x) ? x : dflt; }
  function clamp(x, lo, hi) { return Math.max(lo, Math.min(hi, x)); }

  /* ---------------------------------------------------------------- text */
  var ctx2d = null;
  function plain(s) { return String(s == null ? "" : s).replace(/<[^>]*>/g, ""); }
  function textWidth(s, size) {
    ctx2d = ctx2d || document.createElement("canvas").getContext("2d");
    ctx2d.font = size + "px " + FONT;
    return ctx2d.measureText(plain(s)).width;
  }
  /** words of a line of plotly's pseudo-HTML: split at spaces outside tags */
  function words(line) {
    var out = [], cur = "", inTag = false;
    for (var i = 0; i < line.length; i++) {
      var c = line[i];
      if (c === "<") inTag = true;
      if (c === ">") inTag = false;
      if (c === " " && !inTag) { if (cur) out.push(cur); cur = ""; } else cur += c;
    }
    if (cur) out.push(cur);
    return out;
  }
  /** text with <br> inserted so that no line is wider than `width` px at font `size` */
  function wrap(text, size, width) {
    if (typeof text !== "string" || !text) return text;
    return text.split(/<br\s*\/?>/i).map(function (line) {
      if (textWidth(line, size) <= width) return line;
      var lines = [], cur = "";
      words(line).forEach(function (w) {
        var cand = cur ? cur + " " + w : w;
        if (cur && textWidth(cand, size) > width) { lines.push(cur); cur = w; } else cur = cand;
      });
      if (cur) lines.push(cur);
      return lines.join("<br>");
    }).join("<br>");
  }
  function nLines(text) { return typeof text === "string" && text ? text.split(/<br\s*\/?>/i).length : 0; }
  function titleText(t) { return t == null ? "" : typeof t === "string" ? t : (t.text || ""); }

  /* ---------------------------------------------------------------- the phone layout */
  var AXIS_RE = /^([xy])axis(\d*)$/;
  function axisKey(name) { return name.replace(/^([xy])/, "$1axis"); }   // "x2" -> "xaxis2"

  /** The figure's cartesian panels: one per x axis that is not overlaying another. */
  function cells(fig) {
    var L = fig.layout || {}, byX = {};
    function add(xn, yn) {
      var xa = L[axisKey(xn)] || {}, ya = L[axisKey(yn)] || {};
      if (xa.overlaying || byX[xn]) return;
      byX[xn] = {x: xn, y: yn, xd: (xa.domain || [0, 1]).slice(), yd: (ya.domain || [0, 1]).slice()};
    }
    (fig.data || []).forEach(function (t) {
      if (t.type === "pie") return;
      add(t.xaxis || "x", t.yaxis || "y");
    });
    Object.keys(L).forEach(function (k) {
      var m = AXIS_RE.exec(k);
      if (m && m[1] === "x" && L[k] && typeof L[k].anchor === "string" && /^y\d*$/.test(L[k].anchor))
        add("x" + m[2], L[k].anchor);
    });
    var list = Object.keys(byX).map(function (k) { return byX[k]; });
    if (!list.length) return list;
    list.sort(function (a, b) {
      return (Math.round(b.yd[1] * 100) - Math.round(a.yd[1] * 100)) || (a.xd[0] - b.xd[0]);
    });
    return list;
  }

  function nColumns(list) {
    var starts = {};
    list.forEach(function (c) { starts[Math.round(c.xd[0] * 100)] = 1; });
    return Object.keys(starts).length;
  }

  function isSubplotTitle(a, list) {
    if (!a || a.xref !== "paper" || a.yref !== "paper" || a.showarrow !== false) return null;
    for (var i = 0; i < list.length; i++) {
      var c = list[i];
      if (Math.abs(a.y - c.yd[1]) < 0.01 && Math.abs(a.x - (c.xd[0] + c.xd[1]) / 2) < 0.02) return c;
    }
    return null;
  }

  function insideCell(a, list) {
    for (var i = 0; i < list.length; i++) {
      var c = list[i];
      if (a.x >= c.xd[0] - 1e-6 && a.x <= c.xd[1] + 1e-6 && a.y >= c.yd[0] - 1e-6 && a.y <= c.yd[1] + 1e-6) return c;
    }
    return null;
  }

  /** where an item beside or around the panels came from: its desktop position, in
   *  reading order (above the panels first, then to their right, then below) */
  function rank(x, y, k) {
    var region = y > 1 ? 0 : x > 1 ? 1 : 2;
    return [region, -y, x, k];
  }
  function byRank(a, b) {
    for (var i = 0; i < a.rank.length; i++) if (a.rank[i] !== b.rank[i]) return a.rank[i] < b.rank[i] ? -1 : 1;
    return 0;
  }

  function colorbarOwner(t) {
    var showscale = t.showscale !== undefined ? t.showscale :
      (t.marker && t.marker.showscale !== undefined ? t.marker.showscale : undefined);
    if (showscale === false) return false;
    if (t.type === "heatmap" || t.type === "contour" || t.type === "histogram2d" ||
        t.type === "histogram2dcontour") return showscale !== false && !t.coloraxis;
    return !!(t.marker && t.marker.showscale);
  }

  /**
   * The phone layout of a figure of width W: a new layout (and the items it placed), from
   * the desktop `fig`, with sizes from `m` (measured after a first drawing) or estimated.
   */
  function phoneLayout(fig, W, m) {
    var L = clone(fig.layout || {});
    var list = cells(fig);
    var cols = nColumns(list) >= 4 ? 2 : 1;
    var baseFont = num(((L.font || {}).size), 12);
    var fontColor = (L.font || {}).color || ((((L.template || {}).layout || {}).font || {}).color) || "#444";
    var marginL = 50, marginR = 14;
    var plotW = W - marginL - marginR;
    var cellW = cols === 1 ? plotW : (plotW - 40) / 2;
    m = m || {};

    // ---- the title, wrapped, at the top of the figure
    var title = typeof L.title === "string" ? {text: L.title} : (L.title || {});
    var titleSize = num((title.font || {}).size, Math.round(baseFont * 1.4));
    var titleLines = 0;
    if (title.text) {
      title.text = wrap(title.text, titleSize, W - 16);
      titleLines = Math.max(nLines(title.text), m.titleLines || 0);
      // plotly anchors a title of several lines by its middle: the measured shift puts its top at 8 px
      L.title = Object.assign(title, {x: 0, xref: "container", xanchor: "left",
                                      y: 1, yref: "container", yanchor: "top",
                                      pad: {t: 8 + (m.titleShift || 0), l: 8, r: 8, b: 0}, automargin: false});
    }
    var titleH = title.text ? (m.titleLineH || titleSize * 1.3) * titleLines + 8 : 0;

    // ---- annotations: subplot titles move with their panel, notes inside a panel move
    // with it, the others join the column below the panels
    var band = [];
    var annots = L.annotations || [];
    var subTitles = {};   // cell.x -> [annotation index]
    var inCell = [];      // [index, cell, relative x, relative y]
    annots.forEach(function (a, k) {
      var c = isSubplotTitle(a, list);
      if (c) {
        a.text = wrap(a.text, num((a.font || {}).size, baseFont), cellW);
        (subTitles[c.x] = subTitles[c.x] || []).push(k);
        return;
      }
      if (a.xref === "paper" && a.yref === "paper") {
        c = insideCell(a, list);
        if (c) {
          inCell.push([k, c, (a.x - c.xd[0]) / (c.xd[1] - c.xd[0] || 1), (a.y - c.yd[0]) / (c.yd[1] - c.yd[0] || 1)]);
          return;
        }
        a.text = wrap(a.text, num((a.font || {}).size, baseFont), plotW);
        band.push({kind: "annotation", index: k, rank: rank(num(a.x, 0), num(a.y, 0), k),
                   est: (nLines(a.text) || 1) * num((a.font || {}).size, baseFont) * 1.35 + 4});
      }
    });

    // ---- colour bars: under their panel, horizontal (one that spanned all panels: below)
    var cbars = [];
    (fig.data || []).forEach(function (t, i) {
      if (!colorbarOwner(t)) return;
      var cell = null;
      for (var j = 0; j < list.length; j++) if (list[j].x === (t.xaxis || "x")) cell = list[j];
      var cb = t.colorbar || (t.marker && t.marker.colorbar) || {};
      var shared = list.length > 1 && num(cb.len, 1) >= 0.9;
      cbars.push({trace: i, cell: shared ? null : cell, est: 44 + (titleText(cb.title) ? 18 : 0)});
    });
    cbars.forEach(function (c) {
      if (!c.cell) band.push({kind: "colorbar", trace: c.trace, rank: [2, 1, 0, c.trace], est: c.est});
    });

    // ---- menus, sliders and the legend join the column below the panels
    (L.updatemenus || []).forEach(function (u, k) {
      var buttons = u.type === "buttons";
      band.push({kind: "menu", index: k, rank: rank(num(u.x, -0.05), num(u.y, 1), k),
                 est: buttons ? 34 : 30, buttons: buttons});
    });
    (L.sliders || []).forEach(function (s, k) {
      band.push({kind: "slider", index: k, rank: rank(num(s.x, 0), num(s.y, 0), k), est: 86});
    });
    var names = (fig.data || []).filter(function (t) { return t.showlegend !== false && t.name; });
    var showLegend = L.showlegend !== undefined ? L.showlegend : names.length > 1;
    if (showLegend && names.length) {
      var legendFont = num(((L.legend || {}).font || {}).size, baseFont);
      var row = 0, rows = 1;
      names.forEach(function (t) {
        var w = textWidth(t.name, legendFont) + 46;
        if (row && row + w > W - 16) { rows++; row = 0; }
        row += w;
      });
      band.push({kind: "legend", rank: [3, 0, 0, 0], est: rows * (legendFont * 1.6 + 4) + 8});
    }
    band.sort(byRank);

    // ---- the panels, in rows of `cols`
    var H0 = num(L.height, 450) - num((L.margin || {}).t, 100) - num((L.margin || {}).b, 80);
    var rowsOf = [];
    list.forEach(function (c, i) { var r = Math.floor(i / cols); (rowsOf[r] = rowsOf[r] || []).push(c); });
    function above(c) {
      if (m.above && m.above[c.x] != null) return m.above[c.x];
      var h = 0;
      (subTitles[c.x] || []).forEach(function (k) {
        var a = annots[k];
        h += nLines(a.text) * num((a.font || {}).size, baseFont) * 1.3 + 6;
      });
      var xa = L[axisKey(c.x)] || {};
      if (xa.side === "top" && xa.visible !== false) h += 22 + (titleText(xa.title) ? 24 : 0);
      return h;
    }
    function below(c) {
      if (m.below && m.below[c.x] != null) return m.below[c.x];
      var xa = L[axisKey(c.x)] || {};
      if (xa.side === "top" || xa.visible === false) return 4;
      return (xa.showticklabels === false ? 4 : 22) + (titleText(xa.title) ? nLines(wrap(titleText(xa.title), 14, cellW)) * 18 + 6 : 0);
    }
    function cbarH(c) {
      var h = 0;
      cbars.forEach(function (b) { if (b.cell === c) h += (m.cbar && m.cbar[b.trace] != null ? m.cbar[b.trace] : b.est) + GAP; });
      return h;
    }
    function panelHeight(c) {
      var xa = L[axisKey(c.x)] || {}, ya = L[axisKey(c.y)] || {};
      if (ya.scaleanchor || xa.scaleanchor) return clamp(cellW, 160, 340);
      return clamp((c.yd[1] - c.yd[0]) * H0, cols === 1 ? 180 : 150, 260);
    }

    var y = 8 + titleH + (titleH ? GAP : 0);
    var slots = [];
    rowsOf.forEach(function (r, ri) {
      var up = Math.max.apply(null, r.map(above).concat([0]));
      y += up;
      var h = Math.max.apply(null, r.map(panelHeight));
      r.forEach(function (c, ci) { slots.push({cell: c, top: y, bottom: y + h, col: ci}); });
      y += h;
      var down = Math.max.apply(null, r.map(function (c) { return below(c) + cbarH(c); }).concat([0]));
      r.forEach(function (c) { c._axisBelow = below(c); });
      y += down + (ri < rowsOf.length - 1 ? GAP : 0);
    });
    var plotTop = slots.length ? slots[0].top : y;
    var plotBottom = slots.length ? Math.max.apply(null, slots.map(function (s) { return s.bottom; })) : y;
    if (!slots.length) { plotTop = 8 + titleH + GAP; plotBottom = plotTop + 260; y = plotBottom; }
    var H = plotBottom - plotTop;
    var afterPanels = y;

    function paperY(px) { return (plotBottom - px) / H; }

    slots.forEach(function (s) {
      var c = s.cell, xa = L[axisKey(c.x)] = L[axisKey(c.x)] || {}, ya = L[axisKey(c.y)] = L[axisKey(c.y)] || {};
      var x0 = cols === 1 ? 0 : s.col === 0 ? 0 : 0.5 + 20 / plotW;
      var x1 = cols === 1 ? 1 : s.col === 0 ? 0.5 - 20 / plotW : 1;
      xa.domain = [x0, x1];
      ya.domain = [paperY(s.bottom), paperY(s.top)];
      c._new = {xd: xa.domain, yd: ya.domain, bottom: s.bottom};
      if (xa.title && titleText(xa.title)) {
        xa.title = typeof xa.title === "string" ? {text: xa.title} : xa.title;
        xa.title.text = wrap(xa.title.text, num((xa.title.font || {}).size, 14), (x1 - x0) * plotW);
      }
      if (ya.title && titleText(ya.title)) {
        ya.title = typeof ya.title === "string" ? {text: ya.title} : ya.title;
        ya.title.text = wrap(ya.title.text, num((ya.title.font || {}).size, 14), s.bottom - s.top);
      }
      ya.automargin = true;
      (subTitles[c.x] || []).forEach(function (k, j) {
        var a = annots[k];
        a.x = (x0 + x1) / 2;
        a.y = ya.domain[1];
        a.yanchor = "bottom";
        a.yshift = (xa.side === "top" && xa.visible !== false ? 22 + (titleText(xa.title) ? 24 : 0) : 0) + j * 20;
      });
      // a colour bar of this panel: right under its axis
      var off = s.bottom + c._axisBelow + GAP;
      cbars.forEach(function (b) {
        if (b.cell !== c) return;
        var t = fig.data[b.trace];
        b.set = {x: (x0 + x1) / 2, xanchor: "center", len: (x1 - x0) * 0.9, lenmode: "fraction",
                 y: paperY(off), yanchor: "top", yref: "paper", orientation: "h", thickness: 10,
                 title: Object.assign({}, titleText((t.colorbar || {}).title) ? {text: titleText(t.colorbar.title)} : {}, {side: "top"})};
        off += (m.cbar && m.cbar[b.trace] != null ? m.cbar[b.trace] : b.est) + GAP;
      });
    });
    inCell.forEach(function (e) {
      var a = annots[e[0]], n = e[1]._new;
      if (!n) return;
      a.x = n.xd[0] + e[2] * (n.xd[1] - n.xd[0]);
      a.y = n.yd[0] + e[3] * (n.yd[1] - n.yd[0]);
    });

    // ---- the column below the panels
    var cursor = afterPanels + GAP;
    band.forEach(function (item, i) {
      var h = m.band && m.band[i] != null ? m.band[i] : item.est;
      item.top = cursor;
      item.h = h;
      cursor += h + GAP;
    });
    band.forEach(function (item, i) {
      var yp = paperY(item.top);
      if (item.kind === "annotation") {
        Object.assign(annots[item.index], {x: 0, xref: "paper", xanchor: "left", y: yp, yref: "paper",
                                           yanchor: "top", align: "left", xshift: 0, yshift: 0});
      } else if (item.kind === "menu") {
        var u = L.updatemenus[item.index];
        var below = cursor - (item.top + item.h);   // room under the menu for its list
        var listH = (u.buttons || []).length * 24;
        Object.assign(u, {x: 0, xanchor: "left", y: yp, yanchor: "top", pad: {t: 0, b: 0, l: 0, r: 0}});
        if (!item.buttons) u.direction = listH > below && item.top - plotTop > listH ? "up" : "down";
        else u.direction = "left";
      } else if (item.kind === "slider") {
        var s = L.sliders[item.index];
        var steps = s.steps || [];
        var labelsW = steps.reduce(function (w, st) { return w + textWidth(st.label, num((s.font || {}).size, baseFont)) + 8; }, 0);
        Object.assign(s, {x: 0, len: 1, xanchor: "left", y: yp, yanchor: "top", pad: {t: 0, b: 0, l: 0, r: 0}});
        s.currentvalue = Object.assign({}, s.currentvalue || {}, {xanchor: "left"});
        if (labelsW > plotW) {  // the step labels would run into each other: the current value says it
          s.currentvalue.font = Object.assign({color: fontColor}, s.currentvalue.font || {});
          s.font = Object.assign({}, s.font || {}, {color: "rgba(0,0,0,0)"});
        }
      } else if (item.kind === "legend") {
        L.legend = Object.assign({}, L.legend || {}, {orientation: "h", x: 0, xanchor: "left", y: yp,
                                                      yanchor: "top", yref: "paper", xref: "paper",
                                                      maxheight: 20000});  // px: every entry shown
      } else if (item.kind === "colorbar") {
        var t = fig.data[item.trace];
        cbars.forEach(function (b) {
          if (b.trace === item.trace) b.set = {x: 0.5, xanchor: "center", len: 1, lenmode: "fraction",
            y: yp, yanchor: "top", yref: "paper", orientation: "h", thickness: 10,
            title: Object.assign({}, titleText((t.colorbar || {}).title) ? {text: titleText(t.colorbar.title)} : {}, {side: "top"})};
        });
      }
    });
    if (band.length) cursor -= GAP;
    var height = Math.ceil(cursor + 8);

    L.height = height;
    L.width = undefined;
    L.autosize = true;
    L.margin = {t: plotTop, b: height - plotBottom, l: marginL, r: marginR, pad: 0, autoexpand: true};
    L.dragmode = false;
    return {layout: L, band: band, cells: list, cbars: cbars, titleLines: titleLines, plotTop: plotTop,
            plotBottom: plotBottom, titleShift: m.titleShift || 0};
  }

  /** Sizes plotly drew, for the second pass: px above and below each panel, of each item
   *  of the column below the panels, of each colour bar, and of a title line. */
  function measure(div, plan) {
    var svg = div.querySelector(".main-svg");
    if (!svg || !div._fullLayout) return null;
    var base = svg.getBoundingClientRect();
    function box(el) {
      var r = el.getBoundingClientRect();
      return r.width || r.height ? {t: r.top - base.top, b: r.bottom - base.top, l: r.left - base.left, r: r.right - base.left} : null;
    }
    function boxes(sel) {
      return Array.prototype.map.call(div.querySelectorAll(sel), box).filter(Boolean);
    }
    var fl = div._fullLayout, m = {above: {}, below: {}, band: [], cbar: {}};
    var annEls = div.querySelectorAll(".infolayer .annotation");
    plan.cells.forEach(function (c) {
      var xa = fl[axisKey(c.x)], ya = fl[axisKey(c.y)];
      if (!xa || !ya) return;
      var top = ya._offset, bottom = ya._offset + ya._length;
      var up = [], down = [];
      boxes(".infolayer text." + c.x + "title").concat(boxes("g." + c.x + "tick text")).forEach(function (b) {
        (b.b <= top + 1 ? up : b.t >= bottom - 1 ? down : []).push(b);
      });
      var ups = up.map(function (b) { return top - b.t; });
      var downs = down.map(function (b) { return b.b - bottom; });
      m.above[c.x] = Math.max.apply(null, ups.concat([0]));
      m.below[c.x] = Math.max.apply(null, downs.concat([4]));
    });
    // subplot titles: their height counts above their panel
    Array.prototype.forEach.call(annEls, function (el) {
      var k = Number(el.getAttribute("data-index"));
      var a = (div.layout.annotations || [])[k];
      var c = a && isSubplotTitle(a, plan.cells.map(function (c) { return {x: c.x, xd: c._new.xd, yd: c._new.yd}; }));
      if (!c) return;
      var cell = null;
      plan.cells.forEach(function (cc) { if (cc.x === c.x) cell = cc; });
      var ya = fl[axisKey(cell.y)], b = box(el);
      if (ya && b) m.above[c.x] = Math.max(m.above[c.x] || 0, ya._offset - b.t);
    });
    var sliders = div.querySelectorAll(".slider-container .slider-group");
    var menus = div.querySelectorAll(".updatemenu-container .updatemenu-header-group");
    plan.band.forEach(function (item, i) {
      var b = null;
      if (item.kind === "annotation") {
        Array.prototype.forEach.call(annEls, function (el) {
          if (Number(el.getAttribute("data-index")) === item.index) b = box(el);
        });
      } else if (item.kind === "slider") b = sliders[item.index] && box(sliders[item.index]);
      else if (item.kind === "menu") b = menus[item.index] && box(menus[item.index]);
      else if (item.kind === "legend") b = div.querySelector(".legend") && box(div.querySelector(".legend"));
      else if (item.kind === "colorbar") b = colorbarBox(div, item.trace, box);
      m.band[i] = b ? Math.ceil(b.b - Math.min(b.t, item.top)) : item.est;
    });
    plan.cbars.forEach(function (c) {
      if (!c.cell) return;
      var b = colorbarBox(div, c.trace, box);
      if (b) m.cbar[c.trace] = Math.ceil(b.b - b.t);
    });
    var t = div.querySelector(".infolayer .gtitle");
    if (t && plan.titleLines) {
      var tb = box(t);
      if (tb) {
        m.titleLineH = (tb.b - tb.t) / nLines(titleText(div.layout.title));
        m.titleShift = plan.titleShift + (8 - tb.t);
      }
      m.titleLines = plan.titleLines;
    }
    return m;
  }

  function colorbarBox(div, trace, box) {
    var cd = div.calcdata && div.calcdata[trace] && div.calcdata[trace][0];
    var id = cd && cd.t && cd.t.cb && cd.t.cb._id;
    var el = id ? div.querySelector(".colorbar." + id) || div.querySelector("." + id) : null;
    return el ? box(el) : null;
  }

  /** legend entries wrapped to the width (a horizontal legend wraps between entries only);
   *  W = null unwraps them (the breaks this file put in are plain "<br>") */
  function legendSize(fig) {
    return num((((fig.layout || {}).legend || {}).font || {}).size, num(((fig.layout || {}).font || {}).size, 12));
  }
  function phoneNames(data, size, W) {
    (data || []).forEach(function (t) {
      if (typeof t.name !== "string") return;
      t.name = W ? wrap(t.name.replace(/<br>/g, " "), size, W - 70) : t.name.replace(/<br>/g, " ");
    });
    return data;
  }

  /** apply a plan's colour-bar settings to (a copy of) the traces */
  function withColorbars(data, plan) {
    plan.cbars.forEach(function (b) {
      var t = data[b.trace];
      if (!t || !b.set) return;
      var target = (t.type === "heatmap" || t.type === "contour" || t.type === "histogram2d" ||
                    t.type === "histogram2dcontour") ? t : (t.marker = t.marker || {});
      target.colorbar = Object.assign({}, target.colorbar || {}, b.set);
    });
    return data;
  }

  /** A frame's or a control's layout change, made for the phone layout: titles wrapped and
   *  kept at the top (never moved back to the desktop's place). */
  function phonePatch(patch, plan, W) {
    if (!patch || typeof patch !== "object") return patch;
    var p = clone(patch);
    var t = p.title, tt = p["title.text"];
    var fixed = plan.layout.title || {};
    var size = num((fixed.font || {}).size, 17);
    if (t !== undefined) {
      var text = typeof t === "string" ? t : (t && t.text);
      p.title = Object.assign({}, typeof t === "object" ? t : {}, {
        text: wrap(text, size, W - 16), x: 0, xref: "container", xanchor: "left", y: 1, yref: "container",
        yanchor: "top", pad: {t: 8, l: 8, r: 8, b: 0}});
    }
    if (typeof tt === "string") p["title.text"] = wrap(tt, size, W - 16);
    delete p["title.x"]; delete p["title.y"];
    Object.keys(p).forEach(function (k) { if (/^[xy]axis\d*$/.test(k) && p[k] && p[k].domain) delete p[k].domain; });
    return p;
  }

  /** the most title lines any frame or control can show (the top keeps room for them) */
  function maxTitleLines(fig, W, size) {
    var n = 0;
    function see(t) {
      var text = typeof t === "string" ? t : t && t.text;
      if (text) n = Math.max(n, nLines(wrap(text, size, W - 16)));
    }
    (fig.frames || []).forEach(function (f) { if (f.layout) { see(f.layout.title); see(f.layout["title.text"]); } });
    ((fig.layout || {}).updatemenus || []).concat((fig.layout || {}).sliders || []).forEach(function (u) {
      (u.buttons || u.steps || []).forEach(function (b) {
        var args = b.args || [];
        var lay = b.method === "relayout" ? args[0] : b.method === "update" ? args[1] : null;
        if (lay) { see(lay.title); see(lay["title.text"]); }
      });
    });
    return n;
  }

  function phoneFigure(fig, W, m) {
    var titleSize = num(((fig.layout || {}).title || {}).font && fig.layout.title.font.size,
                        Math.round(num(((fig.layout || {}).font || {}).size, 12) * 1.4));
    m = m || {};
    m.titleLines = Math.max(m.titleLines || 0, maxTitleLines(fig, W, titleSize));
    var plan = phoneLayout(fig, W, m);
    var L = plan.layout;
    (L.updatemenus || []).forEach(function (u) {
      (u.buttons || []).forEach(function (b) {
        if (b.method === "relayout" && b.args) b.args[0] = phonePatch(b.args[0], plan, W);
        if (b.method === "update" && b.args) b.args[1] = phonePatch(b.args[1], plan, W);
      });
    });
    (L.sliders || []).forEach(function (s) {
      (s.steps || []).forEach(function (b) {
        if (b.method === "relayout" && b.args) b.args[0] = phonePatch(b.args[0], plan, W);
        if (b.method === "update" && b.args) b.args[1] = phonePatch(b.args[1], plan, W);
      });
    });
    var frames = clone(fig.frames || []);
    frames.forEach(function (f) { if (f.layout) f.layout = phonePatch(f.layout, plan, W); });
    frames.forEach(function (f) { phoneNames(f.data, legendSize(fig), W); });
    return {plan: plan, layout: L, frames: frames, data: phoneNames(withColorbars(clone(fig.data || []), plan), legendSize(fig), W)};
  }

  /* ---------------------------------------------------------------- state across layouts */
  /** layout paths that frames and controls change (their current values survive a new layout) */
  function statePaths(fig) {
    var paths = {};
    function flat(obj, prefix) {
      Object.keys(obj || {}).forEach(function (k) {
        var v = obj[k], p = prefix ? prefix + "." + k : k;
        if (v && typeof v === "object" && !Array.isArray(v)) flat(v, p); else paths[p] = 1;
      });
    }
    (fig.frames || []).forEach(function (f) { if (f.layout) flat(f.layout, ""); });
    ((fig.layout || {}).updatemenus || []).concat((fig.layout || {}).sliders || []).forEach(function (u) {
      (u.buttons || u.steps || []).forEach(function (b) {
        var args = b.args || [];
        var lay = b.method === "relayout" ? args[0] : b.method === "update" ? args[1] : null;
        if (lay) flat(lay, "");
      });
    });
    return Object.keys(paths).filter(function (p) { return !/^title|domain$/.test(p) && !/\.title/.test(p); });
  }
  function getPath(obj, path) {
    return path.split(".").reduce(function (o, k) { return o == null ? undefined : o[k]; }, obj);
  }
  function setPath(obj, path, v) {
    var ks = path.split("."), o = obj;
    ks.slice(0, -1).forEach(function (k) { o = o[k] = (o[k] && typeof o[k] === "object") ? o[k] : {}; });
    o[ks[ks.length - 1]] = clone(v);
  }

  /* ---------------------------------------------------------------- drawing */
  function layoutFor(entry, W) {
    var fig = entry.fig;
    if (W >= NARROW_PX || W < 120) {  // (no width yet: a hidden container; a resize lays it out)
      return {data: clone(fig.data || []), layout: clone(fig.layout || {}), frames: clone(fig.frames || []),
              config: entry.config, narrow: false};
    }
    var f = phoneFigure(fig, W, null);
    return {data: f.data, layout: f.layout, frames: f.frames, plan: f.plan,
            config: Object.assign({}, entry.config, {displayModeBar: false, scrollZoom: false}), narrow: true};
  }

  /** Draw (or redraw) a figure for its div's width; keep the state of its controls. */
  function render(entry, first) {
    var div = entry.div, W = Math.round(div.clientWidth || div.getBoundingClientRect().width);
    var spec = layoutFor(entry, W);
    var state = null;
    if (!first && div.layout) {
      state = {sliders: (div.layout.sliders || []).map(function (s) { return s.active; }),
               menus: (div.layout.updatemenus || []).map(function (u) { return u.active; }),
               title: entry.titleNow, paths: {}};
      entry.paths.forEach(function (p) { var v = getPath(div.layout, p); if (v !== undefined) state.paths[p] = v; });
      spec.data = div.data.map(function (t, i) {
        var c = clone(t);
        var src = (spec.data || [])[i];
        if (src && src.colorbar) c.colorbar = src.colorbar;
        else if (c.colorbar) c.colorbar = clone((entry.fig.data[i] || {}).colorbar);
        return c;
      });
      phoneNames(spec.data, legendSize(entry.fig), spec.narrow ? W : null);
      Object.keys(state.paths).forEach(function (p) { setPath(spec.layout, p, state.paths[p]); });
      (spec.layout.sliders || []).forEach(function (s, i) { if (state.sliders[i] != null) s.active = state.sliders[i]; });
      (spec.layout.updatemenus || []).forEach(function (u, i) { if (state.menus[i] != null) u.active = state.menus[i]; });
      if (state.title != null && spec.layout.title) {
        spec.layout.title.text = spec.narrow
          ? wrap(state.title, num((spec.layout.title.font || {}).size, 17), W - 16) : state.title;
      }
    }
    entry.mode = spec.narrow ? "narrow" : "wide";
    entry.width = W;
    var p = window.Plotly.react(div, {data: spec.data, layout: spec.layout, frames: spec.frames, config: spec.config});
    if (spec.narrow) div.style.height = spec.layout.height + "px";
    else div.style.height = entry.height0;
    if (!spec.narrow) return p;
    // second pass: the sizes plotly drew
    return p.then(function () { return relayoutMeasured(entry, spec, W, 0); });
  }

  function relayoutMeasured(entry, spec, W, pass) {
    var div = entry.div;
    var m = measure(div, spec.plan);
    if (!m) return;
    var again = phoneFigure(entry.fig, W, m);
    var L = again.layout;
    // keep what the reader changed
    (L.sliders || []).forEach(function (s, i) { s.active = (div.layout.sliders[i] || {}).active; });
    (L.updatemenus || []).forEach(function (u, i) { u.active = (div.layout.updatemenus[i] || {}).active; });
    entry.paths.forEach(function (p) { var v = getPath(div.layout, p); if (v !== undefined) setPath(L, p, v); });
    if (div.layout.title && L.title) L.title.text = div.layout.title.text;
    var data = div.data.map(function (t, i) {
      var c = clone(t);
      if (again.data[i] && again.data[i].colorbar) c.colorbar = again.data[i].colorbar;
      return c;
    });
    var moved = Math.abs(L.height - div.layout.height) > 1 ||
      JSON.stringify(L.margin) !== JSON.stringify(div.layout.margin);
    spec.plan = again.plan;
    return window.Plotly.react(div, {data: data, layout: L, frames: again.frames, config: spec.config}).then(function () {
      div.style.height = L.height + "px";
      if (moved && pass < 1) return relayoutMeasured(entry, spec, W, pass + 1);
    });
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

  /* ---------------------------------------------------------------- keyboard controls */
  function runCommand(div, method, args) {
    if (!method || method === "skip" || typeof window.Plotly[method] !== "function") return Promise.resolve();
    // an animation that the next command interrupts (Pause) rejects its promise: not an error
    return Promise.resolve(window.Plotly[method].apply(null, [div].concat(clone(args || []))))
      .catch(function () {});
  }

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

  function figureTitle(div) { return div.getAttribute("data-title") || say("figure"); }

  /** the text of a note that labels a menu ("pattern:"), if the desktop layout has one */
  function menuLabel(fig, u) {
    var best = null;
    ((fig.layout || {}).annotations || []).forEach(function (a) {
      var t = plain(a.text).trim();
      if (!/:$/.test(t) || a.xref !== "paper" || a.yref !== "paper") return;
      if (Math.abs(num(a.x, 0) - num(u.x, -0.05)) < 0.06 && num(a.y, 0) >= num(u.y, 1) && num(a.y, 0) - num(u.y, 1) < 0.2)
        best = t.replace(/:$/, "");
    });
    return best;
  }

  /** the keyboard controls of a figure's sliders: [{el, rank}] */
  function addSliderKeys(entry) {
    var div = entry.div, out = [];
    var sliders = (div.layout && div.layout.sliders) || [];
    var desktop = (entry.fig.layout || {}).sliders || [];
    sliders.forEach(function (slider, i) {
      var steps = slider.steps || [];
      if (steps.length < 2) return;
      var prefix = plain((slider.currentvalue || {}).prefix || "").replace(/[\s:=]+$/, "");
      var input = document.createElement("input");
      input.type = "range";
      input.min = "0";
      input.max = String(steps.length - 1);
      input.step = "1";
      input.value = String(slider.active || 0);
      input.className = "attn-edu-slider-keys attn-edu-figure-keys";
      input.setAttribute("aria-label", say("slider", {what: prefix ? say("sliderWhat", {what: prefix}) : "",
                                                     title: figureTitle(div)}));
      var label = function () {
        var s = steps[Number(input.value)] || {};
        input.setAttribute("aria-valuetext", plain(s.label == null ? input.value : s.label));
      };
      label();
      input.addEventListener("input", function () {
        label();
        clickStep(div, i, Number(input.value));
      });
      if (div.on) {
        div.on("plotly_sliderchange", function () {
          var active = ((div.layout.sliders || [])[i] || {}).active;
          if (active != null && String(active) !== input.value) { input.value = String(active); label(); }
        });
      }
      var d = desktop[i] || {};
      out.push({el: input, rank: rank(num(d.x, 0), num(d.y, 0), i)});
    });
    return out;
  }

  /** the keyboard controls of a figure's menus: [{el, rank}] */
  function addMenuKeys(entry) {
    var div = entry.div, out = [];
    var menus = (div.layout && div.layout.updatemenus) || [];
    var desktop = (entry.fig.layout || {}).updatemenus || [];
    menus.forEach(function (u, i) {
      var buttons = u.buttons || [];
      if (!buttons.length || u.visible === false) return;
      var what = menuLabel(entry.fig, ((entry.fig.layout || {}).updatemenus || [])[i] || u);
      var control;
      function press(j) {
        var b = (div.layout.updatemenus[i].buttons || [])[j];
        if (!b) return Promise.resolve();
        return runCommand(div, b.method, b.args).then(function () {
          if (u.type !== "buttons" || u.showactive !== false) {
            var upd = {};
            upd["updatemenus[" + i + "].active"] = j;
            return window.Plotly.relayout(div, upd);
          }
        });
      }
      if (u.type === "buttons") {
        control = document.createElement("div");
        control.setAttribute("role", "group");
        control.setAttribute("aria-label", say("group", {what: what || say("buttons"), title: figureTitle(div)}));
        buttons.forEach(function (b, j) {
          var el = document.createElement("button");
          el.type = "button";
          el.textContent = plain(b.label) || say("button", {n: j + 1});
          el.addEventListener("click", function () { press(j); });
          control.appendChild(el);
        });
      } else {
        control = document.createElement("select");
        control.setAttribute("aria-label", say("group", {what: what || say("menu"), title: figureTitle(div)}));
        buttons.forEach(function (b, j) {
          var o = document.createElement("option");
          o.value = String(j);
          o.textContent = plain(b.label) || say("option", {n: j + 1});
          control.appendChild(o);
        });
        control.value = String(u.active == null ? 0 : u.active);
        control.addEventListener("change", function () { press(Number(control.value)); });
        if (div.on) {
          div.on("plotly_buttonclicked", function (e) {
            if (e && e.menu && e.menu._index === i && e.active != null) control.value = String(e.active);
          });
        }
      }
      control.className = "attn-edu-menu-keys attn-edu-figure-keys";
      control.setAttribute("data-menu", String(i));
      var d = desktop[i] || {};
      out.push({el: control, rank: rank(num(d.x, -0.05), num(d.y, 1), i)});
    });
    return out;
  }

  /* ---------------------------------------------------------------- drawing on demand */
  var FIG_RE = /var fig = ([\s\S]*?);\n\s*var config = ([\s\S]*?);\n/;

  /** a figure's data: from its own small script (data-src; the build moves it off the
   *  page) or from the page's inline script */
  function figureData(script) {
    var src = script.getAttribute("data-src"), id = script.getAttribute("data-div");
    if (!src) {
      var m = FIG_RE.exec(script.text);
      try { return Promise.resolve(m && {fig: JSON.parse(m[1]), config: JSON.parse(m[2])}); } catch (e) { return Promise.resolve(null); }
    }
    return new Promise(function (resolve, reject) {
      var s = document.createElement("script");
      s.src = new URL(src, document.baseURI).href;
      s.async = true;
      s.onload = function () { resolve((window.attnEduFigureData || {})[id] || null); };
      s.onerror = function () { reject(new Error("figure data failed to load: " + s.src)); };
      document.head.appendChild(s);
    });
  }

  function draw(script) {
    if (script._attnDrawn) return script._attnDrawn;
    var div = document.getElementById(script.getAttribute("data-div"));
    script._attnDrawn = Promise.all([loadPlotly(), figureData(script)]).then(function (got) {
      var data = got[1], entry = data && {div: div, fig: data.fig, config: data.config};
      if (!entry || !div) {  // not the book renderer's figure: run its own script
        var s = document.createElement("script");
        s.text = script.text;
        script.parentNode.insertBefore(s, script.nextSibling);
        return div ? whenPlotted(div, 30000).then(function (ok) { return ok && {div: div, fig: {layout: div.layout}}; }) : false;
      }
      entry.height0 = div.style.height;
      entry.paths = statePaths(entry.fig);
      entry.titleNow = titleText((entry.fig.layout || {}).title) || null;
      return render(entry, true).then(function () {
        // the title a frame or a control shows now, unwrapped (it is wrapped again for a new width)
        var remember = function () {
          var t = titleText((div.layout || {}).title);
          entry.titleNow = t ? t.replace(/<br>/g, " ") : entry.titleNow;
        };
        if (div.on) { div.on("plotly_animated", remember); div.on("plotly_relayout", remember); }
        drawn.push(entry);
        if (boxes) boxes.observe(div);
        return entry;
      });
    }).then(function (entry) {
      if (entry) {
        var controls = addSliderKeys(entry).concat(addMenuKeys(entry));
        controls.sort(byRank);
        var after = entry.div;
        controls.forEach(function (c) {
          after.parentNode.insertBefore(c.el, after.nextSibling);
          after = c.el;
        });
      }
      return !!entry;
    });
    pending.push(script._attnDrawn);
    return script._attnDrawn;
  }

  /** a new width: a figure whose layout kind or width changed is laid out again. A figure's
   * box can change width without a window resize (the page laid out again after it was
   * drawn, seen on a loaded machine: a figure drawn 840 px wide stayed so in a 688 px box,
   * its slider's end outside the box, where a click does not reach it), and plotly's own
   * "responsive" follows window resizes only: so each drawn figure's box is watched too. */
  var resizeTimer = null;
  function onResize() {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(function () {
      drawn.forEach(function (entry) {
        var div = entry.div, W = Math.round(div.clientWidth);
        var mode = W < NARROW_PX && W >= 120 ? "narrow" : "wide";
        if (mode !== entry.mode || (mode === "narrow" && Math.abs(W - entry.width) > 8)) {
          var p = render(entry, false);
          pending.push(p);
        } else if (mode === "wide" && W >= 120 && div._fullLayout && !(div.layout || {}).width &&
                   Math.abs(div._fullLayout.width - W) > 1) {
          pending.push(window.Plotly.Plots.resize(div).catch(function () {}));
        }
      });
    }, 200);
  }
  window.addEventListener("resize", onResize);
  var boxes = "ResizeObserver" in window ? new ResizeObserver(onResize) : null;

  /* ---------------------------------------------------------------- "Back to top" */
  var backTop = null, ticking = false;
  function checkBackTop() {
    ticking = false;
    backTop = backTop || document.getElementById("pst-back-to-top");
    if (!backTop) return;
    var top = window.innerHeight * 0.9 - 8, bottom = window.innerHeight * 0.9 + 56;
    var under = drawn.some(function (e) {
      var r = e.div.getBoundingClientRect();
      var end = r.bottom;
      for (var n = e.div.nextElementSibling; n && n.classList && n.classList.contains("attn-edu-figure-keys"); n = n.nextElementSibling)
        end = Math.max(end, n.getBoundingClientRect().bottom);
      return r.top < bottom && end > top;
    });
    backTop.classList.toggle("attn-edu-behind-figure", under);
  }
  window.addEventListener("scroll", function () {
    if (!ticking) { ticking = true; window.requestAnimationFrame(checkBackTop); }
  }, {passive: true});

  var scripts = Array.prototype.slice.call(
    document.querySelectorAll('script[type="text/x-attn-edu-plotly"]'));

  function drawAll() { scripts.forEach(draw); return Promise.all(pending); }

  window.attnEduFigures = {
    drawAll: drawAll,
    whenDrawn: function () { return Promise.all(pending); },
    NARROW_PX: NARROW_PX
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
