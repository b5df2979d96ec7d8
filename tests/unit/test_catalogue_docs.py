"""The catalogue is the one source of what each mode is: the app's guide links to docs/modes.md#MODE,
so every mode has its heading there, with the catalogue's own words on what it holds and sends."""

from pathlib import Path

from mgpu_tui.app.views.help import HELP
from mgpu_tui.engine.planning.modes import MODES

DOCS = Path(__file__).parents[2] / "docs" / "modes.md"


def test_every_mode_has_its_anchor_in_the_docs_with_the_catalogues_costs():
    text = DOCS.read_text()
    for name, mode in MODES.items():
        assert f"\n### {name}\n" in text, name  # GitHub's anchor for it is #name
        assert mode.costs and f"{mode.title}. {mode.costs}" in text, name


def test_the_help_names_every_view_and_key():
    for key in ("d ", "t ", "r ", "c ", "h ", "s ", "v ", "w ", "g ", "q "):
        assert f"\n  {key}" in HELP or f"   {key}" in HELP, key
    assert "docs/modes.md#MODE" in HELP
