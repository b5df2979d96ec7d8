"""``mgpu-tui --check``: the results, the environment checks (level 1) and the suite that launches
the ranks for levels 2 and 3. The tasks the ranks run live in ``mgpu_tui.engine.rank``.
"""
