"""One renderer for every ``reports.tables.Table``: CSV, LaTeX, Markdown and HTML."""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from reports.tables import Table
from studies.csvio import safe_writer

# Download formats of a table: file extension -> Content-Type.
CONTENT_TYPES = {
    "csv": "text/csv; charset=utf-8",
    "tex": "application/x-tex; charset=utf-8",
    "md": "text/markdown; charset=utf-8",
}


def csv_text(rows: Iterable[Sequence[Any]]) -> str:
    """Rows as CSV text (None: an empty cell), through studies.csvio so formulas are neutralised."""
    buffer = io.StringIO()
    writer = safe_writer(buffer, lineterminator="\n")
    for row in rows:
        writer.writerow(["" if v is None else v for v in row])
    return buffer.getvalue()


def csv_rows(table: Table) -> list[list[Any]]:
    """The header and value rows ``to_csv`` writes."""
    header: list[Any] = []
    for column in table.columns:
        header += [f"{column.key}_lo", f"{column.key}_hi"] if column.pair else [column.key]
    rows: list[list[Any]] = [header]
    for row in table.rows:
        values: list[Any] = []
        for column, cell in zip(table.columns, row, strict=True):
            values += list(cell.value) if column.pair else [cell.value]
        rows.append(values)
    return rows


def to_csv(table: Table) -> str:
    """The table's raw values with machine column names."""
    return csv_text(csv_rows(table))


_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "|": r"\textbar{}",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
    "↑": r"$\uparrow$",
    "↓": r"$\downarrow$",
    "→": r"$\rightarrow$",
    "\u2212": r"$-$",
    "\u2013": "--",
    "Δ": r"$\Delta$",
}


def latex_escape(text: str) -> str:
    """Escape every LaTeX special character (prompt words may hold &, % or _)."""
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in str(text))


def to_latex(table: Table) -> str:
    """A booktabs table: \\toprule/\\midrule/\\bottomrule, best in bold, worst underlined."""
    align = "".join("r" if c.numeric else "l" for c in table.columns)
    # Wide tables (table 1 with its intervals, table 7) span both columns of a two-column paper.
    env = "table*" if len(table.columns) > 9 else "table"
    lines = [
        r"% Needs \usepackage{booktabs}",
        rf"\begin{{{env}}}[t]",
        r"\centering",
        rf"\caption{{{latex_escape(table.caption)}}}",
        rf"\label{{tab:{table.key.replace('_', '-')}}}",
        rf"\begin{{tabular}}{{{align}}}",
        r"\toprule",
    ]
    if table.groups and any(label for label, _ in table.groups):
        parts, rules, start = [], [], 1
        for label, span in table.groups:
            parts.append(
                rf"\multicolumn{{{span}}}{{c}}{{{latex_escape(label)}}}" if span > 1 else latex_escape(label)
            )
            if label:
                rules.append(rf"\cmidrule(lr){{{start}-{start + span - 1}}}")
            start += span
        lines.append(" & ".join(parts) + r" \\")
        lines.append(" ".join(rules))
    lines.append(" & ".join(latex_escape(c.label) for c in table.columns) + r" \\")
    lines.append(r"\midrule")
    for row in table.rows:
        cells = []
        for column, cell in zip(table.columns, row, strict=True):
            text = latex_escape(cell.text)
            if column.numeric and len(text) > 1 and text[0] == "-" and text[1].isdigit():
                # A minus sign, not a hyphen; "--" (missing) and "$-$" (already a minus) stay as they are.
                text = "$-$" + text[1:]
            if cell.mark == "best":
                text = rf"\textbf{{{text}}}"
            elif cell.mark == "worst":
                text = rf"\underline{{{text}}}"
            cells.append(text)
        lines.append(" & ".join(cells) + r" \\")
    for note in table.notes:
        lines.append(rf"\multicolumn{{{len(table.columns)}}}{{l}}{{\footnotesize {latex_escape(note)}}} \\")
    lines += [r"\bottomrule", r"\end{tabular}", rf"\end{{{env}}}", ""]
    return "\n".join(lines)


def _md(text: Any) -> str:
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def to_markdown(table: Table, *, level: int = 2) -> str:
    """The table as Markdown under its title, with caption and notes."""
    lines = [f"{'#' * level} {table.title}", ""]
    if table.is_empty:
        lines += ["Nothing to show yet.", ""]
    else:
        headers = []
        for index, column in enumerate(table.columns):
            group = table.column_group(index)
            headers.append(f"{group} {column.label}" if group else column.label)
        lines.append("| " + " | ".join(_md(h) for h in headers) + " |")
        lines.append("|" + "".join("---:|" if c.numeric else "---|" for c in table.columns))
        for row in table.rows:
            cells = []
            for cell in row:
                text = _md(cell.text)
                if text and cell.mark == "best":
                    text = f"**{text}**"
                elif text and cell.mark == "worst":
                    text = f"_{text}_"
                cells.append(text)
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    if table.caption:
        lines += [table.caption, ""]
    lines += [*(f"- {note}" for note in table.notes), *([""] if table.notes else [])]
    return "\n".join(lines)


def to_html(table: Table, **context: Any) -> str:
    """The table as the dashboard shows it; ``context`` adds what the template reads besides ``table``."""
    from django.template.loader import render_to_string

    return render_to_string("reports/_table.html", {"table": table, **context})


RENDERERS = {"csv": to_csv, "tex": to_latex, "md": to_markdown}


def render(table: Table, fmt: str) -> str:
    """``table`` in a download format (``csv``, ``tex`` or ``md``); ValueError for any other."""
    try:
        return RENDERERS[fmt](table)
    except KeyError:
        raise ValueError(f"Tables render as {', '.join(RENDERERS)}, not {fmt!r}.") from None


def sectioned_csv_rows(table: Table) -> list[list[Any]]:
    """The table's CSV rows with a first column ``section`` = the table key."""
    header, *body = csv_rows(table)
    return [["section", *header], *([table.key, *row] for row in body)]


def export_tables(
    tables: Sequence[Table],
    fmt: str,
    *,
    name: str,
    heading: Sequence[str],
    left_out: Mapping[str, int],
    paper: Mapping[str, str],
) -> str:
    """A report's tables as ``bias_report --format csv`` or ``md``."""
    if fmt == "csv":
        return "\n".join(csv_text(sectioned_csv_rows(t)) for t in tables)
    if fmt != "md":
        raise ValueError(f"The {name} report exports as csv or md, not {fmt!r}.")
    lines = [*heading, ""]
    lines += [f"- left out ({n}): {reason}" for reason, n in left_out.items()]
    if left_out:
        lines.append("")
    for table in tables:
        titled = replace(table, title=f"{table.title} ({paper[table.key]})") if table.key in paper else table
        lines.append(to_markdown(titled))
    return "\n".join(lines)
