"""The public surface: every public module declares ``__all__`` and every listed name resolves."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import subprocess
import sys
import typing

import msgspec
import pytest

import ds4_context_core
from ds4_context_core import _exceptions

PUBLIC_MODULES = sorted(
    info.name
    for info in pkgutil.iter_modules(ds4_context_core.__path__, "ds4_context_core.")
    if not info.name.rsplit(".", 1)[1].startswith("_")
)


def test_the_documented_public_modules_exist():
    expected = {
        "adapter",
        "config",
        "conformance",
        "history",
        "interop",
        "localkv",
        "planner",
        "privacy",
        "pruning",
        "tokens",
    }
    assert expected <= {name.rsplit(".", 1)[1] for name in PUBLIC_MODULES}


@pytest.mark.parametrize("module_name", ["ds4_context_core", *PUBLIC_MODULES])
def test_every_public_name_resolves_and_all_is_sorted_without_duplicates(module_name: str):
    module = importlib.import_module(module_name)
    names = module.__all__
    assert len(names) == len(set(names))
    missing = [name for name in names if not hasattr(module, name)]
    assert missing == []


SKETCH_NAMES = {
    "ds4_context_core": (
        "CanonicalMessage",
        "ContextPlan",
        "ContextPlanner",
        "ModelDescriptor",
        "PlanState",
        "Provenance",
        "RuntimeHistorySnapshot",
        "RuntimeToolAtomicGroup",
        "build_canonical_tool_atomic_groups",
        "plan_context",
        "validate_runtime_history_snapshot",
    ),
    "ds4_context_core.adapter": (
        "RuntimeAdapter",
        "assert_runtime_adapter_conformance",
        "negotiate_runtime_capabilities",
        "run_runtime_adapter_conformance",
    ),
}


@pytest.mark.parametrize("module_name", sorted(SKETCH_NAMES))
def test_design_sketch_names_are_public(module_name: str):
    module = importlib.import_module(module_name)
    for name in SKETCH_NAMES[module_name]:
        assert name in module.__all__, name
        assert getattr(module, name) is not None


def test_importing_the_package_and_planning_without_a_config_do_not_load_pydantic():
    # pydantic (and building the config models) is most of a command-line plan's start-up: it is loaded
    # when a configuration is read or a model is named, never for the defaults
    code = (
        "import sys, ds4_context_core as c\n"
        "assert 'pydantic' not in sys.modules, 'eager pydantic import'\n"
        "from ds4_context_core import CanonicalMessage, ModelDescriptor, Provenance, TextBlock\n"
        "from ds4_context_core.config import CONFIG_SCHEMA_ID, ConfigLoadResult\n"
        "import ds4_context_core.pruning\n"
        "message = CanonicalMessage(id='s:e1', source_entry_id='e1', role='user',\n"
        "    blocks=(TextBlock(text='hello'),),\n"
        "    provenance=Provenance(source='runtime-session', session_id='s', entry_id='e1'))\n"
        "model = ModelDescriptor(provider='openai', id='gpt-4.1-mini', context_window=8000)\n"
        "plan = c.plan_context([message], model=model)\n"
        "assert plan.manifest.fallback is None and len(plan.items) == 1\n"
        "assert 'pydantic' not in sys.modules, 'a plan without a config loaded pydantic'\n"
        "c.plan_context([message], model=model, config={'budget': {'hard_limit_ratio': 0.5}})\n"
        "assert 'pydantic' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_unknown_attributes_still_raise_attribute_error():
    with pytest.raises(AttributeError):
        _ = ds4_context_core.NoSuchName  # type: ignore[attr-defined]


def test_every_error_carries_a_stable_code_and_a_builtin_base():
    for name in ds4_context_core.__all__:
        value = getattr(ds4_context_core, name)
        if isinstance(value, type) and issubclass(value, BaseException):
            assert issubclass(value, ds4_context_core.Ds4ContextError), name
            # Each subclasses a builtin too, so `except ValueError` style handlers keep working.
            assert any(
                base.__module__ == "builtins" and base is not Exception for base in value.__mro__[1:]
            ) or (value is ds4_context_core.Ds4ContextError), name


def _public_exports():
    for module_name in ["ds4_context_core", *PUBLIC_MODULES]:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            yield module_name, name, getattr(module, name)


def test_public_classes_and_functions_name_a_public_module_not_a_private_room():

    def is_record(value) -> bool:
        return (
            issubclass(value, msgspec.Struct)
            or hasattr(value, "__pydantic_fields__")
            or dataclasses.is_dataclass(value)
            or typing.is_typeddict(value)
            or (issubclass(value, tuple) and hasattr(value, "_fields"))
        )

    checked = 0
    for module_name, name, value in _public_exports():
        if not ((isinstance(value, type) and not is_record(value)) or inspect.isfunction(value)):
            continue
        home = value.__module__
        assert not any(part.startswith("_") for part in home.split(".")[1:]), (module_name, name, home)
        assert getattr(importlib.import_module(home), name) is value, (name, home)
        checked += 1
    assert checked > 50  # exceptions, functions, enums and protocols of every public module


def test_every_public_error_is_under_the_root_and_drawn_in_the_exceptions_docstring():
    errors = {
        value
        for _, _, value in _public_exports()
        if isinstance(value, type) and issubclass(value, BaseException)
    }
    assert ds4_context_core.ConformanceTransportError in errors
    for error in errors:
        assert issubclass(error, ds4_context_core.Ds4ContextError), error
        assert f" {error.__name__}" in (_exceptions.__doc__ or ""), f"{error.__name__} missing from the tree"


def test_the_adapter_contract_imports_without_the_conformance_kit():
    # a host's start-up (the CLI's plan) reads the contract's types; the kit comes when it is named
    code = (
        "import sys, ds4_context_core.adapter as adapter\n"
        "kit = 'ds4_context_core._adapter._conformance._runner'\n"
        "assert kit not in sys.modules and 'anyio' not in sys.modules, 'eager kit import'\n"
        "from ds4_context_core import conformance\n"
        "assert adapter.run_runtime_adapter_conformance is conformance.run_runtime_adapter_conformance\n"
        "kit = conformance.assert_runtime_adapter_conformance\n"
        "assert adapter.assert_runtime_adapter_conformance is kit\n"
        "assert 'run_runtime_adapter_conformance' in adapter.__all__\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
