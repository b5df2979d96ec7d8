"""This machine: what it can run (host), its GPUs through NVML, live telemetry, and the
interconnect topology.
"""
