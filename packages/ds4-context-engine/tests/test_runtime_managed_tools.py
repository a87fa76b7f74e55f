"""The managed file tools on real files: what the model gets back, what lands on disk, what is refused."""

import dataclasses
import json
import os
import stat

import anyio
import jsonschema
import pytest

from ds4_context_engine.runtime import (
    MANAGED_TOOL_ERROR_CODES,
    MANAGED_TOOL_NAMES,
    SANDBOX_ERROR_CODES,
    ManagedToolbox,
    RuntimeOptionsError,
    SandboxPolicyError,
    ToolLimits,
    ToolOutcome,
    create_sandbox_policy,
    group_tool_calls,
)


@pytest.fixture
def ws(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return workspace


@pytest.fixture
def outside(tmp_path):
    place = tmp_path / "outside"
    place.mkdir()
    (place / "secret.txt").write_text("top secret\n")
    return place


def call(toolbox, name, arguments, **kwargs) -> ToolOutcome:
    async def main():
        return await toolbox.execute(name, arguments, call_id="call-1", **kwargs)

    outcome = anyio.run(main)
    assert isinstance(outcome, ToolOutcome)
    assert outcome.is_error == (outcome.code is not None)
    if outcome.is_error:
        assert outcome.code in (*MANAGED_TOOL_ERROR_CODES, *SANDBOX_ERROR_CODES)
        assert outcome.code in outcome.text
    return outcome


def refused(outcome, code, state="error"):
    assert outcome.is_error
    assert outcome.code == code
    assert outcome.state == state
    return outcome


# --- specs ---


def test_specs_describe_six_tools_with_schemas_the_validator_agrees_with(ws):
    toolbox = ManagedToolbox(ws)
    specs = toolbox.specs()
    assert tuple(spec.name for spec in specs) == MANAGED_TOOL_NAMES
    by_name = {spec.name: spec for spec in specs}
    assert {name for name, spec in by_name.items() if spec.read_only} == {"Read", "Glob", "Grep"}
    assert {name for name, spec in by_name.items() if spec.concurrency == "parallel-safe"} == {
        "Read",
        "Glob",
        "Grep",
    }
    for spec in specs:
        jsonschema.Draft202012Validator.check_schema(dict(spec.parameters))
        assert spec.parameters["additionalProperties"] is False
        json.dumps(spec.parameters)  # the model gets it as JSON
    validator = jsonschema.Draft202012Validator(dict(by_name["Read"].parameters))
    assert not validator.is_valid({"path": "a", "offset": 0})
    assert validator.is_valid({"path": "a", "offset": 3, "limit": 5})
    by_name["Read"].parameters["properties"].clear()  # a caller editing its copy changes nothing here
    assert "path" in toolbox.specs()[0].parameters["properties"]


# --- Read ---


def test_read_numbers_lines_and_pages_with_offset_and_limit(ws):
    (ws / "notes.txt").write_text("".join(f"line {n}\n" for n in range(1, 11)))
    toolbox = ManagedToolbox(ws)
    whole = call(toolbox, "Read", {"path": "notes.txt"})
    assert whole.state == "ok"
    assert whole.text.splitlines()[0] == "     1\tline 1"
    assert whole.text.splitlines()[-1] == "    10\tline 10"
    assert whole.details["lines"] == 10
    assert whole.details["next_offset"] is None
    page = call(toolbox, "Read", {"path": str(ws / "notes.txt"), "offset": 4, "limit": 3})
    lines = page.text.splitlines()
    assert lines[:3] == ["     4\tline 4", "     5\tline 5", "     6\tline 6"]
    assert "offset=7" in lines[3]
    assert page.details == {
        "path": "notes.txt",
        "offset": 4,
        "limit": 3,
        "lines": 3,
        "bytes": (ws / "notes.txt").stat().st_size,
        "truncated": True,
        "next_offset": 7,
    }
    past = call(toolbox, "Read", {"path": "notes.txt", "offset": 50})
    assert past.state == "ok"
    assert "10 lines" in past.text


def test_read_bounds_long_lines_and_total_output(ws):
    (ws / "wide.txt").write_text("x" * 5000 + "\nshort\n")
    (ws / "tall.txt").write_text("y" * 50 + "\n" * 1 + ("z" * 50 + "\n") * 2000)
    toolbox = ManagedToolbox(ws, limits=ToolLimits(max_line_chars=100, read_max_bytes=4096))
    wide = call(toolbox, "Read", {"path": "wide.txt"})
    first = wide.text.splitlines()[0]
    assert first.startswith("     1\t" + "x" * 100)
    assert "line truncated" in first
    assert len(first) < 200
    tall = call(toolbox, "Read", {"path": "tall.txt"})
    assert len(tall.text.encode()) < 4096 + 200
    assert tall.details["truncated"] is True
    resumed = call(toolbox, "Read", {"path": "tall.txt", "offset": tall.details["next_offset"]})
    assert resumed.text.startswith(f"{tall.details['next_offset']:>6}\t")


def test_read_skips_past_a_huge_line_without_holding_it(ws):
    # 9.4 MB: past the size Read takes whole, so it is streamed a line at a time
    (ws / "minified.js").write_text("é" * 4_700_000 + "\nnext line\n")
    outcome = call(ManagedToolbox(ws, limits=ToolLimits(max_line_chars=50)), "Read", {"path": "minified.js"})
    first, second = outcome.text.splitlines()
    assert first == "     1\t" + "é" * 50 + " [ds4: line truncated]"
    assert second == "     2\tnext line"


def test_read_refuses_binary_missing_and_directories(ws):
    (ws / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (ws / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    (ws / "sub").mkdir()
    toolbox = ManagedToolbox(ws)
    refused(call(toolbox, "Read", {"path": "image.png"}), "tool-binary-file")
    refused(call(toolbox, "Read", {"path": "latin1.txt"}), "tool-binary-file")
    refused(call(toolbox, "Read", {"path": "missing.txt"}), "tool-path-not-found")
    refused(call(toolbox, "Read", {"path": "sub"}), "tool-not-a-file")
    os.mkfifo(ws / "pipe")
    refused(call(toolbox, "Read", {"path": "pipe"}), "tool-not-a-file")  # and it did not hang


def test_read_of_an_empty_file_says_so(ws):
    (ws / "empty.txt").write_text("")
    outcome = call(ManagedToolbox(ws), "Read", {"path": "empty.txt"})
    assert outcome.state == "ok"
    assert "empty" in outcome.text


# --- Write ---


def test_write_creates_parents_privately_and_keeps_an_existing_mode(ws):
    toolbox = ManagedToolbox(ws)
    created = call(toolbox, "Write", {"path": "deep/er/new.py", "content": "print('hi')\n"})
    assert created.state == "ok"
    target = ws / "deep" / "er" / "new.py"
    assert target.read_text() == "print('hi')\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert stat.S_IMODE((ws / "deep").stat().st_mode) == 0o700
    assert created.details == {"path": "deep/er/new.py", "bytes": 12, "lines": 1, "created": True}
    script = ws / "run.sh"
    script.write_text("old\n")
    script.chmod(0o755)
    again = call(toolbox, "Write", {"path": "run.sh", "content": "#!/bin/sh\necho new\n"})
    assert again.details["created"] is False
    assert script.read_text() == "#!/bin/sh\necho new\n"
    assert stat.S_IMODE(script.stat().st_mode) == 0o755
    assert sorted(p.name for p in ws.iterdir()) == ["deep", "run.sh"]  # no temporary left behind


def test_write_through_an_inside_symlink_writes_its_target_and_keeps_the_link(ws):
    (ws / "real.txt").write_text("before\n")
    (ws / "link.txt").symlink_to("real.txt")
    call(ManagedToolbox(ws), "Write", {"path": "link.txt", "content": "after\n"})
    assert (ws / "link.txt").is_symlink()
    assert (ws / "real.txt").read_text() == "after\n"


def test_write_refuses_a_directory_target_and_a_file_parent(ws):
    (ws / "dir").mkdir()
    (ws / "file").write_text("x")
    toolbox = ManagedToolbox(ws)
    refused(call(toolbox, "Write", {"path": "dir", "content": "x"}), "tool-not-a-file")
    refused(call(toolbox, "Write", {"path": "file/child.txt", "content": "x"}), "tool-not-a-directory")
    assert (ws / "file").read_text() == "x"


def test_write_refuses_content_past_the_limit(ws):
    toolbox = ManagedToolbox(ws, limits=ToolLimits(max_file_bytes=64))
    refused(call(toolbox, "Write", {"path": "big.txt", "content": "a" * 65}), "tool-file-too-large")
    assert not (ws / "big.txt").exists()


# --- Edit ---


def test_edit_replaces_a_unique_match_and_reports_lines(ws):
    source = ws / "app.py"
    source.write_text("def f():\n    return 1\n\ndef g():\n    return 2\n")
    source.chmod(0o640)
    outcome = call(
        ManagedToolbox(ws),
        "Edit",
        {"path": "app.py", "old_string": "    return 2\n", "new_string": "    x = 2\n    return x\n"},
    )
    assert outcome.state == "ok"
    assert source.read_text() == "def f():\n    return 1\n\ndef g():\n    x = 2\n    return x\n"
    assert stat.S_IMODE(source.stat().st_mode) == 0o640
    assert outcome.details["first_line"] == 5
    assert outcome.details["replacements"] == 1
    assert outcome.details["lines_added"] - outcome.details["lines_removed"] == 1


def test_edit_needs_a_unique_match_unless_replace_all(ws):
    source = ws / "a.txt"
    source.write_text("foo\nbar\nfoo\n")
    toolbox = ManagedToolbox(ws)
    ambiguous = refused(
        call(toolbox, "Edit", {"path": "a.txt", "old_string": "foo", "new_string": "baz"}),
        "tool-edit-ambiguous",
    )
    assert "2 times" in ambiguous.text
    assert source.read_text() == "foo\nbar\nfoo\n"
    refused(
        call(toolbox, "Edit", {"path": "a.txt", "old_string": "qux", "new_string": "x"}), "tool-edit-no-match"
    )
    refused(
        call(toolbox, "Edit", {"path": "a.txt", "old_string": "foo", "new_string": "foo"}), "tool-edit-noop"
    )
    every = call(
        toolbox, "Edit", {"path": "a.txt", "old_string": "foo", "new_string": "baz", "replace_all": True}
    )
    assert every.details["replacements"] == 2
    assert source.read_text() == "baz\nbar\nbaz\n"


def test_edit_matches_lf_text_in_a_crlf_file_and_keeps_crlf(ws):
    source = ws / "win.txt"
    source.write_bytes(b"one\r\ntwo\r\nthree\r\n")
    call(ManagedToolbox(ws), "Edit", {"path": "win.txt", "old_string": "one\ntwo", "new_string": "1\n2"})
    assert source.read_bytes() == b"1\r\n2\r\nthree\r\n"


def test_edit_refuses_missing_and_binary_files(ws):
    (ws / "blob.bin").write_bytes(b"\x00\x01\x02abc")
    toolbox = ManagedToolbox(ws)
    refused(
        call(toolbox, "Edit", {"path": "nope.txt", "old_string": "a", "new_string": "b"}),
        "tool-path-not-found",
    )
    refused(
        call(toolbox, "Edit", {"path": "blob.bin", "old_string": "abc", "new_string": "d"}),
        "tool-binary-file",
    )
    assert (ws / "blob.bin").read_bytes() == b"\x00\x01\x02abc"


# --- Glob ---


def test_glob_lists_sorted_matches_below_a_path(ws):
    for name in ("src/b.py", "src/a.py", "src/pkg/c.py", "src/pkg/d.md", "top.py", ".git/x.py"):
        (ws / name).parent.mkdir(parents=True, exist_ok=True)
        (ws / name).write_text("")
    toolbox = ManagedToolbox(ws)
    every = call(toolbox, "Glob", {"pattern": "**/*.py"})
    assert every.text.splitlines() == ["src/a.py", "src/b.py", "src/pkg/c.py", "top.py"]
    assert every.details["hit_count"] == 4
    below = call(toolbox, "Glob", {"pattern": "*.{py,md}", "path": "src/pkg"})
    assert below.text.splitlines() == ["src/pkg/c.py", "src/pkg/d.md"]
    shallow = call(toolbox, "Glob", {"pattern": "*.py"}, cwd=ws / "src")
    assert shallow.text.splitlines() == ["a.py", "b.py"]
    none = call(toolbox, "Glob", {"pattern": "*.rs"})
    assert none.state == "ok"
    assert none.details["hit_count"] == 0


def test_glob_bounds_its_results_and_its_walk(ws):
    for n in range(30):
        (ws / f"f{n:02}.txt").write_text("")
    few = call(ManagedToolbox(ws, limits=ToolLimits(glob_max_results=5)), "Glob", {"pattern": "*.txt"})
    assert few.text.splitlines()[:5] == [f"f{n:02}.txt" for n in range(5)]
    assert "25 more" in few.text
    assert few.details["hit_count"] == 30
    short = call(ManagedToolbox(ws, limits=ToolLimits(walk_max_entries=10)), "Glob", {"pattern": "*.txt"})
    assert short.details["truncated"] is True
    assert "stopped after 10 entries" in short.text


def test_glob_refuses_escaping_patterns(ws):
    toolbox = ManagedToolbox(ws)
    for pattern in (
        "../*",
        "/etc/*",
        "a/../../b",
        "{" + ",".join("abcdefghi") + "}{" + ",".join("abcdefghi") + "}x",
    ):
        refused(call(toolbox, "Glob", {"pattern": pattern}), "tool-invalid-glob")
    (ws / "file.txt").write_text("")
    refused(call(toolbox, "Glob", {"pattern": "*", "path": "file.txt"}), "tool-not-a-directory")


def test_glob_does_not_list_symlinks_that_lead_outside(ws, outside):
    (ws / "inside.txt").write_text("")
    (ws / "leak.txt").symlink_to(outside / "secret.txt")
    (ws / "linked-dir").symlink_to(outside)
    listed = call(ManagedToolbox(ws), "Glob", {"pattern": "**/*"})
    assert listed.text.splitlines() == ["inside.txt"]


# --- Grep ---


def test_grep_reports_path_line_and_hit_count(ws):
    (ws / "a.py").write_text("import os\nx = 1\nimport sys\n")
    (ws / "b.md").write_text("import nothing here\n")
    (ws / "pkg").mkdir()
    (ws / "pkg" / "c.py").write_text("IMPORT = 3\n")
    toolbox = ManagedToolbox(ws)
    found = call(toolbox, "Grep", {"pattern": r"^import \w+$"})
    assert found.text.splitlines() == ["a.py:1:import os", "a.py:3:import sys"]
    assert found.details["hit_count"] == 2
    assert found.details["files_matched"] == 1
    python_only = call(toolbox, "Grep", {"pattern": "import", "glob": "*.py", "case_insensitive": True})
    assert python_only.text.splitlines() == ["a.py:1:import os", "a.py:3:import sys", "pkg/c.py:1:IMPORT = 3"]
    one_file = call(toolbox, "Grep", {"pattern": "x", "path": "a.py"})
    assert one_file.text.splitlines() == ["a.py:2:x = 1"]
    nothing = call(toolbox, "Grep", {"pattern": "zebra"})
    assert nothing.state == "ok"
    assert nothing.details["hit_count"] == 0


def test_grep_numbers_every_matching_line_once(ws):
    (ws / "gaps.txt").write_text("a\n\nb\n\n\nlast")
    toolbox = ManagedToolbox(ws)
    empty = call(toolbox, "Grep", {"pattern": "^$"})
    assert empty.text.splitlines() == ["gaps.txt:2:", "gaps.txt:4:", "gaps.txt:5:"]
    every = call(toolbox, "Grep", {"pattern": "x*"})
    assert [line.split(":")[1] for line in every.text.splitlines()] == ["1", "2", "3", "4", "5", "6"]
    twice = call(toolbox, "Grep", {"pattern": "a|t"})
    assert twice.text.splitlines() == ["gaps.txt:1:a", "gaps.txt:6:last"]
    assert twice.details["hit_count"] == 2


def test_grep_bounds_shown_lines_but_counts_every_hit(ws):
    (ws / "many.txt").write_text("hit\n" * 300)
    outcome = call(ManagedToolbox(ws), "Grep", {"pattern": "hit", "max_results": 10})
    assert len([line for line in outcome.text.splitlines() if line.startswith("many.txt:")]) == 10
    assert outcome.details["hit_count"] == 300
    assert "290 more" in outcome.text


def test_grep_skips_binary_files(ws):
    (ws / "blob.bin").write_bytes(b"\x00needle\x00")
    (ws / "text.txt").write_text("needle\n")
    outcome = call(ManagedToolbox(ws), "Grep", {"pattern": "needle"})
    assert outcome.text.splitlines()[0] == "text.txt:1:needle"
    assert "1 file(s) not searched" in outcome.text.splitlines()[1]
    assert outcome.details["files_skipped"] == 1


def test_grep_stops_a_catastrophic_pattern_at_its_time_bound(ws):
    (ws / "evil.txt").write_text("x" * 5000 + "\n")
    toolbox = ManagedToolbox(ws, limits=ToolLimits(grep_timeout_s=0.3))
    outcome = refused(call(toolbox, "Grep", {"pattern": "(x+x+)+y"}), "tool-search-timeout", state="timeout")
    assert "partial" in outcome.text


def test_grep_refuses_invalid_and_oversized_patterns(ws):
    toolbox = ManagedToolbox(ws, limits=ToolLimits(grep_max_pattern_chars=20))
    refused(call(toolbox, "Grep", {"pattern": "(unclosed"}), "tool-invalid-regex")
    refused(call(toolbox, "Grep", {"pattern": "a" * 21}), "tool-invalid-regex")
    refused(call(toolbox, "Grep", {"pattern": "a", "glob": "../*"}), "tool-invalid-glob")


# --- the boundary ---


def test_paths_outside_the_roots_are_refused_every_way(ws, outside):
    (ws / "escape").symlink_to(outside)
    (ws / "secret-link.txt").symlink_to(outside / "secret.txt")
    toolbox = ManagedToolbox(ws)
    attempts = [
        ("Read", {"path": "../outside/secret.txt"}),
        ("Read", {"path": str(outside / "secret.txt")}),
        ("Read", {"path": "secret-link.txt"}),
        ("Read", {"path": "escape/secret.txt"}),
        ("Write", {"path": "escape/new.txt", "content": "x"}),
        ("Write", {"path": "../outside/new.txt", "content": "x"}),
        ("Edit", {"path": "secret-link.txt", "old_string": "top", "new_string": "bottom"}),
        ("Glob", {"pattern": "*", "path": "escape"}),
        ("Grep", {"pattern": "secret", "path": "escape"}),
        ("Grep", {"pattern": "secret", "path": "/"}),
    ]
    for name, arguments in attempts:
        refused(call(toolbox, name, arguments), "sandbox-path-outside-roots", state="denied")
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "top secret\n"
    refused(call(toolbox, "Read", {"path": "a\x00b"}), "tool-invalid-path")
    refused(call(toolbox, "Read", {"path": "x"}, cwd=outside), "sandbox-path-outside-roots", state="denied")


def test_deny_write_defaults_hold_whatever_the_case_or_the_link(ws):
    (ws / ".env").write_text("API_KEY=1\n")
    (ws / ".git" / "hooks").mkdir(parents=True)
    (ws / ".git" / "config").write_text("[core]\n")
    os.link(ws / ".env", ws / "innocent.txt")
    toolbox = ManagedToolbox(ws)
    for path in (".env", ".ENV", ".env.local", "sub/.Env.production", ".git/config", ".git/hooks/pre-commit"):
        refused(
            call(toolbox, "Write", {"path": path, "content": "pwned"}), "sandbox-path-denied", state="denied"
        )
    refused(
        call(toolbox, "Edit", {"path": "innocent.txt", "old_string": "1", "new_string": "2"}),
        "sandbox-path-hard-linked",
        state="denied",
    )
    refused(
        call(toolbox, "Write", {"path": "innocent.txt", "content": "x"}),
        "sandbox-path-hard-linked",
        state="denied",
    )
    assert (ws / ".env").read_text() == "API_KEY=1\n"
    assert not (ws / ".git" / "hooks" / "pre-commit").exists()
    assert call(toolbox, "Read", {"path": ".env"}).state == "ok"  # deny-write is not deny-read


def test_additional_roots_read_and_write_as_declared(ws, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text("# guide\n")
    out = tmp_path / "out"
    out.mkdir()
    toolbox = ManagedToolbox(ws, additional_read_roots=[docs], additional_write_roots=[out])
    assert call(toolbox, "Read", {"path": str(docs / "guide.md")}).state == "ok"
    refused(
        call(toolbox, "Write", {"path": str(docs / "guide.md"), "content": "x"}),
        "sandbox-path-outside-roots",
        state="denied",
    )
    assert call(toolbox, "Write", {"path": str(out / "r.txt"), "content": "ok\n"}).state == "ok"
    assert call(toolbox, "Read", {"path": str(out / "r.txt")}).state == "ok"  # writable roots are readable
    assert (docs / "guide.md").read_text() == "# guide\n"


def test_a_native_policy_stays_the_boundary_and_adds_its_deny_list(ws, tmp_path):
    extra = tmp_path / "extra"
    extra.mkdir()
    (ws / "keep").mkdir()
    policy = create_sandbox_policy(
        root=ws, readable_roots=[ws], writable_roots=[ws / "keep"], deny_write=["*.lock"]
    )
    toolbox = ManagedToolbox(ws, additional_write_roots=[extra], sandbox_policy=policy)
    refused(
        call(toolbox, "Write", {"path": str(extra / "x"), "content": "x"}),
        "sandbox-path-outside-roots",
        "denied",
    )
    refused(
        call(toolbox, "Write", {"path": "top.txt", "content": "x"}), "sandbox-path-outside-roots", "denied"
    )
    refused(call(toolbox, "Write", {"path": "keep/uv.lock", "content": "x"}), "sandbox-path-denied", "denied")
    assert call(toolbox, "Write", {"path": "keep/fine.txt", "content": "x"}).state == "ok"


def test_construction_refuses_missing_roots_and_bad_limits(ws, tmp_path):
    with pytest.raises(SandboxPolicyError) as missing:
        ManagedToolbox(tmp_path / "absent")
    assert missing.value.code == "sandbox-root-missing"
    with pytest.raises(SandboxPolicyError):
        ManagedToolbox(ws, additional_read_roots=[tmp_path / "absent"])
    with pytest.raises(RuntimeOptionsError) as limits:
        ToolLimits(read_max_bytes=0)
    assert limits.value.code == "tool-invalid-limits"
    with pytest.raises(RuntimeOptionsError):
        ToolLimits(bash_timeout_s=700)


# --- bad calls ---


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("Read", {}),
        ("Read", {"path": 3}),
        ("Read", {"path": "a", "offset": 0}),
        ("Read", {"path": "a", "offset": "2"}),
        ("Read", {"path": "a", "limit": True}),
        ("Read", {"path": "a", "surprise": 1}),
        ("Read", ["a"]),
        ("Read", '{"path": "a"'),
        ("Write", {"path": "a"}),
        ("Edit", {"path": "a", "old_string": "", "new_string": "b"}),
        ("Edit", {"path": "a", "old_string": "x", "new_string": "b", "replace_all": "yes"}),
        ("Glob", {"pattern": ""}),
        ("Grep", {"pattern": "a", "max_results": 0}),
        ("Bash", {"command": "true", "timeout": -1}),
        ("Bash", {"command": ["ls"]}),
    ],
)
def test_broken_arguments_come_back_as_a_coded_error(ws, name, arguments):
    outcome = refused(call(ManagedToolbox(ws), name, arguments), "tool-invalid-arguments")
    assert "Traceback" not in outcome.text


def test_arguments_may_arrive_as_json_text(ws):
    (ws / "a.txt").write_text("hello\n")
    assert call(ManagedToolbox(ws), "Read", '{"path": "a.txt"}').text == "     1\thello"


def test_unknown_tools_are_an_error_outcome_that_names_the_known_ones(ws):
    for name in ("Delete", "read", "", None):
        outcome = refused(call(ManagedToolbox(ws), name, {}), "tool-unknown")
        assert "Read" in outcome.text


def test_a_cancel_already_set_stops_before_anything_happens(ws):
    async def main():
        cancel = anyio.Event()
        cancel.set()
        return await ManagedToolbox(ws).execute(
            "Write", {"path": "a.txt", "content": "x"}, call_id="c", cancel=cancel
        )

    outcome = anyio.run(main)
    assert outcome.state == "cancelled"
    assert outcome.code == "tool-cancelled"
    assert not (ws / "a.txt").exists()


def test_a_cancel_during_a_long_walk_ends_the_call(ws):
    for n in range(200):
        (ws / f"d{n}").mkdir()
        for m in range(20):
            (ws / f"d{n}" / f"f{m}.txt").write_text("needle\n" * 50)

    async def main():
        cancel = anyio.Event()
        toolbox = ManagedToolbox(ws, limits=ToolLimits(grep_timeout_s=60))
        async with anyio.create_task_group() as group:
            group.start_soon(lambda: _set_soon(cancel))
            return await toolbox.execute("Grep", {"pattern": "(n|e)+dle$"}, call_id="c", cancel=cancel)

    outcome = anyio.run(main)
    assert outcome.state == "cancelled"
    assert outcome.code == "tool-cancelled"


async def _set_soon(event):
    await anyio.sleep(0.05)
    event.set()


# --- safe-parallel grouping ---


def test_safe_parallel_overlaps_only_consecutive_read_only_built_ins(ws):
    specs = ManagedToolbox(ws).specs()
    calls = [
        "Read",
        "Grep",
        "Glob",
        "Edit",
        "Read",
        "Read",
        "mcp__github__search",
        "Read",
        "Bash",
        "Write",
        "Glob",
    ]
    batches = group_tool_calls(calls, specs)
    assert batches == (
        ("Read", "Grep", "Glob"),
        ("Edit",),
        ("Read", "Read"),
        ("mcp__github__search",),
        ("Read",),
        ("Bash",),
        ("Write",),
        ("Glob",),
    )
    assert [call for batch in batches for call in batch] == calls  # order preserved, nothing lost
    assert group_tool_calls(calls, specs, mode="sequential") == tuple((call,) for call in calls)
    assert group_tool_calls(["Read"] * 5, specs, max_batch=2) == (
        ("Read", "Read"),
        ("Read", "Read"),
        ("Read",),
    )
    # a tool that is not declared read-only and parallel-safe never overlaps, even under a built-in name
    assert group_tool_calls(["Read", "Read"], ()) == (("Read",), ("Read",))


def test_grouping_takes_call_records_and_refuses_bad_modes(ws):
    @dataclasses.dataclass
    class Call:
        id: str
        name: str

    specs = ManagedToolbox(ws).specs()
    calls = [Call("1", "Read"), Call("2", "Glob"), Call("3", "Write")]
    assert group_tool_calls(calls, specs) == ((calls[0], calls[1]), (calls[2],))
    keyed = group_tool_calls([("1", "Read"), ("2", "Read")], specs, name=lambda call: call[1])
    assert keyed == ((("1", "Read"), ("2", "Read")),)
    with pytest.raises(RuntimeOptionsError):
        group_tool_calls(calls, specs, mode="parallel")
    with pytest.raises(RuntimeOptionsError):
        group_tool_calls(calls, specs, max_batch=0)


def test_a_parallel_batch_runs_together_and_each_call_gets_its_own_outcome(ws):
    for n in range(8):
        (ws / f"f{n}.txt").write_text(f"content {n}\n")
    toolbox = ManagedToolbox(ws)
    calls = [("Read", {"path": f"f{n}.txt"}) for n in range(8)] + [("Grep", {"pattern": "content 3"})]
    (batch,) = group_tool_calls(calls, toolbox.specs(), name=lambda call: call[0])

    async def main():
        results = [None] * len(batch)

        async def one(index, name, arguments):
            results[index] = await toolbox.execute(name, arguments, call_id=f"c{index}")

        async with anyio.create_task_group() as group:
            for index, (name, arguments) in enumerate(batch):
                group.start_soon(one, index, name, arguments)
        return results

    results = anyio.run(main)
    assert [outcome.text for outcome in results[:8]] == [f"     1\tcontent {n}" for n in range(8)]
    assert results[8].text == "f3.txt:1:content 3"
