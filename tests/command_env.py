"""The XLA settings of the test session and the environment of the commands its tests start."""

from __future__ import annotations

import os
import re
import subprocess
import sys

# The suite compiles thousands of small programs, most of them once, so it trades run time for
# compile time: XLA:CPU's classic loop emitters instead of its MLIR fusion emitters, and LLVM at
# -O0 (benchmarks/suite_xla_settings.py measures each against the alternatives). XLA aborts a
# process whose XLA_FLAGS name a flag it does not have, and the classic emitters' flag is gone
# from newer XLAs (jaxlib 0.12): the suite keeps each of these flags only where the installed XLA
# accepts it (`suite_xla_flags`).
SUITE_XLA_FLAGS = ("--xla_backend_optimization_level=0", "--xla_cpu_use_fusion_emitters=false")
# Where the test session leaves the accepted flags for its workers and the commands they start,
# so that the installed XLA is asked once a session.
ACCEPTED_FLAGS_VARIABLE = "JCAPS_TEST_XLA_FLAGS"

# The exceptions: the recurrent encoders of CCCapsNet (a BiGRU) and of the binary-relevance
# baseline (SGM's BiLSTM) run so much slower at -O0 that -O2's longer compile pays, so the tests
# that train those `:smoke` configs compile their train and eval steps at -O2
# (`training_compiler_options`; benchmarks/suite_xla_settings.py times each config both ways).
O2_COMPILED_CONFIGS = frozenset({"cccapsnet_ag_news.py", "br_reuters.py"})

# The devices of the test processes: two, so that every in-process training runs the sharded
# path (batches split over a mesh, gradients reduced across it); eight made the `:smoke` trainings
# slower on two cores, and the eight-device case is a command's (tests/train/test_multiprocess.py).
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


def training_compiler_options(config_name: str) -> dict | None:
    """The XLA compiler options of the train and eval steps of configs/`config_name`
    (`loop.train_and_evaluate(..., compiler_options=...)`): -O2 for `O2_COMPILED_CONFIGS`, None
    (the suite's XLA_FLAGS) for the others."""
    return {"xla_backend_optimization_level": 2} if config_name in O2_COMPILED_CONFIGS else None


# A record of a library's Python logging as absl prints it (`I1207 02:46:09.056723 1397... file.py:1848] ...`).
_ABSL_RECORD = re.compile(r"^[DIWEF]\d{4} \d\d:\d\d:\d\d")


def library_log_lines(stderr: str) -> list[str]:
    """The lines of a command's stderr that a library logged (absl's record format, matplotlib)."""
    return [line for line in stderr.splitlines() if _ABSL_RECORD.match(line) or "matplotlib" in line]
