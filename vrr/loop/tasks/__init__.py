"""Task plug-ins: loaders, prompts, answer extraction, true-validity labels, perturbations (App. B).

To add a task: subclass :class:`Task` in a module here (see ``gsm8k.py``) and add it to ``TASKS``.
"""
from .base import MAX_PLAN_CHARS, Problem, Task  # noqa: F401
from .gsm8k import GSM8K

TASKS: dict[str, type] = {GSM8K.name: GSM8K}


def get_task(name: str) -> Task:
    """The task plug-in named by a setting's ``task`` field."""
    if name not in TASKS:
        raise NotImplementedError(f"task {name!r} has no loader in vrr.loop.tasks yet (implemented: {sorted(TASKS)})")
    return TASKS[name]()
