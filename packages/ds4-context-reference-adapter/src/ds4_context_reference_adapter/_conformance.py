"""The conformance factory: builds a fresh reference adapter over the kit's fixture history.

The release pipeline runs ``ds4-context-conformance ds4_context_reference_adapter:conformance_factory``
against installed wheels; each case gets its own private scratch directory, removed by ``cleanup``.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from typing import Final

from ds4_context_core.conformance import ConformanceFixture, ConformanceSubject, ConformanceTransport

from ._adapter import ADAPTER_NAME, ReferenceRuntimeAdapter
from ._jsonl import append_reference_history_message, create_reference_history

__all__ = ["ReferenceConformanceFactory", "conformance_factory"]

_SCRATCH_PREFIX: Final = "ds4-reference-conformance-"


class ReferenceConformanceFactory:
    """Writes the fixture's messages into a new history file and wraps it in a ``ReferenceRuntimeAdapter``."""

    name: Final = ADAPTER_NAME

    def create(self, fixture: ConformanceFixture, transport: ConformanceTransport) -> ConformanceSubject:
        scratch = tempfile.mkdtemp(prefix=_SCRATCH_PREFIX)  # mode 0700
        try:
            project = os.path.join(scratch, "project")
            os.mkdir(project, 0o700)
            history = os.path.join(scratch, "history", "session.jsonl")
            create_reference_history(
                history, session_id=fixture.session_id, project_root=project, runtime_id=fixture.runtime_id
            )
            for message in fixture.messages:
                append_reference_history_message(history, message)
            adapter = ReferenceRuntimeAdapter(
                history,
                transport=transport,
                model=fixture.model,
                runtime_id=fixture.runtime_id,
                session_id=fixture.session_id,
            )
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
        return ConformanceSubject(
            adapter=adapter,
            expected_project_root=os.path.realpath(project),
            cleanup=functools.partial(shutil.rmtree, scratch, ignore_errors=True),
        )


conformance_factory: Final = ReferenceConformanceFactory()
