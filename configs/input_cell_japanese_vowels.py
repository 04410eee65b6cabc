"""Input-cell attention LSTM on UEA JapaneseVowels (12 LPC channels, 7 to 29 steps, 9 speakers,
270 train / 370 test series): docs/input-cell-lstm.md#defaults-ref, the paper's defaults.

    python train.py --config configs/input_cell_japanese_vowels.py --workdir /tmp/jv \
        --config.data.dir=PATH/JapaneseVowels
    python -m jcaps.interpret --workdir /tmp/jv --out /tmp/jv/saliency   # saliency figures

`PATH/JapaneseVowels` holds `JapaneseVowels_TRAIN.ts` and `JapaneseVowels_TEST.ts` (UEA/UCR
archive, timeseriesclassification.com).

The series have unequal lengths: they are standardised per feature (not per step) and
batched in length buckets; the LSTM reads each series up to its own last step. Config
arguments as in input_cell_basicmotions.py.
"""

from jcaps.train.config_blocks import input_cell_lstm_config


def get_config(arg: str = ""):
    return input_cell_lstm_config(arg, data_format="ts", num_epochs=150, validation_fraction=0.1)
