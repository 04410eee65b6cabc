"""The XLA settings of the test session and the environment of the commands its tests start."""

from __future__ import annotations

import contextlib
import functools
import os
import re
import subprocess
import sys

# The suite compiles thousands of small programs, most of them once, and compiling was most of
# its time, so it trades run time for compile time (whole suite, `-n 2`, 2 cores, one checkout,
# eight test devices then):
# - XLA:CPU's classic loop emitters instead of its MLIR fusion emitters compile the same programs
#   in about three quarters of the time (tests/models/test_outputs.py with ops/test_capsules.py:
#   28 s against 38 s; the SGM and CCCapsNet tests of interpret/test_explain.py: 73 s against
#   100 s), and a CCCapsNet `:smoke` training runs about as fast (19.7 s against 19.1 s). Whole
#   suite at -O1: 22:33 -> 16:18.
# - LLVM at -O0 instead of -O1: the whole suite then took 13:37 against 16:18, although its
#   bfloat16 trainings (tests/train/test_mixed_precision.py) ran slower, 218 s against 197 s.
#   JAX's `jax_disable_most_optimizations` instead, which a test could turn off for one run,
#   took tests/models/test_outputs.py from 15 s to 34 s.
# XLA aborts a process whose XLA_FLAGS name a flag it does not have, and the classic emitters'
# flag is gone from newer XLAs (jaxlib 0.12): the suite keeps each of these flags only where the
# installed XLA accepts it (`suite_xla_flags`).
SUITE_XLA_FLAGS = ("--xla_backend_optimization_level=0", "--xla_cpu_use_fusion_emitters=false")
# Where the test session leaves the accepted flags for its workers and the commands they start,
# so that the installed XLA is asked once a session.
ACCEPTED_FLAGS_VARIABLE = "JCAPS_TEST_XLA_FLAGS"

# The exceptions: the recurrent encoders of CCCapsNet (a BiGRU) and of the binary-relevance
# baseline (SGM's BiLSTM) run so much slower at -O0 that -O2's longer compile pays, so the tests
# that train those `:smoke` configs compile their programs at -O2 (`compiled_at_o2` below). Their
# bfloat16 trainings (tests/train/test_mixed_precision.py, the float32 run each compares with
# included): CCCapsNet 77 to 84 s at -O0 against 53 s at -O2 (`-n 2`), binary relevance 15.7 s
# against 13.5 s (alone). The other models trained as fast or faster at -O0 (icapsnet_long in
# bfloat16: 13 s against 19 s; SGM 29 s either way).
O2_COMPILED_CONFIGS = frozenset({"cccapsnet_ag_news.py", "br_reuters.py"})

# The devices of the test processes: two, so that every in-process training runs the sharded
# path (batches split over a mesh, gradients reduced across it). Eight made the `:smoke` trainings
# a quarter slower on two cores (the bfloat16 ones of tests/train/test_mixed_precision.py: 168 s
# against 123 s, `-n 2`); the eight-device case is a command's (tests/train/test_multiprocess.py).
TEST_DEVICES = 2


def _xla_accepts(flags: str) -> bool:
    """Whether a CPU backend starts with XLA_FLAGS=`flags`, in a process of its own."""
    probe = [sys.executable, "-c", "import jax; jax.devices()"]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": flags}
    return subprocess.run(probe, env=env, capture_output=True, check=False).returncode == 0


def suite_xla_flags() -> str:
    """Those of `SUITE_XLA_FLAGS` the installed XLA accepts, asked once a session."""
    accepted = os.environ.get(ACCEPTED_FLAGS_VARIABLE)
    if accepted is None:
        every = " ".join(SUITE_XLA_FLAGS)
        accepted = every if _xla_accepts(every) else " ".join(f for f in SUITE_XLA_FLAGS if _xla_accepts(f))
        os.environ[ACCEPTED_FLAGS_VARIABLE] = accepted
    return accepted


def xla_flags(devices: int) -> str:
    """XLA_FLAGS for `devices` CPU devices with the suite's settings."""
    return f"--xla_force_host_platform_device_count={devices} {suite_xla_flags()}".strip()


def command_env(devices: int = 1, **variables: str) -> dict[str, str]:
    """The environment of a command a test starts: the test's, on `devices` CPU devices with the
    suite's XLA settings, and `variables`."""
    return {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": xla_flags(devices), **variables}


@contextlib.contextmanager
def compiled_at_o2(config_name: str):
    """Within the block, every function jitted for configs/`config_name` compiles at XLA's -O2
    when the config is one of `O2_COMPILED_CONFIGS`, at the suite's -O0 otherwise: XLA_FLAGS hold
    for the whole process, and a program's own compiler options override them."""
    if config_name not in O2_COMPILED_CONFIGS:
        yield
        return
    import jax
    import pytest

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(jax, "jit", functools.partial(jax.jit, compiler_options={"xla_backend_optimization_level": 2}))
        yield


# A record of a library's Python logging as absl prints it (`I1207 02:46:09.056723 1397... file.py:1848] ...`).
_ABSL_RECORD = re.compile(r"^[DIWEF]\d{4} \d\d:\d\d:\d\d")


def library_log_lines(stderr: str) -> list[str]:
    """The lines of a command's stderr that a library logged (absl's record format, matplotlib)."""
    return [line for line in stderr.splitlines() if _ABSL_RECORD.match(line) or "matplotlib" in line]
