"""The layer rule of docs/design.md ("Layers"), read from the source: each layer imports only those below it.

Every module under ``src/litstore`` is parsed with :mod:`ast`, and every import of a
litstore module counts, wherever it is: at the top, inside a function (a lazy import),
or under ``if TYPE_CHECKING:``. Two rules:

- a module imports no module of a higher layer (:data:`LAYERS`);
- no two modules import each other, directly or through others (importing
  ``litstore.a.b`` also runs ``litstore/a/__init__.py``, so that counts as an import of
  ``litstore.a``).

An edge that breaks a rule today and that later work removes is listed in
:data:`ALLOWED`, with the reason. Every listed edge must be a ``TYPE_CHECKING`` import
(a type, never code that runs) and must still exist: the set can only shrink, and any
new violation fails. Imports named by a string (``storage.BACKENDS``, the fork server's
preload list in ``ingest``) are not seen here.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parent.parent / "src"

#: The layer of each top-level module or package of litstore, from the bottom up.
#: A module may import modules of its own layer or below.
LAYERS: dict[str, int] = {
    "errors": 0,
    "format": 1,  # pure: paths, models, the record codec, hashes, manifests
    "_litdata": 2,  # the only importer of litdata
    "storage": 3,
    "query": 4,  # the only importer of DuckDB
    "read": 5,  # the version log, key index, chunks, composed manifests
    "txn": 6,  # the commit protocol
    # What a Snapshot or Store hands work to, and the Snapshot itself.
    "snapshot": 7,
    "ops": 7,
    "streaming": 7,
    "views": 7,  # the private view directories streaming hands litdata
    "stream_state": 7,
    "order": 7,  # the world-size-independent training order (pure numpy)
    "export": 7,
    "huggingface": 7,  # the features kept from Hugging Face, and to_huggingface
    "tags": 7,
    "branches": 7,
    "ingest": 7,
    "_forkserver_main": 7,  # the caller's main module, imported in ingest's fork server (stdlib only)
    "store": 8,
    "litstore": 9,  # the package itself: the public names
    # Tools on top of the public API.
    "ray": 10,
    "sources": 10,
    "cli": 10,
    "__main__": 10,
    "testing": 10,
}

#: (importer, imported) -> why the edge is still there. Each one is a ``TYPE_CHECKING``
#: import; remove it here when the code stops needing it.
ALLOWED: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    line: int
    typing_only: bool  # under ``if TYPE_CHECKING:``


def _modules() -> dict[str, Path]:
    modules = {}
    for path in sorted((SOURCE / "litstore").rglob("*.py")):
        parts = list(path.relative_to(SOURCE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


MODULES = _modules()


def _is_package(module: str) -> bool:
    return MODULES[module].name == "__init__.py"


def _known(name: str) -> str:
    """The module ``name`` imports: itself, or the package whose attribute it is."""
    while name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:  # relative: from the importer's package, up level - 1
            package = module.split(".") if _is_package(module) else module.split(".")[:-1]
            package = package[: len(package) - (node.level - 1)]
            base = ".".join([*package, *([node.module] if node.module else [])])
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
    for name in names:
        if name == "litstore" or name.startswith("litstore."):
            yield _known(name)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports_in(module: str, node: ast.AST, typing_only: bool) -> Iterator[Import]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for statement in child.body:
                yield from _imports_in(module, ast.Module(body=[statement], type_ignores=[]), True)
            for statement in child.orelse:
                yield from _imports_in(module, ast.Module(body=[statement], type_ignores=[]), typing_only)
            continue
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            for target in _targets(module, child):
                if target != module:
                    yield Import(module, target, child.lineno, typing_only)
        yield from _imports_in(module, child, typing_only)


def _all_imports() -> list[Import]:
    found: list[Import] = []
    for module, path in MODULES.items():
        found += _imports_in(module, ast.parse(path.read_text(), str(path)), False)
    return found


IMPORTS = _all_imports()


def _unit(module: str) -> str:
    """The top-level module or package ``module`` belongs to (``litstore``: the package itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "litstore"


def _where(found: Import) -> str:
    kind = " (TYPE_CHECKING)" if found.typing_only else ""
    return f"{MODULES[found.importer].relative_to(SOURCE)}:{found.line}: {found.importer} -> {found.imported}{kind}"


def test_every_module_has_a_layer() -> None:
    missing = sorted({_unit(module) for module in MODULES} - LAYERS.keys())
    assert not missing, f"place these in LAYERS (and in docs/design.md's Layers): {missing}"


def test_no_module_imports_a_higher_layer() -> None:
    upward = [
        _where(found)
        for found in IMPORTS
        if LAYERS[_unit(found.imported)] > LAYERS[_unit(found.importer)]
        and (found.importer, found.imported) not in ALLOWED
    ]
    assert not upward, "imports of a higher layer:\n" + "\n".join(upward)


@pytest.mark.parametrize(
    ("layer", "forbidden"),
    [
        ("format", {"_litdata", "storage", "query", "read", "txn", "snapshot", "store"}),
        ("_litdata", {"storage", "query", "read", "txn", "snapshot", "store"}),
        ("storage", {"query", "read", "txn", "snapshot", "store"}),
        ("read", {"txn", "snapshot", "ops", "streaming", "views", "export", "store", "ingest", "tags"}),
        ("txn", {"ops", "streaming", "views", "export", "store", "ingest", "tags"}),
    ],
)
def test_the_rules_the_issue_names(layer: str, forbidden: set[str]) -> None:
    """The rules of "One home for each read-side concern", spelled out (they follow from LAYERS)."""
    assert all(LAYERS[name] > LAYERS[layer] for name in forbidden)
    found = [_where(edge) for edge in IMPORTS if _unit(edge.importer) == layer and _unit(edge.imported) in forbidden]
    assert not found, f"{layer} imports what it must not:\n" + "\n".join(found)


def _edges() -> dict[str, set[str]]:
    """Who imports whom, minus :data:`ALLOWED`; an import of ``a.b.c`` also imports ``a.b`` (its ``__init__`` runs).

    A module's own packages are left out: they are importing it, or have been imported, first.
    """
    edges: dict[str, set[str]] = {module: set() for module in MODULES}
    for found in IMPORTS:
        if (found.importer, found.imported) in ALLOWED:
            continue
        parts = found.imported.split(".")
        for end in range(2, len(parts) + 1):
            target = ".".join(parts[:end])
            if target != found.importer and not found.importer.startswith(target + "."):
                edges[found.importer].add(target)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(edges[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return components


def test_no_import_cycle() -> None:
    cycles = _cycles(_edges())
    shown = []
    for component in cycles:
        members = set(component)
        shown += [_where(found) for found in IMPORTS if found.importer in members and found.imported in members]
    assert not cycles, f"modules that import each other: {cycles}\n" + "\n".join(shown)


def test_the_cycle_check_sees_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_allowed_edges_are_types_that_still_exist() -> None:
    """An allowed edge is a ``TYPE_CHECKING`` import (no code of the higher layer runs), and still there."""
    for edge, reason in ALLOWED.items():
        found = [imported for imported in IMPORTS if (imported.importer, imported.imported) == edge]
        assert found, f"{edge} ({reason}) is gone: remove it from ALLOWED"
        runtime = [_where(imported) for imported in found if not imported.typing_only]
        assert not runtime, f"{edge} is allowed as a type only, but runs:\n" + "\n".join(runtime)


def test_lazy_and_typing_imports_are_seen() -> None:
    """The parser finds imports inside functions and under TYPE_CHECKING (the ones this test exists for)."""
    store = {found.imported: found for found in IMPORTS if found.importer == "litstore.store"}
    assert "litstore.ingest" in store and not store["litstore.ingest"].typing_only  # inside Store.ingest
    assert store["litstore.streaming"].typing_only
    snapshot = [found for found in IMPORTS if found.importer == "litstore.snapshot"]
    assert any(found.imported == "litstore.export" and not found.typing_only for found in snapshot)  # in methods
