#!/usr/bin/env bash
# Set up (see scripts/setup.sh) and run the whole test suite: unit tests, notebooks, docs build.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/setup.sh
python -m pytest -q -n 2 "$@"
