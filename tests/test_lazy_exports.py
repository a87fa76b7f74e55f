"""Every lazy export map (a package ``__getattr__`` driven by ``_LAZY_EXPORTS``) agrees with its modules.

A name added to a private submodule's ``__all__`` but not to the map (or the other way round) would be
public in one place and missing in the other; the map is written by hand, so it is checked here.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from importlib import import_module
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted(ROOT.glob("packages/*/src"))


def _modules_with_a_lazy_map() -> list[str]:
    """Dotted names of the package modules that assign ``_LAZY_EXPORTS`` and define ``__getattr__``."""
    found = []
    for source in SOURCES:
        for path in sorted(source.rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            assigned = {
                target.id
                for node in tree.body
                if isinstance(node, ast.Assign | ast.AnnAssign)
                for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
                if isinstance(target, ast.Name)
            }
            if "_LAZY_EXPORTS" in assigned and "__getattr__" in (
                assigned | {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
            ):
                parts = path.relative_to(source).with_suffix("").parts
                found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


LAZY_MODULES = _modules_with_a_lazy_map()


def _public_names() -> frozenset[str]:
    """Every name in the ``__all__`` of a public module (no part of its dotted name private)."""
    names: set[str] = set()
    for source in SOURCES:
        for path in sorted(source.rglob("*.py")):
            parts = path.relative_to(source).with_suffix("").parts
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            if any(part.startswith("_") for part in parts) or parts[-1] == "__main__":
                continue
            names.update(getattr(import_module(".".join(parts)), "__all__", ()))
    return frozenset(names)


PUBLIC_NAMES = _public_names()


def test_the_lazy_maps_are_found() -> None:
    # the three the packages have today; a new one is picked up by the scan above
    assert {"ds4_context_core", "ds4_context_engine.commands", "ds4_context_engine.providers"} <= set(
        LAZY_MODULES
    )


@pytest.mark.parametrize("name", LAZY_MODULES)
def test_a_lazy_map_matches_its_submodules_all_and_the_packages_all(name: str) -> None:
    package = import_module(name)
    lazy: dict[str, str] = package._LAZY_EXPORTS
    exported = set(package.__all__)
    assert set(lazy) <= exported, f"lazy but not in {name}.__all__: {sorted(set(lazy) - exported)}"
    by_module: dict[str, set[str]] = defaultdict(set)
    for export, module in lazy.items():
        by_module[module].add(export)
    for module, names in sorted(by_module.items()):
        submodule = import_module(f"{name}.{module}")
        declared = set(submodule.__all__)
        assert names <= declared, f"{name}.{module}.__all__ lacks {sorted(names - declared)}"
        if module.startswith("_"):
            # what a private submodule declares is there to be exported: by this map, or (a module
            # shared by several packages, such as the engine's exceptions) by another public package
            unexported = sorted(declared - names - PUBLIC_NAMES)
            assert unexported == [], f"{name}.{module} declares {unexported}, which no package exports"
        for export in sorted(names):
            assert getattr(package, export) is getattr(submodule, export)
    # and every name the package exports resolves, lazily or not
    missing = [export for export in sorted(exported) if not hasattr(package, export)]
    assert missing == []


@pytest.mark.parametrize("name", LAZY_MODULES)
def test_an_unknown_name_is_an_attribute_error(name: str) -> None:
    with pytest.raises(AttributeError, match="no_such_export"):
        _ = import_module(name).no_such_export
