"""``ds4-context-conformance package.module:factory``: run the kit from a shell or a release pipeline."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any, Final, NoReturn

import msgspec

from ds4_context_core._exceptions import ConformanceTargetError

from ._runner import ConformanceFactory, ConformanceReport, run_runtime_adapter_conformance_sync

__all__ = ["load_conformance_factory", "main"]

_TARGET_PREFIX_CHARS: Final = 80


def _escaped(text: str) -> str:
    return text[:_TARGET_PREFIX_CHARS].encode("unicode_escape").decode("ascii")


def _is_target_or_parent(missing: str | None, module_name: str) -> bool:
    """Whether the module Python could not find is the target itself or one of its parent packages."""
    if missing is None:
        return True
    return module_name == missing or module_name.startswith(f"{missing}.")


def _import_target_module(module_name: str) -> Any:
    """Import the target's module; every failure is a :class:`ConformanceTargetError` with a code.

    A module that is missing, one that imports something not installed, and one whose own code raises
    are three different mistakes, and each gets its own code. Only the exception's type is shown: its
    message is the target's text and may hold anything.
    """
    shown = _escaped(module_name)
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if _is_target_or_parent(error.name, module_name):
            raise ConformanceTargetError(
                "conformance-target-not-found", f"cannot import module {shown!r}: no such module"
            ) from None
        raise ConformanceTargetError(
            "conformance-target-dependency-missing",
            f"module {shown!r} imports {_escaped(str(error.name))!r}, which is not installed",
        ) from None
    except Exception as error:  # the target's own code raised while it was imported
        raise ConformanceTargetError(
            "conformance-target-import-failed",
            f"module {shown!r} raised {type(error).__name__} while it was imported",
        ) from None


def _put_cwd_on_path() -> None:
    """Let the console command import a module from the current directory, as ``python -m`` does.

    Skipped under ``python -P`` / ``PYTHONSAFEPATH``, which ask for exactly that not to happen.
    """
    if sys.flags.safe_path:
        return
    cwd = os.getcwd()
    if not any(entry in ("", cwd) for entry in sys.path):
        sys.path.insert(0, cwd)


def load_conformance_factory(target: str) -> ConformanceFactory:
    """Import ``package.module:attribute`` and return the factory it names.

    The attribute may be a factory (an object with ``name`` and ``create``) or a callable taking no
    arguments that returns one.
    """
    module_name, separator, attribute_path = target.partition(":")
    if not separator or not module_name or not attribute_path:
        raise ConformanceTargetError(
            "conformance-target-invalid", f"expected package.module:factory, got {_escaped(target)!r}"
        )
    value: Any = _import_target_module(module_name)
    for part in attribute_path.split("."):
        if not hasattr(value, part):
            raise ConformanceTargetError(
                "conformance-target-not-found", f"no attribute {_escaped(attribute_path)!r} in that module"
            )
        value = getattr(value, part)
    if not hasattr(value, "create") and callable(value):
        try:
            value = value()
        except Exception as error:  # the target's factory function raised: its code, not the kit's
            raise ConformanceTargetError(
                "conformance-target-raised", f"calling the target raised {type(error).__name__}"
            ) from None
    if not (hasattr(value, "create") and callable(value.create) and hasattr(value, "name")):
        raise ConformanceTargetError(
            "conformance-target-invalid", "the target is not a conformance factory (needs name and create)"
        )
    factory: ConformanceFactory = value
    return factory


def _render(report: ConformanceReport) -> str:
    lines = [
        f"{report.version}  contract={report.contract_version}  factory={report.factory_name}"
        f"  fixture={report.fixture_version}"
    ]
    if report.skipped_parts:  # said before the cases: a pass below covers the rest of the fixture only
        lines.append(
            "  skipped (the factory says its runtime cannot carry them): " + ", ".join(report.skipped_parts)
        )
    for case in report.cases:
        if case.passed:
            lines.append(f"  {case.id:<18} passed")
        else:
            lines.append(f"  {case.id:<18} FAILED  {case.failure_code} ({case.detail})")
    passed = sum(case.passed for case in report.cases)
    lines.append(f"result: {'passed' if report.passed else 'FAILED'} ({passed}/{len(report.cases)} cases)")
    return "\n".join(lines)


def _trio_installed() -> bool:
    try:
        importlib.import_module("trio")
    except ImportError:
        return False
    return True


def _error_line(code: str, message: str) -> None:
    """The one error line of a failed run, in the ``ds4-context`` CLI's own form: ``error [code]: ...``."""
    print(f"error [{code}]: {message}", file=sys.stderr)


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors are one coded line too (argparse prints its usage first)."""

    def error(self, message: str) -> NoReturn:
        _error_line("conformance-usage", f"{message} (see --help)")
        raise SystemExit(2)


def _timeout(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {_escaped(text)!r}") from None
    if not seconds > 0 or seconds == float("inf"):  # nan and inf too: a case must be able to run out of time
        raise argparse.ArgumentTypeError("must be a positive, finite number of seconds")
    return seconds


def main(argv: Sequence[str] | None = None) -> int:
    """Exit status 0 when every case passed, 1 when any failed, 2 when the target or backend is unusable."""
    parser = _Parser(
        prog="ds4-context-conformance",
        description="Run the runtime-adapter-v1 conformance kit against a factory.",
        epilog=(
            "Exit status: 0 every case passed, 1 a case failed, 2 the target could not be loaded or the "
            "backend is not installed (one line on stderr with its code)."
        ),
    )
    parser.add_argument("target", help="the factory as package.module:attribute")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio", help="async backend")
    parser.add_argument("--timeout", type=_timeout, default=30.0, help="seconds allowed per case")
    options = parser.parse_args(argv)
    _put_cwd_on_path()
    try:
        factory = load_conformance_factory(options.target)
    except ConformanceTargetError as error:
        _error_line(error.code, str(error.args[0]) if error.args else error.code)
        return 2
    if options.backend == "trio" and not _trio_installed():
        _error_line("conformance-backend-unavailable", "the trio backend needs trio: pip install trio")
        return 2
    report = run_runtime_adapter_conformance_sync(
        factory, backend=options.backend, case_timeout=options.timeout
    )
    if options.json:
        print(msgspec.json.encode(report).decode("utf-8"))
    else:
        print(_render(report))
    return 0 if report.passed else 1
