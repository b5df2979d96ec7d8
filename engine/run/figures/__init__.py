"""A run's figures, read from its ranks' events and files: rates, step times, losses and peaks
(aggregate.py), where a step goes and why the job is slow (anatomy.py), TF/s and MFU (mfu.py), the
machine during the run (telemetry_log.py), NCCL's own log (nccl_record.py), who arrives late at
the collectives (flight_records.py), and a command's trainers and phases (trainers.py)."""
