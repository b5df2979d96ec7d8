"""The command line's argument types and parser: each type refuses bad input with one sentence
(argparse then names the option), and the parser raises that sentence as a UsageError instead of
printing usage and exiting, so cli.main reports it as every other error. Standard library only:
``mgpu-tui --help`` loads this."""

from __future__ import annotations

import argparse
import math
import re

from mgpu_tui.errors import UsageError


class Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage and exiting, so every
    usage error comes out as one sentence."""

    def error(self, message: str):  # noqa: D401 (argparse's name)
        match = re.match(r"argument (\S+?)(?:/\S+)?: (.*)", message)
        if match:
            option, detail = match.groups()
            message = detail if detail.startswith(option) else f"{option}: {detail}"
        message = message.replace("unrecognized arguments:", "unknown option(s):")
        raise UsageError(f"{message} (see {self.prog} --help)")


def whole_number(minimum: int, maximum: int | None = None):
    """A parser of whole numbers from ``minimum`` to ``maximum`` (no limit: None)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"must be at most {maximum}, got {value}")
        return value

    return parse


def positive_float(text: str) -> float:
    """A finite number above zero: a learning rate, a timeout. (float() takes 'inf' and 'nan'.)"""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
    return value


def seconds_or_off(text: str) -> float:
    """0 (off), or a finite number of seconds of at least 0.1."""
    if text.strip() in ("0", "0.0"):
        return 0.0
    value = positive_float(text)
    if value < 0.1:
        raise argparse.ArgumentTypeError(f"must be 0 or at least 0.1 seconds, got {text}")
    return value


def whole_numbers(text: str) -> list[int]:
    """Counts separated by commas (1,2,4,8), each at least 1."""
    parts = [part.strip() for part in text.split(",")]
    if not all(part.isdigit() for part in parts):
        raise argparse.ArgumentTypeError(f"must be whole numbers separated by commas, got {text!r}")
    counts = [int(part) for part in parts]
    if min(counts) < 1:
        raise argparse.ArgumentTypeError(f"each must be at least 1, got {text!r}")
    return counts
