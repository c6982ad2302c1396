#!/usr/bin/env bash
# Run the README's two quickstart commands in a brand-new virtual environment, from a clean clone
# of the committed tree: what CI (and a new user) will see. Usage: tools/fresh_venv_check.sh [DIR]
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="${1:-$(mktemp -d /tmp/lirs-fresh.XXXXXX)}"
git clone -q "$repo" "$work/lirs"
cd "$work/lirs"
python3 -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
# the README's commands, verbatim (demo kept small: the full default takes about two minutes)
pip install -q -e . && lirs demo --size 20MB --dir "$work/demo"
pip install -q torch==2.13.0 -e '.[test,torch,plots]' && python -m pytest -q
echo "fresh-venv check passed in $work"
