"""The XLA settings of the test session and the environment of the commands its tests start."""

from __future__ import annotations

import os

# LLVM at -O1 instead of XLA:CPU's -O2. The suite compiles hundreds of small programs, most of
# them once, and compiling is most of its time: at -O1 the compile-bound tests
# (tests/interpret/test_any_model.py, models/test_outputs.py, ops/test_capsules.py) took 105 s
# against 149 s, and a CCCapsNet `:smoke` training 14.9 s against 17.0 s. At -O0 those tests
# took 90 s but bfloat16 trainings ran 0.2 slower.
# XLA:CPU's classic loop emitters instead of its MLIR fusion emitters: they compile the same
# programs in about three quarters of the time (tests/models/test_outputs.py with
# ops/test_capsules.py: 28 s against 38 s; the SGM and CCCapsNet tests of
# interpret/test_explain.py: 73 s against 100 s), and a CCCapsNet `:smoke` training runs as fast
# (19.7 s against 19.1 s in float32, 28.6 s against 25.8 s in bfloat16).
SUITE_XLA_FLAGS = "--xla_backend_optimization_level=1 --xla_cpu_use_fusion_emitters=false"


def xla_flags(devices: int) -> str:
    """XLA_FLAGS for `devices` CPU devices with the suite's settings."""
    return f"--xla_force_host_platform_device_count={devices} {SUITE_XLA_FLAGS}"


def command_env(devices: int = 1, **variables: str) -> dict[str, str]:
    """The environment of a command a test starts: the test's, on `devices` CPU devices with the
    suite's XLA settings, and `variables`."""
    return {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": xla_flags(devices), **variables}
