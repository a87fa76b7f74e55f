"""Sandbox policy as data: filesystem roots, write denials, network reach and the fallback rule.

Policies only ever get stricter when combined. ``merge_sandbox_policies`` intersects what is allowed and
unions what is denied, so a request-scoped policy can narrow the configured one but never widen it.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import re
import stat
from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal, TypeAlias
from urllib.parse import urlsplit

import msgspec

from ._errors import SandboxPolicyError, SandboxUnavailableError

__all__ = [
    "DEFAULT_DENY_WRITE",
    "SANDBOX_ERROR_CODES",
    "SANDBOX_FALLBACKS",
    "SANDBOX_MODES",
    "SANDBOX_NETWORK_MODES",
    "NetworkPolicy",
    "SandboxMode",
    "SandboxPolicy",
    "check_sandbox_path",
    "create_sandbox_policy",
    "fail_closed_sandbox_policy",
    "merge_sandbox_policies",
    "network_policy_allows_url",
    "parse_sandbox_policy",
    "resolve_sandbox_mode",
    "revalidate_sandbox_policy",
    "sandbox_path_is_denied",
    "tighten_sandbox_policy",
]

SANDBOX_MODES: Final = ("native", "off")
SANDBOX_NETWORK_MODES: Final = ("none", "localhost", "allowlist", "all")
SANDBOX_FALLBACKS: Final = ("fail-closed", "unsafe-host-process")
DEFAULT_DENY_WRITE: Final = (".env", ".env.*", ".git/config", ".git/hooks/**")
SANDBOX_ERROR_CODES: Final = (
    "sandbox-engine-unavailable",
    "sandbox-invalid-domain",
    "sandbox-invalid-fallback",
    "sandbox-invalid-field",
    "sandbox-invalid-mode",
    "sandbox-invalid-network-mode",
    "sandbox-invalid-pattern",
    "sandbox-invalid-root",
    "sandbox-path-denied",
    "sandbox-path-hard-linked",
    "sandbox-path-outside-roots",
    "sandbox-root-missing",
    "sandbox-root-not-directory",
    "sandbox-root-symlinked",
    "sandbox-roots-disjoint",
    "sandbox-unknown-field",
    "sandbox-unsafe-fallback-not-allowed",
)

Mode: TypeAlias = Literal["native", "off"]
NetworkMode: TypeAlias = Literal["none", "localhost", "allowlist", "all"]
Fallback: TypeAlias = Literal["fail-closed", "unsafe-host-process"]
SandboxMode: TypeAlias = Literal["native", "off", "unsafe-host-process"]

_DOMAIN_PATTERN: Final = re.compile(
    r"(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*"
)
_LOOPBACK_NAMES: Final = frozenset({"localhost"})
_MAX_ENTRIES: Final = 256


class NetworkPolicy(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Where sandboxed processes may connect. ``allowed_domains`` is only used by ``allowlist``."""

    mode: NetworkMode = "none"
    allowed_domains: tuple[str, ...] = ()


class SandboxPolicy(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A validated policy, built by :func:`create_sandbox_policy` or :func:`parse_sandbox_policy`."""

    mode: Mode
    root: str
    readable_roots: tuple[str, ...]
    writable_roots: tuple[str, ...]
    deny_write: tuple[str, ...]
    network: NetworkPolicy
    fallback: Fallback


def _error(code: str, message: str) -> SandboxPolicyError:
    return SandboxPolicyError(code, message)


def _absolute_root(value: object, field: str) -> str:
    """A root as a normalised absolute path naming an existing directory, reached without symlinks.

    ``ws/..`` is normalised before anything compares it, so a policy cannot look narrower than it is; a
    symlinked root is refused because the lexical and the real path would name different places.
    """
    if not isinstance(value, str | os.PathLike):
        raise _error("sandbox-invalid-root", f"{field} entries must be paths")
    text = os.fspath(value)
    if not isinstance(text, str) or not text or "\x00" in text:
        raise _error("sandbox-invalid-root", f"{field} entries must be non-empty text paths")
    if not os.path.isabs(text):
        raise _error("sandbox-invalid-root", f"{field} entries must be absolute paths")
    normalised = os.path.normpath(text)
    if normalised.startswith("//"):
        normalised = "/" + normalised.lstrip("/")
    try:
        status = os.stat(normalised)
    except FileNotFoundError:
        raise _error("sandbox-root-missing", f"a {field} entry does not exist") from None
    except OSError:
        raise _error("sandbox-root-missing", f"a {field} entry cannot be reached") from None
    if not stat.S_ISDIR(status.st_mode):
        raise _error("sandbox-root-not-directory", f"a {field} entry is not a directory")
    if os.path.realpath(normalised) != normalised:
        raise _error(
            "sandbox-root-symlinked",
            f"a {field} entry goes through a symlink; give its resolved path instead",
        )
    return normalised


def _is_within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _dedupe_roots(roots: Iterable[str]) -> tuple[str, ...]:
    """Drop roots already covered by another root; keep a stable sorted order."""
    unique = sorted(set(roots))
    kept = [root for root in unique if not any(other != root and _is_within(root, other) for other in unique)]
    return tuple(kept)


def _domain(value: object) -> str:
    if not isinstance(value, str):
        raise _error("sandbox-invalid-domain", "allowed domains must be strings")
    lowered = value.strip().lower().rstrip(".")
    if lowered in _LOOPBACK_NAMES:
        return lowered
    try:
        return str(ipaddress.ip_address(lowered.strip("[]")))
    except ValueError:
        pass
    if len(lowered) > 253 or not _DOMAIN_PATTERN.fullmatch(lowered):
        raise _error("sandbox-invalid-domain", "an allowed domain must be a host name, '*.' wildcard or IP")
    return lowered


def _network(value: object) -> NetworkPolicy:
    if isinstance(value, NetworkPolicy):
        value = {"mode": value.mode, "allowedDomains": list(value.allowed_domains)}
    if isinstance(value, str):
        value = {"mode": value}
    if not isinstance(value, Mapping):
        raise _error("sandbox-invalid-field", "network must be a mode name or an object")
    unknown = set(value) - {"mode", "allowedDomains", "allowed_domains"}
    if unknown:
        raise _error("sandbox-unknown-field", f"unknown network fields: {sorted(map(str, unknown))[:5]}")
    mode = value.get("mode", "none")
    if mode not in SANDBOX_NETWORK_MODES:
        raise _error("sandbox-invalid-network-mode", f"network mode must be one of {SANDBOX_NETWORK_MODES}")
    raw_domains = value.get("allowedDomains", value.get("allowed_domains", ()))
    if isinstance(raw_domains, str) or not isinstance(raw_domains, Iterable):
        raise _error("sandbox-invalid-domain", "allowedDomains must be a list of strings")
    domains = tuple(sorted({_domain(item) for item in raw_domains}))
    if len(domains) > _MAX_ENTRIES:
        raise _error("sandbox-invalid-domain", f"at most {_MAX_ENTRIES} allowed domains")
    if mode != "allowlist":
        domains = ()
    elif not domains:
        # An allowlist that names nothing allows nothing.
        mode = "none"
    return NetworkPolicy(mode=mode, allowed_domains=domains)


def _patterns(values: object, field: str) -> tuple[str, ...]:
    if isinstance(values, str) or not isinstance(values, Iterable):
        raise _error("sandbox-invalid-pattern", f"{field} must be a list of glob patterns")
    patterns: set[str] = set()
    for item in values:
        if not isinstance(item, str) or not item or "\x00" in item or len(item) > 1024:
            raise _error("sandbox-invalid-pattern", f"{field} entries must be non-empty glob patterns")
        patterns.add(item)
    if len(patterns) > _MAX_ENTRIES:
        raise _error("sandbox-invalid-pattern", f"at most {_MAX_ENTRIES} {field} patterns")
    return tuple(sorted(patterns))


def _roots(values: object, field: str) -> tuple[str, ...]:
    if isinstance(values, str | os.PathLike) or not isinstance(values, Iterable):
        raise _error("sandbox-invalid-root", f"{field} must be a list of absolute paths")
    roots = [_absolute_root(item, field) for item in values]
    if len(roots) > _MAX_ENTRIES:
        raise _error("sandbox-invalid-root", f"at most {_MAX_ENTRIES} {field}")
    return _dedupe_roots(roots)


def create_sandbox_policy(
    *,
    root: str | os.PathLike[str] | None = None,
    mode: str = "native",
    readable_roots: Iterable[str | os.PathLike[str]] | None = None,
    writable_roots: Iterable[str | os.PathLike[str]] | None = None,
    deny_write: Iterable[str] = (),
    network: NetworkPolicy | Mapping[str, Any] | str = "none",
    fallback: str = "fail-closed",
    allow_unsafe_fallback: bool = False,
) -> SandboxPolicy:
    """Build a validated policy. ``deny_write`` is added to :data:`DEFAULT_DENY_WRITE`, never replaces it.

    ``fallback="unsafe-host-process"`` runs commands unsandboxed when no engine is available; it is refused
    unless ``allow_unsafe_fallback=True`` says the host chose that on purpose.
    """
    if mode not in SANDBOX_MODES:
        raise _error("sandbox-invalid-mode", f"mode must be one of {SANDBOX_MODES}")
    if fallback not in SANDBOX_FALLBACKS:
        raise _error("sandbox-invalid-fallback", f"fallback must be one of {SANDBOX_FALLBACKS}")
    if fallback == "unsafe-host-process" and not allow_unsafe_fallback:
        raise _error(
            "sandbox-unsafe-fallback-not-allowed",
            "fallback 'unsafe-host-process' needs an explicit opt-in (allow_unsafe_fallback=True)",
        )
    resolved_root = _absolute_root(os.getcwd() if root is None else root, "root")
    readable = _roots([resolved_root] if readable_roots is None else readable_roots, "readableRoots")
    writable = _roots([resolved_root] if writable_roots is None else writable_roots, "writableRoots")
    # Writable roots are readable too.
    readable = _dedupe_roots((*readable, *writable))
    return SandboxPolicy(
        mode=mode,  # type: ignore[arg-type]
        root=resolved_root,
        readable_roots=readable,
        writable_roots=writable,
        deny_write=_patterns((*DEFAULT_DENY_WRITE, *_patterns(deny_write, "denyWrite")), "denyWrite"),
        network=_network(network),
        fallback=fallback,  # type: ignore[arg-type]
    )


def fail_closed_sandbox_policy(root: str | os.PathLike[str] | None = None) -> SandboxPolicy:
    """The default policy: native sandbox, only ``root`` readable and writable, no network, fail closed."""
    return create_sandbox_policy(root=root)


_POLICY_FIELDS: Final = {
    "mode": "mode",
    "root": "root",
    "readableRoots": "readable_roots",
    "writableRoots": "writable_roots",
    "denyWrite": "deny_write",
    "network": "network",
    "fallback": "fallback",
    "allowUnsafeFallback": "allow_unsafe_fallback",
}


def parse_sandbox_policy(data: Mapping[str, Any]) -> SandboxPolicy:
    """Build a policy from host configuration (camelCase keys, as in JSON config files)."""
    if not isinstance(data, Mapping):
        raise _error("sandbox-invalid-field", "a sandbox policy must be an object")
    unknown = [str(key) for key in data if key not in _POLICY_FIELDS]
    if unknown:
        raise _error("sandbox-unknown-field", f"unknown sandbox policy fields: {sorted(unknown)[:5]}")
    allow_unsafe = data.get("allowUnsafeFallback", False)
    if not isinstance(allow_unsafe, bool):
        raise _error("sandbox-invalid-field", "allowUnsafeFallback must be a boolean")
    for key in ("mode", "fallback"):
        if key in data and not isinstance(data[key], str):
            raise _error(f"sandbox-invalid-{key}", f"{key} must be a string")
    kwargs = {_POLICY_FIELDS[key]: value for key, value in data.items()}
    return create_sandbox_policy(**kwargs)


def _intersect_roots(left: tuple[str, ...], right: tuple[str, ...]) -> tuple[str, ...]:
    common: list[str] = []
    for a in left:
        for b in right:
            if _is_within(a, b):
                common.append(a)
            elif _is_within(b, a):
                common.append(b)
    return _dedupe_roots(common)


def _domain_covered(domain: str, by: str) -> bool:
    if by == domain:
        return True
    if by.startswith("*."):
        suffix = by[1:]
        return domain.endswith(suffix) and domain != suffix[1:]
    return False


def _is_loopback(domain: str) -> bool:
    if domain in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(domain).is_loopback
    except ValueError:
        return False


def _merge_network(left: NetworkPolicy, right: NetworkPolicy) -> NetworkPolicy:
    if left.mode == "none" or right.mode == "none":
        return NetworkPolicy(mode="none")
    if left.mode == "all":
        return right
    if right.mode == "all":
        return left
    if left.mode == "localhost" and right.mode == "localhost":
        return left
    if left.mode == "allowlist" and right.mode == "allowlist":
        domains = {
            d for d in left.allowed_domains if any(_domain_covered(d, o) for o in right.allowed_domains)
        }
        domains |= {
            d for d in right.allowed_domains if any(_domain_covered(d, o) for o in left.allowed_domains)
        }
    else:
        allowlist = left if left.mode == "allowlist" else right
        domains = {d for d in allowlist.allowed_domains if _is_loopback(d)}
    if not domains:
        return NetworkPolicy(mode="none")
    return NetworkPolicy(mode="allowlist", allowed_domains=tuple(sorted(domains)))


def revalidate_sandbox_policy(policy: SandboxPolicy) -> SandboxPolicy:
    """Validate a policy that may have been built by hand, returning its normalised equivalent.

    The result is never wider than ``policy``: roots are normalised and must exist, the default deny list is
    added back, and an unsafe fallback written into the struct counts as the host's explicit choice.
    """
    if not isinstance(policy, SandboxPolicy):
        raise _error("sandbox-invalid-field", "a sandbox policy must be a SandboxPolicy")
    return create_sandbox_policy(
        root=policy.root,
        mode=policy.mode,
        readable_roots=policy.readable_roots,
        writable_roots=policy.writable_roots,
        deny_write=policy.deny_write,
        network=policy.network,
        fallback=policy.fallback,
        allow_unsafe_fallback=policy.fallback == "unsafe-host-process",
    )


def merge_sandbox_policies(base: SandboxPolicy, other: SandboxPolicy) -> SandboxPolicy:
    """Combine two policies so the result allows no more than either of them.

    Roots intersect, deny patterns union, ``native`` beats ``off``, ``fail-closed`` beats the unsafe
    fallback, and networks intersect. Two policies whose working roots do not nest are refused. Both are
    validated again first, so a hand-built :class:`SandboxPolicy` (a root such as ``ws/..``) is compared
    by what it names, not by how it is spelled.
    """
    base = revalidate_sandbox_policy(base)
    other = revalidate_sandbox_policy(other)
    if _is_within(other.root, base.root):
        root = other.root
    elif _is_within(base.root, other.root):
        root = base.root
    else:
        raise _error("sandbox-roots-disjoint", "the two policies' roots do not overlap")
    writable = _intersect_roots(base.writable_roots, other.writable_roots)
    readable = _dedupe_roots((*_intersect_roots(base.readable_roots, other.readable_roots), *writable))
    return SandboxPolicy(
        mode="native" if "native" in (base.mode, other.mode) else "off",
        root=root,
        readable_roots=readable,
        writable_roots=writable,
        deny_write=tuple(sorted({*base.deny_write, *other.deny_write})),
        network=_merge_network(base.network, other.network),
        fallback="fail-closed" if "fail-closed" in (base.fallback, other.fallback) else "unsafe-host-process",
    )


def tighten_sandbox_policy(configured: SandboxPolicy, request: SandboxPolicy | None) -> SandboxPolicy:
    """Apply a request-scoped policy; it can narrow ``configured`` but whatever it loosens is ignored."""
    return configured if request is None else merge_sandbox_policies(configured, request)


def resolve_sandbox_mode(policy: SandboxPolicy, *, engine_available: bool) -> SandboxMode:
    """How a command will actually run; refuses (fail closed) when the engine is missing."""
    if policy.mode == "off":
        return "off"
    if engine_available:
        return "native"
    if policy.fallback == "unsafe-host-process":
        return "unsafe-host-process"
    raise SandboxUnavailableError(
        "sandbox-engine-unavailable",
        "the sandbox engine is not available and the policy fails closed; the command was not run",
    )


def _relative_to_any(path: str, roots: tuple[str, ...]) -> str | None:
    for root in roots:
        if _is_within(path, root):
            return os.path.relpath(path, root)
    return None


def _glob_regex(glob: str) -> str:
    """Translate a glob: ``*``, ``?`` and ``[...]`` stay inside one path component, ``**`` crosses them."""
    out: list[str] = []
    index = 0
    while index < len(glob):
        if glob.startswith("**/", index):
            out.append("(?:.*/)?")
            index += 3
        elif glob.startswith("**", index):
            out.append(".*")
            index += 2
        elif glob[index] == "*":
            out.append("[^/]*")
            index += 1
        elif glob[index] == "?":
            out.append("[^/]")
            index += 1
        elif glob[index] == "[" and (end := glob.find("]", index + 2)) != -1:
            body = glob[index + 1 : end]
            negate = body[:1] in {"!", "^"}
            body = re.escape(body[1:] if negate else body).replace("\\-", "-").replace("/", "")
            out.append(f"[^/{body}]" if negate else f"[{body}]")
            index = end + 1
        else:
            out.append(re.escape(glob[index]))
            index += 1
    return "".join(out)


def _pattern_body(pattern: str) -> str:
    folded = pattern.casefold()
    return folded[:-3] if folded.endswith("/**") else folded


@functools.lru_cache(maxsize=256)
def _deny_matchers(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], re.Pattern[str]] | None:
    """For a deny list: a regex over whole paths, and a quick one over a single name.

    A name that fails the second cannot end a match of the first, except below a matching directory (which
    the whole-path regex covers, and which a scan does not descend into).
    """
    if not patterns:
        return None
    bodies = [_pattern_body(pattern) for pattern in patterns]
    whole = "|".join(f"(?:{_glob_regex(body)})" for body in bodies)
    names = "|".join(
        ".*" if "**" in body else f"(?:{_glob_regex(body.rsplit('/', 1)[-1])})" for body in bodies
    )
    return re.compile(rf"(?:^|/)(?:{whole})(?:/.*)?\Z", re.DOTALL), re.compile(names, re.DOTALL)


def sandbox_path_is_denied(path: str, pattern: str) -> bool:
    """Whether writing ``path`` is denied by one deny-write ``pattern``.

    A pattern matches the last components of the path at any depth, and everything below what it matches,
    as a .gitignore pattern does: ``.git/hooks/**`` (or ``.git/hooks``) covers a nested repository's hooks
    too, ``.env`` any ``.env``. ``*``, ``?`` and ``[...]`` stay within one component and ``**`` crosses
    them. Matching does not depend on where the policy's roots are, so narrowing the roots in a merge can
    never stop a pattern from matching. It ignores case: on a case-insensitive file system ``.ENV`` is
    ``.env``, and a policy must not depend on the file system it happens to run on.
    """
    return _denied(path, (pattern,))


def _denied(path: str, patterns: tuple[str, ...]) -> bool:
    matchers = _deny_matchers(patterns)
    return matchers is not None and matchers[0].search(path.replace(os.sep, "/").casefold()) is not None


def check_sandbox_path(
    policy: SandboxPolicy, path: str | os.PathLike[str], *, access: Literal["read", "write"] = "read"
) -> str:
    """Return the normalized absolute path if ``policy`` allows ``access`` to it, else raise.

    Both the lexical path and the resolved real path (symlinks followed) must lie inside an allowed root,
    so a symlink inside the workspace cannot reach outside it. Relative paths are taken from ``root``.
    """
    text = os.fspath(path)
    if not isinstance(text, str) or "\x00" in text:
        raise _error("sandbox-path-outside-roots", "the path is not a valid text path")
    lexical = os.path.normpath(os.path.join(policy.root, text))
    real = os.path.realpath(lexical)
    roots = policy.writable_roots if access == "write" else policy.readable_roots
    real_roots = tuple(os.path.realpath(root) for root in roots)
    if _relative_to_any(lexical, roots) is None or _relative_to_any(real, real_roots) is None:
        raise _error("sandbox-path-outside-roots", f"{access} access outside the allowed roots is refused")
    if access == "write":
        if _denied(lexical, policy.deny_write) or _denied(real, policy.deny_write):
            raise _error("sandbox-path-denied", "writing this path is denied by the sandbox policy")
        try:
            status = os.stat(real)
        except OSError:
            status = None
        # Another name of the same file may be a denied one (a hard link to .env); which names a file has
        # cannot be known without scanning every root, so a shared file is not writable at all.
        if status is not None and stat.S_ISREG(status.st_mode) and status.st_nlink > 1:
            raise _error("sandbox-path-hard-linked", "writing a file with more than one hard link is refused")
    return lexical


_URL_FORBIDDEN: Final = re.compile(r"[\\\s\x00-\x1f\x7f]")


def _url_host(url: str) -> str | None:
    """The host a URL names, or ``None`` when parsers could disagree about it.

    WHATWG parsers treat a backslash as a slash in http(s) URLs, so ``https://evil.com\\@docs.example.com``
    goes to ``evil.com`` while ``urlsplit`` reports ``docs.example.com``. Backslashes, whitespace,
    control characters and userinfo are refused instead of guessed at, and the host must be a valid name.
    """
    if not isinstance(url, str) or _URL_FORBIDDEN.search(url):
        return None
    try:
        parts = urlsplit(url)
        _ = parts.port
    except ValueError:
        return None
    if parts.scheme.lower() not in {"http", "https", "ws", "wss"} or "@" in parts.netloc:
        return None
    host = (parts.hostname or "").lower().rstrip(".")
    if not host:
        return None
    try:
        return _domain(host)
    except SandboxPolicyError:
        return None


def network_policy_allows_url(network: NetworkPolicy, url: str) -> bool:
    """Whether a connection to ``url``'s host is allowed by ``network`` (ambiguous URLs never are)."""
    host = _url_host(url)
    if host is None or host.startswith("*."):
        return False
    if network.mode == "all":
        return True
    if network.mode == "none":
        return False
    if network.mode == "localhost":
        return _is_loopback(host)
    return any(_domain_covered(host, allowed) for allowed in network.allowed_domains)
