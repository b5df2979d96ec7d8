"""Issue 61: focus that can be seen. In every view, at 80x24 (its fields without borders) and at
160x50, the focused control looks unlike its unfocused self by 3:1 or more (WCAG's contrast for a
focus mark), read from the colours the screen draws (the snapshot's)."""

from __future__ import annotations

import pytest
from test_every_size import SIZES, an_app
from test_view_snapshots import pinned_run
from waiting import settled

from mgpu_tui.app.views.run.view import RunView


def luminance(colour: tuple[int, int, int]) -> float:
    def channel(value: int) -> float:
        v = value / 255
        return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4

    r, g, b = colour
    return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b)


def contrast(a: tuple[int, int, int], b: tuple[int, int, int]) -> float:
    """WCAG's contrast ratio of two colours (1 to 21)."""
    low, high = sorted((luminance(a), luminance(b)))
    return (high + 0.05) / (low + 0.05)


Colour = tuple[int, int, int]


def cells(app, region) -> dict[tuple[int, int], tuple[Colour, Colour]]:
    """Each cell of ``region`` as the eye sees it: the colour of its glyph (its background's where
    it is blank), and its background's (reverse video swapped), as the snapshot draws it."""
    seen = {}
    for y, strip in enumerate(app.screen._compositor.render_strips()):
        if not region.y <= y < region.bottom:
            continue
        x = 0
        for segment in strip:
            style = segment.style
            fg = style.color.get_truecolor() if style and style.color else None
            bg = style.bgcolor.get_truecolor() if style and style.bgcolor else None
            if style and style.reverse:
                fg, bg = bg, fg
            for char in segment.text:
                if region.x <= x < region.right:
                    back = tuple(bg or (0, 0, 0))
                    seen[x, y] = (tuple(fg or back) if char.strip() else back, back)
                x += 1
    return seen


def marks(before: dict, after: dict) -> int:
    """How many cells changed by 3:1 or more (WCAG's for a focus mark) between the two looks, in
    the colour seen or in the background."""
    return sum(
        max(contrast(a, b) for a, b in zip(look, after.get(cell, look))) >= 3 for cell, look in before.items()
    )


async def focus_marks(app, pilot) -> dict[str, int]:
    """Each control of the screen's focus chain on screen: how many of its cells its focus changes
    by 3:1 or more against its look unfocused."""
    found = {}
    chain = [widget for widget in app.screen.focus_chain if widget.region.area]
    app.set_focus(None)
    await pilot.pause()  # (the focus change's messages handled, and the screen drawn)
    unfocused = [cells(app, widget.region) for widget in chain]  # (one's look is not another's focus)
    for widget, before in zip(chain, unfocused):
        widget.focus()
        await pilot.pause()
        found[f"{type(widget).__name__}#{widget.id}"] = marks(before, cells(app, widget.region))
    return found


@pytest.mark.parametrize("size", ["80x24", "160x50"])  # (160x45: the widths of 160x50, not folded)
async def test_in_every_view_the_focused_control_differs_from_its_unfocused_look_by_3_to_1(size):
    """On 8177ed0 a focused field differed by one shade (colour 234 against 235) at 80 columns, and a
    table or a scrolled box not at all. A mark of three cells at least (a field's background, a
    border, a table's header), not the text cursor alone."""
    app = an_app()
    weak = {}
    async with app.run_test(size=SIZES[size]) as pilot:
        for key in ("d", "t", "r", "c", "h"):
            await pilot.press(key)
            await settled(pilot)
            weak |= {f"{key}: {w}": n for w, n in (await focus_marks(app, pilot)).items() if n < 3}
        await pilot.press("r")  # the Run view after a run: its logs' controls and pane
        pinned_run(app.query_one(RunView), finished=True)
        await settled(pilot)
        marked = await focus_marks(app, pilot)
        assert {"Select#log-rank", "Input#log-search", "LogPane#log"} <= set(marked)
        weak |= {f"run after: {w}": n for w, n in marked.items() if n < 3}
    assert weak == {}, weak
