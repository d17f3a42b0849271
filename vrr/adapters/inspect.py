"""Inspect AI pieces for the online controller (extra ``inspect``): a solver, a cost scorer, a calibration
probe and a panel reducer.

Inspect's ``self_critique`` runs one critique and one regeneration, and a loop of solvers stops on a
budget; neither models judge noise. The pieces here put :class:`vrr.policies.online.OnlineController`
(Sec. 4; App. A, Algorithm 1) into an eval:

* :func:`vrr_refine`, a solver: ``generate``; the judge model votes on the candidate (the votes of a round
  asked concurrently, or one at a time with sequential voting); the controller decides; on *repair* a user
  message from ``repair_template`` (question, candidate, vote summary) is appended and ``generate`` runs
  again, as ``self_critique`` does; on *commit*, ``state.output`` becomes the committed candidate (Guard's
  keep-best incumbent, Eq. 9, where it applies) and ``state.messages`` the conversation up to its reply.
  Each round adds one ``InfoEvent`` (source ``"vrr_refine"``) to the sample's transcript with b_k, G-hat_k,
  B_k, the action, the mode and the reason. The loop's trace (``LoopTrace.as_dict()``: decisions, votes,
  calls and tokens per role) goes to ``state.metadata["vrr"]`` and the store, also when the loop raises.
* :func:`vrr_cost`, a scorer of the loop's costs: verifier calls, repairs and tokens per role.
* :func:`vrr_probe` and :func:`plan_labels`, the calibration eval: every first plan gets M votes and one
  repair, and the task's own scorer labels both plans; :func:`calibrate_from_log` turns that log into a
  controller (``OnlineController.from_labeled``).
* :func:`posterior_panel`, a score reducer for a panel of model graders (``model_graded_qa(model=[...],
  reducer=...)``) that combines the grades by Eq. 5 with each grader's rho0, rho1 instead of a majority.

Every sample works on its own copy of the controller, so samples run concurrently. Judge calls must not be
cached (identical prompts would repeat one vote instead of sampling M).
"""
from __future__ import annotations

import copy
import math
import warnings
from pathlib import Path
from typing import Callable, Sequence

from inspect_ai.log import EvalLog, EvalSample, read_eval_log, transcript
from inspect_ai.model import ChatMessageUser, GenerateConfig, Model, ModelOutput, get_model
from inspect_ai.scorer import (Metric, SampleScore, Score, Scorer, Target, mean, score_reducer, scorer,
                                value_to_float)
from inspect_ai.scorer import metric as inspect_metric   # "metric" in the docs is a DSPy metric(example, pred)
from inspect_ai.scorer import ScoreReducer
from inspect_ai.solver import Generate, Solver, TaskState, solver
from inspect_ai.util import collect, resource

from ..core.belief import belief_update
from ..policies.online import OnlineController
from ._common import (Decided, LoopTrace, Plan, Votes, add_usage, as_vote, calibration_decision, check_vote_batch,
                      describe_error, deterministic_judge_note, fresh_controller, labeled_controller, refine_steps,
                      round_record, vote_feedback)

JUDGE_TEMPLATE = r"""
You are reviewing a proposed answer. Decide whether it is correct.

[Question]: {question}

[Proposed answer]: {completion}

Reply with exactly one word: ACCEPT if the answer is correct, REJECT if it is not.
"""

REPAIR_TEMPLATE = r"""
Reviewers checked your answer to the question below.

[Question]: {question}

[Your answer]: {completion}

[Reviewer feedback]: {feedback}

Find the mistake, if there is one, and write an improved answer. Provide your answer at the end on its own
line in the form "ANSWER: $ANSWER" (without quotes) where $ANSWER is the answer to the question.
"""

METADATA_KEY = "vrr"          # the loop's trace in state.metadata and the store
PROBE_KEY = "vrr_probe"       # the calibration probe's record in state.metadata
EVENT_SOURCE = "vrr_refine"   # the source of the per-round transcript events


class _SampleLoop:
    """The model calls of one sample: plans (generator, repairer) and votes (judge), with their usage."""

    def __init__(self, state: TaskState, generate: Generate, judge: Model, judge_templ: str, repair_templ: str,
                 config: GenerateConfig, parse_vote: Callable | None, trace: LoopTrace):
        self.state, self.generate, self.judge, self.config = state, generate, judge, config
        self.judge_templ, self.repair_templ, self.parse_vote = judge_templ, repair_templ, parse_vote
        self.trace = trace
        # the template variables come first from the loop, so metadata cannot shadow them
        self.metadata = {k: v for k, v in state.metadata.items()
                         if k not in ("question", "completion", "feedback", METADATA_KEY, PROBE_KEY)}
        self.conversations: list[list] = []

    async def plan(self, req: Plan) -> ModelOutput:
        if req.decision is not None:
            self.state.messages.append(ChatMessageUser(content=self.repair_templ.format(
                question=self.state.input_text, completion=req.previous.completion,
                feedback=vote_feedback(req.decision), **self.metadata)))
        self.state = await self.generate(self.state)
        out = self.state.output
        self._count(req.role, out)
        self.conversations.append(list(self.state.messages))
        return out

    async def votes(self, req: Votes) -> list[int]:
        prompt = self.judge_templ.format(question=self.state.input_text, completion=req.plan.completion,
                                         **self.metadata)
        replies = await collect(*[self.judge.generate(prompt, config=self.config) for _ in range(req.count)])
        out = []
        for reply in replies:
            self._count("judge", reply)
            out.append(self.trace.read_vote(reply.completion, req.round, self.parse_vote))
        return out

    def _count(self, role: str, output: ModelOutput) -> None:
        u = output.usage
        if u is None:   # the provider reported no usage: unknown, not 0
            add_usage(self.trace.usage, role, calls_without_usage=1)
            return
        add_usage(self.trace.usage, role, input_tokens=u.input_tokens, output_tokens=u.output_tokens,
                  total_tokens=u.total_tokens)

    def keep(self) -> None:
        """The trace into the sample's metadata and store (kept in the log, also for a sample that errs)."""
        record = self.trace.as_dict()
        self.state.metadata[METADATA_KEY] = record
        self.state.store.set(METADATA_KEY, record)


def _judge_setup(judge_model, judge_template, repair_template, judge_temperature, deterministic_judge):
    judge_templ = resource(judge_template or JUDGE_TEMPLATE)
    repair_templ = resource(repair_template or REPAIR_TEMPLATE)
    config = GenerateConfig(temperature=judge_temperature) if judge_temperature is not None else GenerateConfig()
    reason = None
    if deterministic_judge is None and judge_temperature == 0:
        reason = "the judge samples at temperature 0"
    elif deterministic_judge:
        reason = "declared deterministic_judge=True"
    return judge_templ, repair_templ, config, reason


def _judge(judge_model) -> Model:
    return judge_model if isinstance(judge_model, Model) else get_model(judge_model)


@solver
def vrr_refine(controller: OnlineController, judge_model: str | Model | None = None,
               judge_template: str | None = None, repair_template: str | None = None,
               judge_temperature: float | None = None,
               parse_vote: Callable[[str], int | bool] | None = None, vote_batch: int | None = None,
               deterministic_judge: bool | None = None) -> Solver:
    """Generate, vote, repair or commit under the online controller (Algorithm 1), per sample.

    Args:
        controller: an :class:`OnlineController` (``from_parameters``, ``from_calibration``,
            ``from_labeled`` or :func:`calibrate_from_log`); copied per sample. Its ``M`` is the votes per
            round and ``k_max`` the repair budget.
        judge_model: the model that votes (default: the model under evaluation, as ``self_critique``).
        judge_template: the judge prompt, with ``{question}``, ``{completion}`` and the sample's metadata
            (default :data:`JUDGE_TEMPLATE`: one word, ACCEPT or REJECT).
        repair_template: the repair request, with ``{question}``, ``{completion}``, ``{feedback}`` and the
            metadata (default :data:`REPAIR_TEMPLATE`).
        judge_temperature: sampling temperature of the judge calls (default: the model's own config).
        parse_vote: ``parse_vote(reply_text) -> 0/1`` instead of the verdict parser.
        vote_batch: votes requested concurrently (default: the round's M votes at once; one at a time with
            sequential voting, so that the controller can stop asking early).
        deterministic_judge: ``None`` detects it (a judge at temperature 0 repeats its verdict); such a
            judge is asked once per round and the controller runs with M = 1, with a warning.
    """
    fresh_controller(controller)  # a wrong controller is an error when the task is built, not mid-eval
    judge_templ, repair_templ, config, reason = _judge_setup(judge_model, judge_template, repair_template,
                                                             judge_temperature, deterministic_judge)
    note = deterministic_judge_note(reason, controller, stacklevel=4) if reason else None
    check_vote_batch(vote_batch)  # a bad vote_batch is an error when the task is built

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        ctl = fresh_controller(controller, one_vote=note is not None)
        trace = LoopTrace(judge_note=note)
        loop = _SampleLoop(state, generate, _judge(judge_model), judge_templ, repair_templ, config, parse_vote,
                           trace)
        steps, reply = refine_steps(ctl, trace, vote_batch), None
        try:
            while True:
                req = steps.send(reply)
                if isinstance(req, Plan):
                    reply = await loop.plan(req)
                elif isinstance(req, Votes):
                    reply = await loop.votes(req)
                else:
                    assert isinstance(req, Decided)
                    transcript().info({"vrr_round": round_record(req.decision)}, source=EVENT_SOURCE)
                    reply = None
        except StopIteration:
            pass
        except BaseException as exc:
            trace.error = describe_error(exc)
            loop.keep()
            raise
        state = loop.state
        chosen = trace.candidate
        state.output = trace.candidates[chosen]
        state.messages = loop.conversations[chosen]
        loop.keep()
        return state

    return solve


COST_FIELDS = ("verifier_calls", "repair_calls", "rounds", "unparsable_votes", "generator_tokens", "judge_tokens",
               "repairer_tokens")


@scorer(metrics={name: [mean()] for name in COST_FIELDS})
def vrr_cost() -> Scorer:
    """The loop's costs per sample, averaged over the eval: verifier calls (judge votes), repairs, rounds, judge
    replies no verdict could be read from (each counted as a rejection) and total tokens per role
    (generator: the first answer; judge: the votes; repairer: every rewrite). A role whose provider reported
    no usage for some call has unknown tokens: NaN, never 0.

    Reads the trace :func:`vrr_refine` stores in ``state.metadata["vrr"]``; a sample without one is unscored.
    """

    async def score(state: TaskState, target: Target) -> Score:
        trace = state.metadata.get(METADATA_KEY)
        if not isinstance(trace, dict):
            return Score.unscored(reason="no_vrr_trace",
                                  explanation="no vrr trace in the sample's metadata (is the solver vrr_refine?)")
        usage = trace.get("usage", {})
        value = {"verifier_calls": trace["verifier_calls"], "repair_calls": trace["repair_calls"],
                 "rounds": trace["rounds"], "unparsable_votes": len(trace.get("unparsable", []))}
        for role in ("generator", "judge", "repairer"):
            tokens = usage.get(role, {}).get("total_tokens", 0)
            value[f"{role}_tokens"] = float("nan") if tokens is None else tokens
        calls = ", ".join(f"{role} {row['calls']} calls" for role, row in usage.items())
        return Score(value=value, explanation=f"committed round {trace['candidate']}; {calls}")

    return score


# ---------------------------------------------------------------------- calibration
@solver
def vrr_probe(M: int, judge_model: str | Model | None = None, judge_template: str | None = None,
              repair_template: str | None = None, judge_temperature: float | None = None,
              parse_vote: Callable[[str], int | bool] | None = None,
              deterministic_judge: bool | None = None) -> Solver:
    """The calibration solver: the first answer, M judge votes on it (concurrently), one repair.

    Calibration needs the first plans' votes and labels (rho0, rho1, pi, the labeled J diagnostic) and
    labeled (before, after) repair pairs (alpha, beta), collected from trajectories in which every plan is
    repaired (Sec. 4.2). The record goes to ``state.metadata["vrr_probe"]`` (votes, both answers, M);
    ``state.output`` stays the first answer. Score the eval with :func:`plan_labels` around the task's
    scorer and pass the log to :func:`calibrate_from_log`. The judge and templates are those of
    :func:`vrr_refine`; use the same ones in both.
    """
    if isinstance(M, bool) or not isinstance(M, int) or M < 1:
        raise ValueError(f"vrr_probe: M must be an integer >= 1, got {M!r}")
    judge_templ, repair_templ, config, reason = _judge_setup(judge_model, judge_template, repair_template,
                                                             judge_temperature, deterministic_judge)
    note = deterministic_judge_note(reason, None, stacklevel=4) if reason else None
    votes_needed = 1 if note else M

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        trace = LoopTrace(judge_note=note)
        loop = _SampleLoop(state, generate, _judge(judge_model), judge_templ, repair_templ, config, parse_vote,
                           trace)
        first = await loop.plan(Plan(0))
        votes = await loop.votes(Votes(0, votes_needed, first))
        repaired = await loop.plan(Plan(1, first, calibration_decision(sum(votes), votes_needed)))
        state = loop.state
        state.metadata[PROBE_KEY] = {
            "M": votes_needed, "votes": votes, "answers": [first.completion, repaired.completion],
            "messages": [len(c) for c in loop.conversations], "usage": trace.usage, "judge_note": note}
        state.output = first
        state.messages = loop.conversations[0]
        return state

    return solve


@scorer(metrics={"first": [mean()], "repaired": [mean()]})
def plan_labels(scorer: Scorer) -> Scorer:
    """Label both answers of a :func:`vrr_probe` sample with the task's own scorer.

    The value is ``{"first": v0, "repaired": v1}``, each the inner score as a float (``value_to_float``:
    C -> 1, I -> 0); an answer the inner scorer leaves unscored gives NaN, and that sample does not enter
    the calibration.
    """
    to_float = value_to_float()

    async def score(state: TaskState, target: Target) -> Score:
        probe = state.metadata.get(PROBE_KEY)
        if not isinstance(probe, dict):
            return Score.unscored(reason="no_vrr_probe", explanation="no vrr_probe record (is the solver vrr_probe?)")
        values, explanations = {}, []
        full = list(state.messages) if len(state.messages) >= probe["messages"][-1] else None
        for key, answer, n_messages in zip(("first", "repaired"), probe["answers"], probe["messages"]):
            view = copy.deepcopy(state)
            view.output = ModelOutput.from_content(model=state.output.model or "", content=answer)
            if full is not None:
                view.messages = full[:n_messages]
            inner_score = await scorer(view, target)
            values[key] = float("nan") if inner_score is None else to_float(inner_score.value)
            explanations.append(f"{key}: {None if inner_score is None else inner_score.value}")
        return Score(value=values, answer=probe["answers"][0], explanation="; ".join(explanations))

    return score


def calibrate_from_samples(samples: Sequence[EvalSample], *, scorer: str | None = None, k_max: int = 5,
                           policy: str = "algorithm1", j_min: float = 0.10, label_threshold: float = 1.0,
                           **options) -> OnlineController:
    """A controller calibrated from the samples of a :func:`vrr_probe` eval scored by :func:`plan_labels`.

    A plan's label is ``score >= label_threshold`` (1.0: only a fully correct answer is valid). A sample
    that errored or whose label is missing (an unscored answer) is left out, with a warning naming it.
    ``options`` go to ``OnlineController.from_labeled`` (``delta``, ``tau``, ``sequential``, ...).
    """
    votes, labels, repairs, skipped, M = [], [], [], [], None
    for sample in samples:
        probe = (sample.metadata or {}).get(PROBE_KEY)
        if sample.error is not None:
            skipped.append(f"{sample.id} (error)")
            continue
        if not isinstance(probe, dict):
            raise ValueError(f"sample {sample.id}: no '{PROBE_KEY}' record in its metadata; calibrate from an eval "
                             "whose solver is vrr_probe(M, ...)")
        if M is None:
            M = probe["M"]
        elif probe["M"] != M:
            raise ValueError(f"sample {sample.id}: field '{PROBE_KEY}.M' is {probe['M']}, other samples have {M}")
        value = _plan_label_value(sample, scorer)
        if value is None or any(math.isnan(float(value[k])) for k in ("first", "repaired")):
            skipped.append(f"{sample.id} (unlabeled)")
            continue
        before, after = (int(float(value[k]) >= label_threshold) for k in ("first", "repaired"))
        votes.append(list(probe["votes"]))
        labels.append(before)
        repairs.append((before, after))
    if skipped:
        warnings.warn(f"calibration left out {len(skipped)} sample(s): {', '.join(skipped)}", stacklevel=2)
    if M is None:
        raise ValueError("calibration needs at least one labeled vrr_probe sample; none found")
    return labeled_controller(votes, labels, repairs, M=M, k_max=k_max, policy=policy, j_min=j_min, **options)


def _plan_label_value(sample: EvalSample, scorer_name: str | None) -> dict | None:
    scores = sample.scores or {}
    if scorer_name is not None:
        if scorer_name not in scores:
            raise ValueError(f"sample {sample.id}: no score named {scorer_name!r} (have {sorted(scores)})")
        found = scores[scorer_name]
    else:
        found = [s for s in scores.values() if isinstance(s.value, dict) and {"first", "repaired"} <= set(s.value)]
        if len(found) != 1:
            if not scores:
                return None
            raise ValueError(f"sample {sample.id}: expected one plan_labels score (a dict with 'first' and "
                             f"'repaired'), found {len(found)} among {sorted(scores)}; pass scorer=")
        found = found[0]
    return found.value if isinstance(found.value, dict) else None


def calibrate_from_log(log: EvalLog | str | Path, *, scorer: str | None = None, k_max: int = 5,
                       policy: str = "algorithm1", j_min: float = 0.10, label_threshold: float = 1.0,
                       **options) -> OnlineController:
    """:func:`calibrate_from_samples` on an eval log (an ``EvalLog`` or its file)."""
    if not isinstance(log, EvalLog):
        log = read_eval_log(str(log))
    if log.status != "success":
        raise ValueError(f"eval log {log.location or log.eval.task}: status {log.status!r}, not 'success'")
    if not log.samples:
        raise ValueError(f"eval log {log.location or log.eval.task}: no samples (read it with samples)")
    return calibrate_from_samples(log.samples, scorer=scorer, k_max=k_max, policy=policy, j_min=j_min,
                                  label_threshold=label_threshold, **options)


# ---------------------------------------------------------------------- grader panels
@inspect_metric
def mean_posterior() -> Metric:
    """The mean over samples of the panel posterior Pr(valid | grades) (:func:`posterior_panel`), under its
    own name: the grader scorer's default metric would call it accuracy, which it is not. Give it to the
    task, ``Task(..., scorer=panel, metrics=[mean_posterior()])``; unscored panels are left out."""

    def compute(scores: list[SampleScore]) -> float:
        values = [float(s.score.value) for s in scores if isinstance(s.score.value, (int, float))]
        return sum(values) / len(values) if values else float("nan")

    return compute


@score_reducer(name="vrr_posterior")
def posterior_panel(rates: Sequence[tuple[float, float]], prior: float = 0.5, accept: Sequence = ("C",),
                    reject: Sequence = ("I",)) -> ScoreReducer:
    """Combine a grader panel by its calibrated posterior (Eq. 5 with one (rho0, rho1) per grader).

    ``rates[i]`` is grader i's (rho0, rho1): its false-accept rate on invalid answers and false-reject rate
    on valid ones, in the order of ``model=[...]``. The reduced value is
    b = Pr(valid | grades) = prior prod_i L_i(1) / (prior prod_i L_i(1) + (1 - prior) prod_i L_i(0)), with
    L_i(1) = (1-rho1_i) for an accept and rho1_i for a reject, L_i(0) = rho0_i and (1-rho0_i). A grade that
    is neither in ``accept`` nor in ``reject`` (unscored, unparsable, or a partial grade) carries no
    evidence: it is counted and reported in the metadata (``panel.unparsable``), never read as either. A
    panel with no usable grade is unscored.
    """
    rates = [(float(r0), float(r1)) for r0, r1 in rates]
    for i, (r0, r1) in enumerate(rates):
        if not (0.0 <= r0 <= 1.0 and 0.0 <= r1 <= 1.0):
            raise ValueError(f"posterior_panel: rates[{i}] = ({r0}, {r1}): rho0 and rho1 must lie in [0, 1]")
    if not 0.0 < prior < 1.0:
        raise ValueError(f"posterior_panel: prior must lie in (0, 1), got {prior}")
    accept, reject = set(accept), set(reject)

    def reduce(scores: list[Score]) -> Score:
        if len(scores) != len(rates):
            raise ValueError(f"posterior_panel: {len(scores)} grades for {len(rates)} graders' rates")
        posterior, grades, unparsable = prior, [], []
        for i, (s, (r0, r1)) in enumerate(zip(scores, rates)):
            v = s.value
            if isinstance(v, (str, int, bool)) and v in accept:
                a = 1
            elif isinstance(v, (str, int, bool)) and v in reject:
                a = 0
            else:
                unparsable.append(i)
                grades.append(None)
                continue
            grades.append(a)
            posterior = belief_update(posterior, a, 1, r0, r1)   # Eq. 5, one grader's vote at a time
        panel = {"grades": grades, "rates": [list(r) for r in rates], "prior": prior,
                 "accepts": grades.count(1), "rejects": grades.count(0), "unparsable": unparsable}
        if len(unparsable) == len(scores):
            return Score.unscored(reason="no_usable_grade", metadata={"panel": panel},
                                  explanation=f"none of the {len(scores)} graders gave a usable grade")
        panel["posterior"] = posterior = float(posterior)
        return Score(value=posterior, answer=scores[0].answer, metadata={"panel": panel},
                     explanation=(f"posterior {posterior:.3f} from {panel['accepts']} accept(s), {panel['rejects']} "
                                  f"reject(s), {len(unparsable)} unusable grade(s)"))

    return reduce
