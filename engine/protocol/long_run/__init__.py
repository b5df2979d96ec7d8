"""A long run's event files: a rank's later lines in segments, the older ones kept only as digests
(docs/long-runs.md). digest.py: what a digest holds of a run of steps; tail.py: one rank's files
read as they grow, whatever became of its older segments."""
