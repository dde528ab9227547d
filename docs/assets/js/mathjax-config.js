// MathJax 3's settings, read by assets/mathjax/tex-svg-full.js (loaded right after this file, from the site
// itself: docs/hooks.py copies it there, so maths typesets without internet).
//
// Maths is looked for only where it can be: the Markdown cells of notebooks (nbconvert leaves their
// $...$ and $$...$$ as they were written) and the spans pymdownx.arithmatex makes in the Markdown pages and
// docstrings. Everything else, code and printed output above all, is left alone, dollars included.
window.MathJax = {
  tex: {
    inlineMath: [["$", "$"], ["\\(", "\\)"]],
    displayMath: [["$$", "$$"], ["\\[", "\\]"]],
    processEscapes: true,
    processEnvironments: true,
  },
  startup: {
    // Only these are typeset (and inside them, never code: MathJax skips pre and code by itself).
    elements: [".arithmatex", ".jp-MarkdownOutput", ".jp-RenderedLatex"],
  },
  svg: { fontCache: "global" },
};
