"""Input-cell attention LSTM on MNIST read as sequences: 28 steps (image rows) x 28 features
(pixels of a row), 10 classes; the paper's qualitative saliency example (docs/input-cell-lstm.md#saliency).

    python train.py --config configs/input_cell_mnist.py --workdir /tmp/mnist \
        --config.data.dir=DIR_WITH_IDX_FILES
    python -m jcaps.interpret --workdir /tmp/mnist --out /tmp/mnist/saliency

`data.dir` holds the idx files (`train-images-idx3-ubyte.gz`, `train-labels-idx1-ubyte.gz`,
`t10k-images-idx3-ubyte.gz`, `t10k-labels-idx1-ubyte.gz`, from yann.lecun.com or any mirror).
With the 10,000 test images only, train on them and hold out a test part:
    --config.data.train_file=t10k --config.data.test_fraction=0.2
Config arguments as in input_cell_basicmotions.py.
"""

from jcaps.train.config_blocks import input_cell_lstm_config


def get_config(arg: str = ""):
    return input_cell_lstm_config(arg, data_format="idx", num_epochs=10, validation_fraction=0.05)
