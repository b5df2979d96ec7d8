"""The package list, found rather than written by hand (pyproject.toml holds everything else).

engine/ and demos/ live at the top of the repository but install under mgpu_tui, so nothing
generic lands in site-packages. setuptools' declarative ``packages.find`` cannot put a found
folder under another package's name, so the three roots are walked here: a new sub-package is in
the wheel the moment it has an ``__init__.py`` (tests/integration/test_wheel.py checks it).
"""

from setuptools import find_packages, setup

ROOTS = {"mgpu_tui": "mgpu_tui", "mgpu_tui.engine": "engine", "mgpu_tui.demos": "demos"}


def packages() -> list[str]:
    found = []
    for name, folder in ROOTS.items():
        found += [name, *(f"{name}.{sub}" for sub in find_packages(folder))]
    return sorted(set(found))


setup(packages=packages(), package_dir=ROOTS)
