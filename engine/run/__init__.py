"""One run's lifecycle, in the parent: start the launcher, follow its files, watch for stalls,
stop it, find the root cause, write the summary, verify against the baseline.
"""
