#!/usr/bin/env bash
# Set up (see scripts/setup.sh) and run the whole test suite twice: on the lesson path (the default: unit
# tests, notebooks, docs build and site), then on the fast path (TOYNET_FAST=1: the same tests of the engine;
# the notebooks, the site and the lesson's line budget are about the lesson and run in the first pass).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/setup.sh
TOYNET_FAST=0 python -m pytest -q -n 2 "$@"
TOYNET_FAST=1 python -m pytest -q -n 2 --ignore=tests/test_notebooks.py --ignore=tests/test_notebook_numbers.py \
    --ignore=tests/test_notebook_claims.py --ignore=tests/test_docs.py --ignore=tests/test_site_browser.py \
    --ignore=tests/test_lesson_path.py "$@"
