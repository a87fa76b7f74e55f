"""``scripts/golden.py``: the compatibility golden pins public contracts and fails on any change.

The cases run the script on copies of the three packages (first on ``PYTHONPATH``) with an injected
public probe module, so the real sources and the real golden are never touched.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from conftest import clean_env, replace_in, run_script

PROBE = '''"""A public module injected by the golden tests."""

from pydantic import BaseModel, Field

__all__ = [
    "PROBE_CODES", "PROBE_LIMIT", "PROBE_ORDER", "PROBE_VERSION", "ProbeConfig", "ProbeSettings", "helper",
    "lower_case",
]

PROBE_VERSION = "probe-contract-v1"
PROBE_LIMIT = 64
PROBE_CODES = frozenset({"P002", "P001"})
PROBE_ORDER = ("first", "second")
lower_case = "not pinned: not UPPER_CASE"
NOT_EXPORTED = "not pinned: not in __all__"


class ProbeConfig(BaseModel):
    budget_tokens: int = Field(default=1000, ge=1)
    mode: str = "balanced"


class ProbeSettings(BaseModel):
    value: int = 1


def helper() -> None:
    """A public function."""
'''
PRIVATE = '__all__ = ["HIDDEN"]\nHIDDEN = "private modules are not pinned"\n'
MODULE = "ds4_context_core.release_probe"


def _package(base: Path, name: str, version: str, extra_all: str = "") -> Path:
    package = base / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        f'"""Stand-in for {name}."""\n\nfrom ._version import __version__\n\n'
        f'__all__ = ["__version__"{extra_all}]\n',
        encoding="utf-8",
    )
    (package / "_version.py").write_text(f'__version__ = "{version}"\n', encoding="utf-8")
    return package


@pytest.fixture
def packages(tmp_path: Path) -> Path:
    """Three small stand-in packages under the real import names, the core one holding the probes.

    Stand-ins keep these tests fast and independent of work in progress in the real packages; the real
    packages are checked against the real golden by ``nox -s golden`` and ``nox -s artifacts``.
    """
    base = tmp_path / "src"
    core = _package(base, "ds4_context_core", "0.1.0")
    (core / "release_probe.py").write_text(PROBE, encoding="utf-8")
    (core / "_private_probe.py").write_text(PRIVATE, encoding="utf-8")
    (core / "wire").mkdir()
    (core / "wire" / "__init__.py").write_text('__all__ = ["WIRE_FORMAT"]\nWIRE_FORMAT = "wire-v1"\n')
    _package(base, "ds4_context_reference_adapter", "0.1.0")
    _package(base, "ds4_context_engine", "0.1.0")
    return base


def _golden(packages: Path, golden_dir: Path, *args: str) -> tuple[int, str]:
    result = run_script(
        "golden.py",
        *args,
        "--golden-dir",
        golden_dir,
        env=clean_env(PYTHONPATH=str(packages)),
    )
    return result.returncode, result.stdout + result.stderr


def _load(golden_dir: Path) -> dict[str, Any]:
    (path,) = golden_dir.glob("*.json")
    loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return loaded


@pytest.fixture
def pinned(packages: Path, tmp_path: Path) -> Path:
    golden_dir = tmp_path / "golden"
    code, output = _golden(packages, golden_dir, "generate")
    assert code == 0, output
    return golden_dir


def test_generate_pins_api_constants_and_config_models(pinned: Path) -> None:
    golden = _load(pinned)
    core = golden["packages"]["ds4_context_core"]
    probe = core["modules"][MODULE]
    assert probe["all"] == sorted(
        [
            "PROBE_CODES",
            "PROBE_LIMIT",
            "PROBE_ORDER",
            "PROBE_VERSION",
            "ProbeConfig",
            "ProbeSettings",
            "helper",
            "lower_case",
        ]
    )
    assert probe["constants"] == {
        "PROBE_CODES": {"type": "frozenset", "value": ["P001", "P002"]},
        "PROBE_LIMIT": {"type": "int", "value": 64},
        "PROBE_ORDER": {"type": "tuple", "value": ["first", "second"]},
        "PROBE_VERSION": {"type": "str", "value": "probe-contract-v1"},
    }
    config = core["configs"]["ProbeConfig"]
    assert config["defaults"] == {"budget_tokens": 1000, "mode": "balanced"}
    assert config["schema"]["properties"]["budget_tokens"]["minimum"] == 1
    assert "ProbeSettings" not in core["configs"], "only *Config models are pinned"
    assert not any("_private_probe" in name for name in core["modules"])
    assert core["modules"]["ds4_context_core.wire"]["constants"]["WIRE_FORMAT"]["value"] == "wire-v1"
    assert golden["packages"]["ds4_context_engine"]["modules"]["ds4_context_engine"]["all"] == ["__version__"]
    assert golden["release_line"] == "0.1"


def test_check_passes_when_nothing_changed(packages: Path, pinned: Path) -> None:
    code, output = _golden(packages, pinned, "check")
    assert code == 0, output


CHANGES = {
    "contract-version": ('"probe-contract-v1"', '"probe-contract-v2"', f"{MODULE}/constants/PROBE_VERSION"),
    "int-becomes-float": ("PROBE_LIMIT = 64", "PROBE_LIMIT = 64.0", f"{MODULE}/constants/PROBE_LIMIT"),
    "new-code": (
        '{"P002", "P001"}',
        '{"P002", "P001", "P003"}',
        f"{MODULE}/constants/PROBE_CODES/value: removed [], added ['P003']",
    ),
    "reordered": (
        '("first", "second")',
        '("second", "first")',
        f"{MODULE}/constants/PROBE_ORDER/value: same items, new order",
    ),
    "tuple-becomes-list": (
        '("first", "second")',
        '["first", "second"]',
        f"{MODULE}/constants/PROBE_ORDER/type",
    ),
    "config-default": (
        "default=1000",
        "default=2000",
        "configs/ProbeConfig/defaults/budget_tokens",
    ),
    "config-schema": ("ge=1)", "ge=0)", "configs/ProbeConfig/schema"),
    "api-removed": ('"helper",\n    "lower_case"', '"lower_case"', f"{MODULE}/all: removed ['helper']"),
    "api-added": (
        '"helper",',
        '"helper", "NOT_EXPORTED",',
        f"{MODULE}/all: removed [], added ['NOT_EXPORTED']",
    ),
}


@pytest.mark.parametrize(("old", "new", "where"), list(CHANGES.values()), ids=list(CHANGES))
def test_a_changed_value_fails_the_check(
    packages: Path, pinned: Path, old: str, new: str, where: str
) -> None:
    replace_in(packages / "ds4_context_core" / "release_probe.py", old, new)
    code, output = _golden(packages, pinned, "check")
    assert code == 1
    assert "error GLD002:" in output
    assert where in output


def test_generate_refuses_to_overwrite_a_different_golden_without_force(packages: Path, pinned: Path) -> None:
    before = _load(pinned)
    replace_in(packages / "ds4_context_core" / "release_probe.py", "PROBE_LIMIT = 64", "PROBE_LIMIT = 65")
    code, output = _golden(packages, pinned, "generate")
    assert code == 1
    assert "error GLD003:" in output
    assert _load(pinned) == before
    code, output = _golden(packages, pinned, "generate", "--force")
    assert code == 0, output
    code, output = _golden(packages, pinned, "check")
    assert code == 0, output


def test_a_new_release_line_needs_its_own_golden(packages: Path, pinned: Path) -> None:
    replace_in(packages / "ds4_context_core" / "_version.py", '"0.1.0"', '"0.2.0"')
    code, output = _golden(packages, pinned, "check")
    assert code == 1
    assert "error GLD001:" in output


def test_a_public_module_that_fails_to_import_is_reported(packages: Path, pinned: Path) -> None:
    (packages / "ds4_context_core" / "broken_probe.py").write_text("raise RuntimeError('boom')\n")
    code, output = _golden(packages, pinned, "check")
    assert code == 1
    assert "error GLD004:" in output
    assert "ds4_context_core.broken_probe" in output


def test_check_from_source_rejects_expect_site_packages(packages: Path, pinned: Path) -> None:
    code, output = _golden(packages, pinned, "check", "--expect-site-packages")
    assert code == 1
    assert "error GLD005:" in output
    assert os.fspath(packages) in output


def test_re_exporting_a_config_changes_only_the_api_inventory(packages: Path, pinned: Path) -> None:
    init = packages / "ds4_context_core" / "__init__.py"
    init.write_text(
        init.read_text(encoding="utf-8").replace(
            '__all__ = ["__version__"]', '__all__ = ["ProbeConfig", "__version__"]'
        )
        + "from .release_probe import ProbeConfig\n",
        encoding="utf-8",
    )
    code, output = _golden(packages, pinned, "check")
    assert code == 1
    changed = [line for line in output.splitlines() if line.startswith("error GLD002: 0.1.json/")]
    assert changed == [
        "error GLD002: 0.1.json/packages/ds4_context_core/modules/ds4_context_core/all: "
        "removed [], added ['ProbeConfig']"
    ]
