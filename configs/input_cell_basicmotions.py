"""Input-cell attention LSTM on UEA BasicMotions (6 accelerometer/gyroscope channels x 100 steps,
4 activities, 40 train / 40 test series): docs/input-cell-lstm.md#defaults-ref, the paper's defaults.

    python train.py --config configs/input_cell_basicmotions.py --workdir /tmp/bm \
        --config.data.dir=PATH/BasicMotions
    python -m jcaps.interpret --workdir /tmp/bm --out /tmp/bm/saliency   # saliency figures

`data.dir` holds `BasicMotions_TRAIN.ts` and `BasicMotions_TEST.ts` (UEA/UCR archive,
timeseriesclassification.com). Config arguments: a variant (`lstm`, `bilstm`, ...) and/or
`smoke` (a tiny generated problem: offline, seconds). The recipe, shared with the other
recorded-series configs, is `jcaps.train.config_blocks.input_cell_lstm_config`.
"""

from jcaps.train.config_blocks import input_cell_lstm_config


def get_config(arg: str = ""):
    # 40 training series: batches of 20 [decision] (the reference's 50 exceed the split).
    return input_cell_lstm_config(arg, data_format="ts", num_epochs=400, validation_fraction=0.0, batch_size=20)
