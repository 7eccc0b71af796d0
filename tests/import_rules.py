"""The house rules of ``sam3_agent``'s imports (README "Layout"), as a checker the tests run.

The package's modules are read with ``ast`` (nothing is imported); every ``import`` and ``from ... import``
(at module level or inside a function) becomes an arrow from the importing module to the module it names
(``from . import x`` names the submodule ``x`` where one exists, else the package). The rules:

- no circles;
- every arrow runs down the floors of ``FLOORS`` or stays inside one wing (a folder, or the ground floor);
  two wings on the same floor do not import each other;
- inside the package, imports of the package are relative;
- Gradio is imported only by ``ui/`` and by the two tools that drive the app (``bench/``, ``smoke/``).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "sam3_agent"

GROUND = ("errors", "limits", "rle", "shared", "images", "mask_set", "messages", "types", "events", "edit_ops", "verification",
          "deviations",
          "package_files")

# floor of each wing, lowest first: an arrow may only run to a lower floor (or stay in its wing)
FLOORS = {
    "ground": 0,
    "models": 1, "imaging": 1, "tiny": 1,
    "sam": 2, "engine": 2,
    "vlm": 3,
    "agent": 4,
    "trace": 5,
    "correct": 6,
    "presets": 7, "video": 7,  # clips and tracking: above agent and trace (it saves keyframe runs as image traces)
    "": 8,  # sam3_agent/__init__.py: the public API
    "datasets": 9,
    "cli": 10,
    "ui": 11,
    "bench": 12, "smoke": 12,
    "__main__": 13,
}

GRADIO_MODULES = ("gradio", "gradio_client")
GRADIO_WINGS = ("ui", "bench", "smoke")  # the app itself, and the tools that drive it (benchmark, smoke check)


@dataclass(frozen=True)
class Arrow:
    source: str  # dotted module name
    target: str  # dotted module name, or a package
    line: int
    absolute: bool  # written as an absolute import of the package


def wing_of(module: str) -> str:
    """The wing of a dotted module name: its folder under the package, ``ground`` or a top-level module's name."""
    parts = module.split(".")[1:]
    if not parts:
        return ""
    if len(parts) == 1 and parts[0] in GROUND:
        return "ground"
    return parts[0]


def module_names(root: Path) -> dict[str, Path]:
    """Dotted name -> file of every module of the package under ``root``."""
    names = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def _resolve(module: str | None, level: int, current: str, is_package: bool) -> str:
    if level == 0:
        return module or ""
    base = current.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def arrows_of(source: str, path: Path, modules: set[str]) -> tuple[list[Arrow], list[tuple[str, int]]]:
    """The package arrows of one module and its third-party imports (name, line)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_package = path.name == "__init__.py"
    arrows, outside = [], []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            target = _resolve(node.module, node.level, source, is_package)
            if target.split(".")[0] != PACKAGE:
                outside.append((target, node.lineno))
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                arrows.append(Arrow(source, sub if sub in modules else target, node.lineno, node.level == 0))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == PACKAGE:
                    arrows.append(Arrow(source, alias.name, node.lineno, True))
                else:
                    outside.append((alias.name, node.lineno))
    return [a for a in arrows if a.target != source], outside


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def violations(root: Path) -> list[str]:
    """Every broken rule of the package under ``root``, one line each (empty when the house is in order)."""
    modules = module_names(root)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    problems = []
    for source, path in modules.items():
        arrows, outside = arrows_of(source, path, set(modules))
        here = wing_of(source)
        for arrow in arrows:
            graph[source].add(arrow.target)
            there = wing_of(arrow.target)
            where = f"{path.relative_to(root)}:{arrow.line}"
            if arrow.absolute:
                problems.append(f"{where}: imports {arrow.target} absolutely; inside the package imports are relative")
            if here not in FLOORS or there not in FLOORS:
                problems.append(f"{where}: wing {here if here not in FLOORS else there!r} has no floor in FLOORS")
            elif here != there and FLOORS[there] >= FLOORS[here]:
                problems.append(f"{where}: {source} ({here}, floor {FLOORS[here]}) imports {arrow.target} "
                                f"({there}, floor {FLOORS[there]}): arrows run down")
        for name, line in outside:
            if name.split(".")[0] in GRADIO_MODULES and here not in GRADIO_WINGS:
                problems.append(f"{path.relative_to(root)}:{line}: imports {name}; only {', '.join(GRADIO_WINGS)} "
                                "import Gradio")
    for component in circles(graph):
        problems.append("import circle: " + " -> ".join(component))
    return problems
