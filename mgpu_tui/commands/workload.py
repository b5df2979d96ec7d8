"""The workload flags shared by run, compare, scale and plan: --model and the GPT's shape, and the
LaunchSpec fields they give."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from mgpu_tui.engine.planning.shapes import SHAPE_FIELDS


def add_model_arguments(group, whole_number: Callable[[str], int], default: str = "mlp") -> None:
    """--model and the GPT's shape flags (engine/planning/shapes.py)."""
    group.add_argument(
        "--model",
        default=default,
        metavar="NAME",
        help=f"the workload: mlp (quickest; --width, --depth), or a GPT: gpt-tiny, gpt-125m, "
        f"gpt-350m, gpt-1.3b, gpt-7b, custom (default {default})",
    )
    for field, what in SHAPE_FIELDS.items():
        group.add_argument(
            f"--{field.replace('_', '-')}",
            type=whole_number,
            metavar="N",
            help=f"the GPT's {what} (changes the named size)",
        )


def model_fields(args: argparse.Namespace) -> dict:
    """The LaunchSpec fields for --model and whichever shape flags were given."""
    changed = tuple((name, getattr(args, name)) for name in SHAPE_FIELDS if getattr(args, name) is not None)
    return {"model": args.model, "model_args": changed}
