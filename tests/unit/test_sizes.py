"""The size of a part (docs/architecture.md, "The size of a part"): a module of mgpu_tui/, engine/,
demos/, scripts/ or bench/ in at most 400 lines, a function in at most 80, a folder of at most 10
modules (demos/ keeps its modes' scripts in a folder per family)."""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TREES = ("mgpu_tui", "engine", "demos", "scripts", "bench")
MAX_LINES, MAX_FUNCTION, MAX_MODULES = 400, 80, 10


def modules() -> list[Path]:
    return sorted(p for tree in TREES for p in (REPO / tree).rglob("*.py") if "__pycache__" not in p.parts)


def test_no_module_is_over_400_lines():
    lines = {str(p.relative_to(REPO)): len(p.read_text().splitlines()) for p in modules()}
    assert {name: n for name, n in lines.items() if n > MAX_LINES} == {}


def test_no_function_is_over_80_lines():
    over = {}
    for path in modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION:
                    over[f"{path.relative_to(REPO)}:{node.name}"] = length
    assert over == {}


def test_no_folder_holds_more_than_10_modules():
    counts: dict[Path, int] = {}
    for path in modules():
        if path.name != "__init__.py":
            counts[path.parent] = counts.get(path.parent, 0) + 1
    over = {str(folder.relative_to(REPO)): n for folder, n in counts.items() if n > MAX_MODULES}
    assert over == {}


def test_each_demo_is_found_by_its_modes_name_in_its_familys_folder():
    """demos/ keeps its modes' scripts in a folder per family, yet ``python -m mgpu_tui.demos.MODE``
    (a documented command line) still finds each: the package's search path holds the folders."""
    from importlib.util import find_spec

    from mgpu_tui.engine.planning.modes import MODES

    demos = {mode.demo for mode in MODES.values() if mode.demo}
    found = {demo: find_spec(f"mgpu_tui.demos.{demo}") for demo in demos}
    assert {demo for demo, spec in found.items() if spec is None} == set()
    families = {Path(spec.origin).parent.name for spec in found.values()}
    assert families == {"demos", "data_parallel", "model_parallel"}
