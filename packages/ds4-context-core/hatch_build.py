"""Opt-in hatch build hook: a ds4-context-core wheel whose privacy hot path is compiled by mypyc.

Off by default, so the release wheel stays a reproducible pure ``py3-none-any`` wheel and this file is not
even loaded. ``HATCH_BUILD_HOOK_ENABLE_CUSTOM=true`` turns it on for a wheel build; hatchling then asks the
build frontend for this hook's ``dependencies`` (``pyproject.toml``: mypy, setuptools, msgspec), so an
isolated build installs them from the index by itself.

Only ``_privacy_walk.py`` is compiled. It is type-checked beside the one in-package module it imports
(``_exceptions.py``) and an empty package ``__init__``, in a temporary directory: nothing is written into the
source tree, and the rest of the package is not needed at build time. The extension modules are added to
the wheel next to the unchanged ``.py`` sources (Python imports an extension module before a source file
of the same name) and the wheel is tagged for the building interpreter and platform, such as
``cp311-cp311-linux_x86_64``.
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
COMPILED = ("_privacy_walk.py",)
# In-package modules that the compiled ones import: copied beside them for mypy, not compiled.
SUPPORT = ("_exceptions.py",)
SETUP = """\
from setuptools import setup
from mypyc.build import mypycify

setup(name="ds4-context-core-mypyc", ext_modules=mypycify({paths!r}, opt_level="3"))
"""


class MypycBuildHook(BuildHookInterface):
    """Compile :data:`COMPILED` with mypyc and ship the extension modules in a platform wheel."""

    _work: Path | None = None

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        """Compile into a temporary directory and force-include the extension modules."""
        if self.target_name != "wheel" or version == "editable":
            return
        work = self._work = Path(tempfile.mkdtemp(prefix="ds4-mypyc-"))
        package = work / PACKAGE
        package.mkdir()
        (package / "__init__.py").write_text("", encoding="utf-8")
        source = Path(self.root) / "src" / PACKAGE
        for name in COMPILED + SUPPORT:
            shutil.copy2(source / name, package / name)
        paths = [f"{PACKAGE}/{name}" for name in COMPILED]
        (work / "setup.py").write_text(SETUP.format(paths=paths), encoding="utf-8")
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
        built = sorted(path for path in (work / "lib" / PACKAGE).iterdir() if path.name.endswith(suffixes))
        if not any(path.name.startswith(Path(name).stem + ".") for path in built for name in COMPILED):
            raise RuntimeError(f"mypyc built no extension module for {', '.join(paths)}")
        for path in built:
            build_data["force_include"][str(path)] = f"{PACKAGE}/{path.name}"
        build_data["pure_python"] = False
        build_data["infer_tag"] = True

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        """Remove the temporary build directory."""
        if self._work is not None:
            shutil.rmtree(self._work, ignore_errors=True)
            self._work = None
