"""Binary relevance (one sigmoid per label over SGM's encoder, max-pooled) on Reuters-21578
ModApte: the plain multi-label baseline of docs/sgm.md#equations, same data keys as `sgm_reuters.py`.

    python train.py --config configs/br_reuters.py --workdir /tmp/br \
        --config.data.dir=PATH/reuters21578
    python -m jcaps.predict --workdir /tmp/br --text "..." [--threshold 0.3] [--top_k 5]
    python train.py --config configs/br_reuters.py:smoke --workdir /tmp/br_smoke

`PATH/reuters21578`: the Reuters-21578 files described in sgm_reuters.py.

A label is predicted when its probability reaches `model.threshold` (0.5).

Measured (docs/sgm.md; `studies/training/results/reuters/results.json`, on one core of the
2-core machine beside another run): 10 min 46 s, test micro-F1 0.835, hamming loss 0.0042 (seed 0).

Data-dependent choices (docs/training.md, "Adapting a config to new data"): no class weights
(multi-label); 15 epochs with evaluation once an epoch, for a split of this size (fewer epochs
on a larger one).
"""

from jcaps.train.config_blocks import parse_argument, reuters_config


def get_config(arg: str = ""):
    config = reuters_config("br", num_epochs=15, smoke=parse_argument(arg).smoke)
    config.model.pool = "max"
    config.model.threshold = 0.5  # [ref]
    return config
