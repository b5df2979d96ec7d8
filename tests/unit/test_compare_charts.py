"""The comparison's text charts (mgpu_tui/reports/compare.py) fit the columns they are given: the
Compare view draws them as wide as it is, and at 80x24 their bars wrapped (issue #31)."""

import pytest

from conftest import pinned_comparison
from mgpu_tui.reports.compare_charts import BAR_WIDTH, MIN_BAR, compare_charts


@pytest.mark.parametrize("width", [60, 76, 100, 156])  # the Compare view's from 64 columns up
def test_no_line_is_longer_than_the_width_given(width):
    lines = compare_charts(pinned_comparison(), width).splitlines()
    too_long = [line for line in lines if len(line) > width]
    assert too_long == [], too_long


def test_without_a_width_the_bars_keep_their_usual_length_and_narrow_ones_their_least():
    def longest_rate_bar(width):  # the samples/s bars: the lines under the first title
        return max(line.count("█") for line in compare_charts(pinned_comparison(), width).splitlines()[1:4])

    assert longest_rate_bar(None) == BAR_WIDTH
    assert longest_rate_bar(20) == MIN_BAR  # too narrow to fit: the least
