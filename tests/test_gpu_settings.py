"""The GPU settings of the paper's rows cannot run here; a dry run resolves each to the engine requests
it would make (models, sampling parameters, prompts) without loading a model."""
import pytest

from vrr.loop.config import run_config
from vrr.loop.runner import dry_run
from vrr.loop.tasks import get_task
from vrr.settings import list_settings, load_config

GPU = [n for n in list_settings(kind="real") if n.startswith("gpu_")]


def test_the_paper_rows_have_gpu_settings():
    assert {"gpu_math500", "gpu_bfcl_single", "gpu_bfcl_multi", "gpu_mbpp_favorable", "gpu_mbpp_pmstress",
            "gpu_qwen3b_favorable", "gpu_qwen3b_pmstress"} <= set(GPU)


@pytest.mark.parametrize("name", GPU)
def test_dry_run_resolves_to_the_engine_requests(name):
    cfg = load_config(name)
    rc = run_config(cfg)
    calls = dry_run(rc)
    task = get_task(rc.dataset)
    problem = task.load(rc.split)[rc.start]
    gen = [c for c in calls if not c.get("reward") and task.prompts.role_of(c["conversations"][0]) == "generator"]
    judge = [c for c in calls if c.get("reward") or c["n"] == rc.M]
    repair = [c for c in calls if task.prompts.role_of(c["conversations"][0]) == "repairer"]
    assert gen[0]["model"] == cfg["models"]["generator"] and gen[0]["temperature"] == cfg["temperatures"]["generate"]
    assert gen[0]["max_tokens"] == cfg["max_tokens"]["generate"]
    if hasattr(task, "plan_steps"):   # multi-step plans (BFCL multi-turn): the docs, then the user turns one by one
        first = gen[0]["conversations"][0]
        assert problem.question.startswith(first[0]["content"]) and first[1]["content"] in problem.question
    else:
        assert problem.question in gen[0]["conversations"][0][-1]["content"]
    assert len(judge) == rc.K_max + 1 and all(c["model"] == cfg["models"]["judge"] for c in judge)
    assert all(c.get("reward") or c["temperature"] == cfg["temperatures"]["judge"] for c in judge)
    if rc.verifier == "prm":   # the PRM scores steps: one reward request per round, no sampling
        assert all(c.get("reward") for c in judge)
    repair = [c for c in repair if not c.get("reward")]
    assert len(repair) == rc.K_max and all(c["model"] == cfg["models"]["repairer"] for c in repair)
    assert all(c["temperature"] == cfg["temperatures"]["repair"] for c in repair)
    stressed = [problem.question not in c["conversations"][0][-1]["content"] for c in repair]
    if cfg["perturbation"]["regime"] == "favorable":
        assert not any(stressed)
    elif task.make_perturbation(problem, rc.seed, rc.perturb)["kind"] != "none":
        assert all(stressed)   # the repairer sees the perturbed statement; the judge the original
        assert all(any(problem.question in m["content"] for m in c["conversations"][0]) for c in judge)
