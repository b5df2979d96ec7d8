"""The workload flags shared by run, compare, scale and plan: --model and the GPT's shape, and the
LaunchSpec fields they give."""

from __future__ import annotations

import argparse

from mgpu_tui.arguments import whole_number
from mgpu_tui.engine.planning.shapes import MODELS, SHAPE_FIELDS, UNTIED_HELP

# Each shape field's bound at the door: past these the planner works for minutes on a model no
# machine holds (a row per layer), or a rank fails later with a traceback.
SHAPE_MAX = {"layers": 1024, "d_model": 1 << 17, "heads": 1024, "seq_len": 1 << 20, "vocab": 1 << 21}


def add_model_arguments(group, default: str = "mlp") -> None:
    """--model and the GPT's shape flags (engine/planning/shapes.py). A command whose default is a
    GPT (plan) takes GPTs only, and its help offers only them."""
    gpts = f"{', '.join(MODELS)}, custom"
    offered = (
        f"the workload: mlp (quickest; --width, --depth), or a GPT: {gpts}"
        if default == "mlp"
        else f"the GPT: {gpts}"
    )
    group.add_argument("--model", default=default, metavar="NAME", help=f"{offered} (default {default})")
    for field, what in SHAPE_FIELDS.items():
        group.add_argument(
            f"--{field.replace('_', '-')}",
            type=whole_number(1, SHAPE_MAX[field]),
            metavar="N",
            help=f"the GPT's {what} (changes the named size)",
        )
    group.add_argument(
        "--untied-head",
        action="store_true",
        help=f"{UNTIED_HELP} (gpt-125m, -350m and -1.3b tie it, as GPT-2 and GPT-3 do; the modes "
        "that cut the model into stages need this)",
    )


def model_fields(args: argparse.Namespace) -> dict:
    """The LaunchSpec fields for --model and whichever shape flags were given."""
    changed = tuple((name, getattr(args, name)) for name in SHAPE_FIELDS if getattr(args, name) is not None)
    if args.untied_head:
        changed += (("untied_head", 1),)
    return {"model": args.model, "model_args": changed}
