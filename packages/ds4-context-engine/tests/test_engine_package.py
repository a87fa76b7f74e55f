import importlib
import pkgutil
import subprocess
import sys
from importlib.metadata import version

import pytest

import ds4_context_engine
import ds4_context_engine.providers as providers

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
