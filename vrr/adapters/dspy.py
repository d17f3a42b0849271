"""A DSPy module with ``dspy.Refine``'s shape whose stop rule is the online controller (extra ``dspy``).

``dspy.Refine(module, N, reward_fn, threshold)`` runs ``module`` up to N times and stops at the first
prediction whose reward reaches a threshold; between attempts it passes a hint to the module. It has no
model of judge noise. :class:`VRRRefine` keeps that shape and replaces the threshold with
:class:`vrr.policies.online.OnlineController` (Sec. 4; App. A, Algorithm 1):

1. the wrapped module writes a candidate (round 0);
2. the judge votes on it, one vote per call, for as long as the controller asks (M votes, or fewer
   with sequential voting);
3. the controller filters the votes into b_k (Eq. 5) and decides from G-hat_k (Eqs. 6-8) or Guard's
   keep-best rule (Eq. 9): on *repair* the module runs again with the earlier answer and the votes as a
   hint (Refine's ``hint_`` input field); on *commit* the loop ends;
4. the returned prediction is the controller's candidate (Guard's incumbent where it applies), with the
   decision trace in its ``vrr`` field (a :class:`~vrr.adapters._common.LoopTrace`).

The judge is a DSPy module or signature whose last output field is the verdict (a bool, or a word such
as yes/no, accept/reject), or a callable ``judge(inputs, prediction) -> 0/1`` with ``reward_fn``'s
arguments. Like Refine, every call gets its own ``rollout_id`` at ``temperature`` so that cached LMs
still give independent samples.
"""
from __future__ import annotations

from typing import Any, Callable

import dspy
from dspy.signatures import InputField

from ..policies.online import Decision, OnlineController
from ._common import LoopTrace, as_vote, fresh_controller, vote_feedback

HINT_FIELD = "hint_"  # Refine's name for the hint input field


def default_feedback(inputs: dict, prediction: dspy.Prediction, decision: Decision) -> str:
    """The repair hint: the earlier answer and the judges' votes on it (the self-refine feedback of App. B)."""
    shown = "; ".join(f"{k}: {v}" for k, v in prediction.items() if k != "vrr")
    return (f"An earlier attempt answered ({shown}). {vote_feedback(decision)} "
            "Check it step by step and give a corrected answer.")


class VRRRefine(dspy.Module):
    """``dspy.Refine`` with the online controller as its stop rule (Algorithm 1, one problem per call).

    Args:
        module: the DSPy module that writes a candidate (and rewrites it on repair).
        controller: an :class:`OnlineController`; each call works on a fresh copy of it, so one
            ``VRRRefine`` can serve concurrent calls. Its ``k_max`` replaces Refine's ``N`` (at most
            ``k_max + 1`` candidates) and its ``M`` is the votes per round.
        judge: a DSPy module, signature (or signature string) whose inputs are filled by name from the
            call's inputs and the candidate's outputs, or a callable ``judge(inputs, prediction)``
            returning one vote (0/1 or bool).
        verdict_field: the judge output read as the vote (default: the judge signature's last output).
        feedback_fn: ``feedback_fn(inputs, prediction, decision) -> str``, the hint for a repair
            (default :func:`default_feedback`).
        temperature: sampling temperature of every module and judge call (Refine uses 1.0).
    """

    def __init__(self, module: dspy.Module, controller: OnlineController,
                 judge: dspy.Module | type | str | Callable[[dict, dspy.Prediction], Any], *,
                 verdict_field: str | None = None,
                 feedback_fn: Callable[[dict, dspy.Prediction, Decision], str] | None = None,
                 temperature: float = 1.0):
        super().__init__()
        if not isinstance(module, dspy.Module):
            raise TypeError(f"module must be a dspy.Module (e.g. dspy.ChainOfThought(...)), got {type(module).__name__}")
        fresh_controller(controller)  # checks the type now rather than on the first call
        self.module = module
        self.controller = controller
        if isinstance(judge, str) or (isinstance(judge, type) and issubclass(judge, dspy.Signature)):
            judge = dspy.Predict(judge)
        if isinstance(judge, dspy.Module):
            self.judge = judge
            self._judge_fn = None
            signature = self._judge_signature(judge)
            outputs = list(signature.output_fields)
            self.verdict_field = verdict_field or outputs[-1]
            if self.verdict_field not in outputs:
                raise ValueError(f"verdict_field {self.verdict_field!r} is not an output of the judge's signature "
                                 f"(outputs: {outputs})")
            self._judge_inputs = list(signature.input_fields)
        elif callable(judge):
            self.judge = None
            self._judge_fn = lambda *args: judge(*args)  # a lambda, so DSPy does not take it for a parameter
            self.verdict_field = None
            self._judge_inputs = []
        else:
            raise TypeError("judge must be a dspy module, a signature, or a callable judge(inputs, prediction) -> 0/1; "
                            f"got {type(judge).__name__}")
        self.feedback_fn = feedback_fn or default_feedback
        self.temperature = float(temperature)

    @staticmethod
    def _judge_signature(judge: dspy.Module):
        signature = getattr(judge, "signature", None)
        if signature is None:
            predictors = judge.named_predictors()
            if not predictors:
                raise ValueError("the judge module has no predictor whose signature names the verdict")
            signature = predictors[-1][1].signature
        return signature

    def _lm(self, module: dspy.Module, role: str):
        lm = module.get_lm() or dspy.settings.lm
        if lm is None:
            raise RuntimeError(f"no LM for the {role}: dspy.configure(lm=...) or {role}.set_lm(...)")
        return lm

    def _run(self, lm, rollout: int, kwargs: dict, hint: str | None):
        """One candidate: the module at its own rollout id, with the repair hint when there is one."""
        mod = self.module.deepcopy()
        mod.set_lm(lm.copy(rollout_id=rollout, temperature=self.temperature))
        with dspy.context(trace=[]):
            if hint is None:
                pred = mod(**kwargs)
            else:
                adapter = dspy.settings.adapter or dspy.ChatAdapter()

                class HintAdapter(adapter.__class__):
                    # Refine's mechanism: every predictor of the module sees the hint as an extra input.
                    def __call__(self, lm, lm_kwargs, signature, demos, inputs):
                        inputs = {**inputs, HINT_FIELD: hint}
                        signature = signature.append(HINT_FIELD, InputField(desc="A hint to the module from an "
                                                                                  "earlier run"))
                        return adapter(lm, lm_kwargs, signature, demos, inputs)

                with dspy.context(adapter=HintAdapter()):
                    pred = mod(**kwargs)
            trace = list(dspy.settings.trace)
        return pred, trace

    def _vote(self, judge_lm, rollout: int, kwargs: dict, pred: dspy.Prediction, k: int) -> int:
        # Like Refine's reward_fn, the judge's calls stay out of the program's trace.
        with dspy.context(trace=[]):
            return self._judge_vote(judge_lm, rollout, kwargs, pred, f"judge vote in round {k}")

    def _judge_vote(self, judge_lm, rollout: int, kwargs: dict, pred: dspy.Prediction, where: str) -> int:
        if self._judge_fn is not None:
            return as_vote(self._judge_fn(kwargs, pred), where)
        available = {**kwargs, **{key: pred[key] for key in pred.keys()}}
        missing = [name for name in self._judge_inputs if name not in available]
        if missing:
            raise ValueError(f"the judge's inputs {missing} are neither inputs of the call nor outputs of the module "
                             f"(have {sorted(available)})")
        judge = self.judge.deepcopy()
        judge.set_lm(judge_lm.copy(rollout_id=rollout, temperature=self.temperature))
        verdict = judge(**{name: available[name] for name in self._judge_inputs})
        return as_vote(verdict[self.verdict_field], where)

    def forward(self, **kwargs) -> dspy.Prediction:
        """Generate, vote, repair or commit until the controller commits (Algorithm 1); returns the
        committed candidate with the loop's :class:`LoopTrace` in its ``vrr`` field."""
        ctl = fresh_controller(self.controller)
        lm = self._lm(self.module, "module")
        judge_lm = self._lm(self.judge, "judge") if self.judge is not None else None
        rollout = lm.kwargs.get("rollout_id", 0) or 0
        judge_rollout = (judge_lm.kwargs.get("rollout_id", 0) or 0) if judge_lm is not None else 0
        loop, traces = LoopTrace(), []
        hint = None
        while True:
            pred, trace = self._run(lm, rollout, kwargs, hint)
            rollout += 1
            loop.candidates.append(pred)
            traces.append(trace)
            while ctl.need_vote():
                ctl.add_vote(self._vote(judge_lm, judge_rollout, kwargs, pred, ctl.round))
                judge_rollout += 1
            decision = ctl.decide()
            loop.decisions.append(decision)
            if decision.committed:
                break
            hint = self.feedback_fn(kwargs, pred, decision)
        chosen = loop.candidate
        if dspy.settings.trace is not None:
            dspy.settings.trace.extend(traces[chosen])
        return loop.candidates[chosen].copy(vrr=loop)
