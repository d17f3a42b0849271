"""Every ```python block of README.md and docs/*.md runs, and the vrr names the pages cite exist.

The blocks of one page run top to bottom in one namespace, in a fresh interpreter whose working
directory is the repository root, as a reader would paste them into one session on a fresh clone. The
run is offline: an audit hook refuses any connection to a non-loopback address (a block may open its own
server on 127.0.0.1), and LiteLLM's cost map stays local. Nothing else is arranged for the page: a block
that would leave a file in the repository root (Inspect's default ./logs, say) fails the test.

A block that cannot run here (it needs a GPU, a model server or a long run) says so in the page, in an
HTML comment on the line just before its fence: ``<!-- no-run: the reason -->``. It is still parsed. The
test lists every such block with its reason and keeps their number small; nothing is skipped silently.
"""
from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
MAX_NO_RUN = 3                      # blocks that may be marked no-run across all pages
NO_RUN = re.compile(r"^<!--\s*no-run:\s*(?P<reason>.*?)\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<ticks>`{3,}|~{3,})(?P<info>.*)$")
# the extras a page's blocks may import; without them the page is skipped (a failure under make test)
EXTRAS = {"dspy": "dspy", "inspect_ai": "inspect_ai"}

# Run in the child interpreter before the page's blocks: no connection leaves the machine.
GUARD = textwrap.dedent("""
    import ipaddress, sys

    def _offline(event, args):
        if event == "socket.connect":
            address = args[1]
            host = address[0] if isinstance(address, tuple) else None
            if host is None:
                return
            try:
                loopback = ipaddress.ip_address(host).is_loopback
            except ValueError:
                loopback = False
            if not loopback:
                raise ConnectionRefusedError(f"docs examples run offline; refused a connection to {address}")

    sys.addaudithook(_offline)
""")


class Block:
    def __init__(self, page: Path, line: int, code: str, no_run: str | None):
        self.page, self.line, self.code, self.no_run = page, line, code, no_run

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def python_blocks(page: Path) -> list[Block]:
    """The page's fenced blocks whose info string starts with ``python``, with their no-run marks."""
    lines = page.read_text().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            if NO_RUN.match(lines[i].strip()) and not (i + 1 < len(lines) and FENCE.match(lines[i + 1])):
                raise AssertionError(f"{page.relative_to(REPO)}:{i + 1}: a no-run mark must sit on the line just "
                                     "before a ```python fence")
            i += 1
            continue
        ticks, lang = m.group("ticks"), m.group("info").strip().split(" ")[0]
        start = i
        body = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(ticks):
            body.append(lines[i])
            i += 1
        i += 1
        mark = NO_RUN.match(lines[start - 1].strip()) if start > 0 else None
        if lang != "python":
            if mark:
                raise AssertionError(f"{page.relative_to(REPO)}:{start + 1}: a no-run mark before a "
                                     f"```{lang} block (only python blocks run)")
            continue
        if mark and not mark.group("reason"):
            raise AssertionError(f"{page.relative_to(REPO)}:{start}: a no-run mark needs a reason")
        code = textwrap.dedent("\n".join(body))
        blocks.append(Block(page, start + 1, code, mark.group("reason") if mark else None))
    return blocks


BLOCKS = {page: python_blocks(page) for page in PAGES}
RUNNABLE = [page for page, blocks in BLOCKS.items() if any(b.no_run is None for b in blocks)]


def test_the_pages_have_examples_and_few_marked_no_run():
    assert any(BLOCKS.values()), "no ```python block found in README.md or docs/*.md"
    assert REPO / "docs" / "adapters.md" in RUNNABLE
    no_run = [(b.where, b.no_run) for blocks in BLOCKS.values() for b in blocks if b.no_run]
    assert len(no_run) <= MAX_NO_RUN, f"too many blocks marked no-run (at most {MAX_NO_RUN}): {no_run}"


@pytest.mark.parametrize("block", [b for blocks in BLOCKS.values() for b in blocks], ids=lambda b: b.where)
def test_every_block_is_valid_python(block):
    try:
        ast.parse(block.code, filename=block.where)
    except SyntaxError as exc:
        pytest.fail(f"{block.where}: {exc}")


def _needed_extras(code: str) -> list[str]:
    tree = ast.parse(code)
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    return sorted(EXTRAS[n] for n in names if n in EXTRAS)


@pytest.mark.parametrize("page", RUNNABLE, ids=lambda p: str(p.relative_to(REPO)))
def test_the_page_runs_top_to_bottom(page, tmp_path):
    from conftest import require_adapter_library

    blocks = [b for b in BLOCKS[page] if b.no_run is None]
    for extra in _needed_extras("\n".join(b.code for b in blocks)):
        require_adapter_library(extra)
    # one script: each block runs in the shared namespace; a failure names the block's line
    script = [GUARD, "__ns = {'__name__': '__main__'}"]
    for b in blocks:
        script.append(f"print({b.where!r}, flush=True)")
        script.append(f"exec(compile({b.code!r}, {b.where!r}, 'exec'), __ns)")
    env = {k: v for k, v in os.environ.items() if k != "INSPECT_LOG_DIR"}
    env.update({"LITELLM_LOCAL_MODEL_COST_MAP": "True", "INSPECT_DISPLAY": "none", "PYTHONPATH": str(REPO)})
    top_level = set(os.listdir(REPO))
    proc = subprocess.run([sys.executable, "-c", "\n".join(script)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)
    left = sorted(set(os.listdir(REPO)) - top_level)
    ran = [line for line in proc.stdout.splitlines() if line.startswith(str(page.relative_to(REPO)) + ":")]
    assert proc.returncode == 0, (f"{page.relative_to(REPO)}: the block at {ran[-1] if ran else '?'} failed\n"
                                  f"{proc.stderr[-3000:]}")
    assert len(ran) == len(blocks)
    assert not left, f"{page.relative_to(REPO)}: running its blocks left {left} in the repository root"


# ---------------------------------------------------------------- the names the pages cite
CITED = re.compile(r"(?<![\w./])vrr(?:\.[A-Za-z_]\w*)+")


def _resolve(dotted: str):
    """Import the longest module prefix of ``dotted`` and follow the rest as attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ModuleNotFoundError(dotted)


def test_every_cited_vrr_name_exists():
    missing = []
    for page in PAGES:
        for n, line in enumerate(page.read_text().splitlines(), 1):
            for name in CITED.findall(line):
                if name.endswith((".py", ".md")) or name.split(".")[1] in ("adapters",) and not _has_extras():
                    continue
                try:
                    _resolve(name)
                except (ImportError, AttributeError) as exc:
                    missing.append(f"{page.relative_to(REPO)}:{n}: {name} ({type(exc).__name__}: {exc})")
    assert not missing, "names the pages cite that the code does not have:\n" + "\n".join(missing)


def _has_extras() -> bool:
    try:
        import dspy  # noqa: F401
        import inspect_ai  # noqa: F401
    except ImportError:
        return os.environ.get("VRR_REQUIRE_ADAPTERS") == "1"   # then resolving them fails loudly
    return True


# A call written in a page's inline code, e.g. `OnlineController.from_labeled(votes=..., M=...)`: every
# argument name it shows must be a parameter of the code's signature (unless the signature takes **kwargs).
INLINE_CALL = re.compile(r"`([A-Za-z_][\w.]*)\(([^`]*)\)`")
# where a bare name is looked up (``vrr``'s own lazy API has generic names such as generate, so a bare call
# is checked only against these modules)
NAMESPACES = ["vrr.policies.online", "vrr.adapters.dspy", "vrr.adapters.inspect"]


def _callee(name: str):
    if name.startswith("vrr."):
        return _resolve(name)
    head, *rest = name.split(".")
    for module in NAMESPACES:
        if module.startswith("vrr.adapters") and not _has_extras():
            continue
        obj = getattr(importlib.import_module(module), head, None)
        if obj is not None:
            for part in rest:
                obj = getattr(obj, part)
            return obj
    return None


def _shown_parameters(args: str) -> list[str]:
    """Argument names a call shows: ``name=...`` and bare identifiers (a signature written out)."""
    depth, part, parts = 0, "", []
    for ch in args:
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            parts.append(part)
            part = ""
        else:
            part += ch
    parts.append(part)
    names = []
    for p in (p.strip() for p in parts):
        m = re.match(r"^([A-Za-z_]\w*)\s*(=|$)", p)
        if m and not p.startswith("*"):
            names.append(m.group(1))
    return names


def test_calls_in_the_pages_match_the_signatures():
    import inspect as pyinspect

    wrong = []
    for page in PAGES:
        for n, line in enumerate(page.read_text().splitlines(), 1):
            for name, args in INLINE_CALL.findall(line):
                try:
                    callee = _callee(name)
                except (ImportError, AttributeError) as exc:
                    wrong.append(f"{page.relative_to(REPO)}:{n}: {name} ({exc})")
                    continue
                if callee is None or not callable(callee):
                    continue
                target = callee.__init__ if isinstance(callee, type) else getattr(callee, "__wrapped__", callee)
                try:
                    params = dict(pyinspect.signature(target).parameters)
                except (TypeError, ValueError):
                    continue
                params.pop("self", None)
                if any(p.kind is p.VAR_KEYWORD for p in params.values()):
                    continue   # the names it takes are not in its signature
                unknown = [a for a in _shown_parameters(args) if a not in params]
                if unknown:
                    wrong.append(f"{page.relative_to(REPO)}:{n}: {name}(...) shows {unknown}, not parameters of "
                                 f"{name}{pyinspect.signature(target)}")
    assert not wrong, "calls in the pages that do not match the code:\n" + "\n".join(wrong)
