"""Preflight: before the first GPU job, check that this machine can run the configured experiments.

The checks are pure functions over what was observed (the GPU list, free disk, the environment), so
tests feed them made-up machines; :func:`observe` gathers the real observations. Each problem is one
line that says what is wrong and how to fix it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence
from .jobspec.images import SGLANG_IMAGE, definition_problems, image_definition, parse_apptainer_version, used_images

#: vLLM needs room beyond the weights (activations, CUDA graphs, some KV cache): weights may use at
#: most this share of the memory vLLM may take (gpu_memory_utilization x GPU memory)
WEIGHT_SHARE = 0.8
#: an image's size on disk while it is built (layers + squashed image), GB
IMAGE_BUILD_GB = 30.0
# The lowest NVIDIA driver of each image is its own cuda.min_driver label (specrepro.jobspec.images):
# no second table here that could disagree with the image.


@dataclass(frozen=True)
class Gpu:
    name: str
    memory_gib: float
    driver: str = ""


@dataclass(frozen=True)
class Need:
    """What one configured model (target plus the drafters its experiments use) asks of the machine."""

    model: str
    repo: str
    tensor_parallel_size: int
    weights_gb: float  #: target + drafters, as in the config's size_gb
    gated: tuple[str, ...] = ()  #: gated repositories it downloads
    download_gb: float = 0.0  #: what is not downloaded yet


@dataclass
class Observed:
    """What preflight saw on this machine."""

    gpus: list[Gpu] = field(default_factory=list)
    free_gb: dict[str, float] = field(default_factory=dict)  #: cache directory -> free GB
    apptainer: str | None = None  #: path of the apptainer (or singularity) binary
    apptainer_version: str | None = None  #: what ``apptainer --version`` printed
    hf_token: bool = False
    slurm_gpus_per_node: int | None = None  #: from sinfo, when running through SLURM


def parse_nvidia_smi(text: str) -> list[Gpu]:
    """GPUs from ``nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader,nounits``."""
    gpus = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2 and parts[1].replace(".", "", 1).isdigit():
            gpus.append(Gpu(parts[0], round(float(parts[1]) / 1024, 1), parts[2] if len(parts) > 2 else ""))
    return gpus


def parse_sinfo_gres(text: str) -> int:
    """Most GPUs on one node, from ``sinfo -h -o %G`` lines such as ``gpu:h100:8(S:0-1)``."""
    best = 0
    for line in text.split():
        for item in line.split(","):
            bits = item.split("(")[0].split(":")
            if bits[0] == "gpu" and bits[-1].isdigit():
                best = max(best, int(bits[-1]))
    return best


def needs(config: Mapping[str, Any], downloaded: Sequence[str] = ()) -> list[Need]:
    """One :class:`Need` per model an experiment uses; ``downloaded`` names manifests already present."""
    models = config.get("models", {})
    used: dict[str, set[str]] = {}
    for exp in config.get("experiments", []):
        used.setdefault(exp["model"], set()).update(m["method"] for m in exp["methods"])
    out = []
    for name in sorted(used):
        m = models[name]
        sources = [(name, m["source"])]
        for method, d in (m.get("drafters") or {}).items():
            if method in used[name] and "source" in d:
                sources.append((f"{name}/drafters/{method}", d["source"]))
        weights = download = 0.0
        gated = []
        for key, src in sources:
            hf = src.get("hf")
            if not hf:
                continue
            size = float(hf.get("size_gb", 0.0))
            weights += size
            if key not in downloaded:
                download += size
                if hf.get("gated"):
                    gated.append(hf["repo"])
        repo = (m["source"].get("hf") or {}).get("repo", name)
        out.append(Need(name, repo, int(m.get("tensor_parallel_size", 1)), weights, tuple(gated), download))
    return out


def _driver(version: str) -> tuple[int, int] | None:
    try:
        major, minor = version.split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return None


def problems(
    config: Mapping[str, Any], obs: Observed, need: Sequence[Need], uses_apptainer: bool,
    cache_dir: str, image_built: bool = True, images: Mapping[str, Any] | None = None,
    missing_images: Sequence[str] = (),
) -> list[str]:
    """Every problem, one line each with its fix; an empty list means the run can start.

    ``images``: name -> :class:`specrepro.jobspec.images.Definition` of every image the run's jobs use
    (default: read from containers/); ``missing_images``: those still to be built.
    """
    out: list[str] = []
    if images is None:
        images = {name: image_definition(name) for name in used_images(config)}
    gpu_run = config["run"]["kind"] == "gpu"
    engine = config.get("engine", {})
    if gpu_run:
        if not uses_apptainer:
            out.append(
                "GPU run without the container: add --use-apptainer (or --profile profiles/apptainer), "
                "or set run.kind: cpu"
            )
        elif not obs.apptainer:
            out.append("apptainer not found on PATH: install Apptainer >= 1.2 (https://apptainer.org), "
                       "or load its module on the cluster")
        else:
            version = parse_apptainer_version(obs.apptainer_version or "")
            if obs.apptainer_version is not None and version is None:
                out.append(f"{obs.apptainer} --version printed {obs.apptainer_version.strip()!r}, not a version: "
                           "check the Apptainer installation")
            for d in images.values():
                out += [f"apptainer: {p}" for p in definition_problems(d, version)]
        most = max((n.tensor_parallel_size for n in need), default=0)
        have = obs.slurm_gpus_per_node if obs.slurm_gpus_per_node is not None else len(obs.gpus)
        where = "per SLURM node" if obs.slurm_gpus_per_node is not None else "on this machine"
        if most and have < most:
            short = [n for n in need if n.tensor_parallel_size > have]
            who = ", ".join(f"{n.model} (tensor_parallel_size {n.tensor_parallel_size})" for n in short)
            out.append(
                f"{who} {'needs' if len(short) == 1 else 'need'} {most} GPUs but {have} are visible {where}: "
                f"run on a node with {most} GPUs, "
                "or leave these experiments out of the config"
            )
        if obs.gpus and obs.slurm_gpus_per_node is None:
            usable = min(g.memory_gib for g in obs.gpus) * float(engine.get("gpu_memory_utilization", 0.9))
            for n in need:
                tp = n.tensor_parallel_size
                per_gpu = n.weights_gb / max(tp, 1) * 1e9 / 2**30
                if have >= tp and per_gpu > WEIGHT_SHARE * usable:
                    out.append(
                        f"{n.model}: about {per_gpu:.0f} GiB of weights per GPU (tensor_parallel_size {tp}) "
                        f"but only {usable:.0f} GiB usable per GPU ({obs.gpus[0].name}, "
                        f"gpu_memory_utilization {engine.get('gpu_memory_utilization', 0.9)}): use GPUs with "
                        "more memory, raise tensor_parallel_size, or raise gpu_memory_utilization"
                    )
            got = _driver(obs.gpus[0].driver)
            for name, d in images.items():
                lowest = _driver(d.labels.get("cuda.min_driver", ""))
                if lowest and got and got < lowest:
                    out.append(
                        f"NVIDIA driver {obs.gpus[0].driver} is older than {lowest[0]}.{lowest[1]}, the lowest the "
                        f"{name} image's CUDA runs on (its cuda.min_driver label): update the driver"
                        + ("" if name == SGLANG_IMAGE else ", or move its jobs to another image (experiments[].container)")
                    )
    builds = len(missing_images) if missing_images else (0 if image_built else 1)
    wanted = sum(n.download_gb for n in need) + (0.0 if not gpu_run else IMAGE_BUILD_GB * builds)
    free = obs.free_gb.get(cache_dir)
    if free is not None and wanted > free:
        out.append(
            f"{cache_dir}: {free:.0f} GB free but the downloads{' and the image build' if builds else ''} "
            f"need about {wanted:.0f} GB: free space there, or set cache.dir to a larger disk"
        )
    gated = sorted({r for n in need for r in n.gated})
    if gated and not obs.hf_token and not config.get("offline", False):
        out.append(
            f"gated models {', '.join(gated)} need a Hugging Face token: accept each model's licence on "
            "huggingface.co, create a token (https://huggingface.co/settings/tokens) and export HF_TOKEN"
        )
    return out


def free_gb(path: str | os.PathLike) -> float:
    """Free space at ``path`` (or its nearest existing parent), GB."""
    p = Path(path).expanduser().absolute()
    while not p.exists():
        p = p.parent
    return shutil.disk_usage(p).free / 1e9


def _run(cmd: list[str]) -> str | None:
    if not shutil.which(cmd[0]):
        return None
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def observe(cache_dir: str, slurm: bool = False, env: Mapping[str, str] = os.environ) -> Observed:
    """Look at this machine: nvidia-smi, free disk, apptainer, HF_TOKEN (or a saved token), sinfo."""
    smi = _run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader,nounits"])
    token = bool(env.get("HF_TOKEN"))
    if not token:
        hf_home = Path(env.get("HF_HOME", Path.home() / ".cache" / "huggingface"))
        token = (hf_home / "token").is_file()
    sinfo = _run(["sinfo", "-h", "-o", "%G"]) if slurm else None
    apptainer = shutil.which("apptainer") or shutil.which("singularity")
    return Observed(
        gpus=parse_nvidia_smi(smi or ""),
        free_gb={cache_dir: round(free_gb(cache_dir), 1)},
        apptainer=apptainer,
        apptainer_version=_run([apptainer, "--version"]) if apptainer else None,
        hf_token=token,
        slurm_gpus_per_node=parse_sinfo_gres(sinfo) if sinfo is not None else None,
    )


def report(obs: Observed, need: Sequence[Need], found: Sequence[str]) -> dict:
    """The preflight record (results/preflight.json)."""
    return {
        "ok": not found,
        "problems": list(found),
        "observed": {**asdict(obs), "gpus": [asdict(g) for g in obs.gpus]},
        "needs": [asdict(n) for n in need],
    }


def add_cli(sub) -> None:
    """Register ``specrepro preflight``."""
    p = sub.add_parser("preflight", help="check GPUs, memory, disk, apptainer and token against the configured models")
    p.add_argument("--run-config", required=True)
    p.add_argument("--cache-dir", required=True, help="where downloads go (its free space is checked)")
    p.add_argument("--uses-apptainer", action="store_true", help="the workflow runs with --use-apptainer")
    p.add_argument("--slurm", action="store_true", help="jobs go to SLURM: count GPUs per node with sinfo")
    p.add_argument("--image", action="append", default=[], metavar="NAME=DEF",
                   help="an image the run's jobs use and its definition file (repeat; default: read containers/)")
    p.add_argument("--image-missing", action="append", default=[], metavar="NAME",
                   help="an image that still has to be built (repeat)")
    p.add_argument("--downloaded", nargs="*", default=[], help="model inputs already downloaded")
    p.add_argument("--token-file", help="a saved Hugging Face token counts as a token")
    p.add_argument("-o", "--output", required=True)

    def run(a):
        import os

        from .core.errors import SpecReproError
        from .core.io import read_json, write_json

        cfg = read_json(a.run_config)
        env = dict(os.environ)
        obs = observe(a.cache_dir, slurm=a.slurm, env=env)
        if not obs.hf_token and a.token_file and Path(a.token_file).is_file():
            obs.hf_token = True
        need = needs(cfg, a.downloaded)
        images = None
        if a.image:
            from .jobspec.images import parse_definition

            images = {}
            for item in a.image:
                name, _, path = item.partition("=")
                if not path or not Path(path).is_file():
                    raise SpecReproError(f"--image {item}: expected NAME=<existing .def file>")
                images[name] = parse_definition(Path(path).read_text(encoding="utf-8"), path)
        found = problems(cfg, obs, need, a.uses_apptainer, a.cache_dir, images=images,
                         missing_images=a.image_missing)
        for line in found:
            print(f"preflight: {line}", file=sys.stderr)
        if found:
            raise SpecReproError(f"{len(found)} problem(s) above; fix them or skip the check with --config preflight=false")
        write_json(a.output, report(obs, need, found))
        print(f"preflight: ok ({len(obs.gpus)} GPU(s), {len(need)} model(s))", file=sys.stderr)

    p.set_defaults(func=run)
