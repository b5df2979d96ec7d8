"""What the parts say to each other, and the files they say it in: the event format from the ranks
(events.py), the nodes' heartbeats (heartbeat.py), the run folder's layout (rundir.py, the one
owner of its paths; rundir_make.py), the one bounded reader of a folder's files (folder.py) and of
a growing one (file_tail.py), how a failure is told (causes.py), the environment a rank is given
(environment.py), text made safe to show (text.py) and JSON read into frozen types (typed.py)."""
