"""The wheel holds every module of the tree: a package left out of it is a `mgpu-tui --help` that
fails with ModuleNotFoundError for whoever installs it (scripts/check-wheel.sh, run by CI, installs
the wheel and runs it; this test is the quick half, in every `make test`)."""

import shutil
import subprocess
import sys
import zipfile

from conftest import REPO

ROOTS = {"mgpu_tui": "mgpu_tui", "engine": "mgpu_tui/engine", "demos": "mgpu_tui/demos"}


def test_the_wheel_holds_every_module_of_the_tree(tmp_path):
    # Built from a copy of the sources: setuptools reuses an old build/ folder of the tree, whose
    # files would hide a package the configuration leaves out.
    source = tmp_path / "source"
    source.mkdir()
    for name in ("setup.py", "pyproject.toml", "README.md", *ROOTS):
        copy = shutil.copytree if (REPO / name).is_dir() else shutil.copy
        copy(
            REPO / name,
            source / name,
            **({"ignore": shutil.ignore_patterns("__pycache__")} if (REPO / name).is_dir() else {}),
        )
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(source),
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("mgpu_tui-*.whl")
    inside = {name for name in zipfile.ZipFile(wheel).namelist() if name.endswith(".py")}
    tree = set()
    for folder, installed in ROOTS.items():
        for path in (REPO / folder).rglob("*.py"):
            relative = path.relative_to(REPO / folder)
            if "__pycache__" not in relative.parts and not (
                folder == "mgpu_tui" and relative.parts[0] in ("engine", "demos")
            ):
                tree.add(f"{installed}/{relative.as_posix()}")
    assert tree - inside == set()
    assert "mgpu_tui/engine/planning/memory.py" in inside and "mgpu_tui/engine/records/follow.py" in inside
