"""Test-wide JAX settings: fake CPU devices and strict shape/dtype rules.

XLA_FLAGS must be set before jax initialises its backends, so this runs at import time.
"""
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

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
