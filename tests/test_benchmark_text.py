"""No benchmark problem text in committed files; redaction of verbatim restatements."""
import gzip
import json
import subprocess
from pathlib import Path

from vrr.loop.redact import MARKER, contains_problem_text, redact_problem_text

REPO = Path(__file__).resolve().parent.parent
GSM8K = REPO.parent / "shared" / "data" / "gsm8k"


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


def test_no_gsm8k_problem_text_is_committed():
    assert GSM8K.is_dir(), f"{GSM8K}: the shared datasets must sit beside the clone (../shared)"
    problems = [json.loads(line)["question"] for split in ("test", "train")
                for line in open(GSM8K / f"{split}.jsonl")]
    hits = {name: contains_problem_text(text, problems)[:3] for name, text in committed_text_files()}
    assert not {k: v for k, v in hits.items() if v}
