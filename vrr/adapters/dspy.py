"""A DSPy module with ``dspy.Refine``'s shape whose stop rule is the online controller (extra ``dspy``).

``dspy.Refine(module, N, reward_fn, threshold)`` runs ``module`` up to N times and stops at the first
prediction whose reward reaches a threshold; between attempts it passes a hint to the module. It has no
model of judge noise. :class:`VRRRefine` keeps that shape and replaces the threshold with
:class:`vrr.policies.online.OnlineController` (Sec. 4; App. A, Algorithm 1):

1. the wrapped module writes a candidate (round 0);
2. the judge votes on it for as long as the controller asks (M votes, asked concurrently by ``acall``;
   fewer, one at a time, with sequential voting);
3. the controller filters the votes into b_k (Eq. 5) and decides from G-hat_k (Eqs. 6-8) or Guard's
   keep-best rule (Eq. 9): on *repair* the module runs again with the earlier answer and the votes as a
   hint (Refine's ``hint_`` input field); on *commit* the loop ends;
4. the returned prediction is the controller's candidate (Guard's incumbent where it applies), with the
   loop's :class:`~vrr.adapters._common.LoopTrace` in its ``vrr`` field (decisions, votes, calls and
   tokens per role, retried failures).

A judge LM that does not answer in DSPy's field format (a plain "ACCEPT" from an OpenAI-compatible
server) is read from its raw reply text: a verdict word, or the LLM-judge verdict parser; a reply with no
readable verdict is an unparsable vote, counted as a rejection and listed in ``trace.unparsable``. The
judge's calls go without DSPy's JSON-adapter retry, so one vote is one LM call.

The judge is a DSPy module or signature whose last output field is the verdict, a callable
``judge(inputs, prediction) -> 0/1``, or Refine's ``reward_fn`` with a ``threshold`` (vote = reward >=
threshold; the reward may be a ``dspy.Prediction(score=..., feedback=...)``, whose feedback joins the
repair hint). :meth:`VRRRefine.calibrate` builds the controller from a small labeled devset.
"""
from __future__ import annotations

import asyncio
import contextlib
import inspect
from typing import Any, Callable

import dspy
from dspy.signatures import InputField
from dspy.utils.exceptions import AdapterParseError
from dspy.utils.usage_tracker import track_usage

from ..policies.online import Decision, OnlineController
from ._common import (Decided, FailureBudget, LoopTrace, Plan, Votes, add_usage, as_vote, calibration_decision,
                      check_vote_batch, describe_error, deterministic_judge_note, fresh_controller,
                      labeled_controller, refine_steps, vote_feedback)

HINT_FIELD = "hint_"  # Refine's name for the hint input field


def default_feedback(inputs: dict, prediction: dspy.Prediction, decision: Decision) -> str:
    """The repair hint: the earlier answer and the judges' votes on it (the self-refine feedback of App. B)."""
    shown = "; ".join(f"{k}: {v}" for k, v in prediction.items() if k != "vrr")
    return (f"An earlier attempt answered ({shown}). {vote_feedback(decision)} "
            "Check it step by step and give a corrected answer.")


class PlainTextAdapter(dspy.ChatAdapter):
    """DSPy's ``ChatAdapter`` for models too small to write its ``[[ ## field ## ]]`` format: a reply that does
    not parse fills the signature's last output field with the reply's text, when that field is a string, and
    the other outputs with '' (a ``ChainOfThought``'s reasoning). Any other reply parses as ``ChatAdapter``'s
    does. Without the JSON-adapter fallback: one call per module call.

    ``dspy.configure(adapter=PlainTextAdapter())`` (or ``dspy.context``) puts it under the module and the judge
    alike; the judge's verdict is then read from the text (``trace.unparsable`` lists the replies without one)."""

    def __init__(self, **kwargs):
        kwargs.setdefault("use_json_adapter_fallback", False)
        super().__init__(**kwargs)

    def parse(self, signature, completion: str) -> dict:
        try:
            return super().parse(signature, completion)
        except AdapterParseError:
            outputs = signature.output_fields
            last = list(outputs)[-1]
            if outputs[last].annotation is not str:
                raise
            return {name: (completion.strip() if name == last else "") for name in outputs}


class _RawReply:
    """A judge reply DSPy's adapter could not parse into the signature's fields: its raw text."""

    def __init__(self, text):
        self.text = text if isinstance(text, str) else str(text)


def _judge_adapter() -> dict:
    """The judge's adapter: the configured ChatAdapter without its JSON-adapter fallback, which would ask
    the LM a second time for a reply it then reads as raw text anyway (one vote, one LM call)."""
    adapter = dspy.settings.adapter
    if adapter is None or type(adapter) is dspy.ChatAdapter:
        return {"adapter": dspy.ChatAdapter(use_json_adapter_fallback=False)}
    return {}


class _Hidden:
    """Holds the judge so that ``named_predictors()`` (what optimizers tune) never reaches it."""

    def __init__(self, module):
        self.module = module

    def __deepcopy__(self, memo):
        return _Hidden(self.module.deepcopy() if self.module is not None else None)


def _hint_adapter(hint: str):
    """Refine's mechanism: every predictor of the module sees the hint as an extra input field."""
    adapter = dspy.settings.adapter or dspy.ChatAdapter()

    def with_hint(signature, inputs):
        return (signature.append(HINT_FIELD, InputField(desc="A hint to the module from an earlier run")),
                {**inputs, HINT_FIELD: hint})

    class HintAdapter(adapter.__class__):
        def __call__(self, lm, lm_kwargs, signature, demos, inputs):
            signature, inputs = with_hint(signature, inputs)
            return adapter(lm, lm_kwargs, signature, demos, inputs)

        async def acall(self, lm, lm_kwargs, signature, demos, inputs):
            signature, inputs = with_hint(signature, inputs)
            return await adapter.acall(lm, lm_kwargs, signature, demos, inputs)

    return HintAdapter()


def _score_and_feedback(value) -> tuple[Any, str | None]:
    """A reward's score and feedback: a ``dspy.Prediction(score=..., feedback=...)`` or a bare value."""
    if isinstance(value, dspy.Prediction):
        if "score" not in value:
            raise ValueError(f"a reward returned as a dspy.Prediction needs a 'score' field, got {list(value.keys())}")
        return value.score, (value.feedback if "feedback" in value else None)
    return value, None


class _Run:
    """The state of one call: controller copy, trace, failure budget, rollout counters, captured traces."""

    def __init__(self, refine: "VRRRefine", kwargs: dict, controller: OnlineController | None):
        self.kwargs = kwargs
        self.ctl = fresh_controller(controller, one_vote=refine.deterministic_judge) if controller else None
        self.trace = LoopTrace(judge_note=refine.judge_note)
        self.budget = FailureBudget(refine.fail_count, self.trace)
        self.lm = refine._lm(refine.module, "module")
        judge = refine.judge
        self.judge_lm = refine._lm(judge, "judge") if judge is not None else None
        self.rollout = self.lm.kwargs.get("rollout_id", 0) or 0
        self.judge_rollout = (self.judge_lm.kwargs.get("rollout_id", 0) or 0) if self.judge_lm is not None else 0
        self.dspy_traces: list = []
        self.notes: list[str] = []   # the reward's feedback on the current plan

    def next_rollout(self) -> int:
        self.rollout += 1
        return self.rollout - 1

    def next_judge_rollout(self) -> int:
        self.judge_rollout += 1
        return self.judge_rollout - 1


class VRRRefine(dspy.Module):
    """``dspy.Refine`` with the online controller as its stop rule (Algorithm 1, one problem per call).

    Args:
        module: the DSPy module that writes a candidate (and rewrites it on repair).
        controller: an :class:`OnlineController`; each call works on a fresh copy of it, so one
            ``VRRRefine`` can serve concurrent calls. Its ``k_max`` replaces Refine's ``N`` (at most
            ``k_max + 1`` candidates) and its ``M`` is the votes per round. ``None`` until
            :meth:`calibrate` sets it.
        judge: a DSPy module, signature (or signature string) whose inputs are filled by name from the
            call's inputs and the candidate's outputs, or a callable ``judge(inputs, prediction)``
            returning one vote (0/1 or bool). It is kept out of ``named_predictors()``, so an optimizer
            tunes the module and never the judge.
        reward_fn: instead of ``judge``, Refine's ``reward_fn(inputs, prediction)``: a number (the vote is
            ``reward >= threshold``), a bool, or a ``dspy.Prediction(score=..., feedback=...)``.
        threshold: the reward a candidate needs for an accepting vote (required for a graded reward).
        verdict_field: the judge output read as the vote (default: the judge signature's last output).
        feedback_fn: ``feedback_fn(inputs, prediction, decision) -> str``, the hint for a repair
            (default :func:`default_feedback`); a reward's feedback is added to it.
        temperature: sampling temperature of the module's calls (Refine uses 1.0).
        judge_temperature: sampling temperature of the judge's calls, independent of ``temperature``.
        fail_count: calls (module or judge) that may raise before the error is raised, as in Refine
            (default ``k_max + 1``, Refine's N); a failed call is retried at the next rollout id.
        deterministic_judge: ``None`` detects it: a Python judge or reward function, or an LM judge at
            ``judge_temperature=0``, gives the same verdict for the same candidate. Such a judge is asked
            once per round and the controller runs with M = 1 (a :class:`DeterministicJudgeWarning`
            says so). ``False`` declares a callable that samples (e.g. one that calls an LM).
        vote_batch: votes asked at once by ``acall`` (default: all M, or one at a time with sequential
            voting).
    """

    def __init__(self, module: dspy.Module, controller: OnlineController | None = None,
                 judge: dspy.Module | type | str | Callable[[dict, dspy.Prediction], Any] | None = None, *,
                 reward_fn: Callable[[dict, dspy.Prediction], Any] | None = None, threshold: float | None = None,
                 verdict_field: str | None = None,
                 feedback_fn: Callable[[dict, dspy.Prediction, Decision], str] | None = None,
                 temperature: float = 1.0, judge_temperature: float = 1.0, fail_count: int | None = None,
                 deterministic_judge: bool | None = None, vote_batch: int | None = None):
        super().__init__()
        if not isinstance(module, dspy.Module):
            raise TypeError(f"module must be a dspy.Module (e.g. dspy.ChainOfThought(...)), got {type(module).__name__}")
        if controller is not None:
            fresh_controller(controller)  # checks the type now rather than on the first call
        if (judge is None) == (reward_fn is None):
            raise TypeError("give exactly one of judge= (a DSPy module, signature or callable) and reward_fn=")
        self.module = module
        self.controller = controller
        self.threshold = None if threshold is None else float(threshold)
        self._judge = _Hidden(None)
        self._judge_fn = None
        self._judge_inputs: list[str] = []
        self.verdict_field = None
        if reward_fn is not None:
            judge = reward_fn
        if isinstance(judge, str) or (isinstance(judge, type) and issubclass(judge, dspy.Signature)):
            judge = dspy.Predict(judge)
        if isinstance(judge, dspy.Module):
            self._judge = _Hidden(judge)
            signature = self._judge_signature(judge)
            outputs = list(signature.output_fields)
            self.verdict_field = verdict_field or outputs[-1]
            if self.verdict_field not in outputs:
                raise ValueError(f"verdict_field {self.verdict_field!r} is not an output of the judge's signature "
                                 f"(outputs: {outputs})")
            self._judge_inputs = list(signature.input_fields)
        elif callable(judge):
            self._judge_fn = lambda *args: judge(*args)  # a lambda, so DSPy does not take it for a parameter
        else:
            raise TypeError("judge must be a dspy module, a signature, or a callable judge(inputs, prediction) -> 0/1; "
                            f"got {type(judge).__name__}")
        self.feedback_fn = feedback_fn or default_feedback
        self.temperature = float(temperature)
        self.judge_temperature = float(judge_temperature)
        if fail_count is not None:
            FailureBudget(fail_count, LoopTrace())  # validates it now
        self._fail_count = fail_count
        check_vote_batch(vote_batch)
        self.vote_batch = vote_batch
        reason = None
        if deterministic_judge is None:
            if self._judge_fn is not None:
                reason = "a Python function judges: the same candidate gets the same verdict"
            elif self.judge_temperature == 0:
                reason = "the judge samples at temperature 0"
        elif deterministic_judge:
            reason = "declared deterministic_judge=True"
        self.deterministic_judge = reason is not None
        self._deterministic_reason = reason
        self.judge_note = deterministic_judge_note(reason, controller, stacklevel=4) if reason else None

    @property
    def fail_count(self) -> int:
        """Calls that may raise before the error is raised (default Refine's N: the controller's k_max + 1)."""
        if self._fail_count is not None:
            return self._fail_count
        return self.controller.k_max + 1 if self.controller is not None else 1

    @property
    def judge(self) -> dspy.Module | None:
        """The judge module (None for a callable judge); not a sub-module, so optimizers leave it alone."""
        return self._judge.module

    @staticmethod
    def _judge_signature(judge: dspy.Module):
        signature = getattr(judge, "signature", None)
        if signature is None:
            predictors = judge.named_predictors()
            if not predictors:
                raise ValueError("the judge module has no predictor whose signature names the verdict")
            signature = predictors[-1][1].signature
        return signature

    @staticmethod
    def _lm(module: dspy.Module, role: str):
        lm = module.get_lm() or dspy.settings.lm
        if lm is None:
            raise RuntimeError(f"no LM for the {role}: dspy.configure(lm=...) or {role}.set_lm(...)")
        return lm

    # ------------------------------------------------------------------ one plan
    @contextlib.contextmanager
    def _plan_call(self, run: _Run, req: Plan):
        """The module at its own rollout id (with the repair hint after round 0); yields the module, records
        the calls and tokens of the plan's role and keeps the module's own trace."""
        mod = self.module.deepcopy()
        hint = None
        if req.decision is not None:
            hint = self.feedback_fn(run.kwargs, req.previous, req.decision)
            if run.notes:
                hint += " Reviewer feedback: " + " | ".join(dict.fromkeys(run.notes))
        adapter = {} if hint is None else {"adapter": _hint_adapter(hint)}
        lm = run.lm.copy(rollout_id=run.next_rollout(), temperature=self.temperature)
        mod.set_lm(lm)
        with track_usage() as usage:
            try:
                with dspy.context(trace=[], **adapter):
                    yield mod
                    run.dspy_traces.append(list(dspy.settings.trace))
            finally:  # a call that raised still spent its tokens
                self._count(run.trace, req.role, usage, lm)

    @staticmethod
    def _count(trace: LoopTrace, role: str, usage, lm=None) -> None:
        """The calls of one step and their tokens. The calls are the LM copy's history entries (a reply without
        usage leaves no usage entry, and its tokens are unknown, not 0); without history, the usage entries."""
        entries = [e for per_lm in usage.usage_data.values() for e in per_lm]
        history = getattr(lm, "history", None) if lm is not None and not dspy.settings.disable_history else None
        calls = len(history) if history is not None else len(entries)
        add_usage(trace.usage, role, calls=calls, calls_without_usage=max(0, calls - len(entries)))
        for e in entries:
            add_usage(trace.usage, role, calls=0, input_tokens=e.get("prompt_tokens") or 0,
                      output_tokens=e.get("completion_tokens") or 0, total_tokens=e.get("total_tokens") or 0)

    def _plan(self, run: _Run, req: Plan):
        while True:
            try:
                with self._plan_call(run, req) as mod:
                    pred = mod(**run.kwargs)
                break
            except AdapterParseError as exc:
                pred = self._unwritten_plan(run, req, exc)
                if pred is not None:
                    break
            except Exception as exc:  # noqa: BLE001 - Refine's fail_count: retry at the next rollout id
                run.budget.failed(req.role, req.round, exc)
        run.notes = []
        return pred

    async def _aplan(self, run: _Run, req: Plan):
        while True:
            try:
                with self._plan_call(run, req) as mod:
                    pred = await mod.acall(**run.kwargs)
                break
            except AdapterParseError as exc:
                pred = self._unwritten_plan(run, req, exc)
                if pred is not None:
                    break
            except Exception as exc:  # noqa: BLE001
                run.budget.failed(req.role, req.round, exc)
        run.notes = []
        return pred

    @staticmethod
    def _unwritten_plan(run: _Run, req: Plan, exc: AdapterParseError):
        """A module whose LM did not write DSPy's field format (a small model's prose). A repair keeps the last
        good plan: the failure is counted in ``trace.kept_plans`` (its round, the round whose plan was kept, the
        error) and the round is judged on the kept plan, as a repair that changed nothing. The first plan has
        nothing to keep: it is retried as any failed call (``fail_count``), and the error, once raised, says
        what to do (:class:`PlainTextAdapter`)."""
        if req.round > 0 and run.trace.candidates:
            last = len(run.trace.candidates) - 1
            last = {k["round"]: k["kept_round"] for k in run.trace.kept_plans}.get(last, last)  # the plan written
            run.trace.kept_plans.append({"role": req.role, "round": req.round, "kept_round": last,
                                         "error": describe_error(exc)})
            run.dspy_traces.append(list(run.dspy_traces[last]))
            return run.trace.candidates[last].copy()
        if not getattr(exc, "_vrr_noted", False):
            exc.add_note("the module's LM did not write DSPy's field format; a small model's prose is read by "
                         "vrr.adapters.dspy.PlainTextAdapter (docs/adapters.md, 'Small models')")
            exc._vrr_noted = True
        run.budget.failed(req.role, req.round, exc)
        return None

    # ------------------------------------------------------------------ one vote
    def _judge_call(self, run: _Run, pred):
        """What one vote calls: the judge module (a copy at its own rollout id) and its inputs, or the
        callable judge; the judge's calls stay out of the program's trace, as Refine keeps reward_fn's."""
        if self._judge_fn is not None:
            return None, (run.kwargs, pred), None
        available = {**run.kwargs, **{key: pred[key] for key in pred.keys()}}
        missing = [name for name in self._judge_inputs if name not in available]
        if missing:
            raise ValueError(f"the judge's inputs {missing} are neither inputs of the call nor outputs of the module "
                             f"(have {sorted(available)})")
        judge = self.judge.deepcopy()
        lm = run.judge_lm.copy(rollout_id=run.next_judge_rollout(), temperature=self.judge_temperature)
        judge.set_lm(lm)
        return judge, {name: available[name] for name in self._judge_inputs}, lm

    def _read_vote(self, run: _Run, verdict, where: str, round_: int) -> int:
        if isinstance(verdict, _RawReply):   # the judge LM ignored DSPy's format: its raw text
            return run.trace.read_vote(verdict.text, round_)
        if self._judge_fn is None:
            value = verdict[self.verdict_field]
            if isinstance(value, str):
                return run.trace.read_vote(value, round_)
            return as_vote(value, where)
        score, note = _score_and_feedback(verdict)
        if note:
            run.notes.append(str(note))
        if isinstance(score, str) and self.threshold is None:
            return run.trace.read_vote(score, round_)
        return as_vote(score, where, self.threshold)

    def _vote(self, run: _Run, req: Votes) -> int:
        while True:
            judge, args, lm = self._judge_call(run, req.plan)
            try:
                with track_usage() as usage, dspy.context(trace=[], **_judge_adapter()):
                    try:
                        verdict = self._judge_fn(*args) if judge is None else judge(**args)
                    except AdapterParseError as exc:
                        verdict = _RawReply(exc.lm_response)
                break
            except Exception as exc:  # noqa: BLE001 - a judge call that raises is retried, as a module call
                self._count(run.trace, "judge", usage, lm)
                run.budget.failed("judge", req.round, exc)
        return self._counted_vote(run, req, verdict, usage, judge is None, lm)

    async def _avote(self, run: _Run, req: Votes) -> int:
        while True:
            judge, args, lm = self._judge_call(run, req.plan)
            try:
                with track_usage() as usage, dspy.context(trace=[], **_judge_adapter()):
                    try:
                        if judge is None:
                            verdict = self._judge_fn(*args)
                            if inspect.isawaitable(verdict):
                                verdict = await verdict
                        else:
                            verdict = await judge.acall(**args)
                    except AdapterParseError as exc:
                        verdict = _RawReply(exc.lm_response)
                break
            except Exception as exc:  # noqa: BLE001
                self._count(run.trace, "judge", usage, lm)
                run.budget.failed("judge", req.round, exc)
        return self._counted_vote(run, req, verdict, usage, judge is None, lm)

    def _counted_vote(self, run: _Run, req: Votes, verdict, usage, function: bool, lm) -> int:
        """The vote read from a verdict (a verdict that is no vote is an error, never retried); the call
        counted for the judge (a Python judge is one call without tokens)."""
        if function:
            add_usage(run.trace.usage, "judge")
        else:
            self._count(run.trace, "judge", usage, lm)
        return self._read_vote(run, verdict, f"judge vote in round {req.round}", req.round)

    # ------------------------------------------------------------------ the loop
    def _new_run(self, kwargs: dict) -> _Run:
        if self.controller is None:
            raise RuntimeError("VRRRefine has no controller: pass one, or call calibrate(trainset, metric) first")
        return _Run(self, kwargs, self.controller)

    def _finish(self, run: _Run) -> dspy.Prediction:
        chosen = run.trace.candidate
        if dspy.settings.trace is not None:
            dspy.settings.trace.extend(run.dspy_traces[chosen])
        return run.trace.candidates[chosen].copy(vrr=run.trace)

    @staticmethod
    def _failed(run: _Run, exc: BaseException):
        """Keep the trace on the error (``exc.vrr``): the rounds decided before the loop raised."""
        run.trace.error = describe_error(exc)
        exc.vrr = run.trace
        return exc

    def forward(self, **kwargs) -> dspy.Prediction:
        """Generate, vote, repair or commit until the controller commits (Algorithm 1); returns the
        committed candidate with the loop's :class:`LoopTrace` in its ``vrr`` field."""
        run = self._new_run(kwargs)
        steps, reply = refine_steps(run.ctl, run.trace, self.vote_batch), None
        try:
            while True:
                req = steps.send(reply)
                if isinstance(req, Plan):
                    reply = self._plan(run, req)
                elif isinstance(req, Votes):
                    reply = [self._vote(run, req) for _ in range(req.count)]
                else:
                    reply = None
        except StopIteration:
            return self._finish(run)
        except Exception as exc:
            raise self._failed(run, exc)

    async def aforward(self, **kwargs) -> dspy.Prediction:
        """:meth:`forward` for ``acall``: the votes of a request are asked concurrently."""
        run = self._new_run(kwargs)
        steps, reply = refine_steps(run.ctl, run.trace, self.vote_batch), None
        try:
            while True:
                req = steps.send(reply)
                if isinstance(req, Plan):
                    reply = await self._aplan(run, req)
                elif isinstance(req, Votes):
                    reply = list(await asyncio.gather(*[self._avote(run, req) for _ in range(req.count)]))
                else:
                    assert isinstance(req, Decided)
                    reply = None
        except StopIteration:
            return self._finish(run)
        except Exception as exc:
            raise self._failed(run, exc)

    # ------------------------------------------------------------------ calibration
    def calibrate(self, trainset: list, metric: Callable, *, M: int | None = None, k_max: int | None = None,
                  policy: str = "algorithm1", j_min: float = 0.10, metric_threshold: float | None = None,
                  **options):
        """Calibrate the controller on a small labeled devset and use it (Sec. 4.2; App. A line 1).

        For every example (a ``dspy.Example`` with its inputs marked by ``with_inputs``) the module writes a
        first plan, the judge votes M times on it, and the plan is repaired once with the votes as the hint
        (the calibration trajectories repair every round). ``metric(example, prediction)`` labels both plans,
        as a DSPy metric does (a bool, a number with ``metric_threshold``, or a Prediction with a score).
        The first plans' votes and labels give rho0, rho1, pi and the labeled J diagnostic; the (before,
        after) labels give alpha, beta (``OnlineController.from_labeled``).

        ``M`` defaults to the current controller's (1 for a deterministic judge), ``k_max`` to the current
        controller's or 5. Returns the controller's ``calibration_report`` (rho0, rho1, alpha, beta, pi,
        j_hat, mode, reason, n_plans, n_repairs); the controller is then ``self.controller``, and the calls
        and tokens calibration spent per role are in ``self.calibration_trace``.
        """
        if M is None:
            if self.deterministic_judge:
                M = 1
            elif self.controller is not None:
                M = self.controller.M
            else:
                raise ValueError("calibrate: give M (votes per round); there is no controller to take it from")
        if self.deterministic_judge and M != 1:
            raise ValueError(f"calibrate: the judge is deterministic ({self._deterministic_reason}), so a plan gets "
                             f"one vote; M={M} would repeat it")
        if k_max is None:
            k_max = self.controller.k_max if self.controller is not None else 5
        trace = LoopTrace(judge_note=self.judge_note)
        votes, labels, repairs = [], [], []
        for i, example in enumerate(trainset):
            try:
                inputs = dict(example.inputs())
            except (AttributeError, ValueError) as exc:
                raise ValueError(f"calibrate: trainset[{i}] must be a dspy.Example with its inputs marked by "
                                 f".with_inputs(...) ({exc})") from None
            run = _Run(self, inputs, None)
            run.trace, run.budget = trace, FailureBudget(self.fail_count, trace)
            first = self._plan(run, Plan(0))
            plan_votes = [self._vote(run, Votes(0, 1, first)) for _ in range(M)]
            accepts = sum(plan_votes)
            repaired = self._plan(run, Plan(1, first, calibration_decision(accepts, M)))
            before = self._label(metric, example, first, metric_threshold, f"metric on trainset[{i}] (first plan)")
            after = self._label(metric, example, repaired, metric_threshold, f"metric on trainset[{i}] (repaired)")
            votes.append(plan_votes)
            labels.append(before)
            repairs.append((before, after))
        self.controller = labeled_controller(votes, labels, repairs, M=M, k_max=k_max, policy=policy, j_min=j_min,
                                             **options)
        self.calibration_trace = trace
        return self.controller.calibration_report

    @staticmethod
    def _label(metric: Callable, example, pred, threshold: float | None, where: str) -> int:
        with dspy.context(trace=[]):
            value = metric(example, pred)
        score, _ = _score_and_feedback(value)
        return as_vote(score, where, threshold)
