"""Task plug-ins: loaders, prompts, answer extraction, true-validity labels, perturbations (App. B).

To add a task: subclass :class:`Task` in a module here (see ``gsm8k.py``) and add it to ``TASKS``.
"""
from .base import MAX_PLAN_CHARS, Problem, Task  # noqa: F401
from .bfcl import BFCLSimple
from .bfcl_multi import BFCLMulti
from .gsm8k import GSM8K
from .math500 import MATH500
from .mbpp import MBPP

TASKS: dict[str, type] = {cls.name: cls for cls in (GSM8K, MATH500, MBPP, BFCLSimple, BFCLMulti)}


def get_task(name: str) -> Task:
    """The task plug-in named by a setting's ``task`` field."""
    if name not in TASKS:
        raise NotImplementedError(f"task {name!r} has no loader in vrr.loop.tasks yet (implemented: {sorted(TASKS)})")
    return TASKS[name]()
