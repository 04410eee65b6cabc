"""Test-wide JAX settings: fake CPU devices and strict shape/dtype rules.

XLA_FLAGS must be set before jax initialises its backends, so this runs at import time.
"""
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")
# No implicit dtype promotion: a float32 model stays float32, bfloat16 activations stay bfloat16,
# and mixing (int32 with float32, a Python float with an int array) needs an explicit cast.
jax.config.update("jax_numpy_dtype_promotion", "strict")


def pytest_collection_modifyitems(config, items):
    """GPU-marked tests run only where JAX has a GPU backend."""
    import pytest

    if jax.default_backend() == "gpu":
        return
    skip = pytest.mark.skip(reason="needs a GPU (run by benchmarks/device_check.sh)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    """A folder for the prepared data of the module's test runs."""
    return tmp_path_factory.mktemp("tfds")


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


@pytest.fixture(scope="session")
def counting_traces():
    """`counting_traces(family)` -> (family, traced): the family whose loss appends the `tokens`
    shape of its batch to the list `traced` each time a step calling it is traced. Python runs
    a jitted function's body once a trace, not once a call, so `traced` lists the compiled shapes."""
    import dataclasses

    def wrap(family):
        traced = []

        def loss(outputs, batch, model_config):
            traced.append(batch["tokens"].shape)
            return family.loss(outputs, batch, model_config)

        return dataclasses.replace(family, loss=loss), traced

    return wrap
