"""Every relative link of README.md and docs/*.md reaches a file, and its #anchor a heading of that
file (GitHub's slugs: lower case, punctuation dropped, spaces to hyphens), so the README's table
of questions and the guide cannot point at a page or section that moved."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {slug(h) for h in re.findall(r"(?m)^#{1,6} (.+)$", text)}


def links(page: Path) -> list[tuple[str, str]]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    return re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]+))?\)", text)


def test_slugs_are_githubs():
    assert slug("`roofline`: calibrated on measured GPU kernels, with an error band") == \
        "roofline-calibrated-on-measured-gpu-kernels-with-an-error-band"
    assert slug("Against vLLM's own scheduler") == "against-vllms-own-scheduler"


def test_every_relative_link_resolves():
    assert sum(len(links(page)) for page in PAGES) >= 90  # the README's table and the guide among them
    broken = []
    for page in PAGES:
        for target, anchor in links(page):
            if re.match(r"[a-z]+:", target):
                continue  # http:, https:, mailto:
            dest = (page.parent / target).resolve() if target else page
            if not dest.exists():
                broken.append(f"{page.name}: {target}")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{page.name}: {target}#{anchor}")
    assert broken == []
