"""What the engine keeps of a long run, bounded whatever its length (docs/long-runs.md): each rank's
track (whole_run.py), the job's step times (job_times.py)."""
