"""vrr_refine (vrr/adapters/inspect.py) run by Inspect AI's own ``eval`` on its ``mockllm/model``.

Without inspect_ai these tests skip, unless VRR_REQUIRE_ADAPTERS=1 (``make test``), where they fail.
The mock replies carry their token usage, so Inspect never loads a tokenizer file from the network;
every test checks that nothing tried to reach a non-loopback address.
"""
import math

import anyio
import pytest


from conftest import require_adapter_library as _require  # noqa: E402


_require("inspect_ai")
from inspect_ai import Task, eval as inspect_eval  # noqa: E402
from inspect_ai.dataset import Sample  # noqa: E402
from inspect_ai.model import ModelOutput, ModelUsage, get_model  # noqa: E402
from inspect_ai.event import InfoEvent  # noqa: E402
from inspect_ai.scorer import Score, match, model_graded_qa  # noqa: E402
from inspect_ai.solver import generate  # noqa: E402

from vrr.adapters._common import DeterministicJudgeWarning  # noqa: E402
from vrr.adapters.inspect import (calibrate_from_log, calibrate_from_samples, plan_labels, posterior_panel,  # noqa: E402
                                  vrr_cost, vrr_probe, vrr_refine)
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
        out.append({k: None if k in ("radius", "radius_low") and v != v else v for k, v in d.items()})
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
    full_judge = Scripted(verdicts(votes))
    seq_judge = Scripted(answer=lambda last: "ACCEPT" if "ANSWER: 4" in last else "REJECT")
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


class Concurrency:
    """An async mockllm judge that accepts "ANSWER: 4" and records how many of its calls were in flight at once."""

    def __init__(self):
        self.in_flight = self.peak = self.calls = 0

    async def __call__(self, messages, tools, tool_choice, config):
        self.calls += 1
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        await anyio.sleep(0.01)
        self.in_flight -= 1
        return reply("ACCEPT" if "ANSWER: 4" in messages[-1].text else "REJECT")


def test_the_votes_of_a_round_run_concurrently_and_sequential_votes_one_at_a_time(tmp_path):
    full = Concurrency()
    run_eval(tmp_path / "full", stop_controller(), Scripted(["ANSWER: 3", "ANSWER: 4"]), full)
    assert (full.calls, full.peak) == (16, 8)
    seq = Concurrency()
    log = run_eval(tmp_path / "seq", stop_controller(sequential="exact"), Scripted(["ANSWER: 3", "ANSWER: 4"]), seq)
    assert seq.peak == 1 and seq.calls == log.samples[0].metadata["vrr"]["verifier_calls"] < 16
    batched = Concurrency()
    run_eval(tmp_path / "batch", stop_controller(sequential="exact"), Scripted(["ANSWER: 3", "ANSWER: 4"]), batched,
             vote_batch=3)
    assert batched.peak == 3


def test_each_round_is_one_transcript_event_and_costs_are_scored_per_role(tmp_path):
    ctl = stop_controller()
    votes = [[0] * 7 + [1], [1] * 8]
    gen_model = get_model("mockllm/model", custom_outputs=Scripted(["ANSWER: 3", "ANSWER: 4"]))
    judge_model = get_model("mockllm/model", custom_outputs=Scripted(verdicts(votes)))
    task = Task(dataset=[Sample(input="What is 2 + 2?", target="4")],
                solver=vrr_refine(ctl, judge_model=judge_model), scorer=[match(), vrr_cost()])
    [log] = inspect_eval(task, model=gen_model, log_dir=str(tmp_path), display="none")
    assert log.status == "success", log.error
    [sample] = log.samples
    rounds = [e.data["vrr_round"] for e in sample.events if isinstance(e, InfoEvent) and e.source == "vrr_refine"]
    assert rounds == expected_decisions(ctl, votes)                 # b_k, G_k, B_k, action, mode, reason per round
    assert sample.store["vrr"] == sample.metadata["vrr"]
    usage = sample.metadata["vrr"]["usage"]
    assert {role: (row["calls"], row["total_tokens"]) for role, row in usage.items()} == {
        "generator": (1, 2), "judge": (16, 32), "repairer": (1, 2)}   # every mock reply carries 2 tokens
    cost = {s.name: s.metrics["mean"].value for s in log.results.scores if s.scorer == "vrr_cost"}
    assert (cost["verifier_calls"], cost["repair_calls"], cost["rounds"]) == (16, 1, 2)
    assert (cost["generator_tokens"], cost["judge_tokens"], cost["repairer_tokens"]) == (2, 32, 2)


def test_the_trace_is_kept_when_the_loop_raises(tmp_path):
    def judge(last):
        if "ANSWER: 4" in last:
            raise RuntimeError("judge endpoint down")
        return "REJECT"

    gen_model = get_model("mockllm/model", custom_outputs=Scripted(["ANSWER: 3", "ANSWER: 4"]))
    judge_model = get_model("mockllm/model", custom_outputs=Scripted(answer=judge))
    task = Task(dataset=[Sample(input="What is 2 + 2?", target="4")],
                solver=vrr_refine(stop_controller(), judge_model=judge_model), scorer=match())
    [log] = inspect_eval(task, model=gen_model, log_dir=str(tmp_path), display="none", fail_on_error=False,
                         retry_on_error=0)
    [sample] = log.samples
    assert sample.error is not None and "judge endpoint down" in sample.error.message
    trace = sample.metadata["vrr"]
    assert [d["action"] for d in trace["decisions"]] == ["repair"] and trace["candidate"] is None
    assert trace["votes"][0] == [0] * 8 and "judge endpoint down" in trace["error"]


def test_a_judge_at_temperature_zero_counts_as_one_vote(tmp_path):
    judge = Scripted(verdicts([[0], [1]]))
    with pytest.warns(DeterministicJudgeWarning, match="temperature 0"):
        solver = vrr_refine(stop_controller(), judge_model=get_model("mockllm/model", custom_outputs=judge),
                            judge_temperature=0)
    task = Task(dataset=[Sample(input="What is 2 + 2?", target="4")], solver=solver, scorer=match())
    gen_model = get_model("mockllm/model", custom_outputs=Scripted(["ANSWER: 3", "ANSWER: 4"]))
    [log] = inspect_eval(task, model=gen_model, log_dir=str(tmp_path), display="none")
    trace = log.samples[0].metadata["vrr"]
    assert len(judge.prompts) == 2 and trace["votes"] == [[0], [1]] and "M = 1" in trace["judge_note"]


def grader(text):
    return get_model("mockllm/model", custom_outputs=[reply(text)])


def test_the_posterior_panel_combines_grades_by_eq5_and_reports_unparsable_ones(tmp_path):
    rates = [(0.1, 0.2), (0.3, 0.05), (0.2, 0.2)]
    panel = [grader("GRADE: C"), grader("GRADE: I"), grader("I cannot decide")]
    scorer = model_graded_qa(model=panel, reducer=posterior_panel(rates, prior=0.6))
    task = Task(dataset=[Sample(input="What is 2 + 2?", target="4")], solver=generate(), scorer=scorer)
    [log] = inspect_eval(task, model=get_model("mockllm/model", custom_outputs=[reply("4")]),
                         log_dir=str(tmp_path), display="none")
    assert log.status == "success", log.error
    [score] = log.samples[0].scores.values()
    valid = 0.6 * (1 - 0.2) * 0.05                     # grader 0 accepts, grader 1 rejects, grader 2 unusable
    invalid = 0.4 * 0.1 * (1 - 0.3)
    assert score.value == pytest.approx(valid / (valid + invalid))
    assert score.metadata["panel"]["unparsable"] == [2]
    assert (score.metadata["panel"]["accepts"], score.metadata["panel"]["rejects"]) == (1, 1)
    reduce = posterior_panel(rates[:2])
    assert math.isnan(reduce([Score(value=float("nan")), Score(value="P")]).value)     # no usable grade
    with pytest.raises(ValueError, match="3 grades for 2 graders"):
        reduce([Score(value="C")] * 3)
    with pytest.raises(ValueError, match=r"rates\[0\]"):
        posterior_panel([(1.5, 0.1)])


def test_the_calibration_probe_records_votes_and_plan_labels_labels_both_answers(tmp_path):
    gen = Scripted(["ANSWER: 3", "ANSWER: 4"])
    judge = Scripted(verdicts([[1, 0, 0, 1]]))
    task = Task(dataset=[Sample(input="What is 2 + 2?", target="4", id="q1")],
                solver=vrr_probe(4, judge_model=get_model("mockllm/model", custom_outputs=judge)),
                scorer=plan_labels(match()))
    [log] = inspect_eval(task, model=get_model("mockllm/model", custom_outputs=gen), log_dir=str(tmp_path),
                         display="none")
    assert log.status == "success", log.error
    [sample] = log.samples
    probe = sample.metadata["vrr_probe"]
    assert probe["votes"] == [1, 0, 0, 1] and probe["answers"] == ["ANSWER: 3", "ANSWER: 4"]
    assert "2 of 4 reviewers judged the solution incorrect" in gen.prompts[1][-1]   # the repair saw the votes
    [score] = sample.scores.values()
    assert score.value == {"first": 0.0, "repaired": 1.0}
    assert sample.output.completion == "ANSWER: 3"


def test_calibrate_from_log_fits_the_controller_from_the_probe_eval(tmp_path):
    # per sample: first answer, repaired answer, the judge's votes on the first answer (M = 4)
    plans = {0: ("4", "4", [1, 1, 1, 0]), 1: ("4", "5", [1, 1, 1, 1]), 2: ("5", "4", [0, 0, 1, 0]),
             3: ("5", "6", [0, 0, 0, 0]), 4: ("6", "4", [1, 0, 0, 0]), 5: ("4", "4", [1, 1, 0, 1])}

    def generator(last):
        i = int(last.split("Problem ")[1].split(":")[0])
        return f"ANSWER: {plans[i][1] if 'reviewers judged' in last else plans[i][0]}"

    asked = {i: 0 for i in plans}

    def judge(last):
        i = int(last.split("Problem ")[1].split(":")[0])
        asked[i] += 1
        return "ACCEPT" if plans[i][2][asked[i] - 1] else "REJECT"

    samples = [Sample(input=f"Problem {i}: what is 2 + 2?", target="4", id=i) for i in plans]
    task = Task(dataset=samples, scorer=plan_labels(match()),
                solver=vrr_probe(4, judge_model=get_model("mockllm/model", custom_outputs=Scripted(answer=judge))))
    [log] = inspect_eval(task, model=get_model("mockllm/model", custom_outputs=Scripted(answer=generator)),
                         log_dir=str(tmp_path), display="none")
    assert log.status == "success", log.error
    ctl = calibrate_from_log(log.location, k_max=2, policy="vrr_stop")   # the log file, read back
    report = ctl.calibration_report
    assert report.data["accept_histogram_valid"] == [0, 0, 0, 2, 1]
    assert report.data["accept_histogram_invalid"] == [1, 2, 0, 0, 0]
    assert (report.rho0, report.rho1, report.pi, report.alpha, report.beta) == pytest.approx(
        (1 / 6, 1 / 6, 0.5, 2 / 3, 1 / 3))
    assert (ctl.M, ctl.k_max, report.n_plans, report.n_repairs) == (4, 2, 6, 6)
    # an unlabeled sample is left out with a warning naming it; the others still calibrate
    samples = list(log.samples)
    samples[0] = samples[0].model_copy(update={"scores": {"plan_labels": Score(
        value={"first": float("nan"), "repaired": 1.0})}})
    with pytest.warns(UserWarning, match=r"left out 1 sample\(s\): 0 \(unlabeled\)"):
        assert calibrate_from_samples(samples, k_max=2, policy="vrr_stop").calibration_report.n_plans == 5
    with pytest.raises(ValueError, match="no 'vrr_probe' record"):
        calibrate_from_samples([samples[1].model_copy(update={"metadata": {}})])


def test_unparsable_judge_replies_are_counted_listed_and_scored(tmp_path):
    """A judge reply with no verdict counts as a rejection (as the calibration counts it), is listed in the
    trace with its round, and vrr_cost reports how many there were."""
    votes = ["no idea"] * 3 + ["REJECT"] * 5 + ["ACCEPT"] * 7 + ["hmm"]
    gen_model = get_model("mockllm/model", custom_outputs=Scripted(["ANSWER: 3", "ANSWER: 4"]))
    judge_model = get_model("mockllm/model", custom_outputs=Scripted(votes))
    task = Task(dataset=[Sample(input="What is 2 + 2?", target="4")],
                solver=vrr_refine(stop_controller(k_max=1), judge_model=judge_model), scorer=[match(), vrr_cost()])
    [log] = inspect_eval(task, model=gen_model, log_dir=str(tmp_path), display="none")
    assert log.status == "success", log.error
    trace = log.samples[0].metadata["vrr"]
    assert [u["round"] for u in trace["unparsable"]] == [0, 0, 0, 1]
    assert sorted(u["reply"] for u in trace["unparsable"]) == ["hmm", "no idea", "no idea", "no idea"]
    assert trace["decisions"][0]["accepts"] == 0 and trace["decisions"][1]["accepts"] == 7
    cost = {s.name: s.metrics["mean"].value for s in log.results.scores if s.scorer == "vrr_cost"}
    assert cost["unparsable_votes"] == 4


def test_calibrate_from_log_reports_the_mode_that_then_runs(tmp_path):
    """Votes that do not separate the classes (J-hat = 0) with policy="vrr_stop": the report says Stop, the
    mode the controller runs. Labeled rates keep the belief calibrated at any J, so Algorithm 1 would run Stop
    too and no CalibrationWarning is raised."""
    import warnings

    from vrr.policies.online_calibration import CalibrationWarning

    plans = {0: ("4", "4"), 1: ("5", "4"), 2: ("4", "5"), 3: ("5", "5"), 4: ("4", "4"), 5: ("5", "4")}
    asked = {i: 0 for i in plans}

    def generator(last):
        i = int(last.split("Problem ")[1].split(":")[0])
        return f"ANSWER: {plans[i][1] if 'reviewers judged' in last else plans[i][0]}"

    def judge(last):
        i = int(last.split("Problem ")[1].split(":")[0])
        asked[i] += 1
        return "ACCEPT" if asked[i] % 2 else "REJECT"      # 2 of 4 for every plan, valid or not

    task = Task(dataset=[Sample(input=f"Problem {i}: what is 2 + 2?", target="4", id=i) for i in plans],
                scorer=plan_labels(match()),
                solver=vrr_probe(4, judge_model=get_model("mockllm/model", custom_outputs=Scripted(answer=judge))))
    [log] = inspect_eval(task, model=get_model("mockllm/model", custom_outputs=Scripted(answer=generator)),
                         log_dir=str(tmp_path), display="none")
    with warnings.catch_warnings():
        warnings.simplefilter("error", CalibrationWarning)
        ctl = calibrate_from_log(log, k_max=2, policy="vrr_stop")
    report = ctl.calibration_report
    assert report.j_hat == 0.0 and report.mode == ctl.mode == "stop"
    assert report.reason == ctl.to_dict()["state"]["reason"]


def test_the_panel_posterior_is_reported_under_its_own_name(tmp_path):
    from vrr.adapters.inspect import mean_posterior

    panel = model_graded_qa(model=[grader("GRADE: C"), grader("GRADE: I")],
                            reducer=posterior_panel([(0.1, 0.2), (0.3, 0.05)], prior=0.6))
    task = Task(dataset=[Sample(input="What is 2 + 2?", target="4")], solver=generate(), scorer=panel,
                metrics=[mean_posterior()])
    [log] = inspect_eval(task, model=get_model("mockllm/model", custom_outputs=[reply("4")]),
                         log_dir=str(tmp_path), display="none")
    [score] = log.results.scores
    valid, invalid = 0.6 * 0.8 * 0.05, 0.4 * 0.1 * 0.7
    assert list(score.metrics) == ["mean_posterior"]
    assert score.metrics["mean_posterior"].value == pytest.approx(valid / (valid + invalid))
