#!/usr/bin/env bash
# mypy over mgpu_tui as it installs: engine/ and demos/ become mgpu_tui.engine and mgpu_tui.demos
# only at install time (setup.py's package_dir), which mypy cannot follow; so it checks a tree of
# links laid out as the wheel is (build/typecheck/mgpu_tui/...). Configuration: pyproject.toml.
#
#   bash scripts/typecheck.sh [MYPY]        (default .venv/bin/mypy)
set -euo pipefail
cd "$(dirname "$0")/.."
mypy=${1:-.venv/bin/mypy}
tree=build/typecheck
rm -rf "$tree" && mkdir -p "$tree/mgpu_tui"
for entry in mgpu_tui/*; do
    ln -s "$PWD/$entry" "$tree/mgpu_tui/"
done
ln -s "$PWD/engine" "$tree/mgpu_tui/engine"
ln -s "$PWD/demos" "$tree/mgpu_tui/demos"
cd "$tree"
"$OLDPWD/$mypy" --config-file "$OLDPWD/pyproject.toml" -p mgpu_tui
# The scripts that drive the app (a renamed attribute broke one unseen: it runs only on a GPU box).
"$OLDPWD/$mypy" --config-file "$OLDPWD/pyproject.toml" "$OLDPWD/scripts/screenshot-run-view.py"
# The GPU check runs only on a GPU box: its checks, one module each, are type-checked here.
"$OLDPWD/$mypy" --config-file "$OLDPWD/pyproject.toml" "$OLDPWD/scripts/gpu_check.py"
