"""The size of a part (docs/architecture.md, "The size of a part"): a module of mgpu_tui/, engine/,
demos/, scripts/ or bench/ in at most 400 lines, a function in at most 80, a folder of at most 10
modules; demos/ alone is over, with one script per mode of the catalogue."""

import ast
from pathlib import Path

from mgpu_tui.engine.planning.modes import MODES

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


def test_no_folder_holds_more_than_10_modules_but_the_demos_one_a_mode():
    counts: dict[Path, int] = {}
    for path in modules():
        if path.name != "__init__.py":
            counts[path.parent] = counts.get(path.parent, 0) + 1
    over = {str(folder.relative_to(REPO)): n for folder, n in counts.items() if n > MAX_MODULES}
    demos = {m.demo for m in MODES.values()}
    assert set(over) <= {"demos"}
    shared = counts[REPO / "demos"] - len(demos)
    assert shared <= 6, "demos/ is over only by its modes' scripts; what they share stays small"
