"""A pytest convenience: one line turns a factory into a conformance test. pytest is imported on call."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from ._runner import (
    ConformanceFactory,
    assert_runtime_adapter_conformance,
    run_runtime_adapter_conformance_sync,
)

__all__ = ["make_conformance_test"]


def make_conformance_test(
    factory: ConformanceFactory, *, backends: Sequence[Literal["asyncio", "trio"]] = ("asyncio", "trio")
) -> Callable[..., None]:
    """A pytest test function, parametrized over ``backends``, that asserts the factory passes the kit.

    In a test module: ``test_my_adapter_conformance = make_conformance_test(my_factory)``.
    """
    import pytest  # noqa: PLC0415  # only the caller's test run needs pytest

    @pytest.mark.parametrize("ds4_conformance_backend", list(backends))
    def test_runtime_adapter_conformance(ds4_conformance_backend: Literal["asyncio", "trio"]) -> None:
        report = run_runtime_adapter_conformance_sync(factory, backend=ds4_conformance_backend)
        assert_runtime_adapter_conformance(report)

    return test_runtime_adapter_conformance
