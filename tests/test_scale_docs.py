"""Every command of docs/scale.md's shell blocks runs as written, block by block in the order of the page.

What cannot run here is stood in for at the edge, as the page says: a server line (``vllm serve``, the
``vrr.loop.engine.server`` module with ``--run``) by a stub OpenAI-compatible server on 127.0.0.1 that serves
exactly the model the line names where the line listens (a command talks to the server started last at its
address; a hosted API is a stub that serves its models and requires the exported key); the in-process engine by the fake
backend; a long window by ``--n 2 --probe-n 2`` (and ``K_max=1``, ``M=2``). ``pip install`` has its extra
checked in pyproject.toml and the benchmark line, which needs the engine, its options. A line of another kind
fails the test: a command added to the page must be placed here. A plain block right after a shell block is
the output of the block's last command, and must be what it prints.
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from test_openai_backend import stub_factory  # noqa: F401  (a fixture: stub servers on 127.0.0.1)
from vrr.loop.tasks import get_task
from vrr.settings import load_config

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "scale.md"
FENCE = re.compile(r"^```(\w*)\s*$")
HOSTED = {"https://api.openai.com/v1": ["gpt-4o-mini", "gpt-4o"]}  # what each hosted API of the page serves
SMALL = ["--n", "2", "--probe-n", "2"]
SMALL_PROTOCOL = ["--set", "K_max=1", "--set", "M=2"]


@dataclass
class Block:
    line: int                      # the fence's line number in the page
    commands: list[str]
    output: str | None = None      # the plain block that follows it, if any


def page_blocks(text: str) -> list[Block]:
    """The page's ```bash blocks (continuation lines joined; blank and comment lines left out), each with the
    plain ``` block that follows it directly."""
    lines = text.splitlines()
    fences, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        j = i + 1
        while not lines[j].startswith("```"):
            j += 1
        fences.append((i + 1, m.group(1), lines[i + 1:j], j + 1))
        i = j + 1
    blocks = []
    for k, (start, lang, body, end) in enumerate(fences):
        if lang != "bash":
            continue
        joined = "\n".join(body).replace("\\\n", " ")
        commands = [c.strip() for c in joined.splitlines() if shlex.split(c, comments=True)]
        block = Block(start, commands)
        if k + 1 < len(fences) and fences[k + 1][1] == "" and not "".join(lines[end:fences[k + 1][0] - 1]).strip():
            block.output = "\n".join(fences[k + 1][2]) + "\n"
        blocks.append(block)
    return blocks


def option(words, flag, default=None):
    return words[words.index(flag) + 1] if flag in words else default


def served_by(servers: list[dict], url: str, where: str) -> dict:
    """The server line, the last one of the page so far, that listens where ``url`` points (its host, or any
    host, and its port): a reader who runs the page in order talks to the server started last there."""
    parts = urlsplit(url)
    for server in reversed(servers):
        if server["port"] == parts.port and server["host"] in (None, parts.hostname):
            return server
    raise AssertionError(f"{where}: no server line above it listens at {url}")


def check_extra(words):
    assert words[:3] == ["pip", "install", "-e"] and (m := re.fullmatch(r"\.\[([\w,-]+)\]", words[3])), words
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(m.group(1).split(",")) <= set(extras), (words, sorted(extras))


def engine_server_line(words, servers, monkeypatch):
    """The module's line without ``--run`` prints the server it would start: on the line's port, serving the
    model under its name. The model registry's download is the edge replaced here."""
    from vrr.loop.engine import models, server

    monkeypatch.setattr(models, "resolve_model", lambda name: (f"/models/{name}", {}))
    args = [w for w in words[3:] if w != "--run"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert server.main(args) == 0
    printed = shlex.split(out.getvalue())
    name, port = args[0], int(option(args, "--port", 8000))
    assert "vllm.entrypoints.openai.api_server" in printed and option(printed, "--port") == str(port)
    assert option(printed, "--served-model-name") == name
    servers.append({"models": [name], "host": option(args, "--host", "127.0.0.1"), "port": port})


def check_bench_options(words):
    """The benchmark needs the engine: its options must be the script's, its setting a setting."""
    shown = subprocess.run([sys.executable, "scripts/bench_engine.py", "--help"], cwd=REPO, capture_output=True,
                           text=True, timeout=120).stdout
    for word in words[2:]:
        if word.startswith("--"):
            assert re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", shown), f"bench_engine.py has no {word}"
    load_config(option(words, "--serve-compare"))


def test_every_command_of_docs_scale_runs_as_written(tmp_path, stub_factory, monkeypatch):
    blocks = page_blocks(PAGE.read_text())
    env = dict(os.environ, PYTHONPATH=str(REPO))
    stubs: dict = {}
    servers: list[dict] = []  # the server lines run so far, in order
    ran = {"generate": 0, "server": 0}
    for number, block in enumerate(blocks):
        root = tmp_path / f"block{number}"
        last = None
        for command in block.commands:
            words = shlex.split(command, comments=True)
            if words[-1] == "&":
                words = words[:-1]
            where = f"docs/scale.md:{block.line}: {command}"
            if words[0] == "pip":
                check_extra(words)
            elif words[0] == "export":
                name, value = words[1].split("=", 1)
                env[name] = f"key-of-{name}" if value == "..." else value
            elif words[:2] == ["vllm", "serve"]:
                if "--headless" not in words:  # a node without an API server
                    servers.append({"models": [option(words, "--served-model-name", words[2])],
                                          "host": option(words, "--host"), "port": int(option(words, "--port", 8000))})
            elif words[1:3] == ["-m", "vrr.loop.engine.server"]:
                engine_server_line(words, servers, monkeypatch)
            elif words[1:2] == ["scripts/bench_engine.py"]:
                check_bench_options(words)
            elif words[:2] == ["python", "scripts/cost_model.py"]:
                last = subprocess.run([sys.executable, *words[1:]], cwd=REPO, env=env, capture_output=True, text=True,
                                      timeout=300)
                assert last.returncode == 0, f"{where}\n{last.stderr[-3000:]}"
            elif words[:4] == ["python", "-m", "vrr", "generate"]:
                last = run_generate(words, servers, root, env, stubs, stub_factory, where)
                ran["generate"] += 1
            else:
                raise AssertionError(f"{where}: a command this test does not know how to run or stand in for")
        if block.output is not None:
            assert last is not None, f"docs/scale.md:{block.line}: an output block after a block that prints nothing"
            out = last.stdout.replace(shlex.quote(sys.executable), "python")
            written_root = option(shlex.split(block.commands[-1], comments=True), "--out-root")
            if written_root:
                out = out.replace(str(root), written_root)
            assert out == block.output, f"docs/scale.md:{block.line}: the output shown is not what it prints"
    assert ran["generate"] >= 10
    for stub in stubs.values():  # every server a command sent work to answered it
        assert stub.chat_requests()
    hosted = [s for s in stubs.values() if s.api_key]
    assert hosted and {b["model"] for s in hosted for b in s.chat_requests()} == {"gpt-4o-mini"}


def run_generate(words, servers, root, env, stubs, make_stub, where):
    args = list(words[1:])
    setting = load_config(args[3])
    for i, arg in enumerate(args):
        for url in re.findall(r"https?://[^\s,]+", arg):
            if url.startswith("https"):  # a hosted API: its models, and the key the command's variable holds
                key, models, api_key = url, HOSTED[url], env[_api_key_env(args)]
            else:
                server = served_by(servers, url, where)
                key, models, api_key = id(server), server["models"], None
            if key not in stubs:
                stubs[key] = make_stub(task=get_task(setting["task"]), models=models, api_key=api_key)
            args[i] = args[i].replace(url, stubs[key].url)
    if "--backend" not in args:
        args += ["--backend", "fake"]  # the in-process engine
    if "--out-root" in args:
        args[args.index("--out-root") + 1] = str(root)
    else:
        args += ["--out-root", str(root)]
    if "--n" not in args:
        args += SMALL + ([] if "--finalize-only" in args else SMALL_PROTOCOL)
    proc = subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{where}\n{proc.stderr[-3000:]}"
    state = proc.stdout.splitlines()[0].split(":")[0]
    assert state == ("partial" if option(words, "--shard", "").startswith("0/") else "complete"), f"{where}\n{proc.stdout}"
    swapped = [f for f in ("--model", "--verifier")
               if f in words and option(words, f) != setting["models"]["generator" if f == "--model" else "judge"]]
    writes = bool(swapped) and "--finalize-only" not in words      # said once, where a swap starts writing
    assert proc.stderr.startswith("model swap: writing to ") == writes, f"{where}\n{proc.stderr[-3000:]}"
    assert "model swap:" not in proc.stdout and proc.stderr.count("model swap:") <= 1
    return proc


def _api_key_env(args) -> str:
    """The variable a command names for the hosted judge's key (``engine.roles.judge.api_key_env=NAME``)."""
    values = [a.split("=", 1)[1] for a in args if a.startswith("engine.roles.judge.api_key_env=")]
    assert len(values) == 1, "a hosted server's command names the variable of its key"
    return values[0]
