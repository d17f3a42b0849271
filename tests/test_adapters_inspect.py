"""vrr_refine (vrr/adapters/inspect.py) run by Inspect AI's own ``eval`` on its ``mockllm/model``.

Without inspect_ai these tests skip, unless VRR_REQUIRE_ADAPTERS=1 (``make test``), where they fail.
The mock replies carry their token usage, so Inspect never loads a tokenizer file from the network;
every test checks that nothing tried to reach a non-loopback address.
"""

import pytest


from conftest import require_adapter_library as _require  # noqa: E402


_require("inspect_ai")
from inspect_ai import Task, eval as inspect_eval  # noqa: E402
from inspect_ai.dataset import Sample  # noqa: E402
from inspect_ai.model import ModelOutput, ModelUsage, get_model  # noqa: E402
from inspect_ai.scorer import match  # noqa: E402

from vrr.adapters.inspect import vrr_refine  # noqa: E402
from vrr.policies.online import OnlineController  # noqa: E402

# tenacity's own deprecation inside Inspect's retry setup, not ours
pytestmark = [pytest.mark.filterwarnings("ignore:The 'initial' parameter is deprecated:DeprecationWarning"),
              pytest.mark.usefixtures("no_remote_connections")]  # every test: no non-loopback connection

def reply(text):
    out = ModelOutput.from_content(model="mockllm", content=text)
    out.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    return out


class Scripted:
    """A mockllm ``custom_outputs`` callable: answers from a script (or a function of the prompt) and
    records every prompt it was sent, so a test can count the model calls."""

    def __init__(self, script=None, answer=None):
        self.script = iter(script or [])
        self.answer = answer
        self.prompts = []

    def __call__(self, messages, tools, tool_choice, config):
        self.prompts.append([m.text for m in messages])
        return reply(self.answer(messages[-1].text) if self.answer else next(self.script))


def stop_controller(**kw):
    """VRR-Stop with a symmetric judge (rho0 = rho1 = 0.2) and a helpful repairer: b* = 0.8."""
    params = dict(M=8, k_max=3, rho0=0.2, rho1=0.2, alpha=0.4, beta=0.1, pi=0.5, policy="vrr_stop")
    params.update(kw)
    return OnlineController.from_parameters(**params)


def verdicts(rounds):
    return ["ACCEPT" if v else "REJECT" for votes in rounds for v in votes]


def expected_decisions(controller, rounds):
    """The decisions an independent copy of the controller makes on the same vote stream (as dicts)."""
    ctl = OnlineController.from_dict(controller.to_dict()).start()
    out = []
    for votes in rounds:
        it = iter(votes)
        while ctl.need_vote():
            ctl.add_vote(next(it))
        d = ctl.decide().as_dict()
        out.append({k: None if k == "radius" and v != v else v for k, v in d.items()})
        if d["action"] == "commit":
            break
    return out


def run_eval(tmp_path, controller, generator, judge, samples=None, **kw):
    gen_model = get_model("mockllm/model", custom_outputs=generator)
    judge_model = get_model("mockllm/model", custom_outputs=judge)
    task = Task(dataset=samples or [Sample(input="What is 2 + 2?", target="4")],
                solver=vrr_refine(controller, judge_model=judge_model, **kw), scorer=match())
    [log] = inspect_eval(task, model=gen_model, log_dir=str(tmp_path), display="none")
    assert log.status == "success", log.error
    return log


def test_repairs_while_the_gain_is_positive_then_commits(tmp_path):
    ctl = stop_controller()
    votes = [[0] * 7 + [1], [1] * 8]
    gen = Scripted(["ANSWER: 3", "ANSWER: 4", "ANSWER: 9"])
    judge = Scripted(verdicts(votes))
    log = run_eval(tmp_path, ctl, gen, judge)
    [sample] = log.samples
    assert len(gen.prompts) == 2 and len(judge.prompts) == 16      # the controller decided the calls
    assert sample.output.completion == "ANSWER: 4"
    assert log.results.scores[0].metrics["accuracy"].value == 1.0
    trace = sample.metadata["vrr"]
    assert trace["decisions"] == expected_decisions(ctl, votes)
    assert (trace["candidate"], trace["verifier_calls"], trace["repair_calls"]) == (1, 16, 1)
    assert all("ANSWER: 3" in p[-1] for p in judge.prompts[:8]) and all("ANSWER: 4" in p[-1] for p in judge.prompts[8:])
    assert "7 of 8 reviewers judged the solution incorrect" in gen.prompts[1][-1]   # the repair request
    assert [m.role for m in sample.messages] == ["user", "assistant", "user", "assistant"]


def test_commits_the_first_answer_when_repair_cannot_gain(tmp_path):
    gen = Scripted(["ANSWER: 3", "ANSWER: 4"])
    judge = Scripted(verdicts([[0] * 8]))
    log = run_eval(tmp_path, stop_controller(alpha=0.0), gen, judge)
    assert (len(gen.prompts), len(judge.prompts)) == (1, 8)
    assert log.samples[0].output.completion == "ANSWER: 3"
    assert log.results.scores[0].metrics["accuracy"].value == 0.0


def test_guard_commits_the_incumbent_and_its_conversation(tmp_path):
    ctl = OnlineController.from_parameters(M=8, k_max=2, rho0=0.2, rho1=0.2, alpha=0.4, beta=0.1, pi=0.5,
                                           policy="vrr_guard", delta=3)
    votes = [[1] * 6 + [0] * 2, [1] + [0] * 7, [1, 1] + [0] * 6]
    gen = Scripted(["ANSWER: 4", "ANSWER: 7", "ANSWER: 8"])
    log = run_eval(tmp_path, ctl, gen, Scripted(verdicts(votes)))
    [sample] = log.samples
    assert len(gen.prompts) == 3                                   # Guard spends the budget
    assert sample.output.completion == "ANSWER: 4"                  # the last plan was "8"
    assert [m.role for m in sample.messages] == ["user", "assistant"]
    assert log.results.scores[0].metrics["accuracy"].value == 1.0
    assert sample.metadata["vrr"]["decisions"] == expected_decisions(ctl, votes)


def test_sequential_voting_asks_fewer_votes_for_the_same_answer(tmp_path):
    votes = [[0] * 8, [1] * 8]
    full_judge, seq_judge = Scripted(verdicts(votes)), Scripted(verdicts(votes))
    full = run_eval(tmp_path / "full", stop_controller(), Scripted(["ANSWER: 3", "ANSWER: 4"]), full_judge)
    seq_ctl = stop_controller(sequential="exact")
    seq = run_eval(tmp_path / "seq", seq_ctl, Scripted(["ANSWER: 3", "ANSWER: 4"]), seq_judge)
    assert len(seq_judge.prompts) == seq.samples[0].metadata["vrr"]["verifier_calls"] < len(full_judge.prompts) == 16
    assert seq.samples[0].output.completion == full.samples[0].output.completion == "ANSWER: 4"
    assert seq.samples[0].metadata["vrr"]["decisions"] == expected_decisions(seq_ctl, votes)


def test_concurrent_samples_each_get_their_own_controller(tmp_path):
    # Answers depend on the prompt, so the samples can run in any interleaving.
    def generator(last):
        return "ANSWER: 4" if "reviewers judged" in last else "ANSWER: 3"

    def judge(last):
        return "ACCEPT" if "ANSWER: 4" in last else "REJECT"

    gen, jud = Scripted(answer=generator), Scripted(answer=judge)
    samples = [Sample(input=f"Problem {i}: what is 2 + 2?", target="4", id=i) for i in range(3)]
    ctl = stop_controller()
    log = run_eval(tmp_path, ctl, gen, jud, samples=samples)
    assert len(gen.prompts) == 6 and len(jud.prompts) == 48
    for sample in log.samples:
        assert sample.output.completion == "ANSWER: 4"
        assert [d["action"] for d in sample.metadata["vrr"]["decisions"]] == ["repair", "commit"]
    assert ctl.round == 0 and not ctl.done                           # the task's controller was only copied


def test_unparsable_replies_reject_and_a_custom_parser_is_used(tmp_path):
    gen = Scripted(["ANSWER: 3", "ANSWER: 4"])
    log = run_eval(tmp_path / "words", stop_controller(k_max=1), gen, Scripted(["no idea"] * 8 + ["ACCEPT"] * 8))
    assert log.samples[0].metadata["vrr"]["decisions"][0]["accepts"] == 0
    custom = run_eval(tmp_path / "custom", stop_controller(k_max=1), Scripted(["ANSWER: 3", "ANSWER: 4"]),
                      Scripted(["looks right"] * 8), parse_vote=lambda text: "right" in text)
    first = custom.samples[0].metadata["vrr"]["decisions"][0]
    assert first["accepts"] == 8 and first["action"] == "commit"


def test_a_wrong_controller_fails_when_the_task_is_built():
    with pytest.raises(TypeError, match="OnlineController"):
        vrr_refine({"M": 8})
