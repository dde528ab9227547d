#!/usr/bin/env bash
# Set up everything toynet needs on a fresh machine, idempotently:
#   - Graphviz's `dot` and Chromium (Debian packages) when they are missing; Chromium is the browser
#     tests/test_site_browser.py opens the docs site in, driven by Playwright from the test extra,
#   - a virtual environment in .venv with toynet (editable), the test/docs tools and the ONNX extra
#     (onnx, onnxruntime: the ONNX export/import tests and notebook 07 need them),
#   - PyTorch 2.13.0 CPU as an optional test reference, only when a local wheel makes it cheap.
# Sourced by scripts/main.sh and scripts/test.sh; safe to run again.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

missing=""
command -v dot >/dev/null 2>&1 || missing="$missing graphviz"       # Graphviz's dot draws every picture
command -v chromium >/dev/null 2>&1 || missing="$missing chromium"  # tests/test_site_browser.py reads the site
if [ -n "$missing" ]; then
  echo "[setup] installing$missing from Debian"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  # shellcheck disable=SC2086  # one word per package
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv"
  "$PY" -m venv .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate

stamp=.venv/.toynet-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "[setup] installing toynet and its tools into .venv"
  python -m pip install -q --upgrade pip
  python -m pip install -q -e ".[test,docs,onnx]"
  touch "$stamp"
fi

# PyTorch is only a reference for the tests. Take the wheel itself only from a local file (--no-index),
# so a machine without one never downloads gigabytes; its small dependencies then come from the index.
# Without it the comparison tests skip.
if ! python -c "import torch" >/dev/null 2>&1; then
  if python -m pip install -q --no-index --no-deps torch==2.13.0 >/dev/null 2>&1 \
      && python -m pip install -q torch==2.13.0; then
    echo "[setup] installed PyTorch 2.13.0 (CPU) from a local wheel as a test reference"
  else
    python -m pip uninstall -q -y torch >/dev/null 2>&1 || true
    echo "[setup] no local PyTorch wheel: tests that compare with PyTorch will skip"
  fi
fi
