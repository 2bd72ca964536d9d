/* attn-edu: let the ipywidgets HTML manager typeset with MathJax 3.
 *
 * @jupyter-widgets/base (inside embed.js) typesets widget labels with the MathJax 2
 * API, `MathJax.Hub.Queue(["Typeset", MathJax.Hub, element])`, whenever
 * `window.MathJax` exists. The book serves MathJax 3, which has no `Hub`, so every
 * widget label threw "Cannot read properties of undefined (reading 'Queue')".
 * This file is loaded just before embed.js (see nb_ipywidgets_js in _config.yml) and,
 * once MathJax 3 has been set up (it is loaded with `defer`, i.e. before
 * DOMContentLoaded; embed.js renders on `load`), adds the one `Hub.Queue` job the
 * widgets use, mapped to MathJax 3's `typesetPromise`.
 */
(function () {
  function install() {
    var MJ = window.MathJax;
    if (!MJ || !MJ.version || MJ.Hub) return;
    MJ.Hub = {
      Queue: function () {
        Array.prototype.forEach.call(arguments, function (job) {
          if (Array.isArray(job) && job[0] === "Typeset" && job[2]) {
            var ready = MJ.startup && MJ.startup.promise ? MJ.startup.promise : Promise.resolve();
            ready
              .then(function () { return MJ.typesetPromise ? MJ.typesetPromise([job[2]]) : null; })
              .catch(function (err) { console.warn("MathJax typeset of a widget failed", err); });
          }
        });
      }
    };
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", install);
  } else {
    install();
  }
  window.addEventListener("load", install);
})();
