"""Binary relevance (one sigmoid per label over SGM's encoder, max-pooled) on Reuters-21578
ModApte: the plain multi-label baseline of docs/models.md §5, same data keys as `sgm_reuters.py`.

    python train.py --config configs/br_reuters.py --workdir /tmp/br \
        --config.data.dir=PATH/reuters21578
    python -m jcaps.predict --workdir /tmp/br --text "..." [--threshold 0.3] [--top_k 5]
    python train.py --config configs/br_reuters.py:smoke --workdir /tmp/br_smoke

`PATH/reuters21578`: the Reuters-21578 files described in sgm_reuters.py.

A label is predicted when its probability reaches `model.threshold` (0.5).

Measured on 2 CPU cores (one core, the other busy): 26 min 55 s, test micro-F1 0.833, hamming
loss 0.0042.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sgm_reuters import reuters_data, smoke


def get_config(arg: str = ""):
    from jcaps.train.config import base_config

    if arg not in ("", "smoke"):
        raise ValueError(f"unknown config argument {arg!r}; expected '' or 'smoke'")
    config = base_config()
    model = config.model
    model.name = "br"
    model.embedding_dim = 128
    model.encoder_dim = 128
    model.num_layers = 1
    model.dropout_rate = 0.3
    model.pool = "max"
    model.threshold = 0.5  # [ref]

    reuters_data(config)

    train = config.train
    train.batch_size = 64
    train.num_epochs = 15
    train.learning_rate = 3e-3  # as sgm_reuters.py
    train.schedule = "warmup_cosine"
    train.warmup_fraction = 0.05
    train.grad_clip_norm = 10.0
    train.select_metric = "micro_f1"
    train.eval_every_steps = 0
    train.log_every_steps = 50

    if arg == "smoke":
        smoke(config)
        model.embedding_dim = model.encoder_dim = 16
    return config
