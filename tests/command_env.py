"""The XLA settings of the test session and the environment of the commands its tests start."""

from __future__ import annotations

import os

# LLVM at -O1 instead of XLA:CPU's -O2. The suite compiles hundreds of small programs, most of
# them once, and compiling is most of its time: at -O1 the compile-bound tests
# (tests/interpret/test_any_model.py, models/test_outputs.py, ops/test_capsules.py) took 105 s
# against 149 s, and a CCCapsNet `:smoke` training 14.9 s against 17.0 s. At -O0 those tests
# took 90 s but bfloat16 trainings ran 0.2 slower.
SUITE_XLA_FLAGS = "--xla_backend_optimization_level=1"


def xla_flags(devices: int) -> str:
    """XLA_FLAGS for `devices` CPU devices with the suite's settings."""
    return f"--xla_force_host_platform_device_count={devices} {SUITE_XLA_FLAGS}"


def command_env(devices: int = 1, **variables: str) -> dict[str, str]:
    """The environment of a command a test starts: the test's, on `devices` CPU devices with the
    suite's XLA settings, and `variables`."""
    return {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": xla_flags(devices), **variables}
