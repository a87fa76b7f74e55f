import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ds4_context_engine.runtime import (
    DEFAULT_DENY_WRITE,
    SANDBOX_ERROR_CODES,
    NetworkPolicy,
    SandboxPolicyError,
    SandboxUnavailableError,
    check_sandbox_path,
    create_sandbox_policy,
    fail_closed_sandbox_policy,
    merge_sandbox_policies,
    network_policy_allows_url,
    parse_sandbox_policy,
    resolve_sandbox_mode,
    tighten_sandbox_policy,
)


def test_defaults_are_native_cwd_rooted_no_network_fail_closed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    policy = fail_closed_sandbox_policy()
    root = os.path.normpath(os.getcwd())
    assert policy.mode == "native"
    assert policy.root == root
    assert policy.readable_roots == (root,)
    assert policy.writable_roots == (root,)
    assert policy.network == NetworkPolicy(mode="none")
    assert policy.fallback == "fail-closed"
    assert set(DEFAULT_DENY_WRITE) == {".env", ".env.*", ".git/config", ".git/hooks/**"}
    assert set(policy.deny_write) == set(DEFAULT_DENY_WRITE)


def test_extra_deny_patterns_add_to_the_defaults(tmp_path):
    policy = create_sandbox_policy(root=tmp_path, deny_write=["secrets/**"])
    assert set(policy.deny_write) == {*DEFAULT_DENY_WRITE, "secrets/**"}


def test_writable_roots_are_readable(tmp_path):
    extra = tmp_path / "out"
    extra.mkdir()
    (tmp_path / "ws").mkdir()
    policy = create_sandbox_policy(
        root=tmp_path / "ws", readable_roots=[tmp_path / "ws"], writable_roots=[extra]
    )
    assert str(extra) in policy.readable_roots


def test_unsafe_fallback_needs_explicit_opt_in(tmp_path):
    with pytest.raises(SandboxPolicyError) as caught:
        create_sandbox_policy(root=tmp_path, fallback="unsafe-host-process")
    assert caught.value.code == "sandbox-unsafe-fallback-not-allowed"
    policy = create_sandbox_policy(root=tmp_path, fallback="unsafe-host-process", allow_unsafe_fallback=True)
    assert policy.fallback == "unsafe-host-process"


@pytest.mark.parametrize(
    ("data", "code"),
    [
        ({"mode": "docker"}, "sandbox-invalid-mode"),
        ({"mode": 3}, "sandbox-invalid-mode"),
        ({"fallback": "yolo"}, "sandbox-invalid-fallback"),
        ({"network": {"mode": "internet"}}, "sandbox-invalid-network-mode"),
        ({"network": {"mode": "allowlist", "allowedDomains": "example.com"}}, "sandbox-invalid-domain"),
        ({"network": {"mode": "allowlist", "allowedDomains": ["exa mple.com"]}}, "sandbox-invalid-domain"),
        ({"network": {"mode": "allowlist", "allowedDomains": [7]}}, "sandbox-invalid-domain"),
        ({"network": {"mode": "all", "proxy": "x"}}, "sandbox-unknown-field"),
        ({"network": 5}, "sandbox-invalid-field"),
        ({"root": "relative/dir"}, "sandbox-invalid-root"),
        ({"readableRoots": "/tmp"}, "sandbox-invalid-root"),
        ({"writableRoots": ["rel"]}, "sandbox-invalid-root"),
        ({"denyWrite": [""]}, "sandbox-invalid-pattern"),
        ({"denyWrite": ".env"}, "sandbox-invalid-pattern"),
        ({"allowUnsafeFallback": "yes"}, "sandbox-invalid-field"),
        ({"fallback": "unsafe-host-process"}, "sandbox-unsafe-fallback-not-allowed"),
        ({"sandboxEngine": "srt"}, "sandbox-unknown-field"),
    ],
)
def test_bad_policies_are_refused_with_a_code(tmp_path, data, code):
    with pytest.raises(SandboxPolicyError) as caught:
        parse_sandbox_policy({"root": str(tmp_path), **data})
    assert caught.value.code == code
    assert code in SANDBOX_ERROR_CODES


def test_policy_from_config_document(tmp_path):
    policy = parse_sandbox_policy(
        {
            "root": str(tmp_path),
            "network": {"mode": "allowlist", "allowedDomains": ["PyPI.org", "*.github.com"]},
            "denyWrite": ["dist/**"],
        }
    )
    assert policy.network.allowed_domains == ("*.github.com", "pypi.org")
    assert "dist/**" in policy.deny_write


def test_an_empty_allowlist_allows_nothing(tmp_path):
    policy = create_sandbox_policy(root=tmp_path, network={"mode": "allowlist", "allowedDomains": []})
    assert policy.network.mode == "none"


def _policy(root, **kwargs):
    for path in (root, *kwargs.get("readable_roots", ()), *kwargs.get("writable_roots", ())):
        os.makedirs(path, exist_ok=True)
    return create_sandbox_policy(root=root, **kwargs)


def test_merge_intersects_roots_and_unions_denials(tmp_path):
    a = _policy(tmp_path, readable_roots=[tmp_path], writable_roots=[tmp_path], deny_write=["a/**"])
    sub = tmp_path / "pkg"
    elsewhere = tmp_path.parent / f"{tmp_path.name}-elsewhere"
    b = _policy(sub, readable_roots=[sub, elsewhere], writable_roots=[sub], deny_write=["b/**"])
    merged = merge_sandbox_policies(a, b)
    assert merged.root == str(sub)
    assert merged.readable_roots == (str(sub),)
    assert merged.writable_roots == (str(sub),)
    assert {"a/**", "b/**"} <= set(merged.deny_write)


def test_merge_never_loosens_mode_or_fallback(tmp_path):
    strict = _policy(tmp_path)
    loose = _policy(tmp_path, mode="off", fallback="unsafe-host-process", allow_unsafe_fallback=True)
    for merged in (merge_sandbox_policies(strict, loose), merge_sandbox_policies(loose, strict)):
        assert merged.mode == "native"
        assert merged.fallback == "fail-closed"


def test_disjoint_roots_are_refused(tmp_path):
    with pytest.raises(SandboxPolicyError) as caught:
        merge_sandbox_policies(_policy(tmp_path / "a"), _policy(tmp_path / "b"))
    assert caught.value.code == "sandbox-roots-disjoint"


def _net(mode, *domains):
    return {"mode": mode, "allowedDomains": list(domains)}


@pytest.mark.parametrize(
    ("left", "right", "expected"),
    [
        (_net("none"), _net("all"), NetworkPolicy(mode="none")),
        (_net("all"), _net("localhost"), NetworkPolicy(mode="localhost")),
        (
            _net("all"),
            _net("allowlist", "a.com"),
            NetworkPolicy(mode="allowlist", allowed_domains=("a.com",)),
        ),
        (_net("localhost"), _net("localhost"), NetworkPolicy(mode="localhost")),
        (
            _net("allowlist", "a.com", "b.com"),
            _net("allowlist", "b.com", "c.com"),
            NetworkPolicy(mode="allowlist", allowed_domains=("b.com",)),
        ),
        (_net("allowlist", "a.com"), _net("allowlist", "c.com"), NetworkPolicy(mode="none")),
        (
            _net("allowlist", "*.github.com"),
            _net("allowlist", "api.github.com", "pypi.org"),
            NetworkPolicy(mode="allowlist", allowed_domains=("api.github.com",)),
        ),
        (
            _net("localhost"),
            _net("allowlist", "localhost", "127.0.0.1", "a.com"),
            NetworkPolicy(mode="allowlist", allowed_domains=("127.0.0.1", "localhost")),
        ),
        (_net("localhost"), _net("allowlist", "a.com"), NetworkPolicy(mode="none")),
    ],
)
def test_network_merge_is_an_intersection(tmp_path, left, right, expected):
    a = _policy(tmp_path, network=left)
    b = _policy(tmp_path, network=right)
    assert merge_sandbox_policies(a, b).network == expected
    assert merge_sandbox_policies(b, a).network == expected


def test_request_scoped_policy_can_only_tighten(tmp_path):
    configured = _policy(tmp_path, network=_net("allowlist", "pypi.org"))
    wider = _policy(tmp_path, network="all", mode="off")
    assert tighten_sandbox_policy(configured, wider) == configured
    narrower = _policy(tmp_path, network="none", deny_write=["src/**"])
    tightened = tighten_sandbox_policy(configured, narrower)
    assert tightened.network.mode == "none"
    assert "src/**" in tightened.deny_write
    assert tighten_sandbox_policy(configured, None) is configured


def test_missing_engine_fails_closed_unless_unsafe_fallback_chosen(tmp_path):
    with pytest.raises(SandboxUnavailableError) as caught:
        resolve_sandbox_mode(_policy(tmp_path), engine_available=False)
    assert caught.value.code == "sandbox-engine-unavailable"
    assert resolve_sandbox_mode(_policy(tmp_path), engine_available=True) == "native"
    unsafe = _policy(tmp_path, fallback="unsafe-host-process", allow_unsafe_fallback=True)
    assert resolve_sandbox_mode(unsafe, engine_available=False) == "unsafe-host-process"
    assert resolve_sandbox_mode(_policy(tmp_path, mode="off"), engine_available=False) == "off"


def test_paths_inside_roots_are_allowed_and_outside_refused(tmp_path):
    (tmp_path / "ws" / "src").mkdir(parents=True)
    policy = _policy(tmp_path / "ws")
    assert check_sandbox_path(policy, "src/main.py", access="write") == str(
        tmp_path / "ws" / "src" / "main.py"
    )
    for bad in ("../outside.txt", str(tmp_path / "other"), "src/../../x"):
        with pytest.raises(SandboxPolicyError) as caught:
            check_sandbox_path(policy, bad)
        assert caught.value.code == "sandbox-path-outside-roots"


def test_symlink_escape_is_refused(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    outside = tmp_path / "secret"
    outside.mkdir()
    (ws / "link").symlink_to(outside)
    policy = _policy(ws)
    with pytest.raises(SandboxPolicyError) as caught:
        check_sandbox_path(policy, "link/key.pem")
    assert caught.value.code == "sandbox-path-outside-roots"


@pytest.mark.parametrize("path", [".env", ".env.local", "sub/.env", ".git/config", ".git/hooks/pre-commit"])
def test_default_deny_write_patterns(tmp_path, path):
    policy = _policy(tmp_path)
    assert check_sandbox_path(policy, path, access="read")
    with pytest.raises(SandboxPolicyError) as caught:
        check_sandbox_path(policy, path, access="write")
    assert caught.value.code == "sandbox-path-denied"


def test_read_only_root_is_not_writable(tmp_path):
    docs = tmp_path / "docs"
    policy = _policy(tmp_path / "ws", readable_roots=[tmp_path / "ws", docs])
    assert check_sandbox_path(policy, str(docs / "a.md"))
    with pytest.raises(SandboxPolicyError) as caught:
        check_sandbox_path(policy, str(docs / "a.md"), access="write")
    assert caught.value.code == "sandbox-path-outside-roots"


@pytest.mark.parametrize(
    ("network", "url", "allowed"),
    [
        (NetworkPolicy(mode="none"), "https://pypi.org/simple", False),
        (NetworkPolicy(mode="all"), "https://pypi.org/simple", True),
        (NetworkPolicy(mode="localhost"), "http://127.0.0.1:8080/", True),
        (NetworkPolicy(mode="localhost"), "http://[::1]:8080/", True),
        (NetworkPolicy(mode="localhost"), "https://pypi.org/", False),
        (
            NetworkPolicy(mode="allowlist", allowed_domains=("*.github.com",)),
            "https://api.github.com/x",
            True,
        ),
        (NetworkPolicy(mode="allowlist", allowed_domains=("*.github.com",)), "https://github.com/x", False),
        (NetworkPolicy(mode="allowlist", allowed_domains=("*.github.com",)), "https://evilgithub.com", False),
        (NetworkPolicy(mode="allowlist", allowed_domains=("pypi.org",)), "https://PyPI.org/", True),
        (NetworkPolicy(mode="all"), "not a url", False),
    ],
)
def test_network_policy_allows_url(network, url, allowed):
    assert network_policy_allows_url(network, url) is allowed


_hosts = st.sampled_from(
    ["localhost", "127.0.0.1", "::1", "pypi.org", "api.github.com", "github.com", "a.example"]
)
_domain_lists = st.lists(
    st.sampled_from(["localhost", "127.0.0.1", "::1", "pypi.org", "*.github.com", "github.com", "a.example"]),
    max_size=4,
)
_networks = st.builds(
    lambda mode, domains: {"mode": mode, "allowedDomains": domains},
    st.sampled_from(["none", "localhost", "allowlist", "all"]),
    _domain_lists,
)


@settings(max_examples=200, deadline=None)
@given(left=_networks, right=_networks, host=_hosts)
def test_network_merge_never_allows_more_than_either_side(tmp_path_factory, left, right, host):
    root = str(tmp_path_factory.getbasetemp())
    a = create_sandbox_policy(root=root, network=left)
    b = create_sandbox_policy(root=root, network=right)
    merged = merge_sandbox_policies(a, b).network
    url = f"https://[{host}]/" if ":" in host else f"https://{host}/"
    if network_policy_allows_url(merged, url):
        assert network_policy_allows_url(a.network, url)
        assert network_policy_allows_url(b.network, url)
    assert merged == merge_sandbox_policies(b, a).network


_paths = st.lists(st.sampled_from(["a", "b", "c", "a/x", "b/y"]), min_size=1, max_size=3)


@settings(max_examples=100, deadline=None)
@given(
    readable_a=_paths,
    readable_b=_paths,
    probe=st.sampled_from(["a/f", "b/f", "c/f", "a/x/f", "b/y/f", "d/f"]),
)
def test_root_merge_never_allows_more_than_either_side(tmp_path_factory, readable_a, readable_b, probe):
    base = tmp_path_factory.getbasetemp()
    for name in ("a", "b", "c", "a/x", "b/y"):
        (base / name).mkdir(parents=True, exist_ok=True)
    a = create_sandbox_policy(root=base, readable_roots=[base / p for p in readable_a], writable_roots=[])
    b = create_sandbox_policy(root=base, readable_roots=[base / p for p in readable_b], writable_roots=[])
    merged = merge_sandbox_policies(a, b)
    target = str(base / probe)

    def allowed(policy):
        try:
            check_sandbox_path(policy, target)
        except SandboxPolicyError:
            return False
        return True

    if allowed(merged):
        assert allowed(a)
        assert allowed(b)
    assert allowed(merged) == (allowed(a) and allowed(b))
