"""An Inspect AI solver that runs generate -> judge votes -> repair under the online controller (extra ``inspect``).

Inspect's ``self_critique`` runs one critique and one regeneration, and a loop of solvers stops on a
budget; neither models judge noise. :func:`vrr_refine` is a solver that runs the loop of
:class:`vrr.policies.online.OnlineController` (Sec. 4; App. A, Algorithm 1) on each sample:

1. ``generate(state)``: the model under evaluation writes a candidate (round 0);
2. the judge model votes on it with ``judge_template``, one ``generate`` call per vote, for as long as
   the controller asks (M votes, or fewer with sequential voting); a reply is read by the repository's
   verdict parser (``vrr.loop.verifiers.vote``: ACCEPT/CORRECT vs REJECT/INCORRECT, unparsable = reject);
3. the controller decides: on *repair* a user message built from ``repair_template`` (the question, the
   candidate and the vote summary) is appended and ``generate`` runs again, as ``self_critique`` does;
   on *commit* the loop ends;
4. ``state.output`` becomes the committed candidate (Guard's keep-best incumbent, Eq. 9, where it
   applies) and ``state.messages`` the conversation up to that candidate's reply, so scorers see the
   committed answer; ``state.metadata["vrr"]`` holds the decision trace (``LoopTrace.as_dict()``).

Every sample works on its own copy of the controller, so samples can run concurrently. Judge calls
should not be cached (identical prompts would repeat one vote instead of sampling M).
"""
from __future__ import annotations

from typing import Callable

from inspect_ai.model import ChatMessageUser, GenerateConfig, Model, get_model
from inspect_ai.solver import Generate, Solver, TaskState, solver
from inspect_ai.util import resource

from ..policies.online import OnlineController
from ._common import LoopTrace, as_vote, fresh_controller, vote_feedback

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

METADATA_KEY = "vrr"


@solver
def vrr_refine(controller: OnlineController, judge_model: str | Model | None = None,
               judge_template: str | None = None, repair_template: str | None = None,
               judge_temperature: float | None = None,
               parse_vote: Callable[[str], int | bool] | None = None) -> Solver:
    """Generate, vote, repair or commit under the online controller (Algorithm 1), per sample.

    Args:
        controller: an :class:`OnlineController` (``from_parameters`` or ``from_calibration``); copied per
            sample. Its ``M`` is the votes per round and ``k_max`` the repair budget.
        judge_model: the model that votes (default: the model under evaluation, as ``self_critique``).
        judge_template: the judge prompt, with ``{question}``, ``{completion}`` and the sample's metadata
            (default :data:`JUDGE_TEMPLATE`: one word, ACCEPT or REJECT).
        repair_template: the repair request, with ``{question}``, ``{completion}``, ``{feedback}`` and the
            metadata (default :data:`REPAIR_TEMPLATE`).
        judge_temperature: sampling temperature of the judge calls (default: the model's own config).
        parse_vote: ``parse_vote(reply_text) -> 0/1`` instead of the verdict parser.
    """
    fresh_controller(controller)  # a wrong controller is an error when the task is built, not mid-eval
    judge_templ = resource(judge_template or JUDGE_TEMPLATE)
    repair_templ = resource(repair_template or REPAIR_TEMPLATE)
    config = GenerateConfig(temperature=judge_temperature) if judge_temperature is not None else GenerateConfig()

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        ctl = fresh_controller(controller)
        judge = judge_model if isinstance(judge_model, Model) else get_model(judge_model)
        # the template variables come first from the loop, so metadata cannot shadow them
        metadata = {k: v for k, v in state.metadata.items() if k not in ("question", "completion", "feedback")}
        loop = LoopTrace()
        conversations = []
        state = await generate(state)
        while True:
            k = ctl.round
            loop.candidates.append(state.output)
            conversations.append(list(state.messages))
            completion = state.output.completion
            prompt = judge_templ.format(question=state.input_text, completion=completion, **metadata)
            while ctl.need_vote():
                reply = await judge.generate(prompt, config=config)
                text = reply.completion
                ctl.add_vote(as_vote(parse_vote(text), f"parse_vote in round {k}") if parse_vote is not None
                             else as_vote(text, f"judge reply in round {k}"))
            decision = ctl.decide()
            loop.decisions.append(decision)
            if decision.committed:
                break
            state.messages.append(ChatMessageUser(content=repair_templ.format(
                question=state.input_text, completion=completion, feedback=vote_feedback(decision), **metadata)))
            state = await generate(state)
        chosen = loop.candidate
        state.output = loop.candidates[chosen]
        state.messages = conversations[chosen]
        state.metadata[METADATA_KEY] = loop.as_dict()
        return state

    return solve
