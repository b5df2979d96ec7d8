#!/usr/bin/env bash
# Build the sdist and, from it, the wheel; install the wheel (not editable) into a fresh virtual
# environment and run it there: --version, --check --level 1, and a 20-step ddp run on the CPU.
# What a stranger's `pip install mgpu-tui` gets, checked before it can bite them (CI runs this).
#
#   bash scripts/check-wheel.sh [PYTHON]      (default python3; leaves dist/ behind)
set -euo pipefail
cd "$(dirname "$0")/.."
python=${1:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$python" -m venv "$work/build-env"
"$work/build-env/bin/python" -m pip install --quiet build
rm -rf dist
# `build` makes the sdist, then the wheel from the unpacked sdist: a file the sdist lacks fails here.
"$work/build-env/bin/python" -m build --outdir dist . >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
wheel=$(ls dist/*.whl)
echo "check-wheel: built $(ls dist | tr '\n' ' ')"

"$python" -m venv "$work/env"
# torch first, pinned, so that the wheel's range (torch>=2.4) is met by the CPU build here rather
# than a download of the CUDA one (the README's install does the same through install-torch.sh).
if ! "$python" -c "import torch" 2>/dev/null; then
    "$work/env/bin/python" -m pip install --quiet ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} \
        "torch==${TORCH_VERSION:-2.13.0}"
fi
"$work/env/bin/python" -m pip install --quiet "$wheel"
cd "$work"  # away from the source tree: only the installed wheel can be imported
bin="$work/env/bin"
"$bin/mgpu-tui" --version
"$bin/python" -c "from mgpu_tui import Reporter, __version__; print('check-wheel: import ok', __version__)"
"$bin/mgpu-tui" --check --level 1 --run-dir "$work/runs" >/dev/null
"$bin/mgpu-tui" run ddp --nproc 2 --steps 20 --device cpu --run-dir "$work/runs" --json >"$work/ddp.json"
"$bin/python" - "$work/ddp.json" <<'PY'
import json, sys
summary = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
assert summary["status"] == "ok" and summary["steps"] == 20, summary["status"]
print(f"check-wheel: ddp from the wheel: {summary['steps']} steps, {summary['samples_per_s']:.0f} samples/s, ok")
PY
# exec from the wheel: the sitecustomize folder and mgpu-tui's packages are found where pip put them.
cat >"$work/spawned.py" <<'PY'
import os, torch, torch.distributed as dist, torch.multiprocessing as mp
def train(rank):
    dist.init_process_group("gloo", rank=rank, world_size=2, init_method=f"tcp://127.0.0.1:{os.environ['PORT']}")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(5):
        model(torch.randn(8, 4)).sum().backward(); optimizer.step(); optimizer.zero_grad()
    dist.destroy_process_group()
if __name__ == "__main__":
    mp.spawn(train, nprocs=2)
PY
port=$("$bin/python" -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
PORT=$port "$bin/mgpu-tui" exec --run-dir "$work/runs" --json -- "$bin/python" "$work/spawned.py" >"$work/exec.json"
"$bin/python" - "$work/exec.json" <<'PY'
import json, sys
summary = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
assert summary["status"] == "ok" and summary["world_size"] == 2 and summary["steps"] == 5, summary
print(f"check-wheel: exec of an mp.spawn job from the wheel: world size {summary['world_size']}, {summary['steps']} steps, ok")
PY
