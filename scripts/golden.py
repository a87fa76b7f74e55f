"""The compatibility golden: what a release line promises, pinned in ``compat-golden/<major.minor>.json``.

For every public module of the three packages (found with ``pkgutil``; a module or package whose name
starts with an underscore is private and skipped) it records the sorted ``__all__`` and the value of every
UPPER_CASE name in ``__all__`` holding a str, int, float, bool, or a tuple, list or frozenset of those
(contract versions, capability ids, codes, checksums). For every pydantic model in ``__all__`` whose name
ends in ``Config`` it records ``model_json_schema()`` and the defaults ``Model().model_dump(mode="json")``.

``generate`` writes the file for the installed version's release line (refusing to overwrite a different
one without ``--force``); ``check`` compares live values strictly and lists every difference.

Codes: GLD001 no golden for this release line, GLD002 a value differs, GLD003 generate would overwrite a
different golden, GLD004 a public module fails to import, GLD005 a package imports from outside
site-packages (``--expect-site-packages``), GLD006 unreadable golden file.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import re
import sys
import sysconfig
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from _release import DISTRIBUTIONS, ROOT, ReleaseError, release_line, report

__all__ = ["collect", "diff", "main"]

FORMAT = "ds4-context-compat-golden-v1"
_UPPER = re.compile(r"[A-Z][A-Z0-9_]*")
_SCALARS = (str, int, float, bool)
_MAX_DIFFS = 50


def _constant(value: object) -> dict[str, Any] | None:
    """The golden form of a constant, or ``None`` when its type is not pinned."""
    if isinstance(value, _SCALARS):
        return {"type": type(value).__name__, "value": value}
    if isinstance(value, tuple | list) and all(isinstance(item, _SCALARS) for item in value):
        return {"type": type(value).__name__, "value": list(value)}
    if isinstance(value, frozenset) and all(isinstance(item, _SCALARS) for item in value):
        items = sorted(value, key=lambda item: (type(item).__name__, repr(item)))
        return {"type": "frozenset", "value": items}
    return None


def _public_modules(package: ModuleType) -> list[ModuleType]:
    """The package and every public submodule, recursively, sorted by name."""
    found = [package]
    for info in pkgutil.iter_modules(getattr(package, "__path__", []), prefix=f"{package.__name__}."):
        if info.name.rsplit(".", 1)[1].startswith("_"):
            continue
        try:
            module = importlib.import_module(info.name)
        except Exception as exc:
            raise ReleaseError("GLD004", f"public module {info.name} fails to import: {exc!r}") from exc
        found += _public_modules(module) if info.ispkg else [module]
    return sorted(found, key=lambda module: module.__name__)


def _config_models(exported: dict[str, object]) -> dict[str, object]:
    try:
        from pydantic import BaseModel  # noqa: PLC0415 - only the packages decide whether pydantic is there
    except ImportError:
        return {}
    return {
        name: value
        for name, value in exported.items()
        if name.endswith("Config") and isinstance(value, type) and issubclass(value, BaseModel)
    }


def _configs(found: Iterable[tuple[str, str, Any]]) -> dict[str, Any]:
    """Config models keyed by their exported name, so re-exporting one elsewhere changes nothing here.

    Two different models exported under one name are told apart by the first public module exporting each.
    """
    found = list(found)
    names = [name for _, name, _ in found]
    return {
        (name if names.count(name) == 1 else f"{module}:{name}"): _model_entry(model)
        for module, name, model in found
    }


def _model_entry(model: Any) -> dict[str, Any]:
    try:
        defaults: Any = model().model_dump(mode="json")
    except Exception:  # a model with required fields has no defaults to pin
        defaults = None
    return {"schema": model.model_json_schema(), "defaults": defaults}


def collect() -> dict[str, Any]:
    """The live golden of the importable packages (JSON-ready; run it where the packages are installed)."""
    core = importlib.import_module(DISTRIBUTIONS[0].package)
    version = str(core.__version__)
    packages: dict[str, Any] = {}
    for dist in DISTRIBUTIONS:
        try:
            package = importlib.import_module(dist.package)
        except Exception as exc:
            raise ReleaseError("GLD004", f"{dist.package} fails to import: {exc!r}") from exc
        modules: dict[str, Any] = {}
        models: dict[int, tuple[str, str, Any]] = {}  # id -> (first public module, name, model)
        for module in _public_modules(package):
            names = getattr(module, "__all__", None)
            if names is None:
                modules[module.__name__] = {"all": None, "constants": {}}
                continue
            exported = {name: getattr(module, name) for name in names if hasattr(module, name)}
            constants = {}
            for name, value in sorted(exported.items()):
                entry = _constant(value) if _UPPER.fullmatch(name) else None
                if entry is not None:
                    constants[name] = entry
            modules[module.__name__] = {"all": sorted(names), "constants": constants}
            for name, model in sorted(_config_models(exported).items()):
                models.setdefault(id(model), (module.__name__, name, model))
        packages[dist.package] = {"modules": modules, "configs": _configs(models.values())}
    golden = {"format": FORMAT, "release_line": release_line(version), "packages": packages}
    # Round-trip so tuples become lists and the comparison sees exactly what the file holds.
    loaded: dict[str, Any] = json.loads(_dump(golden))
    return loaded


def _dump(golden: dict[str, Any]) -> str:
    return json.dumps(golden, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 120 else text[:117] + "..."


def diff(expected: Any, actual: Any, path: str = "") -> list[str]:
    """Human-readable differences between two JSON values, one line per changed path."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        lines: list[str] = []
        for key in sorted(set(expected) | set(actual)):
            where = f"{path}/{key}"
            if key not in actual:
                lines.append(f"{where}: removed (was {_short(expected[key])})")
            elif key not in expected:
                lines.append(f"{where}: added ({_short(actual[key])})")
            else:
                lines += diff(expected[key], actual[key], where)
        return lines
    if json.dumps(expected, sort_keys=True) == json.dumps(actual, sort_keys=True):
        return []
    if isinstance(expected, list) and isinstance(actual, list):
        before = [json.dumps(item, sort_keys=True) for item in expected]
        after = [json.dumps(item, sort_keys=True) for item in actual]
        removed = [json.loads(item) for item in before if item not in after]
        added = [json.loads(item) for item in after if item not in before]
        if removed or added:
            return [f"{path}: removed {removed}, added {added}"]
        return [f"{path}: same items, new order {_short(actual)}"]
    return [f"{path}: {_short(expected)} -> {_short(actual)}"]


def _golden_path(directory: Path, golden: dict[str, Any]) -> Path:
    return directory / f"{golden['release_line']}.json"


def _import_locations() -> list[ReleaseError]:
    """GLD005 for every package that does not import from this interpreter's site-packages."""
    site = {Path(sysconfig.get_path(key)).resolve() for key in ("purelib", "platlib")}
    problems = []
    for dist in DISTRIBUTIONS:
        module = importlib.import_module(dist.package)
        location = Path(str(module.__file__)).resolve()
        if not any(location.is_relative_to(directory) for directory in site):
            problems.append(
                ReleaseError(
                    "GLD005", f"{dist.package} imports from {location}, not from {sys.prefix}'s site-packages"
                )
            )
    return problems


def check(directory: Path, *, expect_site_packages: bool = False) -> tuple[Path, list[ReleaseError]]:
    """Compare live values with the golden of their release line."""
    problems = _import_locations() if expect_site_packages else []
    live = collect()
    path = _golden_path(directory, live)
    if not path.is_file():
        return path, [
            *problems,
            ReleaseError(
                "GLD001",
                f"no golden for release line {live['release_line']}: {path} is missing; write it on purpose "
                "with `python scripts/golden.py generate`",
            ),
        ]
    try:
        pinned = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return path, [*problems, ReleaseError("GLD006", f"cannot read {path}: {exc}")]
    if not isinstance(pinned, dict) or pinned.get("format") != FORMAT:
        return path, [*problems, ReleaseError("GLD006", f"{path} is not a {FORMAT} file")]
    lines = diff(pinned, live)
    for line in lines[:_MAX_DIFFS]:
        problems.append(ReleaseError("GLD002", f"{path.name}{line}"))
    if len(lines) > _MAX_DIFFS:
        problems.append(ReleaseError("GLD002", f"... and {len(lines) - _MAX_DIFFS} more differences"))
    if lines:
        problems.append(
            ReleaseError(
                "GLD002",
                "a pinned contract changed: revert it, or pin the change on purpose with "
                "`python scripts/golden.py generate --force` (same release line) or a new release line",
            )
        )
    return path, problems


def generate(directory: Path, *, force: bool) -> tuple[Path, bool]:
    """Write the golden of the live values; returns its path and whether it changed."""
    golden = collect()
    path = _golden_path(directory, golden)
    text = _dump(golden)
    if path.is_file():
        if path.read_text(encoding="utf-8") == text:
            return path, False
        if not force:
            raise ReleaseError(
                "GLD003",
                f"{path} exists and differs from the live values; pass --force to replace it on purpose",
            )
    directory.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path, True


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description="Generate or check the compatibility golden.")
    parser.add_argument("command", choices=("generate", "check"))
    parser.add_argument(
        "--golden-dir", type=Path, default=ROOT / "compat-golden", help="default: compat-golden/"
    )
    parser.add_argument("--force", action="store_true", help="generate: replace a different golden")
    parser.add_argument(
        "--expect-site-packages",
        action="store_true",
        help="check: also fail unless the packages import from this interpreter's site-packages",
    )
    args = parser.parse_args(argv)
    try:
        if args.command == "generate":
            path, changed = generate(args.golden_dir, force=args.force)
            return report([], ok=f"{'wrote' if changed else 'unchanged'}: {path}")
        path, problems = check(args.golden_dir, expect_site_packages=args.expect_site_packages)
    except ReleaseError as exc:
        return report([exc], ok="")
    return report(problems, ok=f"live values match {path}")


if __name__ == "__main__":
    raise SystemExit(main())
