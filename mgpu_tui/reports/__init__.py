"""What the headless commands write: the --check table, JSON and JUnit, compare tables and files,
and the ranks' own lines on the console while `run` goes."""
