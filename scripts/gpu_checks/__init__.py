"""The checks of scripts/gpu_check.py (make gpu-check), one module per concern: base (what every
check uses: a command run with its output kept, the results and the report, the machine), suites
(check-level3, check-shared, modes, oom), compare_runs (compare, transformer, the energy counter),
nccl_check, script_check (script, fr-hang), machine_checks (topology, telemetry, sampler-cost),
app_check, and the third round's: launchers, round3 (script-mfu, input-bound, fr-versions, speed,
gpt13b-profile). Each is a class of checks that gpu_check.py's Checker mixes in; each check returns
a Result or a list of them."""
