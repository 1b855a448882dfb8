"""Every ```python block in README.md and docs/ runs as written, and pastes as written.

A page is read like a notebook: its blocks run in order in one fresh namespace (a block may use
what an earlier block of the same page defined), top-level `await` allowed. A block preceded by
`<!-- fragment: path/to/complete_example.py -->` is not run; the comment must name a file of this
repository that shows it complete. A block preceded by `<!-- signature: module.name -->` is a
signature, compared with the code's by tests/test_docs_signatures.py. Blocks that need a server
start a loopback one themselves.

A reader pastes a block into `python -m asyncio`, whose console ends a compound statement at a
blank line and refuses a statement right after one without it: every block must paste as it is
(checked by feeding it to `code.InteractiveConsole` line by line, as the console reads it).
A block that is not a program says so in its fence, for the reader too: a file to save (a test
module, `title="test_x.py"`, the only blocks that may import pytest) or a signature
(`title="signature (not a program)"`).
"""

from __future__ import annotations

import ast
import asyncio
import code
import dataclasses
import inspect
import re
import sys
import textwrap
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from langgraph_deadline.instrument import get_observers, set_observers

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)(?:[ \t]+(?P<attrs>[^`]*?))?[ \t]*$")
TITLE = re.compile(r'\btitle="(?P<title>[^"]*)"')
MARK = re.compile(r"<!--\s*(?P<kind>fragment|signature)\b:?\s*(?P<target>[^\s>]*)\s*-->")


@dataclasses.dataclass(frozen=True)
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    code: str
    fragment_of: str | None  # the complete example a fragment points to ("": names none)
    signature_of: str | None = None  # the function whose signature the block shows
    title: str | None = None  # the fence's `title="..."`: a file's name, or what the block is

    @property
    def a_file(self) -> bool:
        """A file to save (a test module), not lines to paste."""
        return self.title is not None and self.title.endswith(".py")


def blocks(page: Path) -> list[Block]:
    """The ```python blocks of `page`, each with the marking (fragment, signature) on the line
    before it, if any."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), len(lines))
        if opening["lang"] == "python":
            before = lines[i - 1] if i else ""
            mark = MARK.search(before)
            kind, target = (mark["kind"], mark["target"]) if mark else (None, None)
            code = textwrap.dedent("\n".join(lines[i + 1 : end]))
            fragment_of = target if kind == "fragment" else None
            signature_of = target if kind == "signature" else None
            titled = TITLE.search(opening["attrs"] or "")
            title = titled["title"] if titled else None
            found.append(Block(page, i + 1, code, fragment_of, signature_of, title))
        i = end + 1
    return found


def run_page(page: Path) -> None:
    """Run the page's blocks in order in one fresh module, on one event loop."""
    name = "docs_" + re.sub(r"\W", "_", str(page.relative_to(ROOT)))
    module = types.ModuleType(name)
    module.__file__ = str(page)
    sys.modules[name] = module  # so that classes defined in a block resolve their annotations
    loop = asyncio.new_event_loop()
    try:
        for block in blocks(page):
            if block.fragment_of is not None or block.signature_of is not None:
                continue
            flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
            tree = compile(block.code, str(page), "exec", flags=flags | ast.PyCF_ONLY_AST)
            ast.increment_lineno(tree, block.line)  # a traceback names the page's own line
            result = eval(compile(tree, str(page), "exec", flags=flags), module.__dict__)
            if inspect.iscoroutine(result):
                loop.run_until_complete(result)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
        del sys.modules[name]


class _Console(code.InteractiveConsole):
    """The console of `python -m asyncio` (top-level `await`), compiling what it is fed without
    running it, and keeping the errors it would show."""

    def __init__(self) -> None:
        super().__init__()
        self.compile.compiler.flags |= ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        self.errors: list[str] = []

    def runcode(self, code: types.CodeType) -> None:
        pass

    def showsyntaxerror(self, filename: str | None = None, **kwargs: object) -> None:
        kind, error, _ = sys.exc_info()
        self.errors.append(f"{getattr(kind, '__name__', kind)}: {error}")


def paste_errors(source: str) -> list[str]:
    """The errors pasting `source` into the console shows, each with the line it came at."""
    console = _Console()
    more = False
    for n, line in enumerate(source.splitlines(), 1):
        before = len(console.errors)
        more = console.push(line)
        console.errors[before:] = [f"line {n}: {e}" for e in console.errors[before:]]
    if more:
        console.push("")
    return console.errors


def pasted_blocks() -> list[Block]:
    """The blocks a reader may paste: every run block but the files to save."""
    return [
        b
        for p in PAGES
        for b in blocks(p)
        if b.fragment_of is None and b.signature_of is None and not b.a_file
    ]


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A page writes its files (trace.jsonl, plots) in a scratch directory, and the observers
    it installs are taken down after it."""
    monkeypatch.chdir(tmp_path)
    saved = get_observers()
    try:
        yield
    finally:
        set_observers(saved)


@pytest.mark.timeout(60)
@pytest.mark.usefixtures("isolated")
@pytest.mark.parametrize(
    "page", [p for p in PAGES if blocks(p)], ids=lambda p: str(p.relative_to(ROOT))
)
def test_every_python_block_of_the_page_runs(page: Path) -> None:
    run_page(page)


def test_every_block_a_reader_may_paste_pastes_into_the_console() -> None:
    refused = {
        f"{b.page.relative_to(ROOT)}:{b.line}": errors
        for b in pasted_blocks()
        if (errors := paste_errors(b.code))
    }
    assert refused == {}


def test_only_files_to_save_import_pytest() -> None:
    pasted = [b for b in pasted_blocks() if re.search(r"^\s*(import|from) pytest\b", b.code, re.M)]
    assert [f"{b.page.relative_to(ROOT)}:{b.line}" for b in pasted] == []


def test_a_signature_block_says_it_is_not_a_program() -> None:
    signatures = [b for p in PAGES for b in blocks(p) if b.signature_of is not None]
    assert signatures
    assert [b.line for b in signatures if b.title != "signature (not a program)"] == []


def test_the_paste_check_catches_what_the_console_refuses() -> None:
    assert paste_errors("class A:\n    x = 1\n\n    y = 2\n")  # blank line in a body
    assert paste_errors("with open('f') as f:\n    pass\nprint(1)\n")  # no blank line after
    assert paste_errors("x = (\n    1\n)\nif x:\n    await y\n\nprint(x)\n") == []


def test_each_fragment_names_a_complete_example_that_exists() -> None:
    fragments = [b for p in PAGES for b in blocks(p) if b.fragment_of is not None]
    missing = [
        f"{b.page.relative_to(ROOT)}:{b.line} -> {b.fragment_of}"
        for b in fragments
        if not b.fragment_of or not (ROOT / b.fragment_of).is_file()
    ]
    assert missing == []


def test_the_fence_reader_finds_blocks_and_fragment_markings(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "text\n\n```python\nx = 1\n```\n\n<!-- fragment: examples/quickstart.py -->\n"
        "```python\ny = await z\n```\n\n```bash\nmake demo\n```\n\n- item\n\n    ```python\n"
        "    w = 2\n    ```\n<!-- fragment -->\n```python\nv\n```\n"
        '```python title="test_x.py"\nimport pytest\n```\n'
    )
    found = blocks(page)
    assert [(b.line, b.code, b.fragment_of) for b in found] == [
        (3, "x = 1", None),
        (8, "y = await z", "examples/quickstart.py"),
        (18, "w = 2", None),
        (22, "v", ""),  # a bare marking: skipped, and refused for naming no example
        (25, "import pytest", None),
    ]
    assert [b.title for b in found] == [None, None, None, None, "test_x.py"]
    assert found[-1].a_file


def test_the_readme_links_to_a_complete_quickstart_example() -> None:
    assert "examples/quickstart.py" in (ROOT / "README.md").read_text(encoding="utf-8")
    assert (ROOT / "examples" / "quickstart.py").is_file()
