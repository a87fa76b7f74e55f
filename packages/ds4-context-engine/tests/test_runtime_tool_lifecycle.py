import json
import os
import stat

import anyio
import pytest

from ds4_context_engine.pi import append_pi_entry, create_pi_session, read_pi_session
from ds4_context_engine.runtime import (
    TOOL_LIFECYCLE_CUSTOM_TYPE,
    TOOL_LIFECYCLE_ERROR_CODES,
    JsonlToolLifecycleStore,
    PiSessionToolLifecycleStore,
    ToolInvocationEvent,
    ToolLifecycleError,
    ToolLifecycleSink,
    ToolResultEvent,
)

CALL = ToolInvocationEvent(tool_call_id="call_1", tool_name="read", arguments={"path": "src/app.py"})
RESULT = ToolResultEvent(
    tool_call_id="call_1", tool_name="read", content="print('hi')\n", state="success", execution_ms=12.5
)


def _run(coroutine_function, *args):
    return anyio.run(coroutine_function, *args)


@pytest.fixture(params=["jsonl", "pi"])
def store_factory(request, tmp_path):
    if request.param == "jsonl":
        path = tmp_path / "lifecycle.jsonl"
        return lambda: JsonlToolLifecycleStore(path)
    path = tmp_path / "session.jsonl"
    create_pi_session(path, cwd=str(tmp_path))
    append_pi_entry(path, "message", {"message": {"role": "user", "content": "read app.py", "timestamp": 1}})
    return lambda: PiSessionToolLifecycleStore(path)


def test_invocation_then_result_are_persisted_in_sequence(store_factory):
    sink = ToolLifecycleSink(store_factory())

    async def main():
        return await sink.record(CALL), await sink.record(RESULT)

    invocation, result = _run(main)
    assert invocation.persistence == "persisted"
    assert (invocation.sequence, result.sequence) == (1, 2)
    assert invocation.record_id
    assert result.record_id
    assert invocation.record_id != result.record_id
    assert result.original_bytes == len(b"print('hi')\n")
    assert result.truncated is False


def test_identical_retry_returns_the_same_record_even_after_restart(store_factory):
    async def first():
        sink = ToolLifecycleSink(store_factory())
        return await sink.record(CALL), await sink.record(RESULT)

    async def retry():
        sink = ToolLifecycleSink(store_factory())  # a new process reading the same store
        return await sink.record(CALL), await sink.record(RESULT)

    assert _run(first) == _run(retry)
    assert len(store_factory().read_records()) == 2


@pytest.mark.parametrize(
    "conflicting",
    [
        ToolInvocationEvent(tool_call_id="call_1", tool_name="read", arguments={"path": "other.py"}),
        ToolInvocationEvent(tool_call_id="call_1", tool_name="write"),
    ],
)
def test_conflicting_invocation_retry_fails(store_factory, conflicting):
    sink = ToolLifecycleSink(store_factory())

    async def main():
        await sink.record(CALL)
        await sink.record(conflicting)

    with pytest.raises(ToolLifecycleError) as caught:
        _run(main)
    assert caught.value.code == "tool-lifecycle-conflict"
    assert len(store_factory().read_records()) == 1


def test_a_second_different_result_fails_and_history_keeps_the_first(store_factory):
    sink = ToolLifecycleSink(store_factory())
    other = ToolResultEvent(tool_call_id="call_1", content="changed", state="error")

    async def main():
        await sink.record(CALL)
        await sink.record(RESULT)
        await sink.record(other)

    with pytest.raises(ToolLifecycleError) as caught:
        _run(main)
    assert caught.value.code == "tool-lifecycle-conflict"
    records = store_factory().read_records()
    assert records[-1].event["content"] == "print('hi')\n"


def test_result_without_invocation_fails(store_factory):
    sink = ToolLifecycleSink(store_factory())
    with pytest.raises(ToolLifecycleError) as caught:
        _run(sink.record, RESULT)
    assert caught.value.code == "tool-lifecycle-result-before-invocation"


def test_result_naming_another_tool_conflicts(store_factory):
    sink = ToolLifecycleSink(store_factory())

    async def main():
        await sink.record(CALL)
        await sink.record(ToolResultEvent(tool_call_id="call_1", tool_name="bash", state="success"))

    with pytest.raises(ToolLifecycleError) as caught:
        _run(main)
    assert caught.value.code == "tool-lifecycle-conflict"


def test_large_content_is_bounded_and_artifacts_become_opaque_references(tmp_path):
    sink = ToolLifecycleSink(JsonlToolLifecycleStore(tmp_path / "l.jsonl"), max_content_bytes=1024)
    big = "é" * 5000  # 10000 bytes

    async def main():
        await sink.record(CALL)
        return await sink.record(
            ToolResultEvent(
                tool_call_id="call_1",
                content=big,
                state="exit_nonzero",
                artifacts=("/home/u/.cache/out.log",),
            )
        )

    record = _run(main)
    assert record.truncated is True
    assert record.original_bytes == 10000
    assert record.retained_bytes <= 1024
    assert record.artifact_references
    assert record.artifact_references[0].startswith("artifact-")
    assert "/home/u" not in json.dumps(list(record.artifact_references))
    stored = JsonlToolLifecycleStore(tmp_path / "l.jsonl").read_records()[-1]
    assert len(stored.event["content"].encode()) == record.retained_bytes


def test_pi_records_are_custom_entries_that_leave_the_conversation_alone(tmp_path):
    path = tmp_path / "session.jsonl"
    create_pi_session(path, cwd=str(tmp_path))
    sink = ToolLifecycleSink(PiSessionToolLifecycleStore(path))
    record = _run(sink.record, CALL)
    session = read_pi_session(path)
    entry = session.entries[-1]
    assert entry.type == "custom"
    assert entry.data["customType"] == TOOL_LIFECYCLE_CUSTOM_TYPE
    assert entry.id == record.record_id


def test_store_failure_reports_failed_and_a_retry_can_succeed(tmp_path):
    class FlakyStore(JsonlToolLifecycleStore):
        fail = True

        def append_record(self, record):
            if self.fail:
                self.fail = False
                raise OSError(28, "No space left on device")
            return super().append_record(record)

    sink = ToolLifecycleSink(FlakyStore(tmp_path / "l.jsonl"))

    async def main():
        return await sink.record(CALL), await sink.record(CALL)

    failed, retried = _run(main)
    assert failed.persistence == "failed"
    assert failed.record_id is None
    assert retried.persistence == "persisted"


def test_torn_last_line_is_ignored_and_not_glued_to(tmp_path):
    path = tmp_path / "l.jsonl"
    sink = ToolLifecycleSink(JsonlToolLifecycleStore(path))
    _run(sink.record, CALL)
    with path.open("ab") as handle:
        handle.write(b'{"version": "ds4-tool-lifecycle-v1", "pha')
    fresh = ToolLifecycleSink(JsonlToolLifecycleStore(path))
    _run(fresh.record, RESULT)
    assert [r.phase for r in JsonlToolLifecycleStore(path).read_records()] == ["invocation", "result"]


def test_corrupt_store_is_reported(tmp_path):
    path = tmp_path / "l.jsonl"
    path.write_text('{"not": "a record"}\n')
    sink = ToolLifecycleSink(JsonlToolLifecycleStore(path))
    with pytest.raises(ToolLifecycleError) as caught:
        _run(sink.record, CALL)
    assert caught.value.code == "tool-lifecycle-store-corrupt"


@pytest.mark.parametrize(
    "event",
    [
        ToolInvocationEvent(tool_call_id="", tool_name="read"),
        ToolInvocationEvent(tool_call_id="c\n1", tool_name="read"),
        ToolInvocationEvent(tool_call_id="c1", tool_name=" read"),
        ToolInvocationEvent(tool_call_id="c" * 257, tool_name="read"),
        ToolInvocationEvent(tool_call_id="c1", tool_name="read", arguments={"x": object()}),
        ToolResultEvent(tool_call_id="c1", state="exploded"),
        ToolResultEvent(tool_call_id="c1", state="success", execution_ms=-1),
        ToolResultEvent(tool_call_id="c1", state="success", execution_ms=float("nan")),
        ToolResultEvent(tool_call_id="c1", state="success", failure_kind="bad\x00kind"),
        ToolResultEvent(tool_call_id="c1", state="success", artifacts=("",)),
        "not an event",
    ],
)
def test_malformed_events_are_refused(tmp_path, event):
    sink = ToolLifecycleSink(JsonlToolLifecycleStore(tmp_path / "l.jsonl"))
    with pytest.raises(ToolLifecycleError) as caught:
        _run(sink.record, event)
    assert caught.value.code == "tool-lifecycle-invalid-event"
    assert caught.value.code in TOOL_LIFECYCLE_ERROR_CODES


def test_concurrent_identical_retries_write_once(tmp_path):
    store = JsonlToolLifecycleStore(tmp_path / "l.jsonl")
    sink = ToolLifecycleSink(store)
    results = []

    async def main():
        async def one():
            results.append(await sink.record(CALL))

        async with anyio.create_task_group() as group:
            for _ in range(8):
                group.start_soon(one)

    _run(main)
    assert len({r.record_id for r in results}) == 1
    assert len(store.read_records()) == 1


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\u0085", "\r", "\x1c"])
def test_text_with_other_line_separators_survives_a_restart(tmp_path, separator):
    path = tmp_path / "l.jsonl"
    call = ToolInvocationEvent(tool_call_id="call_1", tool_name="read", arguments={"path": f"a{separator}b"})
    _run(ToolLifecycleSink(JsonlToolLifecycleStore(path)).record, call)
    records = JsonlToolLifecycleStore(path).read_records()
    assert [record.event["arguments"] for record in records] == [{"path": f"a{separator}b"}]
    result = ToolResultEvent(tool_call_id="call_1", tool_name="read", content="ok", state="success")
    assert _run(ToolLifecycleSink(JsonlToolLifecycleStore(path)).record, result).persistence == "persisted"


def test_a_symlinked_or_special_store_path_is_refused_and_nothing_is_written_through_it(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep\n")
    victim.chmod(0o644)
    link = tmp_path / "l.jsonl"
    link.symlink_to(victim)
    store = JsonlToolLifecycleStore(link)
    with pytest.raises(ToolLifecycleError) as caught:
        store.read_records()
    assert caught.value.code == "tool-lifecycle-store-unsafe"
    stored = ToolLifecycleSink(JsonlToolLifecycleStore(tmp_path / "elsewhere.jsonl"))
    assert _run(stored.record, CALL).persistence == "persisted"
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(ToolLifecycleError) as special:
        JsonlToolLifecycleStore(fifo).read_records()
    assert special.value.code == "tool-lifecycle-store-unsafe"

    class FreshIndex(ToolLifecycleSink):
        async def _load(self):  # an empty index, so the append itself meets the symlink
            return {}

    assert _run(FreshIndex(JsonlToolLifecycleStore(link)).record, CALL).persistence == "failed"
    assert victim.read_text() == "keep\n"
    assert stat.S_IMODE(victim.stat().st_mode) == 0o644


def test_an_existing_store_file_is_made_private_on_append(tmp_path):
    path = tmp_path / "l.jsonl"
    path.touch(mode=0o644)
    path.chmod(0o644)
    _run(ToolLifecycleSink(JsonlToolLifecycleStore(path)).record, CALL)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
