"""The documentation says what the program does: the reference is regenerated from the program and must
equal the page; every link between the pages leads somewhere; the README stays a newcomer's page."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def test_the_reference_is_what_the_program_says(tmp_path: Path) -> None:
    """docs/reference.md against every --help, the catalogues and the window's keys, made afresh (a window is
    built offscreen for its keys: about 10 s)."""
    run = subprocess.run([sys.executable, str(REPO / "docs" / "generate_reference.py"), "--check"],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]


def _anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a Markdown page's headings (lower case, punctuation dropped, spaces -> -)."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
            for heading in re.findall(r"^#+ (.+)$", text, re.M)}


def test_every_link_between_the_pages_leads_to_a_file_and_a_heading() -> None:
    broken = []
    for page in PAGES:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # code blocks hold no links
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists() or (anchor and linked.suffix == ".md" and anchor not in _anchors(linked)):
                broken.append(f"{page.relative_to(REPO)} -> {target}")
    assert not broken, broken


def test_every_page_is_reached_from_the_readme() -> None:
    """A page under docs/ that no link leads to (from the README, or a page it leads to) is lost to readers."""
    seen, todo = set(), [REPO / "README.md"]
    while todo:
        page = todo.pop()
        if page in seen:
            continue
        seen.add(page)
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s#]+)(?:#[^)\s]*)?\)", text):
            linked = (page.parent / target).resolve()
            if linked.suffix == ".md" and linked.exists():
                todo.append(linked)
    assert {p for p in PAGES if p.parent.name == "docs"} - seen == set()


def test_the_readme_is_a_newcomers_page() -> None:
    readme = (REPO / "README.md").read_text()
    assert len(readme.encode()) <= 16 * 1024
    makefile = (REPO / "Makefile").read_text()
    for command in ("make run", "make test"):  # the quick start, and the targets it names
        assert command in readme and re.search(rf"^{command.split()[1]}:", makefile, re.M)
