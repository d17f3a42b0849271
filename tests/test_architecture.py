"""The package is laid out as the paper's flow, and imports run one way.

Every module of ``vrr`` belongs to a stage; a module may import only from its own stage and from
stages before it. ``vrr/__init__.py`` (the lazy public API) and ``vrr/__main__.py`` are not stages.
"""
import ast
import importlib
from pathlib import Path

import pytest

import vrr

PKG = Path(vrr.__file__).resolve().parent
# The flow: shared helpers, pure math, the protocol, the data contract, the LLM loop, labeling,
# calibration, policies and replay, statistics, reporting, the notebook chain and the CLI, and last the
# adapters that put the online controller into other frameworks' loops (nothing in vrr imports them).
STAGES = ["common", "core", "settings", "data", "loop", "label", "calibration", "policies", "stats", "report",
          "chain", "adapters"]


def _stage(module: str) -> str:
    parts = module.split(".")
    assert parts[0] == "vrr", module
    return parts[1]


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path, source: str | None = None) -> list[tuple[str, int]]:
    """Absolute names of the vrr modules a file imports (relative imports resolved); ``source``: the file's text
    when it is not on disk."""
    tree = ast.parse(path.read_text() if source is None else source, filename=str(path))
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names if a.name.split(".")[0] == "vrr"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "vrr":
                continue
            # "from pkg import sub" imports the submodule pkg.sub; "from mod import name" imports mod
            for a in node.names:
                sub = f"{target}.{a.name}"
                out.append((sub if sub in MODULES or target == "vrr" else target, node.lineno))
    return out


def _sources():
    return [p for p in sorted(PKG.rglob("*.py")) if p.name != "__main__.py" and p != PKG / "__init__.py"]


MODULES = {_module_name(p) for p in sorted(PKG.rglob("*.py"))}


def test_every_module_belongs_to_a_stage():
    for path in _sources():
        assert _stage(_module_name(path)) in STAGES, f"{path} is outside the flow {STAGES}"


def _wrong_arrows(paths, sources: dict | None = None) -> list[str]:
    wrong = []
    for path in paths:
        own = STAGES.index(_stage(_module_name(path)))
        for target, line in _imports(path, (sources or {}).get(path)):
            stage = _stage(target) if target != "vrr" else None
            if stage is None or STAGES.index(stage) > own:
                wrong.append(f"{path.relative_to(PKG.parent)}:{line} imports {target} (against the flow)")
    return wrong


def test_imports_run_one_way():
    wrong = _wrong_arrows(_sources())
    assert not wrong, "\n".join(wrong)


def test_no_import_cycle_between_modules():
    graph = {}
    for path in _sources():
        graph[_module_name(path)] = {t for t, _ in _imports(path) if t != _module_name(path)}
    modules = set(graph)
    # resolve "vrr.x.y" imports of names to the module that exists
    for m, targets in graph.items():
        graph[m] = {t if t in modules else t.rsplit(".", 1)[0] for t in targets} & modules
    state: dict[str, int] = {}

    def visit(m, stack):
        state[m] = 1
        for t in graph[m]:
            if state.get(t) == 1:
                pytest.fail("import cycle: " + " -> ".join(stack + [m, t]))
            if t not in state:
                visit(t, stack + [m])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])


def test_the_checker_sees_a_wrong_arrow():
    """The direction check is not vacuous: an upward import in core is reported. The probe module's text is given
    in memory, never written into the package, where a test running beside this one would find it."""
    bad = PKG / "core" / "_probe_wrong_arrow.py"
    assert _wrong_arrows([*_sources(), bad], {bad: "from ..stats import inference\n"}) == ["vrr/core/_probe_wrong_arrow.py:1 imports vrr.stats.inference "
                                                  "(against the flow)"]


def test_public_api_resolves_and_cites_the_paper():
    missing, undocumented = [], []
    for name in vrr.__all__:
        obj = getattr(vrr, name)
        if name in vrr._SUBMODULES or isinstance(obj, (str, tuple)):
            continue
        if obj is None:
            missing.append(name)
        doc = getattr(obj, "__doc__", None) or ""
        if callable(obj) and len(doc.strip()) < 10:
            undocumented.append(name)
    assert not missing and not undocumented, (missing, undocumented)


def test_import_vrr_does_not_load_heavy_modules():
    import subprocess
    import sys

    code = ("import sys, vrr; heavy = [m for m in ('matplotlib', 'vllm', 'torch', 'scipy') if m in sys.modules];"
            "print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""


@pytest.mark.parametrize("stage", STAGES)
def test_each_stage_imports_on_its_own(stage):
    importlib.import_module(f"vrr.{stage}")


def test_api_doc_is_current():
    import importlib.util

    spec = importlib.util.spec_from_file_location("render_api_doc", PKG.parent / "scripts" / "render_api_doc.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert (PKG.parent / "docs" / "api.md").read_text() == mod.render(), \
        "docs/api.md is stale: python scripts/render_api_doc.py > docs/api.md"


# ---- the rooms inside the stages ---------------------------------------------------------------------------
SANDBOX = PKG / "loop" / "sandbox"
CONTROLLER = PKG / "policies" / "online"
# what the controller package may use: the math, the calibration, and the policies it shares with replay
CONTROLLER_USES = ("vrr.common", "vrr.core", "vrr.data", "vrr.calibration", "vrr.policies.rules",
                   "vrr.policies.replay", "vrr.policies.mode", "vrr.policies.online")


def _private_of(target: str, room: str) -> bool:
    return target.startswith(room + "._")


def test_the_sandbox_uses_nothing_of_vrr_outside_itself_and_is_used_through_its_face():
    wrong = []
    for path in _sources():
        inside = SANDBOX in path.parents
        for target, line in _imports(path):
            if inside and not target.startswith("vrr.loop.sandbox"):
                wrong.append(f"{path.relative_to(PKG.parent)}:{line} imports {target} (the sandbox uses nothing of vrr)")
            if not inside and _private_of(target, "vrr.loop.sandbox"):
                wrong.append(f"{path.relative_to(PKG.parent)}:{line} imports {target} (use the face vrr.loop.sandbox)")
    assert not wrong, "\n".join(wrong)


def test_bubblewrap_is_started_only_in_the_sandbox():
    outside = [p for p in PKG.rglob("*.py") if SANDBOX not in p.parents and "bwrap" in p.read_text()]
    assert not outside, outside


def test_the_controller_package_uses_only_the_math_the_calibration_and_shared_policies():
    wrong = []
    for path in _sources():
        inside = CONTROLLER in path.parents
        for target, line in _imports(path):
            if inside and not target.startswith(CONTROLLER_USES):
                wrong.append(f"{path.relative_to(PKG.parent)}:{line} imports {target}")
            if not inside and _private_of(target, "vrr.policies.online") and path.name != "online_calibration.py":
                wrong.append(f"{path.relative_to(PKG.parent)}:{line} imports {target} (use the face vrr.policies.online)")
    assert not wrong, "\n".join(wrong)


def test_the_store_is_used_through_its_face():
    wrong = [f"{p.relative_to(PKG.parent)}:{line} imports {t}" for p in _sources() if PKG / "loop" / "store" not in p.parents
             for t, line in _imports(p) if _private_of(t, "vrr.loop.store")]
    assert not wrong, "\n".join(wrong)


def test_no_module_over_700_lines_and_no_class_over_400():
    import ast

    long_modules, long_classes = [], []
    for path in PKG.rglob("*.py"):
        text = path.read_text()
        if text.count("\n") > 700:
            long_modules.append(f"{path.relative_to(PKG.parent)}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > 400:
                long_classes.append(f"{path.relative_to(PKG.parent)}: {node.name} {node.end_lineno - node.lineno + 1} lines")
    assert not long_modules and not long_classes, long_modules + long_classes
