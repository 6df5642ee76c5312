"""Tables and their renderings: the paper's tables and the later analyses' tables, the cells' formats, text, Markdown, LaTeX, CSV and JSON, the figures, usage and the quote's tables."""
