// Typeset TeX with KaTeX at book-build time (book/_ext/attn_edu_book/katex.py runs this with Node).
// stdin: JSON [{"tex": "...", "display": true|false}, ...]
// stdout: JSON [{"html": "..."} | {"error": "..."}, ...], in the same order.
"use strict";
const katex = require("./katex.min.js");
const chunks = [];
process.stdin.on("data", (d) => chunks.push(d));
process.stdin.on("end", () => {
  const items = JSON.parse(Buffer.concat(chunks).toString("utf8"));
  const out = items.map(({ tex, display }) => {
    try {
      return { html: katex.renderToString(tex, {
        displayMode: !!display, throwOnError: true, output: "htmlAndMathml", strict: "ignore",
      }) };
    } catch (e) {
      return { error: String((e && e.message) || e) };
    }
  });
  process.stdout.write(JSON.stringify(out));
});
