#!/usr/bin/env bash
# The main job: set up what it needs (scripts/setup.sh main: Graphviz, .venv with toynet and its runtime),
# rerun the tutorials' programs (their output in out/) and bring the figures of imgs/ up to date (a file is
# rewritten only when its picture changed, so an unchanged clone stays clean).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/setup.sh main
python examples/run_all.py "$@"
