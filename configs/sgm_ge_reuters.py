"""SGM with the global embedding (Yang et al., COLING 2018, Sec. 2.3) on Reuters-21578 ModApte:
the decoder's input is a gate between the embedding of the previous label and the embeddings
of all labels weighted by the previous output distribution, so one early mistake does not
derail the rest. Everything else as in `sgm_reuters.py`.

    python train.py --config configs/sgm_ge_reuters.py --workdir /tmp/sgm_ge \
        --config.data.dir=PATH/reuters21578
    python train.py --config configs/sgm_ge_reuters.py:smoke --workdir /tmp/sgm_ge_smoke

`PATH/reuters21578`: the Reuters-21578 files described in sgm_reuters.py.

Measured (docs/sgm.md; `studies/training/results/reuters/results.json`): test micro-F1 0.847 /
0.849 / 0.829 on seeds 0 / 1 / 2 (mean 0.842; SGM without it: 0.845), 17 to 19 minutes a run on
one core of the 2-core machine beside another run.

Data-dependent choices (docs/training.md, "Adapting a config to new data"): no class weights
(multi-label); 10 epochs with evaluation once an epoch, for a split of this size (fewer epochs
on a larger one).
"""

import os

from jcaps.train.config import load


def get_config(arg: str = ""):
    config = load(os.path.join(os.path.dirname(__file__), f"sgm_reuters.py:{arg}"))
    config.model.global_embedding = True
    return config
