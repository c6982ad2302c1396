#!/usr/bin/env bash
# Run the README's two quickstart commands, exactly as written, in a brand-new virtual environment
# on a fresh clone of one committed branch: what CI (and a new user) will see.
#
#   tools/fresh_venv_check.sh [--branch B] [DIR]
#
# --branch B  the branch to clone (default: the branch checked out where this script lives).
#             Only committed work is cloned: uncommitted changes are not part of the check.
# DIR         where the clone, the venv and the demo's cache go (default: a new /tmp/lirs-fresh.*).
# The demo writes to $XDG_CACHE_HOME/lirs/demo; it is pointed into DIR so that the check neither
# reads nor fills the caller's ~/.cache (the command itself is still the README's, verbatim).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
branch=""
while [ $# -gt 0 ]; do
    case "$1" in
        --branch) branch="$2"; shift 2 ;;
        --branch=*) branch="${1#--branch=}"; shift ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        *) break ;;
    esac
done
[ -n "$branch" ] || branch="$(git -C "$repo" rev-parse --abbrev-ref HEAD)"
want="$(git -C "$repo" rev-parse --verify "refs/heads/$branch^{commit}")"
if [ -n "$(git -C "$repo" status --porcelain --untracked-files=no)" ]; then
    echo "note: $repo has uncommitted changes; they are not part of this check" >&2
fi
work="${1:-$(mktemp -d /tmp/lirs-fresh.XXXXXX)}"
mkdir -p "$work"
git clone -q --branch "$branch" "$repo" "$work/lirs"
got="$(git -C "$work/lirs" rev-parse HEAD)"
if [ "$got" != "$want" ]; then
    echo "fresh-venv check: the clone is at $got, branch $branch is at $want" >&2
    exit 1
fi
echo "fresh-venv check: branch $branch at ${got:0:12}, in $work"
cd "$work/lirs"
python3 -m venv .venv
. .venv/bin/activate
export XDG_CACHE_HOME="$work/cache" PIP_QUIET=1
t0=$(date +%s)
# the README's quickstart, verbatim (tests/test_readme.py checks that these lines match it)
pip install -e . && lirs demo
t1=$(date +%s)
pip install torch==2.13.0 -e '.[test,torch]' && python -m pytest -q
t2=$(date +%s)
echo "fresh-venv check passed: first command $((t1 - t0)) s (install + demo), second $((t2 - t1)) s" \
     "(install + tests), branch $branch at ${got:0:12}, in $work"
