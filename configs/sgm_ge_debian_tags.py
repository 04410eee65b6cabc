"""SGM with the global embedding (Yang et al., COLING 2018, Sec. 2.3) on Debian package tags:
the decoder's input is a gate between the embedding of the previous label and the embeddings of
all labels weighted by the previous output distribution, so one early mistake does not derail
the rest. Everything else as in `sgm_debian_tags.py`.

    python train.py --config configs/sgm_ge_debian_tags.py --workdir /tmp/sgm_ge_tags \\
        --config.data.dir=PATH/debian_tags
    python train.py --config configs/sgm_ge_debian_tags.py:smoke --workdir /tmp/sgm_ge_tags_smoke

`PATH/debian_tags`: the files described in sgm_debian_tags.py.

Data-dependent choices (docs/training.md, "Adapting a config to new data"): no class weights
(multi-label); 6 epochs with evaluation once an epoch, for a split of this size (fewer epochs on
a larger one).
"""

import os

from jcaps.train.config import load


def get_config(arg: str = ""):
    config = load(os.path.join(os.path.dirname(__file__), f"sgm_debian_tags.py:{arg}"))
    config.model.global_embedding = True
    return config
