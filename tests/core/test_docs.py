"""The repository stands alone: the README and docs/ link only to files that are in it, every
link to a section names a heading that exists, and the architecture page names every folder."""

import fnmatch
import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
LINK = re.compile(r"\]\(([^)\s]+)\)")
PATH_MENTION = re.compile(r"`(\.\./[^`]*)`")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
INLINE_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")


def _documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _headings(text: str) -> list[str]:
    """The headings of a Markdown text, fenced code left out (a `# comment` there is no heading)."""
    found, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if match:
            found.append(match.group(2))
    return found


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text (a link's label, not its address), lower case,
    without punctuation, spaces made hyphens."""
    text = INLINE_LINK.sub(r"\1", heading).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(text: str) -> set[str]:
    """Every heading's anchor; a repeated heading gets -1, -2 … as on GitHub."""
    anchors, seen = set(), Counter[str]()
    for heading in _headings(text):
        slug = _slug(heading)
        anchors.add(slug if seen[slug] == 0 else f"{slug}-{seen[slug]}")
        seen[slug] += 1
    return anchors


def _ignored(name: str) -> bool:
    """A top-level folder the repository's .gitignore keeps out (var/, staticfiles/ …)."""
    patterns = [line.strip().strip("/") for line in (ROOT / ".gitignore").read_text().splitlines()]
    return any(
        fnmatch.fnmatch(name, pattern)
        for pattern in patterns
        if pattern and not pattern.startswith("#") and "/" not in pattern
    )


def _folders() -> list[str]:
    """Every folder at the top of the repository (hidden and ignored ones aside), and the two
    apps that live inside starverse/."""
    tops = sorted(
        path.name
        for path in ROOT.iterdir()
        if path.is_dir() and not path.name.startswith((".", "_")) and not _ignored(path.name)
    )
    return [f"{name}/" for name in tops] + ["starverse/core/", "starverse/accounts/"]


def test_docs_exist_and_every_relative_link_resolves_inside_the_repository():
    documents = _documents()
    assert len(documents) >= 5
    for document in documents:
        text = document.read_text()
        for link in LINK.findall(text):
            target = link.partition("#")[0]
            if link.startswith(("http://", "https://", "mailto:")) or not target:
                continue
            resolved = (document.parent / target).resolve()
            assert resolved.is_relative_to(ROOT), f"{document.name} links outside: {target}"
            assert resolved.exists(), f"{document.name} links to a missing file: {target}"


def test_every_link_to_a_section_names_a_heading_of_that_document():
    broken = []
    for document in _documents():
        for link in LINK.findall(document.read_text()):
            target, _sep, anchor = link.partition("#")
            if not anchor or link.startswith(("http://", "https://", "mailto:")):
                continue
            linked = (document.parent / target).resolve() if target else document
            if linked.suffix == ".md" and anchor not in _anchors(linked.read_text()):
                broken.append(f"{document.name}: {link}")
    assert broken == []


def test_anchors_are_made_as_github_makes_them():
    text = (
        "# Guide\n"
        "## Connecting: ports, Jupyter and share links\n"
        "```sh\n# a comment, not a heading\n```\n"
        "### `billing/`: money\n"
        "### Security model\n"
        "## Security model\n"
        "## The trial ([API](api.md#trial))\n"
        "## 发票 and statements\n"
    )

    assert _anchors(text) == {
        "guide",
        "connecting-ports-jupyter-and-share-links",
        "billing-money",
        "security-model",
        "security-model-1",
        "the-trial-api",
        "发票-and-statements",
    }


def test_the_architecture_page_names_every_folder_of_the_repository_in_a_heading():
    folders = _folders()
    headings = " ".join(_headings(ARCHITECTURE.read_text()))

    assert {"billing/", "instances/", "endpoints/", "starverse/core/", "templates/"} <= set(folders)
    assert "var/" not in folders
    assert [folder for folder in folders if f"`{folder}`" not in headings] == []


def test_no_document_sends_the_reader_outside_the_repository():
    for document in _documents():
        mentions = PATH_MENTION.findall(document.read_text())
        assert mentions == [], f"{document.name} points outside the repository: {mentions}"
