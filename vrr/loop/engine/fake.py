"""A deterministic stand-in for the vLLM engine, so generate -> label runs without vLLM.

It answers the same ``chat(conversations, temperature, max_tokens, n)`` calls as
:class:`vrr.loop.engine.backend.VLLMEngine`, from the task's own data:

* generator: a correct plan for problems with an even index, a wrong one for odd indices;
* judge: on a correct plan, votes m = 0, 2, 4, ... accept; on a wrong plan, m = 0, 4, 8, ...
  accept (so the judge discriminates, J = 0.25). A judge model whose name starts with ``prose`` writes the same
  verdicts as a small model does, in a sentence ("The proposed solution is correct."), cut after ``max_tokens``
  words as a token budget cuts it;
* repairer: flips the plan's correctness;
* test writer (the ``llm_asserts`` verifier): the task's shown test, for every vote;
* program writer (the ``llm_program`` verifier): a program printing the right answer for even votes
  m and a wrong one for odd m;
* a generation step of a multi-step task (BFCL multi-turn, ``task.step_context``): at the start of a
  user turn, that turn's calls of the task's synthetic plan (correct for even indices); after the
  calls' results, no call (the turn ends).

Plans are written by ``task.synthetic_plan``; the problem is found by its text in the
conversation. ``fail_after=k`` raises ``KeyboardInterrupt`` on call k + 1 (a kill mid-run).
Use it with ``backend: fake`` in a setting, or ``make_engine(..., backend="fake", task=...)``.

For process tests it can behave like a real engine in two more ways: ``call_seconds`` (or
``$VRR_FAKE_CALL_SECONDS``) makes every call take that long, and ``stub_child`` (or
``$VRR_FAKE_STUB_CHILD=1``) starts a child process that lives as long as the engine, standing in
for vLLM's EngineCore, so a test can check that killing a run leaves no process behind.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Sequence

from ..prompts import plan_of, problem_of
from ..verifiers import ASSERT_SYSTEM, PROGRAM_SYSTEM


class FakeEngine:
    backend = "fake"

    def __init__(self, task, model: str = "fake", seed: int = 0, fail_after: int | None = None,
                 splits: Sequence[str] | None = None, call_seconds: float | None = None,
                 stub_child: bool | None = None, **_ignored):
        self.task, self.model, self.seed, self.fail_after = task, model, seed, fail_after
        self.call_seconds = float(os.environ.get("VRR_FAKE_CALL_SECONDS", 0) if call_seconds is None else call_seconds)
        if stub_child if stub_child is not None else os.environ.get("VRR_FAKE_STUB_CHILD") == "1":
            self.child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        self.splits = tuple(splits if splits is not None else task.splits)
        self._by_text: dict | None = None
        self.calls: list[dict] = []
        self.last_info: dict = {}
        self.load_seconds = 0.0
        self.stats = {"calls": 0, "prompt_tokens": 0, "generated_tokens": 0, "seconds": 0.0}

    def _lookup(self, text: str):
        if self._by_text is None:
            self._by_text = {}
            for split in self.splits:
                for p in self.task.load(split):
                    self._by_text.setdefault(p.question, p)
        return self._by_text.get(text)

    def _correct(self, plan: str, problem) -> bool:
        return problem is not None and bool(self.task.is_valid(self.task.extract_answer(plan), problem))

    def chat(self, conversations, temperature: float, max_tokens: int, n: int = 1, **_) -> list[list[str]]:
        if not max_tokens or max_tokens <= 0:
            raise ValueError("max_tokens must be set (> 0)")
        if self.fail_after is not None and len(self.calls) >= self.fail_after:
            raise KeyboardInterrupt("fake engine: simulated kill")
        t0 = time.time()
        time.sleep(self.call_seconds)
        self.calls.append({"n": n, "B": len(conversations), "temperature": temperature, "max_tokens": max_tokens})
        outs = []
        for conv in conversations:
            if conv[0]["content"] == ASSERT_SYSTEM:  # the reply is prefilled up to "assert ": continue it
                problem = self._lookup(conv[1]["content"].split("Task:\n", 1)[-1].rsplit("\n\n", 1)[0])
                test = self.task.visible_test(problem) if problem is not None else "assert False"
                outs.append([test.strip().removeprefix("assert").lstrip() + "\n"] * n)
                continue
            if conv[0]["content"] == PROGRAM_SYSTEM:  # the last message is the prefilled code fence
                problem = self._lookup(problem_of(conv[:2]))
                answers = [self.task.extract_answer(self._plan(problem, ok)) if problem is not None else None
                           for ok in (True, False)]
                outs.append([f"print({answers[m % 2]!r})\n" for m in range(n)])
                continue
            step = self.task.step_context(conv) if hasattr(self.task, "step_context") else None
            if step is not None:
                problem, turn, first = step
                outs.append([self.task.synthetic_step(problem, turn, problem.index % 2 == 0) if first else "Done."] * n)
                continue
            problem = self._lookup(problem_of(conv))
            role = self.task.prompts.role_of(conv)
            if role == "judge":
                ok = self._correct(plan_of(conv), problem)
                verdicts = [(ok and m % 2 == 0) or (not ok and m % 4 == 0) for m in range(n)]
                if self.model.startswith("prose"):
                    outs.append([" ".join(f"The proposed solution is {'correct' if v else 'incorrect'}, as the "
                                          "steps above show.".split()[:max_tokens]) for v in verdicts])
                else:
                    outs.append(["ACCEPT" if v else "REJECT" for v in verdicts])
            elif role == "repairer":
                ok = self._correct(plan_of(conv), problem)
                outs.append([self._plan(problem, not ok)] * n)
            else:
                outs.append([self._plan(problem, problem is not None and problem.index % 2 == 0)] * n)
        prompt_tokens = sum(len(m["content"].split()) for c in conversations for m in c)
        generated = sum(len(t.split()) for o in outs for t in o)
        self.last_info = {"finish_reasons": [["stop"] * n for _ in conversations], "prompt_tokens": prompt_tokens,
                          "generated_tokens": generated, "seconds": time.time() - t0}
        self.stats["calls"] += 1
        self.stats["prompt_tokens"] += prompt_tokens
        self.stats["generated_tokens"] += generated
        return outs

    def reward(self, conversations) -> list[list[float]]:
        """A process reward model's step scores: 0.9 for every step of a correct plan, 0.2 for the
        last step of a wrong one."""
        out = []
        for conv in conversations:
            problem = self._lookup(conv[1]["content"])
            steps = conv[-1]["content"].split("<extra_0>")[:-1]
            plan = "\n\n".join(steps)
            scores = [0.9] * max(1, len(steps))
            if not self._correct(plan, problem):
                scores[-1] = 0.2
            out.append(scores)
        self.calls.append({"n": 1, "B": len(conversations), "temperature": None, "max_tokens": None, "reward": True})
        return out

    def _plan(self, problem, correct: bool) -> str:
        if problem is None:
            return "I could not find the problem. The answer is 0."
        return self.task.synthetic_plan(problem, correct)

    def describe(self) -> dict:
        return {"backend": "fake", "model": self.model, "seed": self.seed, "load_seconds": 0.0,
                "engine_config": {}, "versions": {}}


class RecordingEngine(FakeEngine):
    """A fake engine that also records every request: the model it was meant for, the sampling
    parameters and the conversations (``python -m vrr resolve --calls``: a dry run of a setting)."""

    def __init__(self, task, model: str = "fake", **kwargs):
        super().__init__(task, model=model, **kwargs)
        self.requests: list[dict] = []

    def chat(self, conversations, temperature: float, max_tokens: int, n: int = 1, **kw) -> list[list[str]]:
        self.requests.append({"model": self.model, "n": n, "temperature": temperature, "max_tokens": max_tokens,
                              "conversations": [list(c) for c in conversations]})
        return super().chat(conversations, temperature, max_tokens, n, **kw)

    def reward(self, conversations) -> list[list[float]]:
        self.requests.append({"model": self.model, "reward": True, "conversations": [list(c) for c in conversations]})
        return super().reward(conversations)
