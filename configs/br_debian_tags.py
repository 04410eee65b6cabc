"""Binary relevance (one sigmoid per label over SGM's encoder, max-pooled; docs/sgm.md#equations) on
Debian package tags, same data keys as `sgm_debian_tags.py`.

    python train.py --config configs/br_debian_tags.py --workdir /tmp/br_tags \\
        --config.data.dir=PATH/debian_tags
    python -m jcaps.predict --workdir /tmp/br_tags --text "..." [--threshold 0.3] [--top_k 5]
    python train.py --config configs/br_debian_tags.py:smoke --workdir /tmp/br_tags_smoke

`PATH/debian_tags`: the files described in sgm_debian_tags.py.

[decision] `model.threshold = 0.4`, chosen on validation (seed 0, 10 epochs; `python -m
jcaps.evaluate --split validation --config.model.threshold=T`): micro-F1 0.678 / 0.683 / 0.685 /
0.686 / 0.684 / 0.681 at T = 0.25 / 0.3 / 0.35 / 0.4 / 0.45 / 0.5, with 3.10 down to 2.12
labels a package (2.78 true). The Reuters setting, 0.5, under-generates here.

Data-dependent choices (docs/training.md, "Adapting a config to new data"): no class weights
(multi-label); 10 epochs with evaluation once an epoch, for a split of this size (fewer epochs
on a larger one).
"""

from jcaps.train.config_blocks import debian_tags_config, parse_argument


def get_config(arg: str = ""):
    config = debian_tags_config("br", num_epochs=10, smoke=parse_argument(arg).smoke)
    config.model.pool = "max"
    config.model.threshold = 0.4  # [decision] the docstring; 0.5 [ref]
    return config
