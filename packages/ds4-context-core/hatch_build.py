"""Opt-in hatch build hook: a ds4-context-core wheel whose hot paths are compiled by mypyc.

Off by default, so the default build stays a reproducible pure ``py3-none-any`` wheel and this file is not
even loaded. ``HATCH_BUILD_HOOK_ENABLE_CUSTOM=true`` turns it on for a wheel build; hatchling then asks the
build frontend for this hook's ``dependencies`` (``pyproject.toml``: mypy, setuptools and core's own
runtime dependencies, which mypy needs to type-check), so an isolated build installs them by itself.

Two groups of modules are compiled (:data:`COMPILED`): the privacy hot path (``_privacy/_walk.py``, its
secret rules, ``_privacy/_rules.py``, and the screen's byte scan, ``_privacy/_scan.py``) and the planner's
history index and budget. The whole package
source is copied to a temporary directory for mypy to type-check; nothing is written into the source
tree. Each group becomes one extension module plus its shared library, both inside the package (no
top-level module in the wheel),
added next to the unchanged ``.py`` sources: Python imports an extension module before a source file of
the same name. The wheel is tagged for the building interpreter and platform, such as
``cp311-cp311-linux_x86_64``; the release retags it manylinux once auditwheel has verified it
(``scripts/retag_manylinux.py``).
"""

from __future__ import annotations

import importlib.machinery
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

PACKAGE = "ds4_context_core"
# Groups of modules (paths inside the package), each compiled into one shared library named by its key.
# The planner's public entry points (``_planner/_engine.py``) stay interpreted: compiled code checks
# annotations at its boundary, so a caller's wrongly typed argument would raise a TypeError there instead
# of giving the fallback plan the planner promises. Its Protocol classes (``_planner/_pruning.py``) stay
# interpreted too: mypyc cannot compile a runtime-checkable Protocol.
COMPILED = {
    "_privacy._walk": ("_privacy/_walk.py", "_privacy/_rules.py", "_privacy/_scan.py"),
    "_planner._native": ("_planner/_index.py", "_planner/_budget.py"),
}
SETUP = """\
from setuptools import setup
from mypyc.build import mypycify

setup(
    name="ds4-context-core-mypyc",
    ext_modules=mypycify({paths!r}, opt_level="3", separate={groups!r}),
)
"""


class MypycBuildHook(BuildHookInterface):
    """Compile :data:`COMPILED` with mypyc and ship the extension modules in a platform wheel."""

    _work: Path | None = None

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        """Compile into a temporary directory and force-include the extension modules."""
        if self.target_name != "wheel" or version == "editable":
            return
        work = self._work = Path(tempfile.mkdtemp(prefix="ds4-mypyc-"))
        # The whole package, for mypy to resolve every import; only COMPILED is compiled.
        shutil.copytree(
            Path(self.root) / "src" / PACKAGE, work / PACKAGE, ignore=shutil.ignore_patterns("__pycache__")
        )
        paths = [f"{PACKAGE}/{name}" for group in COMPILED.values() for name in group]
        groups = [
            ([f"{PACKAGE}/{name}" for name in group], f"{PACKAGE}.{key}") for key, group in COMPILED.items()
        ]
        (work / "setup.py").write_text(SETUP.format(paths=paths, groups=groups), encoding="utf-8")
        command = [sys.executable, "setup.py", "build_ext", "--build-lib", "lib", "--build-temp", "temp"]
        # Neither this temporary directory nor the frontend's temporary build environment (mypyc's
        # runtime headers) may leave its random name in the binaries' debug info and build id.
        maps = f"-ffile-prefix-map={work}=. -ffile-prefix-map={sys.prefix}=/build-env"
        flags = f"{os.environ.get('CFLAGS', '')} {maps}".strip()
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        if os.name == "posix":
            env["CFLAGS"] = flags
        result = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, check=False)
        if result.returncode:
            message = f"mypyc could not compile {', '.join(paths)}:\n{result.stdout}\n{result.stderr}"
            raise RuntimeError(message)
        suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
        lib = work / "lib"
        built = sorted(path for path in lib.rglob("*") if path.name.endswith(suffixes))
        outside = [path.name for path in built if path.relative_to(lib).parts[0] != PACKAGE]
        if outside:  # a top-level module would be a second package in the wheel
            raise RuntimeError(f"mypyc built extension modules outside the package: {', '.join(outside)}")
        names = {path.relative_to(lib).as_posix().split(".")[0] for path in built}
        missing = [path for path in paths if path.removesuffix(".py") not in names]
        if missing:
            raise RuntimeError(f"mypyc built no extension module for {', '.join(missing)}")
        for path in built:
            build_data["force_include"][str(path)] = path.relative_to(lib).as_posix()
        build_data["pure_python"] = False
        build_data["infer_tag"] = True

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        """Remove the temporary build directory."""
        if self._work is not None:
            shutil.rmtree(self._work, ignore_errors=True)
            self._work = None
