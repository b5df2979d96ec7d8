#!/usr/bin/env bash
# Create the virtual environment and give it a torch, without ever replacing one the user has.
#
#   1. The base Python already has torch (a CUDA build on a GPU box, say): the
#      environment sees it through --system-site-packages, and nothing is installed.
#   2. The environment already has torch: kept.
#   3. An NVIDIA driver answers: the default (CUDA) build from the package index.
#   4. Otherwise the CPU build of the tested version. Here that comes from a local
#      wheel; elsewhere set TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu so
#      pip does not fetch gigabytes of CUDA packages for a machine with no GPU.
set -euo pipefail
python=$1
venv=$2
torch_version=${TORCH_VERSION:-2.13.0}

if [ ! -x "$venv/bin/python" ]; then
    if "$python" -c "import torch" 2>/dev/null; then
        echo "install: using the torch that $python already has"
        "$python" -m venv --system-site-packages "$venv"
        # A Python that is itself a virtual environment (the usual home of a CUDA torch) lends
        # --system-site-packages only its base interpreter's packages, without torch: point the
        # new environment at that environment's packages too.
        parent=$("$python" -c 'import site, sys; print(*site.getsitepackages(), sep="\n") if sys.prefix != sys.base_prefix else None')
        if [ "$parent" != "None" ]; then
            site_dir=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
            echo "$parent" > "$site_dir/_mgpu_tui_parent_env.pth"
        fi
    else
        "$python" -m venv "$venv"
    fi
fi
if "$venv/bin/python" -c "import torch" 2>/dev/null; then
    echo "install: keeping torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)')"
    exit 0
fi
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    echo "install: an NVIDIA GPU is here; installing the CUDA build of torch"
    "$venv/bin/python" -m pip install --quiet torch
else
    echo "install: no NVIDIA GPU; installing the CPU build torch==$torch_version"
    "$venv/bin/python" -m pip install --quiet ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "torch==$torch_version"
fi
