"""Sandbox policy data under hostile input: case games, hard links, ambiguous URLs, hand-built roots."""

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ds4_context_engine.runtime import (
    SANDBOX_ERROR_CODES,
    NetworkPolicy,
    SandboxPolicy,
    SandboxPolicyError,
    check_sandbox_path,
    create_sandbox_policy,
    merge_sandbox_policies,
    network_policy_allows_url,
    revalidate_sandbox_policy,
    sandbox_path_is_denied,
)


def _code(call):
    with pytest.raises(SandboxPolicyError) as caught:
        call()
    assert caught.value.code in SANDBOX_ERROR_CODES
    return caught.value.code


@pytest.mark.parametrize(
    "path", [".ENV", ".Env.Local", "sub/.ENV", ".git/CONFIG", ".GIT/config", ".git/HOOKS/x"]
)
def test_deny_write_matching_ignores_case(tmp_path, path):
    policy = create_sandbox_policy(root=tmp_path)
    assert check_sandbox_path(policy, path)  # reading is fine
    assert _code(lambda: check_sandbox_path(policy, path, access="write")) == "sandbox-path-denied"


@pytest.mark.parametrize(
    ("path", "pattern", "denied"),
    [
        ("/r/a/b/.env", ".env", True),
        ("/r/.git/hooks", ".git/hooks/**", True),
        ("/r/sub/.git/config", ".git/config", True),  # a nested repository too
        ("/r/dist/a/b", "dist/**", True),
        ("/r/dist/a/b", "dist", True),  # what lies below a denied directory is denied
        ("/r/a.secret/file", "*.secret", True),
        ("/r/src/b.key", "src/**/*.key", True),
        ("/r/src/a/b.key", "src/**/*.key", True),
        ("/r/src/a/b.key", "src/*.key", False),  # one * stays inside one component
        ("/r/f3", "f[0-9]", True),
        ("/r/f3", "f[!0-9]", False),
        ("/r/sub/.git/configs", ".git/config", False),
        ("/r/env", ".env", False),
        ("/r/my.env", ".env", False),
    ],
)
def test_deny_pattern_matching_rules(path, pattern, denied):
    assert sandbox_path_is_denied(path, pattern) is denied


def test_narrowing_the_writable_root_keeps_a_deny_pattern_matching(tmp_path):
    # Found by the property test below: a pattern matched relative to the root stopped matching once a
    # merge narrowed the root from a/ to a/x/, so a/x/deep/f became writable.
    (tmp_path / "a" / "x" / "deep").mkdir(parents=True)
    left = create_sandbox_policy(root=tmp_path, writable_roots=[tmp_path / "a"], deny_write=["x/deep/**"])
    right = create_sandbox_policy(root=tmp_path, writable_roots=[tmp_path / "a" / "x"])
    merged = merge_sandbox_policies(left, right)
    target = str(tmp_path / "a" / "x" / "deep" / "f")
    assert _code(lambda: check_sandbox_path(left, target, access="write")) == "sandbox-path-denied"
    assert _code(lambda: check_sandbox_path(merged, target, access="write")) == "sandbox-path-denied"


def test_a_hard_link_to_a_deny_write_file_is_not_writable(tmp_path):
    (tmp_path / ".env").write_text("TOKEN=1\n")
    os.link(tmp_path / ".env", tmp_path / "notes.txt")
    (tmp_path / "plain.txt").write_text("x")
    policy = create_sandbox_policy(root=tmp_path)
    assert check_sandbox_path(policy, "plain.txt", access="write")  # the control
    assert check_sandbox_path(policy, "notes.txt")  # reading is fine
    assert (
        _code(lambda: check_sandbox_path(policy, "notes.txt", access="write")) == "sandbox-path-hard-linked"
    )


@pytest.mark.parametrize(
    "url",
    [
        "https://evil.com\\@docs.example.com/",
        "https://evil.com\\.docs.example.com/",
        "https://user@docs.example.com/",
        "https://evil.com%40docs.example.com/",
        "https://docs.example.com\t.evil.com/",
        "https://docs.example.com /",
        "file:///etc/passwd",
        "https://docs.example.com:99999/",
    ],
)
def test_ambiguous_urls_pass_no_allow_list(url):
    allowlist = NetworkPolicy(mode="allowlist", allowed_domains=("docs.example.com", "*.example.com"))
    assert network_policy_allows_url(allowlist, "https://docs.example.com/guide")  # the control
    assert not network_policy_allows_url(allowlist, url)
    assert not network_policy_allows_url(NetworkPolicy(mode="all"), url)


def test_a_hand_built_dotdot_root_cannot_merge_wider_than_its_parts(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "other").mkdir()
    narrow = create_sandbox_policy(root=ws)
    sneaky = SandboxPolicy(
        mode="native",
        root=f"{ws}/..",
        readable_roots=(f"{ws}/..",),
        writable_roots=(f"{ws}/..",),
        deny_write=(),
        network=NetworkPolicy(mode="none"),
        fallback="fail-closed",
    )
    merged = merge_sandbox_policies(narrow, sneaky)
    assert merged.writable_roots == (str(ws),)
    assert _code(lambda: check_sandbox_path(merged, str(tmp_path / "other" / "f"), access="write"))
    assert revalidate_sandbox_policy(sneaky).root == str(tmp_path)


def test_bad_roots_are_refused_with_a_code(tmp_path):
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    cases = {
        "relative": ("sandbox-invalid-root", {"root": "ws"}),
        "missing": ("sandbox-root-missing", {"root": tmp_path / "missing"}),
        "file": ("sandbox-root-not-directory", {"root": tmp_path / "file.txt"}),
        "symlinked": ("sandbox-root-symlinked", {"root": tmp_path / "link"}),
        "symlinked inside": ("sandbox-root-symlinked", {"root": tmp_path / "link" / "."}),
        "missing readable": (
            "sandbox-root-missing",
            {"root": tmp_path, "readable_roots": [tmp_path / "nope"]},
        ),
        "file writable": (
            "sandbox-root-not-directory",
            {"root": tmp_path, "writable_roots": [tmp_path / "file.txt"]},
        ),
        "NUL": ("sandbox-invalid-root", {"root": f"{tmp_path}/\x00x"}),
    }
    for name, (code, kwargs) in cases.items():
        assert _code(lambda kwargs=kwargs: create_sandbox_policy(**kwargs)) == code, name


def test_overlapping_roots_collapse_to_the_outermost(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    policy = create_sandbox_policy(
        root=tmp_path,
        readable_roots=[tmp_path, tmp_path / "a", f"{tmp_path}/a/b/.."],
        writable_roots=[tmp_path / "a"],
    )
    assert policy.readable_roots == (str(tmp_path),)
    assert policy.writable_roots == (str(tmp_path / "a"),)


# Whole policies over a fixed tree: merging never allows a read, a write or a URL that either side refuses.
_TREE = ("a", "a/x", "a/x/deep", "b", "b/y", "c")
_PROBES = ("a/f", "a/x/f", "a/x/deep/f", "b/f", "b/y/f", "c/f", "a/.env", "a/x/.SECRET", "b/dist/out")
_URLS = ("https://pypi.org/", "https://api.github.com/", "http://127.0.0.1:1/", "https://a.example/")
_roots = st.lists(st.sampled_from(_TREE), min_size=1, max_size=3)
_networks = st.builds(
    lambda mode, domains: {"mode": mode, "allowedDomains": domains},
    st.sampled_from(["none", "localhost", "allowlist", "all"]),
    st.lists(st.sampled_from(["pypi.org", "*.github.com", "127.0.0.1", "a.example"]), max_size=3),
)
_policies = st.fixed_dictionaries(
    {
        "readable": _roots,
        "writable": st.lists(st.sampled_from(_TREE), max_size=2),
        "deny": st.lists(st.sampled_from(["*.secret", "dist/**", "x/deep/**"]), max_size=2),
        "network": _networks,
        "mode": st.sampled_from(["native", "off"]),
        "unsafe": st.booleans(),
    }
)


def _build(base, spec):
    return create_sandbox_policy(
        root=base,
        mode=spec["mode"],
        readable_roots=[base / p for p in spec["readable"]],
        writable_roots=[base / p for p in spec["writable"]],
        deny_write=spec["deny"],
        network=spec["network"],
        fallback="unsafe-host-process" if spec["unsafe"] else "fail-closed",
        allow_unsafe_fallback=spec["unsafe"],
    )


def _allows(policy, path, access):
    try:
        check_sandbox_path(policy, path, access=access)
    except SandboxPolicyError:
        return False
    return True


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(left=_policies, right=_policies)
def test_merging_whole_policies_is_monotonic(tmp_path_factory, left, right):
    base = tmp_path_factory.getbasetemp() / "merge-tree"
    for name in _TREE:
        (base / name).mkdir(parents=True, exist_ok=True)
    a, b = _build(base, left), _build(base, right)
    merged = merge_sandbox_policies(a, b)
    for probe in _PROBES:
        path = str(base / probe)
        for access in ("read", "write"):
            if _allows(merged, path, access):
                assert _allows(a, path, access), (probe, access)
                assert _allows(b, path, access), (probe, access)
    for url in _URLS:
        if network_policy_allows_url(merged.network, url):
            assert network_policy_allows_url(a.network, url)
            assert network_policy_allows_url(b.network, url)
    assert set(merged.deny_write) >= set(a.deny_write) | set(b.deny_write)
    assert merged.mode == ("native" if "native" in (a.mode, b.mode) else "off")
    assert (merged.fallback == "fail-closed") == ("fail-closed" in (a.fallback, b.fallback))
    # Merging again with either part changes nothing: the result is already inside both.
    assert merge_sandbox_policies(merged, a) == merged
