"""The engine's layers, one way, and the modules that alone own NVML, the event format and the
launch command: read from every module's imports (at the top and inside functions) and constants.
The order is docs/architecture.md's ("The layers of the engine")."""

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ENGINE = REPO / "engine"

# Bottom to top. A sub-package imports only from itself and the layers before it; siblings in one
# layer (checks, compare) import nothing of each other. rank/ is the ranks' own code: it may import
# the layers it needs, and nothing of the engine imports it (it is started by module name).
LAYERS = [
    ["protocol"],
    ["machine"],
    ["planning"],
    ["launch"],
    ["nodes"],
    ["run"],
    ["records"],
    ["metrics"],
    ["checks", "compare"],
]
PUBLIC_RANK = {"mgpu_tui/__init__.py", "engine/reporter.py"}  # the public Reporter and its old path


def imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
    return found


def sub_package(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["mgpu_tui", "engine"] else None


def level(name: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if name in layer)


def test_every_sub_package_of_the_engine_has_its_layer():
    packages = {p.name for p in ENGINE.iterdir() if (p / "__init__.py").exists()}
    assert packages == {name for layer in LAYERS for name in layer} | {"rank"}


def test_the_engine_imports_only_downwards():
    wrong = []
    for path in sorted(ENGINE.rglob("*.py")):
        parts = path.relative_to(ENGINE).parts
        if len(parts) < 2 or parts[0] == "rank":
            continue
        here = parts[0]
        for module in imports(path):
            there = sub_package(module)
            if there is None or there == here:
                continue
            if there == "rank" or level(there) > level(here) or (level(there) == level(here)):
                wrong.append(f"{path.relative_to(REPO)} imports {module}")
    assert wrong == []


def test_nothing_imports_the_ranks_code_but_the_ranks_and_the_public_reporter():
    wrong = []
    for path in [*sorted(ENGINE.rglob("*.py")), *sorted((REPO / "mgpu_tui").rglob("*.py"))]:
        relative = path.relative_to(REPO).as_posix()
        if relative.startswith("engine/rank/") or relative in PUBLIC_RANK:
            continue
        wrong += [f"{relative} imports {m}" for m in imports(path) if m.startswith("mgpu_tui.engine.rank")]
    assert wrong == []


def test_the_engine_imports_nothing_of_the_command_line_or_the_app():
    wrong = []
    for path in sorted(ENGINE.rglob("*.py")):
        for module in imports(path):
            if module.startswith("mgpu_tui.") and not module.startswith(
                ("mgpu_tui.engine", "mgpu_tui.demos")
            ):
                wrong.append(f"{path.relative_to(REPO)} imports {module}")
    assert wrong == []


def constants(path: Path) -> set[str]:
    return {
        n.value
        for n in ast.walk(ast.parse(path.read_text()))
        if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }


def owners(check) -> list[str]:
    paths = [*ENGINE.rglob("*.py"), *(REPO / "mgpu_tui").rglob("*.py"), *(REPO / "demos").rglob("*.py")]
    return sorted(p.relative_to(REPO).as_posix() for p in paths if check(p))


def test_one_module_owns_nvml_one_the_event_format_one_the_launch_command():
    assert owners(lambda p: any(m.split(".")[0] == "pynvml" for m in imports(p))) == [
        "engine/machine/nvml.py"
    ]
    defines = lambda p, names: any(  # noqa: E731
        isinstance(n, (ast.FunctionDef, ast.Assign))
        and (
            getattr(n, "name", None) in names
            or any(isinstance(t, ast.Name) and t.id in names for t in getattr(n, "targets", ()))
        )
        for n in ast.walk(ast.parse(p.read_text()))
    )
    assert owners(lambda p: defines(p, {"encode", "parse_line", "SCHEMA_VERSION"})) == [
        "engine/protocol/events.py"
    ]
    # torchrun's module named in an argv: only the launch command builds one (the ranks' own code
    # imports torch.distributed.run to read its parser, which is not a launch).
    assert owners(lambda p: "torch.distributed.run" in constants(p)) == ["engine/launch/command.py"]


# The run folder's layout (engine/protocol/rundir.py's docstring): its folders, and its files' names
# with the node's or the rank's number taken out ({} below).
RUN_FOLDERS = {
    "fr",
    "requests",
    "stacks",
    "events",
    "params",
    "logs",
    "checks",
    "smoke",
    "torch",
    "torch-readable",
}
RUN_FILES = re.compile(
    r"(spec|summary|launcher|node-link)(-node\{\})?\.(json|log)|telemetry(-node\{\})?\.jsonl"
    r"|monitor(-node\{\})?\.(lock|json)"
    r"|mgpu-tui\.log|verify\.(json|log)|check\.json|error\.json|std(out|err)\.log"
    r"|rank(\{\}|\*|[0-9]+)\.(jsonl|json|txt|pt)|nccl-[^/ ]*\.log"
)
RUN_FOLDER_OWNER = "engine/protocol/rundir.py"


def spelled_paths(path: Path) -> list[str]:
    """Where a module spells a path of the run folder: a file's name (an f-string's numbers as {}),
    or one of its folders joined onto a path (``run_dir / "fr"``, ``Path(x, "stacks")``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        else:
            text = None
        if text is not None and RUN_FILES.fullmatch(text):
            found.append(f"{path.relative_to(REPO)}:{node.lineno}: {text!r}")
        joined = []
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            joined = [node.left, node.right]
        elif isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] in {
            "Path",
            "joinpath",
            "join",
        }:
            joined = node.args
        found += [
            f"{path.relative_to(REPO)}:{node.lineno}: / {part.value!r}"
            for part in joined
            if isinstance(part, ast.Constant) and part.value in RUN_FOLDERS
        ]
    return found


def test_only_the_run_folders_owner_spells_a_path_in_it():
    """Issue #44: fr/, requests/, stacks/ and the run's log were spelled by hand in five modules."""
    spelled = [
        hit
        for root in ("mgpu_tui", "engine", "demos", "scripts", "bench")
        for path in sorted((REPO / root).rglob("*.py"))
        if path.relative_to(REPO).as_posix() != RUN_FOLDER_OWNER
        for hit in spelled_paths(path)
    ]
    assert spelled == []
    assert len(spelled_paths(REPO / RUN_FOLDER_OWNER)) >= 15  # the rule sees the owner's own


def _strings(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [text for element in node.elts for text in _strings(element)]
    return []


def test_no_module_outside_the_catalogue_compares_a_modes_name():
    """Issue #44: a mode's facts were tested by its name in 24 places (``mode == "rpc"``, an
    if-chain of names in the memory plan); they are fields of Mode in engine/planning/modes.py."""
    from mgpu_tui.engine.planning.modes import MODES

    compared = []
    for root in ("mgpu_tui", "engine", "demos", "scripts", "bench"):
        for path in sorted((REPO / root).rglob("*.py")):
            if path.relative_to(REPO).as_posix() == "engine/planning/modes.py":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Compare):
                    texts = _strings(node.left) + [t for c in node.comparators for t in _strings(c)]
                elif isinstance(node, ast.MatchValue):
                    texts = _strings(node.value)
                else:
                    continue
                if set(texts) & set(MODES):
                    compared.append(f"{path.relative_to(REPO)}:{node.lineno}: {ast.unparse(node)}")
    assert compared == []


def test_every_mode_of_the_catalogue_has_a_memory_planner():
    from typing import get_args

    from mgpu_tui.engine.planning.memory import PLANNERS
    from mgpu_tui.engine.planning.modes import MODES, MemoryShape

    assert set(PLANNERS) == set(get_args(MemoryShape))
    assert all(mode.memory in PLANNERS for mode in MODES.values())
