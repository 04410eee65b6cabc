"""Test-wide JAX settings: fake CPU devices and strict shape/dtype rules; a compilation cache
of the session's own; the `:smoke` workdirs every worker shares.

XLA_FLAGS must be set before jax initialises its backends, so this runs at import time.
"""
import json
import os
import shutil

from tests.command_env import TEST_DEVICES, training_compiler_options, xla_flags

os.environ.setdefault("XLA_FLAGS", xla_flags(TEST_DEVICES))
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import pytest  # noqa: E402

from tests.shared_tmp import locked, shared_folder  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")
# No implicit dtype promotion: a float32 model stays float32, bfloat16 activations stay bfloat16,
# and mixing (int32 with float32, a Python float with an int array) needs an explicit cast.
jax.config.update("jax_numpy_dtype_promotion", "strict")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """GPU-marked tests run only where JAX has a GPU backend. A test that reads what `built_once`
    builds (a trained workdir) is slow: the first such test of the session builds it."""
    skip = pytest.mark.skip(reason="needs a GPU (run by benchmarks/device_check.sh)")
    for item in items:
        if "gpu" in item.keywords and jax.default_backend() != "gpu":
            item.add_marker(skip)
        if "built_once" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    """A folder for the prepared data of the session's test runs, which every worker shares:
    jcaps prepares each source once into it, under a lock, and the runs that resume a shared
    workdir find its data prepared, as a user's do."""
    return shared_folder(tmp_path_factory, "tfds")


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


@pytest.fixture(scope="session", autouse=True)
def session_compilation_cache(tmp_path_factory):
    """JAX's persistent compilation cache of every run of the session, in-process or a command,
    under the session's temporary folder: `train.compilation_cache = "auto"` puts it under
    $XDG_CACHE_HOME, which would otherwise be the user's ~/.cache, kept after the tests. The
    workers share it, as they share a user's. Every program compiled in-process or by a command
    is kept there, however quickly it compiled: many tests compile the same model at the same
    shapes (a module after another, a worker after the other, a command after a test), and a
    kept program loads in milliseconds."""
    from jcaps.train.config import compilation_cache_dir

    cache_home = shared_folder(tmp_path_factory, "xdg_cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(cache_home))
        # Read by the jax of every command the tests start, as its defaults: a script that does
        # not configure the cache (a benchmark, a study) keeps its programs there too.
        patch.setenv("JAX_COMPILATION_CACHE_DIR", compilation_cache_dir("auto"))
        patch.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
        jax.config.update("jax_compilation_cache_dir", compilation_cache_dir("auto"))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        yield cache_home


@pytest.fixture(scope="session")
def built_once(tmp_path_factory):
    """`built_once(NAME, build)` -> (FOLDER, result): `build(FOLDER)` fills the new FOLDER (a
    workdir it trains, the data it writes) and returns what JSON holds; it runs once for every
    worker of the session, the first to ask building under a lock while the others wait, then
    read. NAME says what is built, so that no two builds share one. What reads FOLDER must leave
    it as it is: a test that changes a workdir changes a copy (`shutil.copytree`)."""
    root = shared_folder(tmp_path_factory, "built_once")

    def get(name: str, build):
        folder, result_file = root / name, root / f"{name}.json"
        with locked(root, [name]):
            if not result_file.exists():
                shutil.rmtree(folder, ignore_errors=True)  # what a worker whose build failed left
                folder.mkdir()
                result_file.write_text(json.dumps(build(folder)), encoding="utf-8")
        return folder, json.loads(result_file.read_text(encoding="utf-8"))

    return get


@pytest.fixture(scope="session")
def trained_smoke_workdir(built_once, config_file, cache_dir):
    """`trained_smoke_workdir(CONFIG, ARG="smoke")` -> (workdir, final metrics) of configs/CONFIG
    built with ARG (a `:smoke` form: SMOKE_CONFIGS has one per model), trained once a session
    (`built_once`)."""
    from jcaps.train import loop

    def trained(config: str, arg: str = "smoke"):
        def train(folder):
            return loop.train_and_evaluate(config_file(config, arg, cache_dir), str(folder / "workdir"),
                                           compiler_options=training_compiler_options(config))

        folder, final = built_once(f"{config.removesuffix('.py')}-{arg.replace(',', '-')}", train)
        return folder / "workdir", final

    return trained


@pytest.fixture(scope="session")
def checkpointed_smoke_workdir(built_once, config_file, cache_dir):
    """The fastText `:smoke` run in-process (on the test devices), checkpointed every 10 of its 60
    steps, once a session (`built_once`): the uninterrupted run that the checkpoint-fault tests
    and the one-device `train.py` run compare theirs with."""
    from jcaps.train import loop

    def train(folder):
        config = config_file("fasttext_ag_news.py", "smoke", cache_dir)
        config.train.checkpoint_every_steps = 10
        loop.train_and_evaluate(config, str(folder / "workdir"))

    return built_once("fasttext-smoke-checkpointed", train)[0] / "workdir"
