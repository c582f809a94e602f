"""The README and docs/ stay true to the repository: every relative link (screenshots,
other pages, source files) points at a file that exists, the README's test command is
the one CI runs, and the README stays a page a newcomer reads in five minutes."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_every_relative_link_in_the_docs_resolves() -> None:
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if "://" in target or target.startswith("#"):
                continue
            if not (page.parent / target.partition("#")[0]).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, f"links to files that do not exist: {broken}"


def test_the_readme_test_command_is_the_one_ci_runs() -> None:
    command = ".venv/bin/pip install -q -e '.[dev]' && .venv/bin/pytest -q"
    assert command in (ROOT / "README.md").read_text()
    assert command in (ROOT / ".ci" / "run").read_text()


def test_the_readme_is_a_five_minute_page() -> None:
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= 200, f"README.md has {lines} lines: move the depth to docs/ and link it"
