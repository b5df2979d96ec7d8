"""The CLI's tables within a terminal's width (issue #43: `compare` was 110 columns wide, `list` about
150, `plan` and `runs` 210-220, so every row wrapped at 80 and the columns were lost)."""

from mgpu_tui.console import table

HEADERS = ["mode", "what", "launcher", "here"]
ROWS = [
    ["single", "Single device (baseline)", "python", "yes: on the CPU"],
    ["dp", "nn.DataParallel", "python", "yes: runs, degenerate: DataParallel only splits over CUDA devices; "
     "on the CPU it runs the model once, unsplit."],
]  # fmt: skip


def test_a_table_wider_than_the_terminal_wraps_its_text_column_within_it():
    text = table(HEADERS, ROWS, width=80)
    lines = text.splitlines()
    assert max(map(len, lines)) <= 80
    assert lines[0].split() == HEADERS and lines[3].startswith("dp      nn.DataParallel  ")
    here = lines[0].index("here")
    assert all(line[:here].strip() == "" for line in lines[4:])  # the rest of the cell, under its column
    said = " ".join(line[here:].strip() for line in lines[3:])
    assert said == ROWS[1][3]  # every word, in order


def test_columns_that_cannot_fit_are_cut_into_parts_each_led_by_the_first():
    headers = ["mode", *(f"figure {i}" for i in range(10))]
    rows = [["fsdp_grad_op", *(f"{i * 1000:,}" for i in range(10))]]
    text = table(headers, rows, right=range(1, 11), width=50)
    parts = text.split("\n\n")
    assert len(parts) > 1 and all(max(map(len, p.splitlines())) <= 50 for p in parts)
    assert all(p.splitlines()[2].startswith("fsdp_grad_op") for p in parts)
    shown = [h for p in parts for h in p.splitlines()[0].split("  ") if h.strip()]
    assert [h.strip() for h in shown if h.strip() != "mode"] == headers[1:]


def test_without_a_width_a_table_keeps_each_row_whole():
    """Output to a file or a pipe (no terminal): rows stay one line each, for programs to read."""
    assert table(HEADERS, ROWS, width=None).splitlines()[3].endswith("once, unsplit.")
    assert len(table(HEADERS, ROWS, width=None).splitlines()) == 4
