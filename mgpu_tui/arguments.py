"""The command line's argument types and parser: each type refuses bad input with one sentence
(argparse then names the option), and the parser raises that sentence as a UsageError instead of
printing usage and exiting, so cli.main reports it as every other error. Standard library only:
``mgpu-tui --help`` loads this."""

from __future__ import annotations

import argparse
import re

# The types and their bounds are declared with the launch options (engine/launch/options.py),
# which the demos share; the command line's other flags use them from here.
from mgpu_tui.engine.launch.options import (  # noqa: F401
    MAX_BATCH,
    MAX_COUNT,
    MAX_DEPTH,
    MAX_FLOAT,
    MAX_MICRO,
    MAX_NODES,
    MAX_RANKS,
    MAX_RESTARTS,
    MAX_SEED,
    MAX_STEPS,
    MAX_WIDTH,
    positive_float,
    run_name,
    seconds_or_off,
    whole_number,
    whole_numbers,
)
from mgpu_tui.errors import UsageError


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
        groups: list[list[str]] = []  # an option and the value that followed it (--nrpoc 2)
        for word in unknown.split():
            follows_an_option = groups and groups[-1][0].startswith("-") and len(groups[-1]) == 1
            if follows_an_option and not word.startswith("-") and "=" not in groups[-1][0]:
                groups[-1].append(word)
            else:
                groups.append([word])
        said = []
        for group in groups:
            option = group[0]
            near = nearest(option.split("=", 1)[0], known) if option.startswith("--") else []
            text = " ".join(group)
            said.append(f"{text} (did you mean {' or '.join(near)}?)" if near else text)
        return ", ".join(said)

    def _options(self) -> set[str]:
        """Every long option of this parser and of its commands' parsers."""
        found = {o for action in self._actions for o in action.option_strings if o.startswith("--")}
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                for parser in action.choices.values():
                    if isinstance(parser, Parser):
                        found |= parser._options()
        return found
