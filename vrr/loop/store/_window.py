"""The window of a part file and the one predicate that decides which records belong to it.

A record belongs to a run's window when its setting, dataset and split are the run's and its index
lies in ``start .. start + n`` (:func:`window_membership`, the one predicate that resume and finalize
share); its shape (rounds, verifier outputs) must match the run's config (:func:`record_shape_problem`).
:func:`check_window_fits` refuses a window that ends past its dataset.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..config import RunConfig
from ._errors import WindowError
from ._shard import Shard


@dataclass(frozen=True)
class Window:
    """The instances one part file of a run holds, and the shape of their records.

    ``kind`` is "trajectories" (records with ``rounds`` rounds of ``votes`` verifier outputs each)
    or "probe" (one plan with ``votes`` verifier outputs); ``split`` is None for a run without a
    probe of its own.
    """

    kind: str
    setting: str
    dataset: str
    split: str | None
    start: int
    n: int
    votes: int
    rounds: int | None = None
    shard: Shard | None = None

    @property
    def indices(self) -> list[int]:
        """The window's indices (the shard's share of them for a shard's window)."""
        return [i for i in range(self.start, self.start + self.n) if self.owns(i)]

    def owns(self, index: int) -> bool:
        """Whether ``index`` falls to this window's shard (always, for a whole window)."""
        return self.shard is None or self.shard.owns(index)

    @property
    def config_fields(self) -> tuple[str, str, str]:
        """The names of the window's split, start and length in ``config.json``."""
        return ("split", "start", "n") if self.kind == "trajectories" else ("probe_split", "probe_start", "probe_n")

    def describe(self) -> str:
        f_split, f_start, f_n = self.config_fields
        of_shard = f", shard {self.shard}" if self.shard else ""
        return (f"setting {self.setting!r} {self.kind} window ({self.dataset}, "
                f"{f_split}={self.split!r}, {f_start}={self.start}, {f_n}={self.n}{of_shard})")


def _dataset_name(cfg: RunConfig, dataset: str | None) -> str:
    if dataset is not None:
        return dataset
    from ..tasks import get_task  # the task registry; imported here so reading records starts no task

    return get_task(cfg.dataset).dataset


def trajectory_window(cfg: RunConfig, dataset: str | None = None, shard: Shard | None = None) -> Window:
    """The trajectory window of a run (``shard``: that shard's share). ``dataset``: how records name
    the benchmark (the task's ``dataset``); looked up from ``cfg.dataset`` when not given."""
    return Window("trajectories", cfg.setting, _dataset_name(cfg, dataset), cfg.split, cfg.start, cfg.n,
                  votes=cfg.M, rounds=cfg.K_max + 1, shard=shard)


def probe_window(cfg: RunConfig, dataset: str | None = None, shard: Shard | None = None) -> Window:
    """The probe window whose records the run ``cfg`` stores itself (its own ``probe.part.jsonl``).

    A run that reuses another setting's probe (``probe_from``) or has none owns an empty window
    with ``split`` None: every record in its probe part file is foreign.
    """
    owns = bool(cfg.probe_split) and not cfg.probe_from
    return Window("probe", cfg.setting, _dataset_name(cfg, dataset), cfg.probe_split if owns else None,
                  cfg.probe_start, cfg.probe_n if owns else 0, votes=cfg.probe_votes, shard=shard)


IN_WINDOW, PAST_WINDOW, FOREIGN = "in window", "past the window", "foreign"


def window_membership(record: dict, window: Window) -> tuple[str, str]:
    """Where a record stands relative to a window, and why.

    ``(IN_WINDOW, "")``: an instance of the window (same setting, dataset and split; index in
    ``start .. start + n``). ``(PAST_WINDOW, why)``: an instance of the same run past the window's
    end, kept because the window may be extended. ``(FOREIGN, why)``: a record of another setting,
    dataset or split, one before the window's start, which belongs to no window of this run, or,
    in a shard's window, one whose index falls to another shard.
    """
    for field in ("setting", "dataset", "split"):
        if field not in record:
            return FOREIGN, f"field '{field}' missing (the run's is {getattr(window, field)!r})"
        if record[field] != getattr(window, field):
            return FOREIGN, f"field '{field}' is {record[field]!r}, the run's is {getattr(window, field)!r}"
    index = record.get("index")
    if not isinstance(index, int) or isinstance(index, bool):
        return FOREIGN, f"field 'index' is {index!r}, not an integer"
    if index < window.start:
        return FOREIGN, f"field 'index' is {index}, before the window start {window.config_fields[1]}={window.start}"
    if not window.owns(index):
        return FOREIGN, (f"field 'index' is {index}, which falls to shard {index % window.shard.count}/"
                         f"{window.shard.count}, not to this shard {window.shard}")
    if index >= window.start + window.n:
        return PAST_WINDOW, f"index {index} is past the window's end ({window.start + window.n})"
    return IN_WINDOW, ""


def in_window(record: dict, window: Window) -> bool:
    """Whether ``record`` is one of the window's instances (:func:`window_membership`)."""
    return window_membership(record, window)[0] == IN_WINDOW


def _outputs_problem(outputs, votes: int, where: str) -> str:
    if not isinstance(outputs, list):
        return f"field '{where}judge' is {type(outputs).__name__}, not a list of verifier outputs"
    if len(outputs) != votes:
        return f"field '{where}judge' has {len(outputs)} verifier outputs, the run's M is {votes}"
    for m, text in enumerate(outputs):
        if not isinstance(text, str):
            return f"field '{where}judge[{m}]' is {type(text).__name__}, not a string"
    return ""


def record_shape_problem(record: dict, window: Window) -> str:
    """The first field in which a record differs from the shape of the window's records ('' when none).

    A trajectory record has ``window.rounds`` rounds, round ``k`` at position ``k``, each with a
    string ``plan`` and ``window.votes`` string verifier outputs; a probe record has one string
    ``plan`` and ``window.votes`` string outputs. This is what labeling reads.
    """
    if window.kind == "probe":
        if not isinstance(record.get("plan"), str):
            return f"field 'plan' is {type(record.get('plan')).__name__}, not a string"
        return _outputs_problem(record.get("judge"), window.votes, "")
    rounds = record.get("rounds")
    if not isinstance(rounds, list):
        return "field 'rounds' missing" if rounds is None else f"field 'rounds' is {type(rounds).__name__}, not a list"
    if len(rounds) != window.rounds:
        return f"field 'rounds' has {len(rounds)} rounds, the run's K_max + 1 is {window.rounds}"
    for k, rd in enumerate(rounds):
        if not isinstance(rd, dict):
            return f"field 'rounds[{k}]' is {type(rd).__name__}, not an object"
        if rd.get("k") != k:
            return f"field 'rounds[{k}].k' is {rd.get('k')!r}, expected {k}"
        if not isinstance(rd.get("plan"), str):
            return f"field 'rounds[{k}].plan' is {type(rd.get('plan')).__name__}, not a string"
        problem = _outputs_problem(rd.get("judge"), window.votes, f"rounds[{k}].")
        if problem:
            return problem
    return ""


# the setting's fields (vrr.settings) of a window's start and length, by their config.json names
SETTING_FIELDS = {"start": "window.start", "n": "window.N", "probe_start": "probe.start", "probe_n": "probe.n"}


def check_window_fits(window: Window, dataset_size: int) -> None:
    """Refuse a window that ends past the end of its split (it could never complete): a
    :class:`WindowError` naming the setting's field, its start when the window starts past the end,
    else its length."""
    if window.n > 0 and window.start + window.n > dataset_size:
        f_split, f_start, f_n = window.config_fields
        field = SETTING_FIELDS[f_start if window.start >= dataset_size else f_n]
        raise WindowError(f"setting {window.setting!r}: field '{field}': the {window.kind} window "
                          f"{f_split}={window.split!r} {f_start}={window.start} {f_n}={window.n} ends at index "
                          f"{window.start + window.n - 1}, past the end of {window.dataset} {window.split} "
                          f"({dataset_size} problems, indices 0..{dataset_size - 1})")
