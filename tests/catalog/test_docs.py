"""docs/budgets.md's catalog table states the catalog as it is: every model, in order, with its KV
bytes per token and parameter counts."""

from __future__ import annotations

from pathlib import Path

from kvreplay.catalog.models import catalog, format_params, kv_bytes_per_token

DOC = Path(__file__).resolve().parents[2] / "docs" / "budgets.md"


def test_the_documented_catalog_table_is_the_catalog():
    lines = DOC.read_text().splitlines()
    start = lines.index("| model | KV B/token (bf16) | active / total params | config.json read from | license (model) |")
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    assert [r[0] for r in rows] == [m.name for m in catalog()]
    for row, m in zip(rows, catalog()):
        assert row[1] == f"{kv_bytes_per_token(m):,}", m.name
        assert row[2] == f"{format_params(m.active_params)} / {format_params(m.total_params)}", m.name
    assert f"\n{len(catalog())} models, in `kvreplay models` order." in DOC.read_text()
