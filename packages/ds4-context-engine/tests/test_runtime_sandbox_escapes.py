"""Escape attempts run for real inside the bubblewrap sandbox; each must fail, and its control must work.

They skip only where bwrap truly cannot run (with the engine's reason); under CI=true that is a failure,
because CI installs bwrap through the engine's ``sandbox`` extra.
"""

import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from ds4_context_engine.runtime import (
    BubblewrapEngine,
    SandboxPolicyError,
    SandboxUnavailableError,
    check_sandbox_path,
    create_sandbox_policy,
    parse_mcp_servers,
    prepare_mcp_server_command,
    prepare_sandboxed_command,
)

ENGINE = BubblewrapEngine()


@pytest.fixture(autouse=True)
def _needs_bwrap():
    if ENGINE.available():
        return
    reason = ENGINE.unavailable_reason()
    if os.environ.get("CI"):
        pytest.fail(f"CI must provide bubblewrap for the escape tests: {reason}")
    pytest.skip(f"bubblewrap cannot run here: {reason}")


def run(policy, script, *, env=None, env_allow=None, timeout=60):
    kwargs = {} if env_allow is None else {"env_allow": env_allow}
    env = {"PATH": "/usr/bin:/bin"} if env is None else env
    prepared = prepare_sandboxed_command(
        policy, ["/bin/bash", "-c", script], engine=ENGINE, env=env, **kwargs
    )
    assert prepared.enforced
    return subprocess.run(
        prepared.argv,
        cwd=prepared.cwd,
        env=dict(prepared.env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture
def ws(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return workspace


@pytest.fixture
def secret_dir():
    """A directory outside /tmp (the sandbox's /tmp is private anyway) holding a file nobody may read."""
    directory = tempfile.mkdtemp(dir="/var/tmp" if os.path.isdir("/var/tmp") else None)
    with open(os.path.join(directory, "key.pem"), "w", encoding="utf-8") as handle:
        handle.write("top secret\n")
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def test_writes_outside_writable_roots_fail(tmp_path, ws):
    docs = tmp_path / "docs"
    docs.mkdir()
    policy = create_sandbox_policy(root=ws, readable_roots=[ws, docs], writable_roots=[ws])
    done = run(
        policy,
        f"echo ok > {ws}/allowed.txt && cat {docs}/../docs/.keep 2>/dev/null;"
        f"echo x > {docs}/new.txt; echo $? ;"
        "echo x > /usr/escape.txt; echo $? ;"
        f"echo x > {tmp_path}/sibling.txt; echo $?",
    )
    assert (ws / "allowed.txt").read_text() == "ok\n"  # the control: the writable root is writable
    assert not (docs / "new.txt").exists()
    assert not os.path.exists("/usr/escape.txt")
    assert not (tmp_path / "sibling.txt").exists()  # at most it landed in the sandbox's private /tmp
    assert done.stdout.split()[:2] == ["1", "1"]
    assert "Read-only file system" in done.stderr


def test_deny_write_paths_stay_read_only_including_missing_ones(ws):
    (ws / ".env").write_text("TOKEN=1\n")
    (ws / ".ENV").write_text("TOKEN=2\n")
    (ws / "sub").mkdir()
    (ws / "sub" / ".env.local").write_text("TOKEN=3\n")
    policy = create_sandbox_policy(root=ws)
    done = run(
        policy,
        "echo changed > other.txt;"
        "for f in .env .ENV sub/.env.local .git/config; do echo pwned > $f; done;"
        "rm -f .env; mv .ENV moved; mkdir -p .git/hooks; echo 'touch /tmp/x' > .git/hooks/post-checkout;"
        "rmdir .git/hooks; true",
    )
    assert (ws / "other.txt").read_text() == "changed\n"
    assert (ws / ".env").read_text() == "TOKEN=1\n"
    assert (ws / ".ENV").read_text() == "TOKEN=2\n"
    assert (ws / "sub" / ".env.local").read_text() == "TOKEN=3\n"
    assert (ws / ".git" / "config").read_text() == ""  # the placeholder, still empty
    assert list((ws / ".git" / "hooks").iterdir()) == []
    assert not (ws / "moved").exists()
    assert "Read-only file system" in done.stderr or "Device or resource busy" in done.stderr


def test_a_git_file_of_a_worktree_cannot_be_repointed(ws):
    (ws / ".git").write_text("gitdir: /elsewhere/.git/worktrees/ws\n")
    done = run(create_sandbox_policy(root=ws), "echo 'gitdir: ./evil' > .git; echo $?")
    assert done.stdout.strip() == "1"
    assert (ws / ".git").read_text() == "gitdir: /elsewhere/.git/worktrees/ws\n"


def test_reads_outside_readable_roots_fail(tmp_path, ws, secret_dir):
    outside = tmp_path / "outside.txt"
    outside.write_text("host only\n")
    (ws / "inside.txt").write_text("visible\n")
    done = run(
        create_sandbox_policy(root=ws),
        f"cat inside.txt; cat {secret_dir}/key.pem; cat {outside}; cat /etc/shadow; ls /root; true",
    )
    assert done.stdout == "visible\n"
    assert "top secret" not in done.stdout
    assert "No such file or directory" in done.stderr


def test_symlink_and_dotdot_escapes_created_inside_fail(tmp_path, ws, secret_dir):
    docs = tmp_path / "docs"
    docs.mkdir()
    policy = create_sandbox_policy(root=ws, readable_roots=[ws, docs], writable_roots=[ws])
    done = run(
        policy,
        f"ln -s {secret_dir} secret_link; cat secret_link/key.pem;"
        f"ln -s {docs} docs_link; echo x > docs_link/via_link.txt;"
        "echo x > ../dotdot.txt; cat ../../../../../..{secret_dir}/key.pem;"
        f"cd ..; echo x > {tmp_path}/ws/../dotdot2.txt; true",
    )
    assert "top secret" not in done.stdout
    assert not (docs / "via_link.txt").exists()
    assert not (tmp_path / "dotdot.txt").exists()
    assert not (tmp_path / "dotdot2.txt").exists()
    # What was left behind cannot be used by the host's path checks either.
    assert (ws / "secret_link").is_symlink()
    with pytest.raises(SandboxPolicyError) as caught:
        check_sandbox_path(policy, "secret_link/key.pem")
    assert caught.value.code == "sandbox-path-outside-roots"


def test_hard_links_cannot_reach_protected_files(tmp_path, ws):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "readme.md").write_text("read only\n")
    (ws / ".env").write_text("TOKEN=1\n")
    (ws / "a.txt").write_text("a\n")
    policy = create_sandbox_policy(root=ws, readable_roots=[ws, docs], writable_roots=[ws])
    done = run(
        policy,
        "ln a.txt b.txt && echo same-mount-ok;"
        f"ln {docs}/readme.md ro_link && echo x >> ro_link;"
        "ln .env env_link && echo x >> env_link; true",
    )
    assert done.stdout.strip() == "same-mount-ok"  # the control: hard links inside a writable root work
    assert (docs / "readme.md").read_text() == "read only\n"
    assert (ws / ".env").read_text() == "TOKEN=1\n"
    assert not (ws / "ro_link").exists()
    assert not (ws / "env_link").exists()
    assert "Invalid cross-device link" in done.stderr


def test_a_hard_link_to_a_deny_write_file_made_outside_is_refused_before_running(ws):
    (ws / ".env").write_text("TOKEN=1\n")
    os.link(ws / ".env", ws / "innocent.txt")
    with pytest.raises(SandboxPolicyError) as caught:
        run(create_sandbox_policy(root=ws), "echo pwned > innocent.txt")
    assert caught.value.code == "sandbox-deny-path-hard-linked"
    assert (ws / ".env").read_text() == "TOKEN=1\n"


def test_proc_self_root_tricks_fail(tmp_path, ws, secret_dir):
    docs = tmp_path / "docs"
    docs.mkdir()
    policy = create_sandbox_policy(root=ws, readable_roots=[ws, docs], writable_roots=[ws])
    done = run(
        policy,
        f"echo x > /proc/self/root{docs}/x.txt; cat /proc/self/root{secret_dir}/key.pem;"
        f"cat /proc/1/root{secret_dir}/key.pem; echo x > /proc/1/root/usr/x;"
        "ls /proc | grep -cE '^[0-9]+$'; true",
    )
    assert not (docs / "x.txt").exists()
    assert not os.path.exists("/usr/x")
    assert "top secret" not in done.stdout
    # Its own pid namespace: only the sandbox's few processes are visible, never the host's.
    assert int(done.stdout.split()[-1]) < 10


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"host server\n")

    def log_message(self, *args):
        pass


@pytest.fixture
def host_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


_FETCH = (
    "exec 3<>/dev/tcp/127.0.0.1/{port} || exit 7; printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3; cat <&3 | tail -1"
)


def test_network_none_cannot_reach_the_hosts_loopback(ws, host_server):
    done = run(create_sandbox_policy(root=ws, network="none"), _FETCH.format(port=host_server))
    assert done.returncode == 7
    assert "host server" not in done.stdout
    # The control: with network "all" the same command reaches it.
    shared = run(create_sandbox_policy(root=ws, network="all"), _FETCH.format(port=host_server))
    assert shared.stdout == "host server\n"


@pytest.mark.parametrize(
    "network", ["localhost", {"mode": "allowlist", "allowedDomains": ["127.0.0.1", "pypi.org"]}]
)
def test_network_modes_it_cannot_enforce_are_refused_not_widened(ws, network):
    policy = create_sandbox_policy(root=ws, network=network)
    with pytest.raises(SandboxUnavailableError) as caught:
        run(policy, "touch ran")
    assert caught.value.code == "sandbox-network-mode-unsupported"
    assert not (ws / "ran").exists()


def test_secrets_in_the_environment_are_not_passed_unless_allowed(ws):
    env = {"PATH": "/usr/bin:/bin", "OPENAI_API_KEY": "sk-test-not-real", "LANG": "C.UTF-8"}
    done = run(create_sandbox_policy(root=ws), "env", env=env)
    assert "sk-test-not-real" not in done.stdout
    assert "LANG=C.UTF-8" in done.stdout.splitlines()
    allowed = run(create_sandbox_policy(root=ws), "env", env=env, env_allow=["PATH", "OPENAI_API_KEY"])
    assert "OPENAI_API_KEY=sk-test-not-real" in allowed.stdout.splitlines()


_PARENT = """
import json, subprocess, sys
prepared = json.loads(sys.argv[1])
child = subprocess.Popen(prepared["argv"], cwd=prepared["cwd"], env=prepared["env"])
print(child.pid, flush=True)
child.wait()
"""


def _beat(path):
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


def test_no_process_survives_the_death_of_the_parent(ws):
    # The sandboxed command tries hard to outlive it: a new session, a double fork, SIGHUP ignored.
    script = "(trap '' HUP; setsid bash -c 'while :; do date +%s%N > beat; sleep 0.05; done' &) ; sleep 600"
    prepared = prepare_sandboxed_command(
        create_sandbox_policy(root=ws),
        ["/bin/bash", "-c", script],
        engine=ENGINE,
        env={"PATH": "/usr/bin:/bin"},
    )
    payload = json.dumps({"argv": list(prepared.argv), "cwd": prepared.cwd, "env": dict(prepared.env)})
    parent = subprocess.Popen([sys.executable, "-c", _PARENT, payload], stdout=subprocess.DEVNULL)
    try:
        beat = ws / "beat"
        deadline = time.monotonic() + 20
        first = None
        while time.monotonic() < deadline:
            first = _beat(beat)
            if first:
                break
            time.sleep(0.05)
        assert first, "the sandboxed heartbeat never started"
        while _beat(beat) == first and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _beat(beat) != first, "the heartbeat is not beating (the control)"
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        time.sleep(1.0)
        settled = _beat(beat)
        time.sleep(1.0)
        assert _beat(beat) == settled, "a sandboxed process kept running after its parent was killed"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def test_a_stdio_mcp_server_starts_inside_the_sandbox(ws):
    servers = parse_mcp_servers(
        {
            "files": {
                "command": "/bin/sh",
                "args": ["-c", "echo $SERVER_MODE $OPENAI_API_KEY > started; echo x > .env; true"],
                "env": {"SERVER_MODE": "readonly"},
            },
            "remote": {"url": "https://mcp.example.com/"},
        }
    )
    (ws / ".env").write_text("TOKEN=1\n")
    policy = create_sandbox_policy(root=ws)
    host_env = {"PATH": "/usr/bin:/bin", "OPENAI_API_KEY": "sk-not-real"}
    by_name = {server.name: server for server in servers.servers}
    prepared = prepare_mcp_server_command(by_name["files"], policy, engine=ENGINE, env=host_env)
    assert prepared.enforced
    subprocess.run(prepared.argv, cwd=prepared.cwd, env=dict(prepared.env), check=True, timeout=60)
    assert (ws / "started").read_text() == "readonly\n"  # its configured variable, not the host's key
    assert (ws / ".env").read_text() == "TOKEN=1\n"
    with pytest.raises(SandboxPolicyError):
        prepare_mcp_server_command(by_name["remote"], policy, engine=ENGINE)


def test_no_capabilities_and_no_new_privileges(ws):
    done = run(
        create_sandbox_policy(root=ws),
        "grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs):' /proc/self/status;"
        "mount -t tmpfs none /usr 2>/dev/null && echo mounted;"
        "touch /usr/remounted 2>/dev/null && echo wrote; true",
    )
    fields = dict(line.split(":\t", 1) for line in done.stdout.splitlines() if ":\t" in line)
    assert fields["NoNewPrivs"].strip() == "1"
    for name in ("CapEff", "CapPrm", "CapBnd"):
        assert int(fields[name], 16) == 0, name
    assert "mounted" not in done.stdout  # no mounting over the read-only binds
    assert "wrote" not in done.stdout


def test_a_writable_root_nested_in_a_read_only_one(ws):
    (ws / "out").mkdir()
    policy = create_sandbox_policy(root=ws, readable_roots=[ws], writable_roots=[ws / "out"])
    done = run(policy, "echo built > out/result.txt; echo x > top.txt; echo $?")
    assert (ws / "out" / "result.txt").read_text() == "built\n"
    assert not (ws / "top.txt").exists()
    assert done.stdout.strip() == "1"
