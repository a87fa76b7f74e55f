"""The sandbox engine contract: bad input refused before anything runs, fail closed, honest diagnostics."""

import os
import re
import stat
import subprocess

import pytest

from ds4_context_core import Ds4ContextError
from ds4_context_engine.runtime import (
    SANDBOX_ENGINE_ERROR_CODES,
    SANDBOX_ERROR_CODES,
    BubblewrapEngine,
    SandboxEngine,
    SandboxPolicyError,
    SandboxUnavailableError,
    create_sandbox_policy,
    describe_sandbox_effective_state,
    find_bubblewrap,
    prepare_sandboxed_command,
)

ENGINE = BubblewrapEngine()
MISSING = BubblewrapEngine("/nonexistent/bin/bwrap")
PATH_ONLY = {"PATH": "/usr/bin:/bin"}


def needs_bwrap():
    if ENGINE.available():
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI must provide bubblewrap: {ENGINE.unavailable_reason()}")
    pytest.skip(f"bubblewrap cannot run here: {ENGINE.unavailable_reason()}")


@pytest.fixture
def ws(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return workspace


def _refused(error_type, call):
    with pytest.raises(error_type) as caught:
        call()
    assert caught.value.code in (*SANDBOX_ERROR_CODES, *SANDBOX_ENGINE_ERROR_CODES)
    return caught.value


def test_the_bubblewrap_engine_meets_the_protocol():
    assert isinstance(ENGINE, SandboxEngine)
    assert isinstance(MISSING, SandboxEngine)
    assert ENGINE.name == "bubblewrap"


def test_errors_sit_under_the_engine_root_error():
    assert issubclass(SandboxUnavailableError, Ds4ContextError)
    assert issubclass(SandboxPolicyError, Ds4ContextError)


@pytest.mark.parametrize(
    ("argv", "env", "cwd", "code"),
    [
        (["/bin/touch", "ran\x00x"], PATH_ONLY, None, "sandbox-invalid-argv"),
        ([], PATH_ONLY, None, "sandbox-invalid-argv"),
        ("/bin/touch ran", PATH_ONLY, None, "sandbox-invalid-argv"),
        ([b"/bin/touch", "ran"], PATH_ONLY, None, "sandbox-invalid-argv"),
        (["", "ran"], PATH_ONLY, None, "sandbox-invalid-argv"),
        (["/bin/touch", "ran"], {"PATH": "/bin", "TOKEN": "sk-\x00secret"}, None, "sandbox-invalid-env"),
        (["/bin/touch", "ran"], {"A=B": "x"}, None, "sandbox-invalid-env"),
        (["/bin/touch", "ran"], {"PATH": 3}, None, "sandbox-invalid-env"),
        (["/bin/touch", "ran"], PATH_ONLY, "/", "sandbox-cwd-outside-roots"),
        (["/bin/touch", "ran"], PATH_ONLY, "sub\x00", "sandbox-invalid-cwd"),
        (["/bin/touch", "ran"], PATH_ONLY, "missing-dir", "sandbox-invalid-cwd"),
    ],
)
def test_bad_commands_are_refused_before_anything_runs(ws, argv, env, cwd, code):
    policy = create_sandbox_policy(root=ws)
    error = _refused(
        SandboxPolicyError, lambda: prepare_sandboxed_command(policy, argv, engine=ENGINE, env=env, cwd=cwd)
    )
    assert error.code == code
    assert "secret" not in str(error)
    assert not (ws / "ran").exists()


@pytest.mark.parametrize("root", ["/proc", "/dev", "/sys"])
def test_roots_the_engine_mounts_itself_are_refused(ws, root):
    needs_bwrap()
    policy = create_sandbox_policy(root=ws, readable_roots=[ws, root])
    error = _refused(SandboxPolicyError, lambda: prepare_sandboxed_command(policy, ["true"], engine=ENGINE))
    assert error.code == "sandbox-root-reserved"


def test_no_usable_engine_fails_closed(ws):
    assert not MISSING.available()
    assert "not installed" in MISSING.unavailable_reason()
    policy = create_sandbox_policy(root=ws)
    for engine in (MISSING, None):
        error = _refused(
            SandboxUnavailableError,
            lambda engine=engine: prepare_sandboxed_command(policy, ["/bin/touch", "ran"], engine=engine),
        )
        assert error.code == "sandbox-engine-unavailable"
        state = describe_sandbox_effective_state(policy, engine)
        assert state.refused_code == "sandbox-engine-unavailable"
        assert state.effective_mode is None
        assert not state.filesystem_enforced


def test_an_engine_whose_probe_fails_is_unavailable(ws):
    # /bin/false stands in for a bwrap that exists but cannot create namespaces (the kernel refuses).
    broken = BubblewrapEngine("/bin/false")
    assert not broken.available()
    assert "namespaces" in broken.unavailable_reason()
    with pytest.raises(SandboxUnavailableError):
        prepare_sandboxed_command(create_sandbox_policy(root=ws), ["true"], engine=broken)


def test_the_unsafe_host_process_needs_the_opt_in_and_says_so(ws):
    policy = create_sandbox_policy(root=ws, fallback="unsafe-host-process", allow_unsafe_fallback=True)
    prepared = prepare_sandboxed_command(
        policy,
        ["/bin/sh", "-c", "echo $HOME_SECRET > ran"],
        engine=MISSING,
        env={**PATH_ONLY, "HOME_SECRET": "s"},
    )
    assert prepared.effective_mode == "unsafe-host-process"
    assert not prepared.enforced
    assert prepared.engine == "host-process"
    assert any("UNSAFE" in warning for warning in prepared.warnings)
    assert prepared.dropped_env == ("HOME_SECRET",)
    state = describe_sandbox_effective_state(policy, MISSING)
    assert state.effective_mode == "unsafe-host-process"
    assert not state.filesystem_enforced
    assert any("UNSAFE" in warning for warning in state.warnings)
    done = subprocess.run(prepared.argv, cwd=prepared.cwd, env=dict(prepared.env), check=False)
    assert done.returncode == 0
    assert (ws / "ran").read_text() == "\n"  # ran, but even unsandboxed the secret was not passed


def test_effective_state_when_enforced(ws):
    needs_bwrap()
    state = describe_sandbox_effective_state(create_sandbox_policy(root=ws), ENGINE)
    assert state.effective_mode == "native"
    assert state.filesystem_enforced
    assert state.network_enforced
    assert state.network_mode == "none"
    assert state.engine == "bubblewrap"
    assert re.fullmatch(r"\d+\.\d+(\.\d+)?", state.engine_version)
    assert state.warnings == ()
    assert state.refused_code is None
    refused = describe_sandbox_effective_state(create_sandbox_policy(root=ws, network="localhost"), ENGINE)
    assert refused.refused_code == "sandbox-network-mode-unsupported"
    off = describe_sandbox_effective_state(create_sandbox_policy(root=ws, mode="off"), ENGINE)
    assert off.effective_mode == "off"
    assert off.warnings


def test_the_found_binary_is_executable():
    needs_bwrap()
    binary = find_bubblewrap()
    assert binary is not None
    assert os.access(binary, os.X_OK)


def test_environment_values_never_appear_in_the_arguments(ws):
    needs_bwrap()
    env = {**PATH_ONLY, "LANG": "C.UTF-8", "AWS_SECRET_ACCESS_KEY": "aws-not-real"}
    prepared = prepare_sandboxed_command(create_sandbox_policy(root=ws), ["env"], engine=ENGINE, env=env)
    assert not any("aws-not-real" in item or "C.UTF-8" in item for item in prepared.argv)
    assert prepared.env == {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    assert prepared.dropped_env == ("AWS_SECRET_ACCESS_KEY",)
    for flag in ("--die-with-parent", "--new-session", "--unshare-all"):
        assert flag in prepared.argv
    assert "--share-net" not in prepared.argv


def test_placeholders_protect_missing_deny_paths_and_are_private(ws):
    needs_bwrap()
    prepared = prepare_sandboxed_command(create_sandbox_policy(root=ws), ["true"], engine=ENGINE)
    assert set(prepared.placeholders) == {
        str(ws / ".env"),
        str(ws / ".git"),
        str(ws / ".git/config"),
        str(ws / ".git/hooks"),
    }
    assert stat.S_IMODE(os.stat(ws / ".git").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(ws / ".git" / "hooks").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(ws / ".env").st_mode) == 0o600
    again = prepare_sandboxed_command(create_sandbox_policy(root=ws), ["true"], engine=ENGINE)
    assert again.placeholders == ()  # they exist now


def test_a_huge_writable_root_is_refused_rather_than_half_scanned(ws):
    needs_bwrap()
    for index in range(20):
        (ws / f"f{index}").write_text("x")
    small = BubblewrapEngine(max_scan_entries=10)
    error = _refused(
        SandboxPolicyError,
        lambda: prepare_sandboxed_command(create_sandbox_policy(root=ws), ["true"], engine=small),
    )
    assert error.code == "sandbox-deny-scan-limit"


def test_a_symlinked_git_directory_is_refused(tmp_path, ws):
    needs_bwrap()
    (tmp_path / "real-git").mkdir()
    (ws / ".git").symlink_to(tmp_path / "real-git")
    error = _refused(
        SandboxPolicyError,
        lambda: prepare_sandboxed_command(create_sandbox_policy(root=ws), ["true"], engine=ENGINE),
    )
    assert error.code == "sandbox-deny-path-symlinked"


def test_the_engine_checks_its_input_when_called_directly(ws):
    needs_bwrap()
    policy = create_sandbox_policy(root=ws)
    error = _refused(
        SandboxPolicyError, lambda: ENGINE.prepare(policy, ["/bin/touch", "x\x00"], str(ws), PATH_ONLY)
    )
    assert error.code == "sandbox-invalid-argv"
    error = _refused(SandboxPolicyError, lambda: ENGINE.prepare(policy, ["true"], "/", PATH_ONLY))
    assert error.code == "sandbox-cwd-outside-roots"
    prepared = ENGINE.prepare(policy, ["true"], str(ws), PATH_ONLY)
    assert prepared.enforced
    assert (
        subprocess.run(prepared.argv, cwd=prepared.cwd, env=dict(prepared.env), check=False).returncode == 0
    )
