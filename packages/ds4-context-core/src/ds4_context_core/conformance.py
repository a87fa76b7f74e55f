"""The runtime-adapter conformance kit: seven checks any ``RuntimeAdapter`` must pass.

::

    from ds4_context_core.conformance import (
        assert_runtime_adapter_conformance, run_runtime_adapter_conformance_sync,
    )

    report = run_runtime_adapter_conformance_sync(my_factory)
    assert_runtime_adapter_conformance(report)

From a shell: ``ds4-context-conformance package.module:factory [--json]``. Nothing here imports pytest
at module load; ``make_conformance_test(factory)`` imports it only when called, from a test module.
See ``docs/core/conformance.md``.
"""

from __future__ import annotations

from ._adapter._conformance._cli import load_conformance_factory, main
from ._adapter._conformance._fixture import (
    CONFORMANCE_FIXTURE_VERSION,
    CONFORMANCE_HISTORY_PARTS,
    ConformanceFixture,
    ConformanceTransport,
    load_conformance_fixture,
)
from ._adapter._conformance._pytest import make_conformance_test
from ._adapter._conformance._runner import (
    CONFORMANCE_CASE_IDS,
    CONFORMANCE_FAILURE_CODES,
    CONFORMANCE_FAILURE_DETAILS,
    CONFORMANCE_REPORT_VERSION,
    ConformanceCaseResult,
    ConformanceFactory,
    ConformanceReport,
    ConformanceSubject,
    SimpleConformanceFactory,
    assert_runtime_adapter_conformance,
    run_runtime_adapter_conformance,
    run_runtime_adapter_conformance_sync,
)
from ._exceptions import ConformanceTransportError
from ._exports import adopt_public_names

__all__ = [
    "CONFORMANCE_CASE_IDS",
    "CONFORMANCE_FAILURE_CODES",
    "CONFORMANCE_FAILURE_DETAILS",
    "CONFORMANCE_FIXTURE_VERSION",
    "CONFORMANCE_HISTORY_PARTS",
    "CONFORMANCE_REPORT_VERSION",
    "ConformanceCaseResult",
    "ConformanceFactory",
    "ConformanceFixture",
    "ConformanceReport",
    "ConformanceSubject",
    "ConformanceTransport",
    "ConformanceTransportError",
    "SimpleConformanceFactory",
    "assert_runtime_adapter_conformance",
    "load_conformance_factory",
    "load_conformance_fixture",
    "main",
    "make_conformance_test",
    "run_runtime_adapter_conformance",
    "run_runtime_adapter_conformance_sync",
]

adopt_public_names(__name__, globals())

if __name__ == "__main__":  # ``python -m ds4_context_core.conformance``, the console command's twin
    raise SystemExit(main())
