#!/usr/bin/env bash
# Set up (see scripts/setup.sh) and run the main job: reproduce the tutorials and regenerate imgs/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/setup.sh
python examples/run_all.py "$@"
