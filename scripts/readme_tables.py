#!/usr/bin/env python
"""Write the README's result tables from the saved results, or check that the README quotes them.

    python scripts/readme_tables.py            # rewrite the block between the README's results markers
    python scripts/readme_tables.py --check    # exit 1 if the README differs from results/
    python scripts/readme_tables.py --print    # print the tables only
    python scripts/readme_tables.py --paper-summary   # print the paper comparison's counts by verdict (to paste)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from vrr.common.atomic import atomic_write  # noqa: E402
from vrr.report.summary import readme_summary, splice  # noqa: E402


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
    if args.check:
        if new != text:
            print(f"{args.readme}: the results tables differ from {args.results}; run python scripts/readme_tables.py",
                  file=sys.stderr)
            return 1
        return 0
    atomic_write(args.readme, lambda fh: fh.write(new))
    return 0


if __name__ == "__main__":
    sys.exit(main())
