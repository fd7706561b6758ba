"""The repository stands alone: the README and docs/ link only to files that are in it."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)#\s]+)")
PATH_MENTION = re.compile(r"`(\.\./[^`]*)`")


def _documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_docs_exist_and_every_relative_link_resolves_inside_the_repository():
    documents = _documents()
    assert len(documents) >= 5
    for document in documents:
        text = document.read_text()
        for target in LINK.findall(text):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            resolved = (document.parent / target).resolve()
            assert resolved.is_relative_to(ROOT), f"{document.name} links outside: {target}"
            assert resolved.exists(), f"{document.name} links to a missing file: {target}"


def test_no_document_sends_the_reader_outside_the_repository():
    for document in _documents():
        mentions = PATH_MENTION.findall(document.read_text())
        assert mentions == [], f"{document.name} points outside the repository: {mentions}"
