"""The layout is the architecture: these rules keep it that way (docs/architecture.md).

* no import cycle between the package's modules, counting imports inside functions and the
  package ``__init__`` modules an import runs;
* no module imports another module's private (``_name``) function, class or constant;
* nothing in the library imports ``bert_data.tools`` (the tools are thin wrappers on top);
* no module over ~600 lines unless its docstring says why it is one concern.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set, Tuple

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "bert_data"
MOST_LINES = 600


def _modules() -> Dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> List[Tuple[str, str]]:
    """(module imported, name imported from it or "") for every import in the file, nested ones too."""
    base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:
                target = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else []))
            for alias in node.names:
                if f"{target}.{alias.name}" in MODULES:
                    found.append((f"{target}.{alias.name}", ""))
                else:
                    found.append((target, alias.name))
        elif isinstance(node, ast.Import):
            found += [(alias.name, "") for alias in node.names]
    return [(module, what) for module, what in found if module == "bert_data" or module.startswith("bert_data.")]


def _graph() -> Dict[str, Set[str]]:
    graph: Dict[str, Set[str]] = {}
    for name, path in MODULES.items():
        deps = set()
        for module, _ in _imports(name, path):
            parts = module.split(".")
            for i in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__ and a/b/__init__ first
                prefix = ".".join(parts[:i])
                if prefix in MODULES and prefix != name and not name.startswith(prefix + "."):
                    deps.add(prefix)
        graph[name] = deps
    return graph


def _cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_checker_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles() -> None:
    assert _cycles(_graph()) == []


def test_no_module_imports_another_modules_private_names() -> None:
    private = [
        f"{name} imports {what} from {module}"
        for name, path in MODULES.items()
        for module, what in _imports(name, path)
        if what.startswith("_") and not what.startswith("__") and f"{module}.{what}" not in MODULES
        and not _is_extension_module(module, what)
    ]
    assert private == []


def _is_extension_module(package: str, name: str) -> bool:
    """A compiled submodule (``bert_data.format._wire``, built from ``_wire.c``): a module, not a name."""
    return ROOT.joinpath(*package.split("."), name + ".c").is_file()


def test_the_library_never_imports_the_tools() -> None:
    offenders = [
        f"{name} imports {module}"
        for name, path in MODULES.items()
        if not name.startswith("bert_data.tools")
        for module, _ in _imports(name, path)
        if module.startswith("bert_data.tools")
    ]
    assert offenders == []


def test_long_modules_say_why_they_are_one_concern() -> None:
    long = []
    for name, path in MODULES.items():
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > MOST_LINES:
            doc = ast.get_docstring(ast.parse(text)) or ""
            if "Over 600 lines on purpose" not in " ".join(doc.split()[:80]):  # said in its first lines
                long.append(f"{name}: {text.count(chr(10))} lines")
    assert long == []
