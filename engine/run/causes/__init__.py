"""Why a run failed or stopped moving: the root cause of a failure, from the ranks' errors, exit
codes and torchrun's report (rootcause.py), and the stall watch with its hang verdict
(watchdog.py)."""
