"""The user-facing pages (README.md, docs/*.md) state what is, not how it got there: they do not
speak of the project's issues by number ("issue 19", "#19") nor of the numbered sections the
performance page had when it was a record ("section 13", "§12" of another page). The dated record
is benchmarks/RESULTS.md. A pull request of another project, named with its repository
(`vllm-project/vllm#43447`), is a citation and allowed; so are a page's references to its own
numbered sections (docs/vllm-scheduler.md's "§5.4")."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FORBIDDEN = [
    re.compile(r"\bissues? \d+", re.I),                       # issue 19, issues 5 and 6
    re.compile(r"(?<![\w&])#\d+\b"),                          # #19 (vllm-project/vllm#19 is let through below)
    re.compile(r"\w+\.md,? (?:section|§) ?\d+", re.I),         # performance.md, section 13
]


def offences(text: str) -> list[str]:
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        for pattern in FORBIDDEN:
            out += [f"{number}: {m.group(0)!r} in {line.strip()[:120]!r}" for m in pattern.finditer(line)
                    if not re.search(r"[\w.-]+/[\w.-]+$", line[:m.start()])]  # another project's, cited
    return out


def test_the_patterns_catch_what_they_mean():
    assert offences("as issue 19 asked; see #23 and issues 5 and 6; performance.md, section 13; serving.md §12")
    assert len(offences("issue 19 #23 performance.md, section 13")) == 3
    assert not offences("vLLM's vllm-project/vllm#43447 changed it; block 0 is the null block (§5.6); a 4-issue queue")


def test_no_page_speaks_of_issue_numbers():
    found = {page.name: offences(page.read_text()) for page in PAGES}
    assert {name: lines for name, lines in found.items() if lines} == {}
