"""Input-cell attention LSTM (Ismail et al. 2019) on the paper's synthetic box data:
docs/input-cell-lstm.md#synthetic-box-data-sec-5-ref.

Config argument: `BOX[,VARIANT][,smoke]`, e.g. `:earlier,input_cell` or `:middle,lstm`.
    BOX      earlier | middle | latter | mixed | three_earlier | three_middle | moving
    VARIANT  input_cell (default) | lstm | lstm_maxpool | lstm_meanpool | lstm_self_attention | bilstm
    smoke    20 x 20 maps, 128 training series, a few steps: seconds, for tests

    python train.py --config configs/input_cell_boxes.py:earlier,input_cell --workdir /tmp/box

The data is generated (seeded by `data.generator_seed`), so the config runs offline. The
saliency benchmark `studies/saliency_boxes/saliency_boxes.py` trains every (box, variant) pair with this
config and scores the saliency maps against the boxes.
"""

from typing import get_args

from jcaps.data.boxes import BOX_NAMES
from jcaps.models.choices import InputCellLSTMVariant
from jcaps.train.config import series_config
from jcaps.train.config_blocks import parse_argument


def get_config(arg: str = "earlier"):
    argument = parse_argument(arg, BOX_NAMES, get_args(InputCellLSTMVariant))
    config = series_config()
    config.model.name = "input_cell_lstm"
    config.model.variant = argument.choice(get_args(InputCellLSTMVariant), "input_cell")
    config.model.hidden_dim = 5  # [ref]
    config.model.num_hops = 20  # [ref] r
    config.model.attention_dim = 50  # [ref] d_a
    config.model.dropout_rate = 0.1  # [ref]
    config.model.rnn_impl = "scan"  # or 'cudnn' on a GPU (docs/training.md, "Configs")

    data = config.data
    data.format = "boxes"
    data.box = argument.choice(BOX_NAMES, "earlier")
    data.normalize = "time_feature"  # [ref]
    data.validation_fraction = 0.1

    train = config.train
    train.batch_size = 50  # [ref]
    train.learning_rate = 1e-3  # [ref] Adam
    train.grad_clip_norm = 0.0
    train.num_epochs = 40  # [decision] 1,000 series: 18 steps an epoch; validation picks the best
    train.log_every_steps = 50

    if argument.smoke:
        data.box_time_steps = data.box_features = 20
        data.box_train_size, data.box_test_size = 128, 64
        train.batch_size = 16
        train.num_epochs = 3
        train.learning_rate = 1e-2
        train.log_every_steps = 5
    return config
