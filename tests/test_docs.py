"""Every ``python`` code block in the docs and READMEs runs, so examples can never rot.

Blocks fenced with the info string exactly ``python`` are executed in order, one namespace per file, with
a temporary directory as the working directory; ``python no-exec`` blocks are shown but not run. A failure
names the Markdown file and the line of the block.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import ROOT, run_script

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


@dataclass(frozen=True)
class Block:
    info: str
    line: int  # 1-based line of the first code line
    code: str


def code_blocks(text: str) -> list[Block]:
    """The fenced code blocks of a Markdown text, with their info strings."""
    blocks: list[Block] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        fence = opening["fence"]
        body: list[str] = []
        index += 1
        start = index + 1
        while index < len(lines):
            closing = _FENCE.match(lines[index])
            if (
                closing
                and closing["fence"][0] == fence[0]
                and len(closing["fence"]) >= len(fence)
                and not closing["info"].strip()
            ):
                break
            body.append(lines[index][len(opening["indent"]) :] if opening["indent"] else lines[index])
            index += 1
        blocks.append(Block(opening["info"].strip(), start, "\n".join(body) + "\n"))
        index += 1
    return blocks


def documentation_files() -> list[Path]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    files += sorted((ROOT / "packages").glob("*/README.md"))
    return [path for path in files if path.is_file()]


def _executable(path: Path) -> list[Block]:
    return [block for block in code_blocks(path.read_text(encoding="utf-8")) if block.info == "python"]


DOCUMENTS = [path for path in documentation_files() if _executable(path)]


@pytest.mark.parametrize("path", DOCUMENTS, ids=[str(path.relative_to(ROOT)) for path in DOCUMENTS])
def test_python_examples_run(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"docs_example_{path.stem}"}
    for block in _executable(path):
        # Pad with blank lines so a traceback points at the real line in the Markdown file.
        source = "\n" * (block.line - 1) + block.code
        exec(compile(source, str(path), "exec"), namespace)  # running the docs is the point


def test_every_documentation_file_is_found() -> None:
    found = {path.relative_to(ROOT).as_posix() for path in documentation_files()}
    assert {"README.md", "docs/index.md", "docs/install.md"} <= found


MARKDOWN = """\
Intro.

```python
x = 1
```

```python no-exec
raise SystemExit("never run")
```

````markdown
```python
nested = True
```
````

~~~python
y = x + 1
~~~

```console
$ echo hi
```
"""


def test_block_extraction_keeps_info_strings_lines_and_nesting() -> None:
    blocks = code_blocks(MARKDOWN)
    assert [block.info for block in blocks] == ["python", "python no-exec", "markdown", "python", "console"]
    assert blocks[0].code == "x = 1\n"
    assert blocks[0].line == 4
    assert "```python" in blocks[2].code, "a fence inside a longer fence is content, not a block"
    assert blocks[3].code == "y = x + 1\n"
    assert [b.code for b in blocks if b.info == "python"] == ["x = 1\n", "y = x + 1\n"]


def test_a_failing_example_names_its_file_and_line(tmp_path: Path) -> None:
    doc = tmp_path / "broken.md"
    doc.write_text("# Broken\n\n```python\nvalue = 1\nassert value == 2\n```\n", encoding="utf-8")
    (block,) = _executable(doc)
    with pytest.raises(AssertionError) as caught:
        exec(compile("\n" * (block.line - 1) + block.code, str(doc), "exec"), {})
    last = caught.traceback[-1]
    assert Path(str(last.path)) == doc
    assert last.lineno + 1 == 5


def test_relative_links_in_the_docs_resolve() -> None:
    result = run_script("check_docs_links.py", "--root", ROOT)
    assert result.returncode == 0, result.stderr


def test_a_broken_relative_link_is_reported(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("[ok](docs/a.md) [web](https://example.com) [anchor](#top)\n")
    (tmp_path / "docs" / "a.md").write_text(
        "[back](../README.md#top) [gone](missing.md)\n\n```\n[x](no.md)\n```\n"
    )
    result = run_script("check_docs_links.py", "--root", tmp_path)
    assert result.returncode == 1
    assert result.stderr.count("error DOC001:") == 1
    assert "docs/a.md: broken link missing.md" in result.stderr
