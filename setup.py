"""The packages of the distribution: jcaps, and the repository's `configs/` shipped as the package
`jcaps.configs` (where `jcaps train --config NAME` finds a config by its name) while the folder stays
where the docs and `python train.py --config configs/NAME.py` expect it. Everything else is in
pyproject.toml."""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["jcaps", "jcaps.*"]), "jcaps.configs"],
    package_dir={"jcaps.configs": "configs"},
)
