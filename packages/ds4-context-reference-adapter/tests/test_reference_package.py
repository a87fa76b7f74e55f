import importlib
import pkgutil
from importlib.metadata import version

import ds4_context_reference_adapter
from ds4_context_core import Ds4ContextError
from ds4_context_reference_adapter import _exceptions


def test_version_matches_distribution_metadata():
    assert ds4_context_reference_adapter.__version__ == version("ds4-context-reference-adapter")


def test_every_exception_is_defined_once_under_the_root_drawn_in_the_tree_and_exported():
    package = ds4_context_reference_adapter
    modules = [package] + [
        importlib.import_module(info.name)
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}.")
        if not info.name.endswith(".__main__")
    ]
    found = {
        value
        for module in modules
        for value in vars(module).values()
        if isinstance(value, type)
        and issubclass(value, BaseException)
        and value.__module__.split(".")[0] == package.__name__
    }
    assert len(found) >= 9
    assert {cls for cls in found if vars(_exceptions).get(cls.__name__) is not cls} == set()
    assert {cls.__name__ for cls in found if not issubclass(cls, Ds4ContextError)} == set()
    tree = _exceptions.__doc__ or ""
    assert {cls.__name__ for cls in found if f"── {cls.__name__}" not in tree} == set()
    assert {cls.__name__ for cls in found if cls.__module__ != package.__name__} == set()
    assert {cls.__name__ for cls in found if cls.__name__ not in package.__all__} == set()
