#!/usr/bin/env bash
# Set up (scripts/setup.sh: what the main job needs, and the test tools, Chromium, Jupyter, the docs' and
# ONNX's packages) and run the whole test suite twice, on both cores: on the lesson path (the default: unit
# tests, notebooks, docs build and site), then on the fast path (TOYNET_FAST=1: the same tests of the engine;
# the notebooks, the site and the lesson's line budget are about the lesson and run in the first pass).
# tests/conftest.py runs the quick tests first and the slow ones last, longest first; with --dist worksteal
# a worker that runs out of tests takes over the other's queued ones, so both cores stay busy to the end.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/setup.sh test
start=$SECONDS
echo "[test] lesson path: the whole suite"
TOYNET_FAST=0 python -m pytest -q -n 2 --dist worksteal "$@"
echo "[test] lesson path done in $((SECONDS - start)) s; now the fast path (TOYNET_FAST=1): the engine's tests"
TOYNET_FAST=1 python -m pytest -q -n 2 --dist worksteal --ignore=tests/test_notebooks.py \
    --ignore=tests/test_notebook_numbers.py --ignore=tests/test_notebook_claims.py --ignore=tests/test_docs.py \
    --ignore=tests/test_site_browser.py --ignore=tests/test_lesson_path.py "$@"
