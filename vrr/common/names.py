"""Names that forgive: the known names nearest a mistyped one (``difflib``), and the command line's parser that
answers a mistyped subcommand, option or choice with one line naming them (exit status 2)."""
from __future__ import annotations

import argparse
import difflib
import re
import sys


def nearest(name: str, known, n: int = 3) -> list[str]:
    """The known names closest to ``name`` (``difflib``; case ignored), best first."""
    lower = {str(k).lower(): str(k) for k in known}
    return [lower[m] for m in difflib.get_close_matches(str(name).lower(), list(lower), n=n, cutoff=0.6)]


class ForgivingParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line with the nearest known names and exit status 2
    (argparse's own usage block would bury the hint)."""

    def error(self, message: str):
        hint = ""
        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if choice:
            known = re.findall(r"'([^']*)'", choice.group(2))
            near = nearest(choice.group(1), known)
            what = "command" if "argument command" in message else "choice"
            message = f"no {what} {choice.group(1)!r}; known: {', '.join(known)}"
            hint = f"; did you mean {' or '.join(near)}?" if near else ""
        unknown = re.search(r"unrecognized arguments: (.*)", message)
        if unknown:
            options = {o for action in self._every_action() for o in action.option_strings}
            words = [w.split("=")[0] for w in unknown.group(1).split() if w.startswith("-")]
            other = [w for w in words if w in options]      # an option of another subcommand
            near = [n for w in words if w not in options for n in nearest(w, options)[:1]]
            hint = "".join([f"; did you mean {' or '.join(near)}?" if near else "",
                            f"; {', '.join(other)}: an option of another subcommand" if other else ""])
        sys.stderr.write(f"{self.prog}: error: {message}{hint} (--help lists the options)\n")
        raise SystemExit(2)

    def _every_action(self):
        yield from self._actions
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                for parser in action.choices.values():
                    yield from parser._actions
