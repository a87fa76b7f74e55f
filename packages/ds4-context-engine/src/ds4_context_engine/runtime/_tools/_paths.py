"""Where the managed file tools may read and write, checked by the sandbox policy's own path rules.

The roots become a :class:`SandboxPolicy` (mode ``off``: it only describes paths here) so every check is
:func:`check_sandbox_path`: lexical and resolved real path both inside a root, the deny-write patterns
(case-insensitive) and the refusal to write a file with a second hard link. When the host's policy is
native, its roots stay the boundary: the tools' roots are intersected with it, never widened.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from ds4_context_core import Ds4ContextError
from ds4_context_engine.runtime._errors import SandboxPolicyError
from ds4_context_engine.runtime._sandbox import (
    SandboxPolicy,
    check_sandbox_path,
    create_sandbox_policy,
    merge_sandbox_policies,
    revalidate_sandbox_policy,
)

__all__ = ["ToolRoots"]


def _real_directory(value: str | os.PathLike[str], what: str) -> str:
    text = os.fspath(value)
    if not isinstance(text, str) or not text or "\x00" in text:
        raise SandboxPolicyError("sandbox-invalid-root", f"the {what} must be a text path")
    real = os.path.realpath(os.path.abspath(text))
    if not os.path.isdir(real):
        raise SandboxPolicyError("sandbox-root-missing", f"the {what} is not an existing directory")
    return real


class ToolRoots:
    """The read and write boundary of the file tools, and how a path a model sent maps onto it."""

    def __init__(
        self,
        workspace: str | os.PathLike[str],
        *,
        additional_read_roots: Iterable[str | os.PathLike[str]] = (),
        additional_write_roots: Iterable[str | os.PathLike[str]] = (),
        sandbox_policy: SandboxPolicy | None = None,
    ) -> None:
        # Resolved once: a host that names its workspace through a symlink trusts where it leads.
        self.workspace = _real_directory(workspace, "workspace")
        reads = [_real_directory(root, "additional read root") for root in additional_read_roots]
        writes = [_real_directory(root, "additional write root") for root in additional_write_roots]
        deny = () if sandbox_policy is None else sandbox_policy.deny_write
        own = create_sandbox_policy(
            root=self.workspace,
            mode="off",
            readable_roots=(self.workspace, *reads, *writes),
            writable_roots=(self.workspace, *writes),
            deny_write=deny,
        )
        if sandbox_policy is not None and revalidate_sandbox_policy(sandbox_policy).mode == "native":
            own = merge_sandbox_policies(own, sandbox_policy)
        self.policy = own

    @property
    def read_roots(self) -> tuple[str, ...]:
        return self.policy.readable_roots

    @property
    def write_roots(self) -> tuple[str, ...]:
        return self.policy.writable_roots

    def directory(self, cwd: str | os.PathLike[str] | None) -> str:
        """The working directory a call runs in: the workspace, or ``cwd`` when it is a readable directory."""
        if cwd is None:
            return self.workspace
        lexical = self.check(os.fspath(cwd), self.workspace, "read")
        if not os.path.isdir(lexical):
            raise Ds4ContextError("tool-not-a-directory", "the working directory is not a directory")
        return lexical

    def check(self, path: str, cwd: str, access: str) -> str:
        """The normalised lexical path if ``access`` ("read" or "write") is allowed, else a coded error."""
        if not isinstance(path, str) or not path or "\x00" in path:
            raise Ds4ContextError("tool-invalid-path", "the path must be non-empty text without NUL bytes")
        joined = path if os.path.isabs(path) else os.path.join(cwd, path)
        return check_sandbox_path(self.policy, joined, access="write" if access == "write" else "read")

    def display(self, path: str, cwd: str) -> str:
        """How a path is shown to the model: relative to ``cwd`` when inside it, else absolute."""
        if path == cwd:
            return "."
        if path.startswith(cwd.rstrip(os.sep) + os.sep):
            return os.path.relpath(path, cwd)
        return path

    def real_inside_read_roots(self, path: str) -> bool:
        """Whether ``path``'s resolved real path is readable (a symlink found while walking)."""
        real = os.path.realpath(path)
        return any(real == root or real.startswith(root.rstrip(os.sep) + os.sep) for root in self.read_roots)
