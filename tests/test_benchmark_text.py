"""No benchmark problem text in committed files; redaction of verbatim restatements."""
import gzip
import json
import random
import subprocess
from pathlib import Path

from vrr.loop.sandbox import REDACTION_MARKER as MARKER
from vrr.loop.sandbox import contains_problem_text, redact_problem_text

REPO = Path(__file__).resolve().parent.parent


def test_redaction_removes_verbatim_copies_and_keeps_the_rest():
    problem = "Mira walks to the harbour to buy lanterns for her new boat. One lantern costs $5, but every second lantern is 40% off."
    plan = ("Restating: Mira walks to the harbour to buy lanterns for her new boat. One lantern costs $5. "
            "So 16 lanterns cost 8 * 5 + 8 * 3 = 64. The answer is 64.")
    out = redact_problem_text(plan, problem)
    assert MARKER in out and "Mira walks to the harbour" not in out
    assert out.endswith("The answer is 64.")
    assert redact_problem_text("The answer is 64.", problem) == "The answer is 64."


def committed_text_files():
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True).stdout.split()
    for name in files:
        path = REPO / name
        if not path.is_file() or path.stat().st_size > 50_000_000 or path.suffix in (".png", ".pdf", ".npz"):
            continue
        data = path.read_bytes()
        if name.endswith(".gz"):
            data = gzip.decompress(data)
        yield name, data.decode("utf-8", "ignore")


DATA = REPO.parent / "shared" / "data"
# dataset file -> the field holding the problem text (BFCL: a list of chat turns)
PROBLEM_FILES = {"gsm8k/test.jsonl": "question", "gsm8k/train.jsonl": "question", "math500/test.jsonl": "problem",
                 "mbpp/mbpp.jsonl": "text", "mbpp/sanitized-mbpp.json": "prompt",
                 "bfcl/BFCL_v4_simple_python.json": "question", "bfcl/BFCL_v4_simple_java.json": "question",
                 "bfcl/BFCL_v4_simple_javascript.json": "question"}


def _problem_texts(name: str, field: str) -> list[str]:
    text = (DATA / name).read_text()
    rows = json.loads(text) if text.lstrip().startswith("[") else [json.loads(l) for l in text.splitlines() if l.strip()]
    out = []
    for r in rows:
        v = r[field]
        if isinstance(v, list):  # BFCL: [[{role, content}, ...]]
            v = " ".join(m["content"] for turn in v for m in (turn if isinstance(turn, list) else [turn]))
        out.append(v)
    return out


PREFIX = 60          # contains_problem_text's prefix_chars: the first 60 characters of a problem
PIECE = PREFIX // 2  # the text is looked up every PIECE characters


def prefix_index(problems) -> dict[str, set[int]]:
    """Every PIECE-character piece of every problem's first PREFIX characters -> the problems it is in."""
    index: dict[str, set[int]] = {}
    for i, p in enumerate(problems):
        if len(p) >= PREFIX:
            for offset in range(PREFIX - PIECE + 1):
                index.setdefault(p[offset:offset + PIECE], set()).add(i)
    return index


def problems_in(text: str, problems, index) -> list[int]:
    """contains_problem_text(text, problems) in one pass over the text. A prefix occurring at s spans
    s..s+PREFIX-1, so some multiple t of PIECE lies in s..s+PIECE-1 and text[t:t+PIECE] is a piece of the
    prefix: the pieces at multiples of PIECE find every candidate, each then checked whole."""
    candidates: set[int] = set()
    for t in range(0, len(text), PIECE):
        candidates |= index.get(text[t:t + PIECE], set())
    return sorted(i for i in candidates if problems[i][:PREFIX] in text)


def _all_problems() -> list[str]:
    assert DATA.is_dir(), f"{DATA}: the shared datasets must sit beside the clone (../shared)"
    return [t for name, field in PROBLEM_FILES.items() for t in _problem_texts(name, field)]


def test_the_one_pass_scan_finds_what_contains_problem_text_finds():
    """Prefixes planted at varying offsets to the pieces, a third of them one character short, between fragments:
    the one-pass scan reports exactly the problems ``contains_problem_text`` reports."""
    problems = _all_problems()
    rng = random.Random(0)
    long_enough = [i for i, p in enumerate(problems) if len(p) >= PREFIX]
    planted = rng.sample(long_enough, 2 * PIECE)
    parts = []
    for j, i in enumerate(planted):
        head = problems[i][:PREFIX]
        parts.append("x" * (j % PIECE + 1))                  # varying alignments of the prefix to the pieces
        parts.append(head if j % 3 else head[:-1])           # a third one character short: no hit
        parts.append(" " + problems[rng.choice(long_enough)][5:40])  # a fragment that is no prefix
    text = "".join(parts)
    expected = contains_problem_text(text, problems)
    assert len(expected) >= PIECE
    assert problems_in(text, problems, prefix_index(problems)) == expected


def test_no_benchmark_problem_text_is_committed():
    """No committed file holds the first 60 characters of any problem of the four datasets."""
    problems = _all_problems()
    assert len(problems) > 10_000
    index = prefix_index(problems)
    hits = {name: problems_in(text, problems, index)[:3] for name, text in committed_text_files()}
    assert not {k: [problems[i][:60] for i in v] for k, v in hits.items() if v}
