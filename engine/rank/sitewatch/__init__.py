"""The folder ``mgpu-tui exec`` puts first on the PYTHONPATH of the command it runs: its one module,
``sitecustomize``, is what every Python process of the command's tree runs at start-up
(engine/rank/sitewatch/sitecustomize.py says what it does). Nothing else may live here: every
module of this folder can be imported by name in those processes."""
