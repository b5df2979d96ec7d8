"""The command line's argument types and parser: each type refuses bad input with one sentence
(argparse then names the option), and the parser raises that sentence as a UsageError instead of
printing usage and exiting, so cli.main reports it as every other error. Standard library only:
``mgpu-tui --help`` loads this."""

from __future__ import annotations

import argparse
import math
import re

from mgpu_tui.errors import UsageError

# Bounds at the door (issue #28): a number past these means nothing on any machine, and would
# fail later with a traceback, or make a command work for hours. One home for each.
MAX_COUNT = (1 << 31) - 1  # any count not bounded more tightly (--nproc, --nice, a port: by their own checks)
MAX_STEPS = 10**9
MAX_BATCH = 1 << 24  # samples in a global batch
MAX_MICRO = 1 << 16  # micro-batches a step (--accum, --microbatches)
MAX_RANKS = 1 << 14  # ranks, stages, GPUs planned for: the planner shows each one
MAX_NODES = 1 << 12  # as a recorded run may claim (engine/records/history.py's MAX_NNODES)
MAX_WIDTH = 1 << 16  # the MLP's width (a GPT's shape fields: commands/workload.py)
MAX_DEPTH = 1 << 12  # the MLP's blocks
MAX_RESTARTS = 1000
MAX_FLOAT = 1e9  # seconds (31 years), GiB, a learning rate: any float flag


class Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage and exiting, so every
    usage error comes out as one sentence."""

    def error(self, message: str):  # noqa: D401 (argparse's name)
        match = re.match(r"argument (\S+?)(?:/\S+)?: (.*)", message)
        if match:
            option, detail = match.groups()
            message = detail if detail.startswith(option) else f"{option}: {detail}"
        if message.startswith("unrecognized arguments: "):
            message = "unknown option(s): " + self._with_guesses(message.split(": ", 1)[1])
        raise UsageError(f"{message} (see {self.prog} --help)")

    def _with_guesses(self, unknown: str) -> str:
        """The unknown words, each option with the nearest known ones (--nprocs: did you mean --nproc?)."""
        from mgpu_tui.engine.protocol.text import nearest

        known = self._options()
        words = []
        for word in unknown.split():
            near = nearest(word.split("=", 1)[0], known) if word.startswith("--") else []
            words.append(f"{word} (did you mean {' or '.join(near)}?)" if near else word)
        return " ".join(words)

    def _options(self) -> set[str]:
        """Every long option of this parser and of its commands' parsers."""
        found = {o for action in self._actions for o in action.option_strings if o.startswith("--")}
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                for parser in action.choices.values():
                    if isinstance(parser, Parser):
                        found |= parser._options()
        return found


def whole_number(minimum: int, maximum: int = MAX_COUNT):
    """A parser of whole numbers from ``minimum`` to ``maximum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        if value > maximum:
            raise argparse.ArgumentTypeError(f"must be at most {maximum:,}, got {value:,}")
        return value

    return parse


def positive_float(text: str) -> float:
    """A finite number above zero and at most MAX_FLOAT: a learning rate, a timeout, GiB. (float()
    takes 'inf' and 'nan'.)"""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
    if value > MAX_FLOAT:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_FLOAT:g}, got {text}")
    return value


def seconds_or_off(text: str) -> float:
    """0 (off), or a finite number of seconds of at least 0.1."""
    if text.strip() in ("0", "0.0"):
        return 0.0
    value = positive_float(text)
    if value < 0.1:
        raise argparse.ArgumentTypeError(f"must be 0 or at least 0.1 seconds, got {text}")
    return value


def run_name(text: str) -> str:
    """A job's id (--rdzv-id): a name, since it names the nodes' shared run folder, never a path."""
    from mgpu_tui.engine.protocol.rundir import NAME

    if not NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"must be a name of letters, digits, '.', '_' and '-' (at most 64, starting with a letter "
            f"or digit), got {text[:80]!r}"
        )
    return text


def whole_numbers(text: str) -> list[int]:
    """Counts separated by commas (1,2,4,8), each from 1 to MAX_BATCH, at most 64 of them."""
    parts = [part.strip() for part in text.split(",")]
    if len(parts) > 64:
        raise argparse.ArgumentTypeError(f"must be at most 64 counts, got {len(parts)}")
    if not all(part.isdigit() and len(part) <= 10 for part in parts):
        raise argparse.ArgumentTypeError(f"must be whole numbers separated by commas, got {text!r}")
    counts = [int(part) for part in parts]
    if min(counts) < 1:
        raise argparse.ArgumentTypeError(f"each must be at least 1, got {text!r}")
    if max(counts) > MAX_BATCH:
        raise argparse.ArgumentTypeError(f"each must be at most {MAX_BATCH:,}, got {max(counts):,}")
    return counts
