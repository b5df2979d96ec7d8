"""What a graph inductor compiled declares it computes: the FLOPs of its post-grad graph, read from
the text inductor keeps with every compiled graph (``CompiledFxGraph.inductor_post_grad_graph_str``,
``GraphModule.print_readable`` with each value's shape; cached graphs keep it too).

Each line of that text is Python: ``mm: "f32[16, 64][64, 1]cpu" = torch.ops.aten.mm.default(a, b)``.
Each operation torch's FLOP counter has a formula for is given meta tensors of its arguments' shapes
(no memory, no kernel, no random draw) and its output's, and the formula's FLOPs are summed: the
same arithmetic the counter applies to an eager step. Nothing of the graph runs.

The reasons it returns instead of a number (the count is then n/a): a shape that is a symbol (a graph
compiled for dynamic shapes: its FLOPs depend on values only its run knows), a graph that calls
subgraphs (its text holds more than one ``forward``), an argument the text does not say the shape of.
"""

from __future__ import annotations

import ast
import importlib
import re
from typing import Any

_ANNOTATED = re.compile(r'(\w+): "([^"]*)"')
_SHAPE = re.compile(r"^[a-z0-9]*\[([^\]]*)\]")


class Unreadable(Exception):  # noqa: N818 (a reason, told as the figure's n/a)
    """The graph's text does not say its FLOPs; the message says why."""


def declared_flops(torch: Any, text: str) -> int | str:
    """The FLOPs ``text`` (a post-grad graph's readable code) declares, or why it declares none."""
    try:
        return _read(torch, text)
    except Unreadable as why:
        return str(why)


def _read(torch: Any, text: str) -> int:
    if not text.strip():
        raise Unreadable("inductor kept no text of it")
    if text.count("def forward(") != 1:
        raise Unreadable("it calls subgraphs of its own")
    registry = importlib.import_module("torch.utils.flop_counter").flop_registry
    shapes: dict[str, tuple[int, ...]] = {}
    parts: dict[str, dict[int, tuple[int, ...]]] = {}  # a tuple-valued node: its items' shapes
    calls: list[tuple[Any, ast.Call, str]] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("def forward("):
            for name, annotation in _ANNOTATED.findall(stripped):
                _remember(shapes, name, annotation)
            continue
        if not stripped or stripped.startswith(("#", "class ", "return")):
            continue
        statement = _statement(stripped)
        if statement is None:
            continue
        target, annotation, value = statement
        if annotation is not None:
            _remember(shapes, target, annotation)
        if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name) and annotation:
            index = value.slice
            if isinstance(index, ast.Constant) and isinstance(index.value, int) and target in shapes:
                parts.setdefault(value.value.id, {})[index.value] = shapes[target]
        elif isinstance(value, ast.Call):
            packet = _packet(torch, value.func)
            if packet is not None and packet in registry:
                calls.append((registry[packet], value, target))
    total = 0
    for formula, call, target in calls:
        out = _output(torch, target, shapes, parts)
        args = [_value(torch, a, shapes) for a in call.args]
        kwargs = {k.arg: _value(torch, k.value, shapes) for k in call.keywords if k.arg}
        try:
            total += int(formula(*args, **kwargs, out_val=out))
        except Exception as exc:  # noqa: BLE001 (a formula that the text's values do not fit)
            raise Unreadable(f"torch's FLOP formula did not fit its text ({type(exc).__name__})") from None
    return total


def _statement(line: str) -> tuple[str, str | None, ast.expr] | None:
    """(target, its annotation, the value) of a line's first statement, if it assigns one name."""
    try:
        body = ast.parse(line).body
    except SyntaxError:
        return None
    first = body[0] if body else None
    if isinstance(first, ast.AnnAssign) and isinstance(first.target, ast.Name) and first.value is not None:
        annotation = first.annotation.value if isinstance(first.annotation, ast.Constant) else None
        return first.target.id, annotation if isinstance(annotation, str) else None, first.value
    if isinstance(first, ast.Assign) and len(first.targets) == 1 and isinstance(first.targets[0], ast.Name):
        return first.targets[0].id, None, first.value
    return None


def _remember(shapes: dict[str, tuple[int, ...]], name: str, annotation: str) -> None:
    """A value's shape from its annotation (``f32[16, 64][64, 1]cpu``); a symbolic one is refused."""
    found = _SHAPE.match(annotation.strip())
    if found is None:
        return  # not a tensor (a SymInt, a tuple): its shape is never asked
    text = found.group(1).strip()
    try:
        shapes[name] = tuple(int(d) for d in text.split(",")) if text else ()
    except ValueError:
        raise Unreadable("it was compiled for dynamic shapes") from None


def _packet(torch: Any, func: ast.expr) -> Any:
    """``torch.ops.NS.OP.OVERLOAD`` (or ``torch.ops.NS.OP``) as torch's operator packet."""
    names: list[str] = []
    while isinstance(func, ast.Attribute):
        names.append(func.attr)
        func = func.value
    if not isinstance(func, ast.Name):
        return None
    names.append(func.id)
    names.reverse()
    if names[:2] != ["torch", "ops"] or len(names) < 4:
        return None
    try:
        return getattr(getattr(torch.ops, names[2]), names[3])
    except AttributeError:
        return None


def _value(torch: Any, node: ast.expr, shapes: dict[str, tuple[int, ...]]) -> Any:
    """An argument as the formula takes it: a meta tensor of a named value's shape, a literal as it is,
    anything else (a dtype, a device) None (no formula reads those)."""
    if isinstance(node, ast.Name):
        if node.id not in shapes:
            if node.id in ("None", "True", "False"):
                return ast.literal_eval(node)
            raise Unreadable(f"its text does not say the shape of {node.id}")
        return torch.empty(shapes[node.id], device="meta")
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_value(torch, e, shapes) for e in node.elts]
    if isinstance(node, ast.UnaryOp) and isinstance(node.operand, ast.Constant):
        return ast.literal_eval(node)
    if isinstance(node, ast.Constant):
        return node.value
    return None


def _output(
    torch: Any, target: str, shapes: dict[str, tuple[int, ...]], parts: dict[str, dict[int, tuple[int, ...]]]
) -> Any:
    """The node's output as meta tensors: one of its annotated shape, or a tuple of its items'."""
    if target in shapes:
        return torch.empty(shapes[target], device="meta")
    items = parts.get(target, {})
    if not items:
        return None
    return tuple(torch.empty(items[i], device="meta") if i in items else None for i in range(max(items) + 1))
