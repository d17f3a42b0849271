"""The task plug-in interface (paper App. B: one task = data, prompts, answer rule, perturbation).

A task supplies:

* problem loading: ``load(split)`` (a local copy under ``../shared/data/<dataset>`` first, the
  Hugging Face hub for online users), ``problem(split, index)``;
* its wording of the generator / judge / repair prompts: ``prompts`` (a
  :class:`vrr.loop.prompts.PromptSet`);
* answer extraction: ``extract_answer(text)``, stored with every plan before redaction;
* the validity label: ``is_valid(answer, problem)`` (the task's official rule),
  ``label_round(round_record, problem)`` for a stored round and ``label_rounds(items)`` for many;
* the prompt-mismatch perturbation: ``make_perturbation(problem, seed)`` (a spec that holds only
  the edited span, never the text) and ``apply_perturbation(text, spec)``;
* ``synthetic_plan(problem, correct)``: a plan in the task's answer format, for the fake engine
  backend that lets generate -> label run without vLLM.

Every function that parses model-written text is wrapped in :func:`reads_model_text`: whatever the text
(deep nesting, huge literals, a megabyte of spaces), extraction returns "no answer" (an invalid plan)
with the reason logged, never an exception.

``vrr.loop.tasks.get_task(name)`` returns the task plug-in of a setting's ``task`` field.
"""
from __future__ import annotations

import functools
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ...common.paths import shared_data_dirs

MAX_PLAN_CHARS = 4000  # plans longer than this are clipped inside judge/repair prompts
MAX_MODEL_TEXT_CHARS = 200_000  # model text longer than this is not parsed: no answer (outputs are a few KB)
log = logging.getLogger("vrr.loop.tasks")


def reads_model_text(fallback: Any = None) -> Callable:
    """Decorator of a function whose first argument is model-written text: the one place where reading
    such text may fail. A non-string or empty text, a text longer than :data:`MAX_MODEL_TEXT_CHARS`, and
    any exception raised while reading (``RecursionError`` from deep nesting, ``ValueError`` from the
    int/str conversion limit, ``MemoryError``, ``UnicodeError``, ...) give ``fallback``: no answer, so
    the plan is invalid. The reason of a refusal or a failure is logged (logger ``vrr.loop.tasks``,
    WARNING) with the function's name and the text's length, never the text."""
    def wrap(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def reader(text, *args, **kwargs):
            if not isinstance(text, str) or not text:
                return fallback
            if len(text) > MAX_MODEL_TEXT_CHARS:
                log.warning("%s: no answer: the text has %d characters (more than %d)",
                            fn.__qualname__, len(text), MAX_MODEL_TEXT_CHARS)
                return fallback
            try:
                return fn(text, *args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - model text must never crash extraction
                log.warning("%s: no answer: reading a %d-character text raised %s: %s",
                            fn.__qualname__, len(text), type(exc).__name__, str(exc)[:200])
                return fallback
        return reader
    return wrap


@dataclass(frozen=True)
class Problem:
    """One benchmark problem. ``answer`` is the task's reference (a worked solution, a gold
    answer, test cases): whatever its label rule needs."""

    split: str
    index: int
    question: str
    answer: Any
    dataset: str = ""

    @property
    def ref(self) -> dict:
        """How trajectories refer to this problem (never the text)."""
        return {"dataset": self.dataset, "split": self.split, "index": self.index}


class Task:
    """Base class of the task plug-ins; subclasses set ``name``, ``prompts`` and the methods."""

    name: str = ""
    prompts = None  # a vrr.loop.prompts.PromptSet
    label_rule: str = ""  # one line, stored in the arrays' meta
    splits: tuple = ()    # the splits ``load`` accepts
    dataset: str = ""     # how stored records name the benchmark (``Problem.ref``); default: ``name``
    show_progress: bool = True   # large label batches show a progress bar (``--no-progress`` turns it off)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if not cls.__dict__.get("dataset"):
            cls.dataset = cls.__dict__.get("name", cls.dataset)

    def load(self, split: str) -> list[Problem]:
        raise NotImplementedError

    def split_size(self, split: str) -> int:
        """How many problems ``split`` has (a window is checked against it): tasks whose split is a local file
        of one problem per line count its lines instead of loading every problem."""
        return len(self.load(split))

    def problem(self, split: str, index: int) -> Problem:
        problems = self.load(split)
        if not 0 <= index < len(problems):
            raise IndexError(f"{self.name} {split}: no problem {index} (the split has {len(problems)})")
        return problems[index]

    def extract_answer(self, text: str | None) -> Any:
        raise NotImplementedError

    def is_valid(self, answer: Any, problem: Problem) -> bool:
        raise NotImplementedError

    def label_round(self, round_record: dict, problem: Problem) -> int:
        """True validity of one stored plan: its ``answer`` was extracted before the stored text
        was redacted (vrr.loop.sandbox.redact_record); older records fall back to the text itself."""
        if "answer" in round_record:
            return int(self.is_valid(round_record["answer"], problem))
        return int(self.is_valid(self.extract_answer(round_record["plan"]), problem))

    def label_rounds(self, items: list[tuple[dict, Problem]]) -> list[int]:
        """Labels of many stored plans at once. Tasks whose checker is costly to start (a sandbox,
        another interpreter) override this to check the whole batch in one go."""
        return [self.label_round(rd, problem) for rd, problem in items]

    def execution_record(self) -> dict | None:
        """For tasks whose label or votes run model-written code: the execution rule and the sandbox
        it ran in (stored in the arrays' meta); None for tasks that run no code."""
        return None

    def execution_environment(self) -> dict | None:
        """For tasks whose label runs model-written code: the machine's sandbox (tool and package
        versions, cgroup), written beside the arrays as ``label_environment.json``; None otherwise."""
        return None

    def make_perturbation(self, problem: Problem, seed: int, kind: str = "auto") -> dict:
        raise NotImplementedError

    def apply_perturbation(self, text: str, spec: dict | None) -> str:
        raise NotImplementedError

    def synthetic_plan(self, problem: Problem, correct: bool) -> str:
        raise NotImplementedError

    @staticmethod
    def clip_plan(plan: str) -> str:
        return plan if len(plan) <= MAX_PLAN_CHARS else plan[:MAX_PLAN_CHARS] + "\n[...]"


def local_file(dataset: str, filename: str, env_var: str | None = None) -> Path | None:
    """The first ``<dir>/<filename>`` that exists among the dataset's local folders, or None."""
    for d in shared_data_dirs(dataset, env_var=env_var):
        p = d / filename
        if p.exists():
            return p
    return None


def count_rows(path: Path) -> int:
    """The non-empty lines of a JSONL file: its rows, counted without parsing or holding them."""
    with open(path, "rb") as f:
        return sum(1 for line in f if line.strip())


def read_jsonl_rows(dataset: str, split: str, env_var: str | None, path: str | os.PathLike | None = None,
                    allow_hub: bool = True, from_hub: Callable[[], list[dict]] | None = None) -> list[dict]:
    """The rows of ``<split>.jsonl`` of a benchmark: a given path, else the local copy, else (online users)
    ``from_hub()``; a clear error names every folder searched."""
    p = Path(path) if path else local_file(dataset, f"{split}.jsonl", env_var)
    if p is not None and p.exists():
        return [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
    return rows_from_hub(missing_message(f"{dataset} {split}.jsonl", path, dataset, env_var),
                         from_hub if allow_hub else None)


def missing_message(filename: str, path: str | os.PathLike | None, dataset: str, env_var: str | None) -> str:
    """What a loader found nowhere: ``filename`` and the given ``path``, or every folder searched."""
    return f"no local {filename} in {[Path(path)] if path else shared_data_dirs(dataset, env_var=env_var)}"


def rows_from_hub(missing: str, from_hub: Callable[[], list[dict]] | None) -> list[dict]:
    """The hub fallback of a dataset with no local copy (``None``: no fallback, the error ``missing``); when it
    fails (offline, no ``datasets`` package) the error names the folders searched first, then why the hub gave
    nothing."""
    if from_hub is None:
        raise FileNotFoundError(missing)
    try:
        return from_hub()
    except Exception as e:
        raise FileNotFoundError(f"{missing}, and the Hugging Face hub fallback failed ({type(e).__name__}: {e}); "
                                "put the dataset there or point the task's VRR_*_DIR variable at it") from e
