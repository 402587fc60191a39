"""What olmOCR's pipeline does to a page's transcription before it becomes the reply: LaTeX formatting and
brackets rewritten, HTML tables annotated, and the rules that leave a page out of training. Pure functions of text.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

MATH = re.compile(r"\$\$(.+?)\$\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.DOTALL)
HTML_TABLE = re.compile(r"<table\b[^>]*>.*?</table>", re.IGNORECASE | re.DOTALL)
TABLE_OPEN = re.compile(r"<table\b([^>]*)>", re.IGNORECASE)
# set theory, logic, calculus and operator symbols: pages holding them outside a table are left out (text_rules)
MATH_SYMBOLS = frozenset("∈∉⊂⊃⊆⊇∅∪∩∀∃¬⊕⊗⊙∂∇∆∫∬∭∮∏∑√∛∜⊥∠∡⊤⊢⊣∴∵∶∷∝≅≆≇≊≋⊖⊘⊚⊛⊜⊝")
# LaTeX that should not appear in a transcription's text outside math (lists, figures, formatting, citations)
LATEX_OUTSIDE_MATH = (
    *(r"\begin{" + name + "}" for name in ("itemize", "enumerate", "figure", "table", "tabular", "equation", "align")),
    *("\\" + name for name in ("item", "includegraphics", "caption", "label", "ref", "eqref", "textit", "textbb")),
    *("\\" + name for name in ("frac", "sum", "int", "sqrt", "prod", "lim", "binom", "mathbb", "mathcal", "to")),
    *("\\" + name for name in ("varphi", "cdot", "langle", "rangle", "cite")),
)
LATEX_TABLE = re.compile(r"\\begin\{(table|tabular)\}", re.IGNORECASE)


def outside_math(text: str, change) -> str:
    """``change`` applied to the parts of ``text`` outside ``$$..$$``, ``\\(..\\)`` and ``\\[..\\]``."""
    parts, start = [], 0
    for match in MATH.finditer(text):
        parts += [change(text[start : match.start()]), match.group(0)]
        start = match.end()
    return "".join(parts + [change(text[start:])])


def latex_bold_italic(text: str) -> str:
    """``\\textbf{..}`` → ``**..**`` and ``\\textit{..}`` → ``*..*`` outside math (nested braces kept whole)."""

    def rewrite(part: str) -> str:
        for command, mark in (("textbf", "**"), ("textit", "*")):
            part = replace_command(part, command, mark)
        return part

    return outside_math(text, rewrite)


def replace_command(text: str, command: str, mark: str) -> str:
    """Each ``\\command{body}`` as ``mark + body + mark``; one whose braces never close is left as written."""
    opener, out, index = "\\" + command + "{", [], 0
    while (found := text.find(opener, index)) != -1:
        depth, end = 1, found + len(opener)
        while end < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[end], 0)
            end += 1
        if depth:
            break
        out += [text[index:found], mark, text[found + len(opener) : end - 1], mark]
        index = end
    return "".join(out) + text[index:]


def latex_brackets(text: str) -> str:
    """``$$..$$`` → ``\\[..\\]`` and ``$..$`` → ``\\(..\\)``."""
    text = re.sub(r"\$\$(.+?)\$\$", lambda m: "\\[" + m.group(1) + "\\]", text, flags=re.DOTALL)
    return re.sub(r"\$(.+?)\$", lambda m: "\\(" + m.group(1) + "\\)", text, flags=re.DOTALL)


class TableCells(HTMLParser):
    """The cells of one HTML table as ``{(row, column): text}``, colspans and rowspans taking their places."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: dict[tuple[int, int], str] = {}
        self.taken: set[tuple[int, int]] = set()
        self.row, self.cell, self.text = -1, None, []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        values = dict(attrs)
        if tag == "tr":
            self.row += 1
        elif tag in ("td", "th") and self.row >= 0:
            column = 0
            while (self.row, column) in self.taken:
                column += 1
            span = (span_of(values.get("rowspan")), span_of(values.get("colspan")))
            for down in range(span[0]):
                for across in range(span[1]):
                    self.taken.add((self.row + down, column + across))
            self.cell, self.text = (self.row, column), []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self.cell is not None:
            self.cells[self.cell] = "".join(self.text).strip()
            self.cell = None

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.text.append(data)


def span_of(value: str | None) -> int:
    """A rowspan or colspan attribute as a count (1 when absent or unreadable)."""
    try:
        return max(1, int(value or 1))
    except ValueError:
        return 1


def table_cells(table: str) -> dict[tuple[int, int], str]:
    """The cells of an HTML table."""
    parser = TableCells()
    parser.feed(table)
    return parser.cells


def transform_tables(text: str, transformation: str) -> str:
    """Each HTML table with ``data-totalrows`` / ``data-totalcols`` attributes (``annotate_dims``) or a comment that
    previews its first row holding every column (``firstrowpreview``)."""

    def change(match: re.Match) -> str:
        table = match.group(0)
        cells = table_cells(table)
        if not cells:
            return table
        rows, columns = max(r for r, _ in cells) + 1, max(c for _, c in cells) + 1
        opening = TABLE_OPEN.match(table)
        if transformation == "annotate_dims":
            if "data-totalrows" in opening.group(1).lower():
                return table
            tag = f'<table{opening.group(1)} data-totalrows="{rows}" data-totalcols="{columns}">'
            return tag + table[opening.end() :]
        full = next((r for r in range(rows) if sum(1 for (row, _) in cells if row == r) == columns), None)
        if full is None:
            return table
        shown = [cells[(full, column)] for column in range(columns)]
        shown = [value if len(value) <= 50 else value[:47] + "..." for value in shown]
        listed = ", ".join(f"column {column + 1}: {value}" for column, value in enumerate(shown))
        return opening.group(0) + f"<!-- row {full + 1} of the table: {listed} -->" + table[opening.end() :]

    return HTML_TABLE.sub(change, text)


def broken_rule(text: str) -> str | None:
    """Why ``text`` breaks olmOCR's data rules (``DatasetTextRuleFilter``), or None when it keeps them."""
    lines = [line.strip() for line in text.split("\n")]
    for index, line in enumerate(lines):
        if line.startswith("|") and line.endswith("|") and line.count("|") >= 3:
            around = lines[max(index - 1, 0) : index] + lines[index + 1 : index + 2]
            if any(other.startswith("|") and "-" in other for other in around):
                return "it holds a markdown table"
    if not html_tables_close(text):
        return "it holds a malformed HTML table"
    if MATH_SYMBOLS & set(HTML_TABLE.sub("", text)):
        return "it holds math symbols outside a table"
    without_math = MATH.sub("", text)
    command = next((command for command in LATEX_OUTSIDE_MATH if command in without_math), None)
    if command is not None:
        return f"it holds the LaTeX {command} outside math"
    if LATEX_TABLE.search(text):
        return "it holds a LaTeX table"
    return None


def html_tables_close(text: str) -> bool:
    """Whether every ``<table>`` closes and each table's tags nest properly."""
    lowered = text.lower()
    if "<table" not in lowered:
        return True
    if len(re.findall(r"<table\b[^>]*>", text, re.IGNORECASE)) != lowered.count("</table>"):
        return False
    for table in HTML_TABLE.findall(text):
        checker = TagNesting()
        checker.feed(table)
        if not checker.valid or checker.stack:
            return False
    return True


class TagNesting(HTMLParser):
    """Whether a fragment's closing tags match what is open (a tag left open inside one that closes is fine)."""

    VOID = frozenset({"br", "hr", "img", "col", "input", "meta", "link", "wbr"})

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.valid = True

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in self.VOID:
            return
        if tag not in self.stack:
            self.valid = False
            return
        while self.stack.pop() != tag:
            pass
