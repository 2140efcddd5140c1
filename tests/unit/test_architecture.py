"""The import rules of the README's architecture section, checked on the source (issues 11, 19):

- layers only import downwards: ``app``/``wsgi`` -> ``server`` -> ``blueprints`` -> ``schemas``
  -> ``generation``; ``server`` (the runtime) imports the app's layer, never the reverse, and of
  ``blueprints`` only the interface it drives (``blueprints.streaming``, docs/DESIGN.md);
  ``data`` sits beside the app wiring and may use ``generation``'s interfaces, never the other
  way round;
- inside ``generation`` the subsystems import each other only as :data:`GENERATION_ALLOWED`
  says (the engine at the top, leaves such as ``errors`` and ``config`` at the bottom);
- nothing below ``blueprints`` imports Flask or Werkzeug, and ``server`` imports no Flask;
- no import cycle between modules, counting imports inside functions too (a function-level
  import hides a cycle from Python, not from the design).
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("app", "wsgi", "server", "blueprints", "schemas", "generation", "data")
# which top-level parts each part may import (besides itself)
ALLOWED = {
    "app": {"server", "blueprints", "schemas", "generation", "data", "wsgi"},
    "wsgi": {"app", "server", "generation"},
    "server": {"blueprints", "generation"},
    "blueprints": {"schemas", "generation", "data"},
    "schemas": {"generation"},
    "generation": set(),
    "data": {"generation"},
}
# which generation subpackages each may import (besides itself): downwards only
GENERATION_ALLOWED = {
    "fleet": {"engine", "config"},      # many pods in virtual time, above the engine (issue 29)
    "adapters": {"engine", "content", "structured", "tokenization", "errors", "lanes", "config"},  # config: a kind's pooling tasks
    "engine": {"tokenization", "config", "errors"},
    "kvcache": set(),
    "metrics": {"config"},
    "structured": {"errors", "lanes"},
    "content": {"lanes"},            # paced: loops over a request's items give the hub turns
    "tokenization": {"errors", "lanes", "config"},   # config at the bottom: ConfigError for a model's limits
    "config": {"metrics"},
    "errors": set(),
    "lanes": set(),                 # a worker thread off the hub, clients taking turns
}
WEB = ("flask", "werkzeug", "gunicorn")


def _modules() -> dict[str, Path]:
    out = {}
    for part in PACKAGES:
        p = ROOT / f"{part}.py"
        if p.exists():
            out[part] = p
        for f in sorted((ROOT / part).rglob("*.py")) if (ROOT / part).is_dir() else ():
            rel = f.relative_to(ROOT).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = f
    return out


@functools.cache
def _tree(path: Path) -> ast.Module:
    """The parsed source of ``path``, once per run (three tests walk every module)."""
    return ast.parse(path.read_text(encoding="utf-8"))


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Project modules imported anywhere in ``path`` (relative imports resolved)."""
    tree = _tree(path)
    pkg = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg[:len(pkg) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [mod] + [f"{mod}.{a.name}" for a in node.names]
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


@functools.cache
def _graph():
    mods = _modules()
    known = set(mods)
    return mods, {n: _imports(n, p, known) for n, p in mods.items()}


def test_the_import_graph_is_the_projects():
    """The other checks would pass on an empty graph: make sure it holds the project."""
    mods, graph = _graph()
    assert {"app", "blueprints.serving", "generation.engine.simulator", "schemas.chat", "generation.adapters.base",
            "server.worker", "server.sse_emitter"} <= set(mods)
    assert "generation.engine.simulator" in graph["blueprints.serving"] and "schemas.common" in graph["blueprints.serving"]
    assert "blueprints.streaming" in graph["server.sse_emitter"]


def test_layers_only_import_downwards():
    _, graph = _graph()
    bad = []
    for mod, deps in graph.items():
        part = mod.split(".")[0]
        for d in deps:
            dpart = d.split(".")[0]
            if dpart != part and dpart not in ALLOWED[part]:
                bad.append(f"{mod} -> {d}")
    assert bad == []


def test_generation_subsystems_only_import_downwards():
    mods, graph = _graph()
    subs = {m.split(".")[1] for m in mods if m.startswith("generation.")}
    assert subs == set(GENERATION_ALLOWED), "a new generation subpackage needs its row in GENERATION_ALLOWED"
    flat = sorted(m for m, p in mods.items() if m.count(".") == 1 and m.startswith("generation.") and p.name != "__init__.py")
    assert flat == ["generation.errors"], "modules of a subsystem belong in its subpackage"
    bad = []
    for mod, deps in graph.items():
        if not mod.startswith("generation."):
            continue
        sub = mod.split(".")[1]
        for d in deps:
            if d.startswith("generation.") and (dsub := d.split(".")[1]) != sub and dsub not in GENERATION_ALLOWED[sub]:
                bad.append(f"{mod} -> {d}")
    assert bad == []


def test_the_runtime_uses_only_the_route_layers_interface():
    _, graph = _graph()
    bad = [f"{m} -> {d}" for m, deps in graph.items() if m.startswith("server")
           for d in deps if d.startswith("blueprints") and d != "blueprints.streaming"]
    assert bad == []


def test_no_flask_in_the_server_runtime():
    mods, _ = _graph()
    bad = []
    for mod, path in mods.items():
        if mod.split(".")[0] != "server":
            continue
        for node in ast.walk(_tree(path)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            bad += [f"{mod} imports {n}" for n in names if n.split(".")[0] in ("flask", "werkzeug")]
    assert bad == []


def test_no_module_over_600_lines():
    """Issue 19: a module past ~600 lines is split by concern."""
    mods, _ = _graph()
    long = {m: n for m, p in mods.items() if (n := len(p.read_text(encoding="utf-8").splitlines())) > 600}
    assert long == {}


def test_no_web_framework_below_blueprints():
    mods, _ = _graph()
    bad = []
    for mod, path in mods.items():
        if mod.split(".")[0] not in ("generation", "schemas", "data"):
            continue
        for node in ast.walk(_tree(path)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            bad += [f"{mod} imports {n}" for n in names if n.split(".")[0] in WEB]
    assert bad == []


def test_no_import_cycles():
    _, graph = _graph()
    state: dict[str, int] = {}
    cycles = []

    def visit(n, stack):
        state[n] = 1
        stack.append(n)
        for d in sorted(graph.get(n, ())):
            # a package's __init__ re-exporting its own submodules is not a cycle of design
            if d.startswith(n + ".") or n.startswith(d + "."):
                continue
            if state.get(d) == 1:
                cycles.append(" -> ".join(stack[stack.index(d):] + [d]))
            elif not state.get(d):
                visit(d, stack)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if not state.get(n):
            visit(n, [])
    assert cycles == []
