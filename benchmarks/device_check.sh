#!/usr/bin/env bash
# The accelerator check: everything jcaps has to show on a GPU, in one run of under 10 minutes.
#
#     bash benchmarks/device_check.sh --prepare [AG_NEWS_DIR]   # here, with PyPI: fills .device/
#     bash benchmarks/device_check.sh OUT                       # on the GPU machine, .device/ beside
#     bash benchmarks/device_check.sh OUT --dry-run             # on a CPU: every step, smallest size
#
# --prepare downloads the wheels of benchmarks/device_requirements.txt (what the GPU image lacks;
# Python 3.12, x86-64) into .device/wheels, copies AG News in the format of Zhang et al.
# (train.csv, test.csv, classes.txt; default ../shared/data/ag_news) to .device/data/ag_news and
# records the commit in .device/commit: the GPU machine reaches no package index, and the
# working tree is all that travels (.device/ is git-ignored, so it travels only when carried).
#
# The check installs the wheels (into /tmp/jcaps_site, ahead of the image's packages on
# PYTHONPATH; jcaps itself runs from the checkout) and runs, each step under its own time limit
# (a step that fails or runs out is recorded and the next one runs):
#   environment.json       device, driver, JAX / jaxlib / CUDA versions, commit, date
#   tests.xml              the GPU-marked tests, and every op and model in bfloat16 against
#                          float32, on the GPU (JUnit XML)
#   rnn_impl.json          SGM's encoder with the scan and with cuDNN: values and times
#   run_all_float32.json   the speed suite (`benchmarks.run_all --quick --no-scaling`), float32
#   run_all_bfloat16.json  the same with bfloat16 activations, against a bfloat16 matmul ceiling
#   ag_news.json           iCapsNets Short trained on AG News by its shipped config: the test
#                          split's metrics (`jcaps.evaluate`), the training's wall time, and its
#                          loop efficiency: the run's examples/s over its compiled step's
#                          (`benchmarks.input_pipeline`)
#   summary.json           the figures of all of the above and each step's exit status and time
#   log.txt                everything the steps printed
# into OUT: eight files, flat, as the device tool brings back.
#
# --dry-run runs every step on the CPU at its smallest: the GPU-marked tests are found and skipped,
# the benchmarks run with --tiny, the training is the config's :smoke run on generated data; it
# checks the plumbing and the files (tests/benchmarks/test_device_check.py), so the device's
# minutes go to measuring. DEVICE_CHECK_MODELS (a comma list of run_all's models) narrows the
# speed suite, PYTHON names the interpreter (default python3).
set -uo pipefail
usage="usage: bash benchmarks/device_check.sh --prepare [AG_NEWS_DIR] | OUT [--dry-run]"
cd "$(dirname "$0")/.."
ROOT=$PWD
DEVICE=$ROOT/.device
PY=${PYTHON:-python3}

if [[ ${1:-} == --prepare ]]; then
  set -e
  data=${2:-../shared/data/ag_news}
  for name in train.csv test.csv classes.txt; do
    [[ -f $data/$name ]] || { echo "device_check.sh --prepare: $data/$name: no such file" >&2; exit 2; }
  done
  rm -rf "$DEVICE"
  mkdir -p "$DEVICE/wheels" "$DEVICE/data"
  platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
             --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
  grep -v '^#' benchmarks/device_requirements.txt | while read -r requirement; do
    [[ -n $requirement ]] || continue
    # A pure-Python package published as source only (promise) is built into a wheel here.
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      "${platforms[@]}" -d "$DEVICE/wheels" "$requirement" 2>/dev/null \
      || "$PY" -m pip wheel -q --no-deps -w "$DEVICE/wheels" "$requirement"
  done
  cp -r "$data" "$DEVICE/data/ag_news"
  commit=$(git rev-parse --short HEAD)
  git diff --quiet HEAD -- . ':!benchmarks/results' ':!studies/*/results' || commit="$commit with uncommitted changes"
  echo "$commit" > "$DEVICE/commit"
  echo "prepared $(du -sh "$DEVICE" | cut -f1) in .device/ at $commit: carry .device to the device machine"
  exit 0
fi

OUT=${1:?$usage}
DRY_RUN=false
case ${2:-} in
  "") ;;
  --dry-run) DRY_RUN=true ;;
  *) echo "$usage" >&2; exit 2 ;;
esac
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d)
exec > >(tee "$OUT/log.txt") 2>&1

if [[ -d $DEVICE/wheels ]] && ! $DRY_RUN; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/jcaps_site \
    "$DEVICE"/wheels/*.whl || { echo "device_check.sh: the wheels in .device/wheels did not install" >&2; exit 2; }
  export PYTHONPATH=/tmp/jcaps_site:$ROOT
else
  export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1
# The steps' limits add up to 560 s, so that the whole check ends inside one 10-minute call; a
# CPU doing the dry run's compiles gets three times as long. Sized by the H200's run
# (benchmarks/results/device_h200/summary.json): there the tests took about 125 s in 4 processes,
# the float32 suite about 115 s, the training 56 s (the loop efficiency adds its compiled step's
# timing on 50 batches).
LIMIT_SCALE=1
if $DRY_RUN; then
  LIMIT_SCALE=3
  export JAX_PLATFORMS=cpu
  tiny=(--tiny)
  training_data=()
else
  export JAX_PLATFORMS=cuda
  tiny=()
  training_data=(--data_root "$DEVICE/data")
fi
models=()
[[ -n ${DEVICE_CHECK_MODELS:-} ]] && models=(--models "$DEVICE_CHECK_MODELS")

# step NAME LIMIT_S COMMAND...: runs COMMAND under LIMIT_S x LIMIT_SCALE seconds (its standard
# output into STDOUT_FILE where that is set), records its exit status and milliseconds in
# WORK/steps.tsv, and goes on whatever it returned.
step() {
  local name=$1 limit=$2 start status
  shift 2
  limit=$(( limit * LIMIT_SCALE ))
  echo "== $name (at most $limit s): $*"
  start=$(date +%s%N)
  if [[ -n ${STDOUT_FILE:-} ]]; then
    timeout "$limit" "$@" > "$STDOUT_FILE"
  else
    timeout "$limit" "$@"
  fi
  status=$?
  printf '%s\t%s\t%s\n' "$name" "$status" "$(( ($(date +%s%N) - start) / 1000000 ))" >> "$WORK/steps.tsv"
  echo "== $name: exit $status"
}

step environment 20 "$PY" -m benchmarks.device_summary environment "$OUT/environment.json" \
  --commit-file "$DEVICE/commit" --dry-run "$DRY_RUN"
# Nothing else is worth running where the machine is not what the check is for.
[[ -s $OUT/environment.json ]] || { echo "device_check.sh: no environment, no check" >&2; exit 2; }
if $DRY_RUN; then
  step tests 120 "$PY" -m pytest -q -p no:cacheprovider tests/test_gpu.py --junitxml="$OUT/tests.xml"
else
  # Eight test processes share the GPU (their time goes to compiling, on the CPU): each allocates
  # what it uses instead of most of the memory.
  XLA_PYTHON_CLIENT_PREALLOCATE=false step tests 140 "$PY" -m pytest -q -p no:cacheprovider -n 8 tests/test_gpu.py \
    tests/ops/test_mixed_precision.py tests/train/test_mixed_precision.py -k "not training_keeps" \
    --junitxml="$OUT/tests.xml"
fi
step rnn_impl 40 "$PY" -m benchmarks.rnn_impl_speed --out "$WORK/rnn_impl" "${tiny[@]}"
cp "$WORK/rnn_impl/results.json" "$OUT/rnn_impl.json" 2>/dev/null
for dtype in float32 bfloat16; do
  suite=(--quick --no-scaling)
  $DRY_RUN && suite=(--tiny)
  step "run_all_$dtype" 120 "$PY" -m benchmarks.run_all "${suite[@]}" --dtype "$dtype" "${models[@]}" \
    --out "$WORK/run_all_$dtype"
  cp "$WORK/run_all_$dtype/results.json" "$OUT/run_all_$dtype.json" 2>/dev/null
done
step ag_news_training 100 "$PY" -m benchmarks.input_pipeline --configs "" --loop_configs icapsnet_short_ag_news \
  --loop_workdir "$WORK/ag_news" --out "$WORK/loop" "${training_data[@]}" "${tiny[@]}"
STDOUT_FILE=$WORK/ag_news_test.json step ag_news_evaluation 20 "$PY" -m jcaps.evaluate --workdir "$WORK/ag_news" \
  --split test
"$PY" -m benchmarks.device_summary summary "$OUT" --work "$WORK"
