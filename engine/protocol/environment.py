"""The environment variables through which the engine tells a rank where its run is.

A rank's reporter (or bootstrap) writes its events under ``MGPU_RUN_DIR``; every process of a
run carries ``MGPU_RUN_ID``, by which the engine finds what is left of a run it stopped. Standard
library only: rank code and the engine both read these names.
"""

RUN_DIR_ENV = "MGPU_RUN_DIR"
RUN_ID_ENV = "MGPU_RUN_ID"
# mgpu-tui exec: where the launching mgpu-tui's packages are ("mgpu_tui=DIR;mgpu_tui.engine=DIR"), for the
# sitecustomize of a process whose interpreter has none of its own (engine/rank/sitewatch/).
WATCH_PATHS_ENV = "MGPU_WATCH_PATHS"
