"""What README.md, docs/ and the package's own texts (docstrings, help, messages) point a reader at exists: files
under ``sam3_agent/``, dotted ``sam3_agent.`` names, README sections, docs pages and their anchors.

Read as text (nothing is imported), so the whole check takes well under a second.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "sam3_agent"
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))
SOURCES = sorted(PACKAGE.rglob("*.py")) + [ROOT / "app.py"]

PATH = re.compile(r"\bsam3_agent/[\w/.-]*\w")  # sam3_agent/trace/io.py, sam3_agent/assets/
DOTTED = re.compile(r"(?<![\w/.\"'])sam3_agent(?:\.\w+)+")  # sam3_agent.trace.io.load_trace (not a quoted tag)
README_SECTION = re.compile(r"README(?::\s*|\s+\"|'s\s+)([A-Z][\w ]*?)(?:\"|\s+section|\))")
DOC_PAGE = re.compile(r"\bdocs/(\w+\.md)(?:#([\w-]+))?")
LINK = re.compile(r"\]\(((?:docs/)?[\w-]+\.md)?(?:#([\w-]+))?\)")


def texts() -> list[tuple[Path, str]]:
    return [(path, path.read_text(encoding="utf-8")) for path in [README, *PAGES, *SOURCES]]


def where(path: Path, text: str, match: re.Match) -> str:
    return f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, match.start()) + 1}: {match.group(0)}"


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@cache
def anchors(page: Path) -> set[str]:
    return {slug(h) for h in re.findall(r"^#+\s+(.*)$", page.read_text(encoding="utf-8"), re.M)}


@cache
def top_level_names(module: Path) -> set[str]:
    names = set()
    for node in ast.parse(module.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    if module.name == "__init__.py" and module.parent == PACKAGE:  # the public API's table of lazy names
        names |= set(re.findall(r'^\s+"(\w+)": "\.', module.read_text(encoding="utf-8"), re.M))
    return names


def resolves(dotted: str) -> bool:
    """True when ``sam3_agent.a.b.c`` is a module or package, or a module and a name defined at its top level
    (what comes after that name, an attribute of a class, is not checked)."""
    parts = dotted.split(".")[1:]
    for cut in range(len(parts), -1, -1):
        base = PACKAGE.joinpath(*parts[:cut])
        module = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        if module.is_file():
            return cut == len(parts) or parts[cut] in top_level_names(module)
    return False


def test_every_package_path_named_exists():
    missing = [where(path, text, m) for path, text in texts() for m in PATH.finditer(text)
               if not (ROOT / m.group(0).rstrip(".")).exists()]
    assert missing == []


def test_every_dotted_package_name_resolves():
    missing = [where(path, text, m) for path, text in texts() for m in DOTTED.finditer(text)
               if not resolves(m.group(0).rstrip("."))]
    assert missing == []


def test_every_readme_section_named_exists():
    sections = {h.strip() for h in re.findall(r"^##\s+(.*)$", README.read_text(encoding="utf-8"), re.M)}
    missing = [where(path, text, m) for path, text in texts() for m in README_SECTION.finditer(text)
               if m.group(1).strip() not in sections]
    assert missing == []
    vague = [where(path, text, m) for path, text in texts() for m in re.finditer(r"see the README\b(?!')", text)]
    assert vague == []  # say which page or section


def test_every_docs_page_and_anchor_named_exists():
    missing = []
    for path, text in texts():
        for m in DOC_PAGE.finditer(text):
            page = ROOT / "docs" / m.group(1)
            if not page.is_file() or (m.group(2) and m.group(2) not in anchors(page)):
                missing.append(where(path, text, m))
        if path.suffix == ".md":  # Markdown links: [text](docs/page.md#anchor), [text](page.md), [text](#anchor)
            for m in LINK.finditer(text):
                page = path if not m.group(1) else path.parent / m.group(1)
                if not page.is_file() or (m.group(2) and m.group(2) not in anchors(page)):
                    missing.append(where(path, text, m))
    assert missing == []


@pytest.mark.parametrize("text, found", [
    ("(see README: Datasets)", "Datasets"),
    ('(README "Library use")', "Library use"),
    ("see the README's Datasets section", "Datasets"),
])
def test_the_section_pattern_finds_each_way_a_section_is_named(text, found):
    assert README_SECTION.search(text).group(1) == found
