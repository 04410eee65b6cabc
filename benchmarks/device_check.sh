#!/usr/bin/env bash
# The accelerator check: on a machine with a GPU (and jax[cuda] installed beside jcaps), run
# the GPU-marked tests, SGM's encoder with the scan and with cuDNN (model.rnn_impl) and the quick
# benchmark suite; everything goes to OUT.
#
#     bash benchmarks/device_check.sh OUT
#
# Installs nothing. About 6 minutes on one GPU: the tests take one or two, the encoder timing
# one, the suite the rest.
set -euo pipefail
OUT=${1:?usage: benchmarks/device_check.sh OUT}
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
python - <<'PY'
import jax
backend = jax.default_backend()
if backend != "gpu":
    raise SystemExit(f"device_check.sh needs a GPU backend; JAX sees {backend!r} ({jax.devices()})")
print("devices:", jax.devices())
PY
# The test suite pins CPU unless told otherwise; the GPU tests run on the GPU.
JAX_PLATFORMS=cuda timeout 180 python -m pytest -m gpu tests -q 2>&1 | tee "$OUT/gpu_tests.txt"
JAX_PLATFORMS=cuda timeout 120 python -m benchmarks.rnn_impl_speed --out "$OUT/rnn_impl" 2>&1 | tee "$OUT/rnn_impl.txt"
JAX_PLATFORMS=cuda timeout 270 python -m benchmarks.run_all --quick --out "$OUT" 2>&1 | tee "$OUT/run_all.txt"
