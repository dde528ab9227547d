#!/usr/bin/env bash
# Set up what toynet needs on a fresh Debian/Ubuntu machine, idempotently, in two sizes:
#
#   . scripts/setup.sh main   what the main job (scripts/main.sh) needs: Graphviz's `dot` (Debian) and a
#                             virtual environment in .venv with toynet (editable) and its runtime (NumPy,
#                             matplotlib, graphviz, tqdm);
#   . scripts/setup.sh        (or `test`) all of that, and what the tests (scripts/test.sh) need besides:
#                             Chromium (Debian; tests/test_site_browser.py opens the docs site in it through
#                             Playwright, which never downloads a browser of its own here), the test tools,
#                             Jupyter (the notebooks), the docs site's tools, the ONNX extra (onnx,
#                             onnxruntime), MPI for the multi-process tests (mpi4py, the mpich wheel), and PyTorch 2.13.0 CPU as an optional test reference, only when a
#                             local wheel makes it cheap.
#
# Sourced by scripts/main.sh and scripts/test.sh (it leaves .venv activated); `bash scripts/setup.sh` works
# too. Every step says what it does and when, in seconds since the set-up started; a step whose work is
# already done is skipped, so running it again takes a second.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

setup_for=${1:-test}
case "$setup_for" in
  main|test) ;;
  *) echo "usage: scripts/setup.sh [main|test]" >&2; exit 2 ;;
esac
setup_start=$SECONDS
say() { printf '[setup] %4d s  %s\n' "$((SECONDS - setup_start))" "$*"; }

# ------------------------------------------------------------------------------ Debian packages
missing=""
command -v dot >/dev/null 2>&1 || missing="$missing graphviz"            # Graphviz's dot draws every picture
if [ "$setup_for" = test ]; then
  command -v chromium >/dev/null 2>&1 || missing="$missing chromium"     # tests/test_site_browser.py
fi
if [ -n "$missing" ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  say "apt-get update (to install$missing from Debian)"
  $SUDO apt-get update -qq
  say "apt-get install$missing (Chromium is a large download: a minute or more)"
  # shellcheck disable=SC2086  # one word per package
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
  say "installed$missing"
fi

# ------------------------------------------------------------------------------ .venv
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  say "creating .venv with $("$PY" --version 2>&1)"
  "$PY" -m venv .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate

pip_install() { python -m pip install -q --disable-pip-version-check "$@"; }

# The extras of pyproject.toml one by one (a line each, so the long step shows how far it got), without
# building toynet's editable install again for each.
extra_requirements() {
  python - "$1" <<'EOF'
import sys
try:
    import tomllib
except ImportError:  # Python 3.10: pip reads the extra itself (and installs toynet again, editable)
    print(f"-e\n.[{sys.argv[1]}]")
else:
    with open("pyproject.toml", "rb") as f:
        print("\n".join(tomllib.load(f)["project"]["optional-dependencies"][sys.argv[1]]))
EOF
}

# A stamp per size, redone when pyproject.toml changes.
main_stamp=.venv/.toynet-main
if [ ! -f "$main_stamp" ] || [ pyproject.toml -nt "$main_stamp" ]; then
  say "upgrading pip in .venv"
  pip_install --upgrade pip
  say "installing toynet (editable) and its runtime: NumPy, matplotlib, graphviz, tqdm"
  pip_install -e .
  touch "$main_stamp"
fi

if [ "$setup_for" = test ]; then
  test_stamp=.venv/.toynet-test
  if [ ! -f "$test_stamp" ] || [ pyproject.toml -nt "$test_stamp" ]; then
    for extra in test notebooks docs onnx distributed; do
      case $extra in
        test) what="the test tools: pytest, pytest-xdist, Hypothesis, nbclient, Playwright" ;;
        notebooks) what="Jupyter and ipywidgets (the notebooks)" ;;
        docs) what="MkDocs and its plugins (the docs site)" ;;
        onnx) what="ONNX and ONNX Runtime" ;;
        distributed) what="MPI for toynet.distributed: mpi4py and the MPICH wheel (its mpiexec)" ;;
      esac
      say "installing $what"
      mapfile -t requirements < <(extra_requirements "$extra")
      pip_install "${requirements[@]}"
    done
    touch "$test_stamp"
  fi

  # PyTorch is only a reference for the tests. Take the wheel itself only from a local file (--no-index),
  # so a machine without one never downloads gigabytes; its small dependencies then come from the index.
  # Without it the comparison tests skip.
  if ! python -c "import torch" >/dev/null 2>&1; then
    say "looking for a local PyTorch 2.13.0 wheel (an optional test reference)"
    if pip_install --no-index --no-deps torch==2.13.0 >/dev/null 2>&1 && pip_install torch==2.13.0; then
      say "installed PyTorch 2.13.0 (CPU) from a local wheel"
    else
      python -m pip uninstall -q -y torch >/dev/null 2>&1 || true
      say "no local PyTorch wheel: tests that compare with PyTorch will skip"
    fi
  fi
fi
if [ "$setup_for" = main ]; then ready="the main job"; else ready="the main job and the tests"; fi
say "ready for $ready: .venv with $(python --version 2>&1), toynet $(python -c 'import toynet; print(toynet.__version__)' 2>/dev/null || echo '(not importable!)')"
