"""What ``python -m vrr generate`` prints when it ends: where the run is, what it holds, what is missing and
the command that comes next.

The first line starts with the run's state, the word the label step returns (``complete``, ``partial``,
``empty``), or ``not finalized`` after ``--no-finalize``; scripts read that first word. Then the run folder
(an absolute path), a model swap's folder, the count of each shard's share of the window, the missing
indices and the next command: the one that generates what is missing (one per shard that lacks
instances, for a sharded run), or ``--finalize-only`` once everything is stored. The commands are written
from the options given (:class:`GenerateCommand`), so a swapped run's carry its ``--model``/``--verifier``.
"""
from __future__ import annotations

import os
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from . import store
from .config import RunConfig

# The options of ``python -m vrr generate`` that a resume repeats: (namespace attribute, flag). The others
# are the summary's to choose: --shard (one command per shard), --finalize-only, --allow-partial and
# --no-finalize (a resume finalizes), --limit and --phase (a resume generates everything missing).
RESUME_OPTIONS = (("set", "--set"), ("model", "--model"), ("verifier", "--verifier"), ("n", "--n"),
                  ("probe_n", "--probe-n"), ("seed", "--seed"), ("backend", "--backend"),
                  ("batch_size", "--batch-size"), ("run_name", "--run-name"), ("out_root", "--out-root"),
                  ("no_progress", "--no-progress"))
CHOSEN_BY_THE_SUMMARY = ("shard", "finalize_only", "allow_partial", "no_finalize", "limit", "phase")
# what --finalize-only reads besides the stored config: the run's folder and the window lengths
FINALIZE_OPTIONS = ("model", "verifier", "run_name", "out_root", "n", "probe_n")
MAX_INDEX_TEXT = 160  # characters of index ranges on one line; the rest is counted
MAX_SHARD_LINES = 4   # shards that each get their own next command; more share one line


def interpreter() -> str:
    """How to call this interpreter in a printed command: ``python`` when that is what ``python`` runs on the
    PATH, else its path (an engine venv's, say)."""
    on_path = shutil.which("python")
    return "python" if on_path and os.path.abspath(on_path) == os.path.abspath(sys.executable) else sys.executable


@dataclass(frozen=True)
class GenerateCommand:
    """A ``python -m vrr generate`` command line: the setting and its options as (flag, value) pairs, value
    None for a switch."""

    setting: str
    options: tuple[tuple[str, str | None], ...] = ()

    @classmethod
    def from_args(cls, args: Any, default_out_root: str | os.PathLike = store.DEFAULT_OUT_ROOT) -> "GenerateCommand":
        """The options of a parsed ``generate`` command line that a resume repeats (:data:`RESUME_OPTIONS`);
        ``--out-root`` only when it is not the default."""
        options: list[tuple[str, str | None]] = []
        for attr, flag in RESUME_OPTIONS:
            value = getattr(args, attr, None)
            if value is None or value is False:
                continue
            if attr == "out_root" and os.path.abspath(value) == os.path.abspath(default_out_root):
                continue
            if value is True:
                options.append((flag, None))
            elif isinstance(value, list):
                options += [(flag, str(v)) for v in value]
            else:
                options.append((flag, str(value)))
        return cls(args.setting, tuple(options))

    def line(self, *extra: str, keep: Sequence[str] | None = None) -> str:
        """The command as one shell line, with ``extra`` arguments; ``keep``: only these flags."""
        words = [interpreter(), "-m", "vrr", "generate", self.setting]
        for flag, value in self.options:
            if keep is None or flag in keep:
                words += [flag] if value is None else [flag, value]
        return shlex.join(words + list(extra))

    def finalize_line(self) -> str:
        flags = {flag for attr, flag in RESUME_OPTIONS if attr in FINALIZE_OPTIONS}
        return self.line("--finalize-only", keep=flags)


def swap_note(folder: Path) -> str:
    """The line that says a model swap writes to its own folder."""
    return (f"model swap: writing to {Path(os.path.abspath(folder))}; pass the same --model/--verifier to "
            "resume or finalize")


def require_run(paths: store.RunPaths) -> None:
    """Refuse to finalize a folder without a run when runs of the same setting under a model swap's name
    (``<setting>--gen-X--judge-Y``) lie beside it, naming them: the command may have meant one. Other
    problems are left to reading ``config.json``, which names them."""
    if paths.config.exists() or not paths.dir.parent.is_dir():
        return  # reading config.json says what is wrong
    siblings = sorted(p.name for p in paths.dir.parent.glob(f"{paths.dir.name}--*") if (p / "config.json").is_file())
    if siblings:
        raise store.RunStoreError(paths.dir, f"no run here (no config.json); runs of this setting with a swapped "
                                             f"model: {', '.join(siblings)}. Pass the same --model/--verifier (or "
                                             "--run-name) to finalize one")


def _short(text: str, total: int) -> str:
    """Index ranges (:func:`vrr.loop.store.index_ranges`) cut after about :data:`MAX_INDEX_TEXT` characters at
    a comma, with the number of indices in all."""
    if len(text) <= MAX_INDEX_TEXT:
        return text
    return f"{text[:MAX_INDEX_TEXT].rsplit(', ', 1)[0]}, ... ({total} in all)"


def shard_count(paths: store.RunPaths, shard: store.Shard | None = None) -> int | None:
    """The number of shards a run is split into: ``shard``'s, else that of its part files when they are
    all of one split; None for an unsharded run (or one with part files of several splits)."""
    if shard is not None:
        return shard.count
    whole = store.RunPaths(paths.dir.parent, paths.dir.name)
    counts = {store.shard_of_file(p).count
              for name in (store.TRAJ_PART_NAME, store.PROBE_PART_NAME) for p in whole.shard_files(name)}
    return counts.pop() if len(counts) == 1 else None


def _missing_text(kind: str, missing: list[int], count: int | None) -> str:
    if not missing:
        return ""
    if count is None:
        return f"{kind} {_short(store.index_ranges(missing), len(missing))}"
    groups = []
    for index in range(count):
        share = [i for i in missing if i % count == index]
        if share:
            groups.append(f"{_short(store.index_ranges(share, count), len(share))} (shard {index}/{count})")
    return f"{kind} " + ", ".join(groups)


def run_summary(state: str | None, paths: store.RunPaths, cfg: RunConfig, command: GenerateCommand,
                shard: store.Shard | None = None, swap: str = "", readability: Sequence[str] = ()) -> str:
    """The lines ``python -m vrr generate`` prints on stdout when it ends (see the module docstring).

    ``state``: what finalizing returned (``complete``, ``partial``, ``empty``), None when the run was not
    finalized; ``cfg``: the config whose window is reported; ``shard``: the shard this command ran;
    ``swap``: the model-swap line (:func:`swap_note`), '' without a swap; ``readability``: the lines that give
    the unparsable share of the judge's votes and warn above 10 % (``vrr.report.status.readability_lines``)."""
    window = store.stored_window(paths, cfg)
    count = shard_count(paths, shard)
    traj_done = {r["index"] for r in window.traj}
    probe_done = {r["index"] for r in window.probe}
    traj_missing = sorted(window.traj_want - traj_done)
    probe_missing = sorted(window.probe_want - probe_done)
    owner = cfg.probe_from
    probe_what = f"probe plans of {owner}" if owner else "probe plans"
    stored = f"{len(traj_done & window.traj_want)} of {len(window.traj_want)} trajectories"
    if window.probe_want:
        stored += f" and {len(probe_done & window.probe_want)} of {len(window.probe_want)} {probe_what}"
    lines = [f"{state or 'not finalized'}: {stored} stored", f"run folder: {Path(os.path.abspath(paths.dir))}"]
    if swap:
        lines.append(swap)
    if count is not None:
        whole = store.RunPaths(paths.dir.parent, paths.dir.name)
        ran = {store.shard_of_file(p) for name in (store.TRAJ_PART_NAME, store.PROBE_PART_NAME)
               for p in whole.shard_files(name)}
        for index in range(count):
            def share(indices) -> int:
                return sum(1 for i in indices if i % count == index)
            text = f"shard {index}/{count}: {share(traj_done & window.traj_want)} of {share(window.traj_want)} trajectories"
            if window.probe_want and not owner:
                text += f", {share(probe_done & window.probe_want)} of {share(window.probe_want)} probe plans"
            if store.Shard(index, count) not in ran:
                text += " (never ran)"
            lines.append(text)
    own_probe_missing = [] if owner else probe_missing
    missing = [t for t in (_missing_text("trajectories", traj_missing, count),
                           _missing_text("probe plans", own_probe_missing, count)) if t]
    if owner and probe_missing:
        missing.append(f"probe plans {_short(store.index_ranges(probe_missing), len(probe_missing))} (of {owner}, "
                       "which generates them)")
    if window.probe_missing:
        missing.append(window.probe_missing)
    lines += list(readability)
    if missing:
        lines.append("missing: " + "; ".join(missing))
    if state in ("complete", "partial"):
        lines.append(f"arrays: {Path(os.path.abspath(paths.arrays if state == 'complete' else paths.arrays_partial))}")
    lines += _next_commands(state, traj_missing, own_probe_missing, count, command, owner, probe_missing,
                            window.probe_missing)
    return "\n".join(lines)


def _next_commands(state, traj_missing, probe_missing, count, command: GenerateCommand, owner, owner_missing,
                   owner_problem) -> list[str]:
    if not traj_missing and not probe_missing:
        if owner and (owner_missing or owner_problem):
            owner_command = GenerateCommand(owner, tuple(o for o in command.options if o[0] == "--out-root"))
            return [f"next: {owner_command.line('--phase', 'probe')}  # the run that owns the probe, with the "
                    "options it was started with",
                    f"then: {command.finalize_line()}"]
        if state == "complete":
            return ["next: nothing to generate: the window is complete"]
        return [f"next: {command.finalize_line()}"]
    if count is None:
        return [f"next: {command.line()}"]
    shards = sorted({i % count for i in traj_missing + probe_missing})
    if len(shards) > MAX_SHARD_LINES:
        out = [f"next, for each shard I in {', '.join(map(str, shards))} (one per node): "
               f"{command.line('--shard', f'I/{count}')}"]
    else:
        out = [f"next (shard {s}/{count}): {command.line('--shard', f'{s}/{count}')}" for s in shards]
    return out + [f"then: {command.finalize_line()}  # once every shard is done (the last one to finish does it too)"]
