"""Import boundaries, checked in fresh interpreters: the app and CLI never import torch,
the engine never imports textual, the reporter brings no torch into a rank."""

import ast
import subprocess
import sys

import pytest

from conftest import REPO


def modules_after(code: str) -> set[str]:
    probe = code + "\nimport sys\nprint('\\n'.join(sys.modules))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return {name.split(".")[0] for name in result.stdout.split()}


CLI_PATHS = [
    "from mgpu_tui.cli import main; main(['--help'])",
    "from mgpu_tui.cli import main; main(['list', '--json'])",
    "from mgpu_tui.cli import main; main(['run', 'no-such-mode'])",
    "from mgpu_tui.cli import main; main(['topo', '--json'])",
    "from mgpu_tui.cli import main; main(['--check', '--level', '1'])",
]


@pytest.mark.parametrize("code", CLI_PATHS)
def test_cli_never_imports_torch_or_textual(code):
    loaded = modules_after(
        "import contextlib, io\nwith contextlib.redirect_stdout(io.StringIO()):\n    "
        + code.replace("; ", "\n    ")
    )
    assert "torch" not in loaded
    assert "textual" not in loaded and "rich" not in loaded


ENGINE = REPO / "engine"
PACKAGE = REPO / "mgpu_tui"


def engine_modules(skip_rank: bool) -> list[str]:
    """Every module of the engine, as an import name (engine/rank/ left out when asked)."""
    names = []
    for path in sorted(ENGINE.rglob("*.py")):
        parts = path.relative_to(ENGINE).with_suffix("").parts
        if parts[-1] == "__init__" or (skip_rank and parts[0] == "rank"):
            continue
        names.append("mgpu_tui.engine." + ".".join(parts))
    return names


def test_engine_imports_no_ui_and_no_torch():
    names = engine_modules(skip_rank=True)
    assert len(names) >= 25  # the glob really found the engine (26 modules outside rank/ today)
    loaded = modules_after("\n".join(f"import {n}" for n in names))
    assert "textual" not in loaded and "rich" not in loaded
    assert "torch" not in loaded


def imports_of(path) -> set[str]:
    """The top-level packages a source file imports anywhere, inside functions too."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def test_only_the_rank_folder_imports_torch():
    """The boundary is a folder: what runs in the parent process never names torch, even lazily."""
    parent_side = [
        p
        for p in [*ENGINE.rglob("*.py"), *PACKAGE.rglob("*.py")]
        if p.relative_to(REPO).parts[:2] != ("engine", "rank")
    ]
    offenders = [str(p.relative_to(REPO)) for p in parent_side if "torch" in imports_of(p)]
    assert offenders == []
    assert "torch" in imports_of(ENGINE / "rank" / "check_tasks.py")  # the scan sees imports at all


def test_reporter_imports_only_the_standard_library_and_the_protocol():
    loaded = modules_after("import mgpu_tui.engine.rank.reporter")
    assert not loaded & {"torch", "numpy", "psutil", "pynvml", "textual"}


def test_the_app_never_imports_torch():
    loaded = modules_after("from mgpu_tui.app import create_app\ncreate_app(telemetry=[], topology=None)")
    assert "textual" in loaded  # the probe really built the app
    assert "torch" not in loaded


def test_the_first_frame_reads_nothing_of_the_machine():
    """NVML, psutil and the topology load after the app's first frame, not before it (they cost
    about 60 ms of it here); the frame itself needs only Textual."""
    code = """
import sys
from mgpu_tui.app import create_app
app = create_app()
at_first_frame = []
app.call_after_refresh(lambda: (at_first_frame.extend(sys.modules), app.exit()))
app.run(headless=True, size=(160, 50))
print("\\n".join(at_first_frame))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    loaded = {name.split(".")[0] for name in result.stdout.split()}
    assert "textual" in loaded  # the probe really drew the app
    assert not loaded & {"pynvml", "psutil", "ctypes", "torch"}, loaded & {"pynvml", "psutil", "ctypes"}
    assert "mgpu_tui.engine.machine.topology" not in result.stdout.split()
