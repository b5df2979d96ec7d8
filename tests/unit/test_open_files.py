"""Issue 45: following a job of 1,024 ranks keeps 1,024 event files open; the CLI raises the soft
limit of open files (1,024 on many systems) to the hard one before anything else."""

import resource

from mgpu_tui.engine.machine.open_files import MAX_OPEN_FILES, raise_open_files_limit


def test_the_soft_limit_of_open_files_goes_up_to_the_hard_one():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        want = MAX_OPEN_FILES if hard == resource.RLIM_INFINITY else min(hard, MAX_OPEN_FILES)
        assert raise_open_files_limit() == want
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (want, hard)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
