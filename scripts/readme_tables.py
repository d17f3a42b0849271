#!/usr/bin/env python
"""Write the README's result tables from the saved results, or check that the README quotes them.

    python scripts/readme_tables.py            # rewrite the block between the README's results markers
    python scripts/readme_tables.py --check    # exit 1 if the README differs from results/
    python scripts/readme_tables.py --print    # print the tables only
    python scripts/readme_tables.py --paper-summary   # print the paper comparison's counts by verdict (to paste)

The README's chain runtime table (between the runtime markers) is written here too, from the measurements that
``python scripts/bench_chain.py --record`` leaves in docs/runtime/<machine kind>.json, one column per kind.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from vrr.common.atomic import atomic_write  # noqa: E402
from vrr.report.summary import readme_summary, splice  # noqa: E402

RUNTIME_DIR = REPO / "docs" / "runtime"
RUNTIME_BEGIN, RUNTIME_END = "<!-- runtime:begin -->", "<!-- runtime:end -->"
KIND_ORDER = ("AMX", "AVX512-BF16", "AVX512 (no BF16)", "AVX2", "other")


def _seconds(s: float) -> str:
    s = round(s)
    return f"{s} s" if s < 60 else f"{s // 60} min {s % 60} s"


def runtime_block(records_dir: Path = RUNTIME_DIR) -> str:
    """The README's chain runtime table from the benchmark's records (docs/runtime/*.json), a column per kind."""
    import json

    records = [json.loads(p.read_text()) for p in sorted(Path(records_dir).glob("*.json"))]
    if not records:
        raise SystemExit(f"{records_dir}: no benchmark record; run python scripts/bench_chain.py --record")
    records.sort(key=lambda r: KIND_ORDER.index(r["machine"]) if r["machine"] in KIND_ORDER else len(KIND_ORDER))
    rows = [("`make -j2 reproduce`, empty results root: wall (CPU)",
             lambda r: f"{_seconds(r['wall_s'])} ({_seconds(r['cpu_s'])} CPU), {r['settings']} settings"),
            ("slowest `05_stats` of a setting (papermill)",
             lambda r: f"{r['slowest_05']['seconds']:.1f} s ({r['slowest_05']['setting']})"),
            ("measured on", lambda r: f"{r['cpu_model']}, {r['cores']} cores, load {r['load_start']:.1f} at start, "
                                      f"{r['date']}, commit {r['commit']}")]
    head = f"| chain (`{records[0]['command']}`) | " + " | ".join(r["machine"] for r in records) + " |"
    out = [head, "|---" * (len(records) + 1) + "|"]
    out += ["| " + name + " | " + " | ".join(cell(r) for r in records) + " |" for name, cell in rows]
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default=str(REPO / "results"))
    ap.add_argument("--readme", default=str(REPO / "README.md"))
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true")
    mode.add_argument("--print", action="store_true")
    mode.add_argument("--paper-summary", action="store_true",
                      help="print the README paragraph of results/tables/paper_comparison.csv (counts by verdict)")
    args = ap.parse_args()
    if args.paper_summary:
        from vrr.report.paper_comparison import paper_comparison_summary
        from vrr.report.render import read_csv

        print(paper_comparison_summary(read_csv(Path(args.results) / "tables" / "paper_comparison.csv")), end="")
        return 0
    block = readme_summary(args.results)
    if args.print:
        print(block, end="")
        return 0
    text = Path(args.readme).read_text()
    new = splice(text, block, args.readme)
    new = splice(new, runtime_block(), args.readme, RUNTIME_BEGIN, RUNTIME_END)
    if args.check:
        if new != text:
            print(f"{args.readme}: the results tables differ from {args.results} (or the runtime table from "
                  f"{RUNTIME_DIR}); run python scripts/readme_tables.py",
                  file=sys.stderr)
            return 1
        return 0
    atomic_write(args.readme, lambda fh: fh.write(new))
    return 0


if __name__ == "__main__":
    sys.exit(main())
