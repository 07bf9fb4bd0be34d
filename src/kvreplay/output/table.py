"""Plain-text tables and CSV for the CLI."""

from __future__ import annotations

import csv
import io


def fmt(value) -> str:
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def format_table(rows: list[dict], columns: list[tuple[str, str]]) -> str:
    """Align `rows` under `columns` ((key, header) pairs); numbers right-aligned. A header ending
    in "%" shows its fraction as a percentage (terminal tables speak percent, as the summaries;
    machine outputs keep fractions, see docs/formats.md)."""
    def cell(value, header):
        if header.endswith("%") and isinstance(value, float):
            return f"{100 * value:.2f}"
        return fmt(value)

    cells = [[cell(r.get(key, ""), header) for key, header in columns] for r in rows]
    headers = [h for _, h in columns]
    widths = [max([len(h)] + [len(row[i]) for row in cells]) for i, h in enumerate(headers)]
    numeric = [all(isinstance(r.get(key), (int, float)) for r in rows) for key, _ in columns]

    def line(values):
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)).rstrip()

    out = [line(headers), line(["-" * w for w in widths])]
    out.extend(line(row) for row in cells)
    return "\n".join(out)


def to_csv(rows: list[dict], columns: list[str]) -> str:
    """CSV of `rows` under `columns`: numbers as Python writes them (full precision), booleans
    as true/false, a missing value (None) as an empty cell."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: ("true" if v else "false") if isinstance(v, bool) else v for k, v in r.items()} for r in rows)
    return buf.getvalue()
