import importlib
import pkgutil
import subprocess
import sys
from importlib.metadata import version
from types import ModuleType

import pytest

import ds4_context_engine
import ds4_context_engine.providers as providers
import ds4_context_engine.runtime as runtime
from ds4_context_core import Ds4ContextError
from ds4_context_engine import _exceptions

PUBLIC_MODULES = sorted(
    info.name
    for info in pkgutil.iter_modules(ds4_context_engine.__path__, "ds4_context_engine.")
    if not info.name.rsplit(".", 1)[1].startswith("_")
)


def test_version_matches_distribution_metadata():
    assert ds4_context_engine.__version__ == version("ds4-context-engine")


@pytest.mark.parametrize("module_name", ["ds4_context_engine", *PUBLIC_MODULES])
def test_every_public_name_resolves(module_name: str):
    module = importlib.import_module(module_name)
    names = module.__all__
    assert len(names) == len(set(names))
    assert [name for name in names if not hasattr(module, name)] == []


def test_importing_the_package_loads_neither_http_nor_sqlite_until_used():
    code = (
        "import sys, ds4_context_engine as e\n"
        "assert 'httpx' not in sys.modules and 'sqlite3' not in sys.modules\n"
        "e.parse_model_reference\n"
        "e.open_derived_store\n"
        "assert 'sqlite3' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_model_references_and_provider_types_load_without_http_until_a_transport_is_used():
    # The CLI parses --model on every plan: that must not pay for importing httpx.
    code = (
        "import sys\n"
        "from ds4_context_engine.providers import CompletionFailure, parse_model_reference\n"
        "import ds4_context_engine.runtime\n"
        "assert parse_model_reference('openai:gpt-4.1-mini').provider == 'openai'\n"
        "assert 'httpx' not in sys.modules\n"
        "from ds4_context_engine.providers import OpenAIChatTransport\n"
        "assert 'httpx' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_unknown_provider_attributes_raise_attribute_error():
    with pytest.raises(AttributeError, match="NoSuchTransport"):
        _ = providers.NoSuchTransport  # type: ignore[attr-defined]


def test_unknown_attributes_still_raise_attribute_error():
    with pytest.raises(AttributeError):
        _ = ds4_context_engine.NoSuchName  # type: ignore[attr-defined]


def _exception_classes(package: ModuleType) -> set[type[BaseException]]:
    """Every exception class any module of ``package`` defines (imported modules' classes left out)."""
    prefix = package.__name__
    modules = [package] + [
        importlib.import_module(info.name)
        for info in pkgutil.walk_packages(package.__path__, f"{prefix}.")
        if info.name != f"{prefix}.__main__"
    ]
    return {
        value
        for module in modules
        for value in vars(module).values()
        if isinstance(value, type)
        and issubclass(value, BaseException)
        and (value.__module__ == prefix or value.__module__.startswith(f"{prefix}."))
    }


def test_every_engine_exception_is_defined_once_under_the_root_and_drawn_in_the_tree():
    found = _exception_classes(ds4_context_engine)
    # the whole distribution's exceptions are the ones the one exception module defines
    assert len(found) >= 15
    assert {cls for cls in found if vars(_exceptions).get(cls.__name__) is not cls} == set()
    assert {cls.__name__ for cls in found if not issubclass(cls, Ds4ContextError)} == set()
    tree = _exceptions.__doc__ or ""
    assert {cls.__name__ for cls in found if f"── {cls.__name__}" not in tree} == set()
    for cls in found:
        if cls.__module__ == _exceptions.__name__:
            assert (cls.__doc__ or "").startswith("Internal:")
            continue
        # a public exception names the public module users import it from
        public = importlib.import_module(cls.__module__)
        assert getattr(public, cls.__name__) is cls
        assert cls.__name__ in public.__all__


def test_public_exceptions_name_their_public_module():
    assert ds4_context_engine.PiSessionError.__module__ == "ds4_context_engine"
    assert providers.ModelReferenceError.__module__ == "ds4_context_engine.providers"
    assert providers.ProviderTransportError.__module__ == "ds4_context_engine.providers"
    assert runtime.SandboxPolicyError.__module__ == "ds4_context_engine.runtime"
    assert repr(runtime.SandboxPolicyError("sandbox-path-denied", "refused")).startswith(
        "SandboxPolicyError("
    )


@pytest.mark.parametrize("argument", ["version", "--version"])
def test_the_version_command_loads_neither_typer_nor_core(argument):
    # start-up is the whole cost of a short command: `version` must not pay for the CLI it does not use
    code = (
        "import sys\n"
        f"sys.argv = ['ds4-context', {argument!r}]\n"
        "from ds4_context_engine.cli import main\n"
        "main()\n"
        "loaded = {'typer', 'rich', 'pydantic', 'msgspec', 'ds4_context_core'} & set(sys.modules)\n"
        "assert not loaded, loaded\n"
    )
    result = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert result.stdout == ds4_context_engine.__version__ + "\n"


def test_the_exceptions_import_on_first_use_and_are_the_public_classes():
    code = (
        "import sys, ds4_context_engine as e\n"
        "assert 'ds4_context_core' not in sys.modules\n"
        "from ds4_context_engine import PiSessionError\n"
        "from ds4_context_engine._exceptions import PiSessionError as defined\n"
        "assert PiSessionError is defined and 'ds4_context_core' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
