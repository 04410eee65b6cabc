"""Test-wide JAX settings: fake CPU devices and strict shape/dtype rules.

XLA_FLAGS must be set before jax initialises its backends, so this runs at import time.
"""
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")


def pytest_collection_modifyitems(config, items):
    """GPU-marked tests run only where JAX has a GPU backend."""
    import pytest

    if jax.default_backend() == "gpu":
        return
    skip = pytest.mark.skip(reason="needs a GPU (run by benchmarks/device_check.sh)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def config_file():
    """`config_file(NAME, ARG, cache_dir)`: configs/NAME.py built with ARG for a test run, its
    prepared data kept in `cache_dir`, no progress output."""
    from jcaps.train import config as config_lib

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def load(name: str, arg: str, cache_dir):
        config = config_lib.load(f"{os.path.join(root, 'configs', name)}:{arg}")
        config.data.cache_dir = str(cache_dir)
        config.train.progress = "none"
        return config

    return load
