"""scripts/install-torch.sh keeps a torch the user has, also one that lives in a virtual environment."""

import subprocess
import sys

import torch

from conftest import REPO

SCRIPT = REPO / "scripts" / "install-torch.sh"


def test_a_torch_inside_a_virtual_environment_is_kept(tmp_path):
    # The common GPU box (the lent H100: /opt/torch/.venv): the Python that has torch is itself a
    # virtual environment, and --system-site-packages alone reaches only its base interpreter, so
    # the new environment had no torch and the script went on to download one. This test's Python
    # is such an environment (the project's .venv).
    assert sys.prefix != sys.base_prefix
    venv = tmp_path / "venv"
    done = subprocess.run(
        ["bash", str(SCRIPT), sys.executable, str(venv)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "keeping torch" in done.stdout
    seen = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import torch; print(torch.__version__)"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert seen.stdout.strip() == torch.__version__
