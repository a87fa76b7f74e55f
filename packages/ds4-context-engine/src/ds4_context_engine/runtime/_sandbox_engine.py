"""What a sandbox engine is, and the one entry point that decides how a host command runs.

:func:`prepare_sandboxed_command` checks the command before anything runs (argv, working directory,
environment), picks the engine's wrapping or, only under an unsafe fallback the host opted into, the bare
host process, and refuses (fail closed) everything else. :func:`describe_sandbox_effective_state` tells the
host, without running anything, what would be enforced.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, Protocol, TypeAlias, runtime_checkable

from ._errors import SandboxPolicyError, SandboxUnavailableError
from ._sandbox import SandboxPolicy, check_sandbox_path, resolve_sandbox_mode, revalidate_sandbox_policy

__all__ = [
    "DEFAULT_SANDBOX_ENV_ALLOW",
    "SANDBOX_ENFORCED_NETWORK_MODES",
    "SANDBOX_ENGINE_ERROR_CODES",
    "CommandRequest",
    "PreparedCommand",
    "SandboxEffectiveMode",
    "SandboxEffectiveState",
    "SandboxEngine",
    "describe_sandbox_effective_state",
    "prepare_sandboxed_command",
    "validate_command_request",
]

SANDBOX_ENGINE_ERROR_CODES: Final = (
    "sandbox-cwd-outside-roots",
    "sandbox-deny-path-hard-linked",
    "sandbox-deny-path-symlinked",
    "sandbox-deny-scan-limit",
    "sandbox-invalid-argv",
    "sandbox-invalid-cwd",
    "sandbox-invalid-env",
    "sandbox-network-mode-unsupported",
    "sandbox-placeholder-failed",
    "sandbox-root-reserved",
)
# The network modes an engine can enforce by namespaces alone; the others would need a filtering proxy.
SANDBOX_ENFORCED_NETWORK_MODES: Final = ("none", "all")
# Variables a sandboxed command gets from the given environment when the host names no others. None of them
# usually carries a secret; everything else (API keys, tokens, cloud credentials) is dropped.
DEFAULT_SANDBOX_ENV_ALLOW: Final = (
    "COLUMNS",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_MESSAGES",
    "LINES",
    "NO_COLOR",
    "PATH",
    "TERM",
    "TZ",
)
_DEFAULT_PATH: Final = "/usr/local/bin:/usr/bin:/bin"
_MAX_ARGS: Final = 4096
_MAX_ARG_BYTES: Final = 1 << 20

SandboxEffectiveMode: TypeAlias = Literal["native", "off", "unsafe-host-process"]


@dataclass(frozen=True, slots=True)
class CommandRequest:
    """A command after validation: argv, an absolute working directory and the environment to pass."""

    argv: tuple[str, ...]
    cwd: str
    env: Mapping[str, str]
    dropped_env: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PreparedCommand:
    """A command ready for ``subprocess``: run ``argv`` in ``cwd`` with exactly ``env``.

    ``enforced`` is false only for ``off`` and ``unsafe-host-process``. ``dropped_env`` names (never the
    values of) the variables that were withheld; ``placeholders`` lists the empty files and directories the
    engine created so missing deny-write paths could be bound read-only.
    """

    argv: tuple[str, ...]
    cwd: str
    env: Mapping[str, str]
    engine: str
    effective_mode: SandboxEffectiveMode
    enforced: bool
    network: str
    dropped_env: tuple[str, ...] = ()
    placeholders: tuple[str, ...] = ()
    warnings: tuple[str, ...] = field(default=())


@runtime_checkable
class SandboxEngine(Protocol):
    """Something that can wrap a command so the sandbox policy is enforced by the operating system."""

    @property
    def name(self) -> str:
        """A short stable name, such as ``bubblewrap``."""
        ...

    @property
    def version(self) -> str | None:
        """The engine's version, or ``None`` when it is not installed."""
        ...

    def available(self) -> bool:
        """Whether the engine can run a sandboxed command here (installed, and the kernel allows it)."""
        ...

    def unavailable_reason(self) -> str | None:
        """Why :meth:`available` is false, as a short sentence without paths or secrets."""
        ...

    def prepare(
        self, policy: SandboxPolicy, argv: Sequence[str], cwd: str, env: Mapping[str, str]
    ) -> PreparedCommand:
        """Wrap ``argv``; ``policy``, ``cwd`` and ``env`` are already validated by the caller."""
        ...


@dataclass(frozen=True, slots=True)
class SandboxEffectiveState:
    """What would be enforced for ``policy`` with this engine: shown to hosts and in diagnostics."""

    requested_mode: str
    effective_mode: SandboxEffectiveMode | None
    engine: str | None
    engine_version: str | None
    engine_available: bool
    filesystem_enforced: bool
    network_mode: str
    network_enforced: bool
    refused_code: str | None
    warnings: tuple[str, ...]


def _refuse(code: str, message: str) -> SandboxPolicyError:
    return SandboxPolicyError(code, message)


def _argv(argv: object) -> tuple[str, ...]:
    if isinstance(argv, str | bytes) or not isinstance(argv, Iterable):
        raise _refuse("sandbox-invalid-argv", "argv must be a list of strings, not one string")
    items = tuple(argv)
    if not items or len(items) > _MAX_ARGS:
        raise _refuse("sandbox-invalid-argv", f"argv must hold 1 to {_MAX_ARGS} strings")
    total = 0
    for item in items:
        if not isinstance(item, str):
            raise _refuse("sandbox-invalid-argv", "every argv item must be a string")
        if "\x00" in item:
            raise _refuse("sandbox-invalid-argv", "argv items cannot contain NUL bytes")
        total += len(item.encode("utf-8", "surrogateescape")) + 1
    if not items[0] or total > _MAX_ARG_BYTES:
        raise _refuse("sandbox-invalid-argv", "argv[0] must name a program and argv must stay under 1 MiB")
    return items


def _env(env: object, allow: frozenset[str]) -> tuple[dict[str, str], tuple[str, ...]]:
    if not isinstance(env, Mapping):
        raise _refuse("sandbox-invalid-env", "env must be a mapping of names to strings")
    kept: dict[str, str] = {}
    dropped: list[str] = []
    for name, value in env.items():
        if not isinstance(name, str) or not name or "=" in name or "\x00" in name:
            raise _refuse("sandbox-invalid-env", "environment names must be non-empty, without '=' or NUL")
        if not isinstance(value, str) or "\x00" in value:
            # The name only: the value may be a secret.
            message = f"environment variable {name[:64]!r} is not a NUL-free string"
            raise _refuse("sandbox-invalid-env", message)
        if name in allow:
            kept[name] = value
        else:
            dropped.append(name)
    kept.setdefault("PATH", _DEFAULT_PATH)
    return kept, tuple(sorted(dropped))


def validate_command_request(
    policy: SandboxPolicy,
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    env_allow: Iterable[str] = DEFAULT_SANDBOX_ENV_ALLOW,
) -> CommandRequest:
    """Check a command against ``policy`` before anything runs; every refusal has a code.

    ``cwd`` defaults to the policy's root and must be readable under it. ``env`` defaults to this process's
    environment; only names in ``env_allow`` are kept, so secrets stay out unless the host allows them.
    """
    allow = frozenset(env_allow)
    kept, dropped = _env(os.environ if env is None else env, allow)
    items = _argv(argv)
    if cwd is None:
        directory = policy.root
    else:
        text = os.fspath(cwd)
        if not isinstance(text, str) or not text or "\x00" in text:
            raise _refuse("sandbox-invalid-cwd", "cwd must be a NUL-free text path")
        directory = text
    try:
        directory = check_sandbox_path(policy, directory, access="read")
    except SandboxPolicyError:
        raise _refuse("sandbox-cwd-outside-roots", "cwd must lie inside the readable roots") from None
    if not os.path.isdir(directory) or os.path.realpath(directory) != directory:
        raise _refuse("sandbox-invalid-cwd", "cwd must be an existing directory reached without symlinks")
    return CommandRequest(argv=items, cwd=directory, env=kept, dropped_env=dropped)


def _network_refusal(policy: SandboxPolicy) -> SandboxUnavailableError | None:
    if policy.network.mode in SANDBOX_ENFORCED_NETWORK_MODES:
        return None
    return SandboxUnavailableError(
        "sandbox-network-mode-unsupported",
        f"network mode {policy.network.mode!r} cannot be enforced by this engine (only 'none' and 'all'); "
        "the command was not run rather than given wider network access",
    )


def _unsafe_warning(reason: str | None) -> str:
    return (
        "UNSAFE: the command runs as a plain host process with the host's full rights because no sandbox "
        f"engine is usable ({reason or 'unknown reason'}) and the policy opted into 'unsafe-host-process'"
    )


def describe_sandbox_effective_state(
    policy: SandboxPolicy, engine: SandboxEngine | None
) -> SandboxEffectiveState:
    """What :func:`prepare_sandboxed_command` would enforce for ``policy``; runs no command.

    ``refused_code`` is set when commands would be refused, and ``warnings`` is non-empty whenever anything
    runs unenforced, so a host can show it.
    """
    policy = revalidate_sandbox_policy(policy)
    available = engine is not None and engine.available()

    def state(
        mode: SandboxEffectiveMode | None, *, refused: str | None = None, warnings: tuple[str, ...] = ()
    ) -> SandboxEffectiveState:
        return SandboxEffectiveState(
            requested_mode=policy.mode,
            effective_mode=mode,
            engine=None if engine is None else engine.name,
            engine_version=None if engine is None else engine.version,
            engine_available=available,
            filesystem_enforced=mode == "native",
            network_mode=policy.network.mode,
            network_enforced=mode == "native",
            refused_code=refused,
            warnings=warnings,
        )

    if policy.mode == "off":
        return state("off", warnings=("the sandbox policy mode is 'off': commands run unsandboxed",))
    network_refusal = _network_refusal(policy)
    if network_refusal is not None:
        return state(None, refused=network_refusal.code)
    try:
        mode = resolve_sandbox_mode(policy, engine_available=available)
    except SandboxUnavailableError as error:
        return state(None, refused=error.code)
    if mode == "native":
        return state("native")
    reason = "no engine configured" if engine is None else engine.unavailable_reason()
    return state(mode, warnings=(_unsafe_warning(reason),))


def prepare_sandboxed_command(
    policy: SandboxPolicy,
    argv: Sequence[str],
    *,
    engine: SandboxEngine | None,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    env_allow: Iterable[str] = DEFAULT_SANDBOX_ENV_ALLOW,
) -> PreparedCommand:
    """Validate a host command and wrap it in ``engine`` as ``policy`` requires; nothing runs here.

    Raises :class:`SandboxPolicyError` for bad input and :class:`SandboxUnavailableError` when the policy
    needs a sandbox that ``engine`` cannot give (missing, unusable, or a network mode it cannot enforce).
    A host process without a sandbox is only returned for mode ``off`` or the opted-in unsafe fallback, and
    then ``enforced`` is false and ``warnings`` says so.
    """
    policy = revalidate_sandbox_policy(policy)
    request = validate_command_request(policy, argv, cwd=cwd, env=env, env_allow=env_allow)
    if policy.mode == "off":
        return _host_command(request, "off", policy, ("the sandbox policy mode is 'off': unsandboxed",))
    network_refusal = _network_refusal(policy)
    if network_refusal is not None:
        raise network_refusal
    available = engine is not None and engine.available()
    mode = resolve_sandbox_mode(policy, engine_available=available)
    if mode == "unsafe-host-process" or engine is None:
        reason = "no engine configured" if engine is None else engine.unavailable_reason()
        return _host_command(request, "unsafe-host-process", policy, (_unsafe_warning(reason),))
    prepared = engine.prepare(policy, request.argv, request.cwd, request.env)
    return dataclasses.replace(prepared, dropped_env=request.dropped_env)


def _host_command(
    request: CommandRequest, mode: SandboxEffectiveMode, policy: SandboxPolicy, warnings: tuple[str, ...]
) -> PreparedCommand:
    return PreparedCommand(
        argv=request.argv,
        cwd=request.cwd,
        env=dict(request.env),
        engine="host-process",
        effective_mode=mode,
        enforced=False,
        network=policy.network.mode,
        dropped_env=request.dropped_env,
        warnings=warnings,
    )
