/* attn-edu book: a figure image opens at full size.
 *
 * The book build (book/_ext/attn_edu_book.py, _zoomable_images) makes every figure image a
 * link to itself (<a class="attn-edu-zoom">). A tap, a click or Enter on it opens the image
 * here at its natural size -- where a phone shows a matplotlib figure's text at the size it
 * was drawn (the page shows it scaled to the column) -- in a modal <dialog> that scrolls
 * both ways, with the image's alt text. Escape, the Close button or a tap outside the image
 * closes it and gives the focus back to the figure. Without this script (or <dialog>) the
 * link opens the image itself.
 */
(function () {
  "use strict";
  if (!window.HTMLDialogElement) return;
  // the words this script writes, in the page's language (the Chinese pages: lang="zh-CN")
  var WORDS = {en: {dialog: "Figure at full size", close: "Close", box: "figure at full size"},
               "zh-CN": {dialog: "原尺寸的图", close: "关闭", box: "原尺寸的图"}};
  var W = WORDS[/^zh/i.test(document.documentElement.lang || "") ? "zh-CN" : "en"];

  function open(link) {
    var img = link.querySelector("img");
    if (!img) return false;
    var dialog = document.createElement("dialog");
    dialog.className = "attn-edu-zoom-view";
    dialog.setAttribute("aria-label", W.dialog);
    var close = document.createElement("button");
    close.type = "button";
    close.className = "attn-edu-zoom-close";
    close.textContent = W.close;
    var box = document.createElement("div");
    box.className = "attn-edu-zoom-box";
    box.tabIndex = 0;  // scrolls both ways: the keyboard scrolls it too
    box.setAttribute("role", "group");
    box.setAttribute("aria-label", W.box);
    var big = document.createElement("img");
    big.src = img.currentSrc || img.src;
    big.alt = img.alt;
    if (img.naturalWidth) big.style.width = img.naturalWidth + "px";
    box.appendChild(big);
    dialog.appendChild(close);
    dialog.appendChild(box);
    document.body.appendChild(dialog);
    close.addEventListener("click", function () { dialog.close(); });
    dialog.addEventListener("click", function (e) { if (e.target === dialog) dialog.close(); });
    dialog.addEventListener("close", function () {
      dialog.remove();
      link.focus();
    });
    dialog.showModal();
    close.focus();
    return true;
  }

  document.addEventListener("click", function (e) {
    var link = e.target.closest && e.target.closest("a.attn-edu-zoom");
    if (!link || e.button !== 0 || e.ctrlKey || e.metaKey || e.shiftKey || e.altKey) return;
    if (open(link)) e.preventDefault();
  });
})();
