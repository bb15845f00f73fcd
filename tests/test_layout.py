"""The package's layout rules: layers import only downwards, no import cycle inside specvlm/, no module over the size
limit."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 450
AWAITING_SPLIT: dict[str, int] = {}
"""Modules over the limit whose split is pending; each may not grow, and leaves this table once split."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


LAYERS: tuple[tuple[str, ...], ...] = (
    ("specvlm.config", "specvlm.dtypes", "specvlm.types", "specvlm.assets", "specvlm.runtime"),
    ("specvlm.spec",),
    ("specvlm.text", "specvlm.video"),
    ("specvlm.models",),
    ("specvlm.engine",),
    ("specvlm.analysis",),
    # the command line, the benchmark, the package's facade; specvlm.testing builds random models for tests and
    # for the benchmark's tiny presets, so nothing below this floor (the runtime) may import it
    ("specvlm.bench", "specvlm.cli", "specvlm.testing", "specvlm.__main__", "specvlm"),
    ("app",),
    ("scripts", "training"),
)
"""Floors from the bottom up: a module imports modules of its own floor or of floors below, never above."""
NEVER_IMPORTED_BY = {"specvlm.testing": ("app",)}
"""Modules (test and benchmark tooling) and the trees above them that never import them all the same."""


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def layer_of(module: str, layers: tuple[tuple[str, ...], ...] = LAYERS) -> int | None:
    """The floor of ``module``: that of the longest prefix (a package or the module itself) listed; None if none."""
    best: tuple[int, int] | None = None
    for floor, prefixes in enumerate(layers):
        for prefix in prefixes:
            if _under(module, prefix) and (best is None or len(prefix) > best[1]):
                best = (floor, len(prefix))
    return None if best is None else best[0]


def layer_violations(graph: dict[str, set[str]], layers: tuple[tuple[str, ...], ...] = LAYERS,
                     never: dict[str, tuple[str, ...]] = NEVER_IMPORTED_BY) -> list[str]:
    """Every import from a floor to a higher one, and every import ``never`` forbids, as "importer -> imported"
    lines; modules on no floor are reported too."""
    found = []
    for mod, deps in sorted(graph.items()):
        floor = layer_of(mod, layers)
        if floor is None:
            found.append(f"{mod} is on no floor of LAYERS")
            continue
        for dep in sorted(deps):
            dep_floor = layer_of(dep, layers)
            if dep_floor is not None and dep_floor > floor:
                found.append(f"{mod} (floor {floor}) -> {dep} (floor {dep_floor})")
            elif any(_under(dep, t) and any(_under(mod, m) for m in importers) for t, importers in never.items()):
                found.append(f"{mod} -> {dep} (test and benchmark tooling)")
    return found


def import_graph(*packages: Path) -> dict[str, set[str]]:
    """Module -> the modules of ``packages`` it imports, at module level or inside functions.

    ``from a.b import c`` is an edge to ``a.b.c`` when that is a module, else to ``a.b``.
    """
    files = {_module_name(p): p for package in packages for p in sorted(package.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        deps: set[str] = set()
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:   # relative: resolve against this module's package
                    pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                    pkg = pkg[:len(pkg) - node.level + 1]
                    base = ".".join(pkg + ([base] if base else []))
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    if full in files:
                        deps.add(full)
                    elif base in files:
                        deps.add(base)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name in files)
        deps.discard(name)
        graph[name] = deps
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules (first == last), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for d in sorted(graph.get(n, ())):
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in state:
                found = visit(d)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def test_specvlm_has_no_import_cycle():
    graph = import_graph(ROOT / "specvlm")
    assert "specvlm.engine.stream" in graph and graph["specvlm.engine.stream"]   # the graph is really read
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_check_finds_function_level_and_package_cycles(tmp_path, monkeypatch):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from pkg.sub.b import f\n")
    (pkg / "a.py").write_text("def g():\n    from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text("import pkg.a\n\ndef f():\n    pass\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    graph = import_graph(pkg)
    assert graph["pkg.a"] == {"pkg.sub.b"} and graph["pkg.sub.b"] == {"pkg.a"}
    assert find_cycle(graph) == ["pkg.a", "pkg.sub.b", "pkg.a"]
    (pkg / "sub" / "b.py").write_text("def f():\n    pass\n")
    assert find_cycle(import_graph(pkg)) is None


def test_layers_import_only_downwards():
    graph = import_graph(*(ROOT / d for d in ("specvlm", "app", "scripts", "training") if (ROOT / d).is_dir()))
    assert "specvlm.models.pair" in graph and "app.page.ui" in graph   # both trees are really read
    assert layer_violations(graph) == []


def test_the_layer_check_finds_an_upward_import(tmp_path, monkeypatch):
    layers = (("pkg.base",), ("pkg.low",), ("pkg.high", "pkg.tools"), ("front",))
    (tmp_path / "pkg" / "low").mkdir(parents=True)
    (tmp_path / "front").mkdir()
    for name, text in {"pkg/__init__.py": "", "pkg/base.py": "", "pkg/low/__init__.py": "",
                       "pkg/low/a.py": "from pkg import base\n", "pkg/high.py": "from pkg.low import a\n",
                       "pkg/tools.py": "", "front/__init__.py": "", "front/ui.py": "import pkg.high\n"}.items():
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    graph = import_graph(tmp_path / "pkg", tmp_path / "front")
    assert layer_violations(graph, layers, {"pkg.tools": ("front",)}) == ["pkg is on no floor of LAYERS"]
    layers = (("pkg", "pkg.base"),) + layers[1:]
    assert layer_violations(graph, layers, {"pkg.tools": ("front",)}) == []
    (tmp_path / "pkg/low/a.py").write_text("def f():\n    from pkg.high import g\n")
    (tmp_path / "front/ui.py").write_text("from pkg import tools\n")
    graph = import_graph(tmp_path / "pkg", tmp_path / "front")
    assert layer_violations(graph, layers, {"pkg.tools": ("front",)}) == [
        "front.ui -> pkg.tools (test and benchmark tooling)", "pkg.low.a (floor 1) -> pkg.high (floor 2)"]


@pytest.mark.parametrize("folder", ["specvlm", "app", "training"])
def test_no_module_exceeds_the_size_limit(folder):
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in (ROOT / folder).rglob("*.py")}
    assert sizes, folder
    too_long = {p: n for p, n in sizes.items() if n > max(MAX_LINES, AWAITING_SPLIT.get(p, 0))}
    assert not too_long, f"modules over {MAX_LINES} lines: {too_long}"
    split = {p for p in AWAITING_SPLIT if p.startswith(folder + "/") and sizes.get(p, 0) <= MAX_LINES}
    assert not split, f"within the limit now, remove from AWAITING_SPLIT: {split}"


APP_PARTS = ("inputs", "runs", "views", "page")
"""The app's subpackages (app/__init__.py says what each holds); no module lives loose in app/."""


def test_the_app_is_its_four_parts():
    loose = sorted(p.name for p in (ROOT / "app").glob("*.py") if p.name != "__init__.py")
    assert loose == [], f"app modules outside {APP_PARTS}: {loose}"
    folders = sorted(p.name for p in (ROOT / "app").iterdir() if p.is_dir() and p.name != "__pycache__")
    assert folders == sorted(APP_PARTS)
    for part in APP_PARTS:
        doc = ast.get_docstring(ast.parse((ROOT / "app" / part / "__init__.py").read_text()))
        assert doc and f"app.{part}" in doc, f"app/{part}/__init__.py says what the part holds"
