"""SGM (Yang et al., COLING 2018; docs/models.md §5) on Debian package tags: the English
descriptions of Debian 12 packages with their debtags (54 tags, 2.87 a package). Without the
global embedding; `sgm_ge_debian_tags.py` is the same model with it, `br_debian_tags.py` the
binary-relevance baseline.

Local files (not in the TFDS catalogue): `train.jsonl` and `test.jsonl`, one
`{"text": ..., "labels": [tag, ...], "source": source package}` object a line, the test split
separated from train by source package:
    python train.py --config configs/sgm_debian_tags.py --workdir /tmp/sgm_tags \\
        --config.data.dir=PATH/debian_tags
    python -m jcaps.predict --workdir /tmp/sgm_tags --text "Python bindings for the GTK toolkit"
Offline smoke run on generated multi-label data (seconds):
    python train.py --config configs/sgm_debian_tags.py:smoke --workdir /tmp/sgm_tags_smoke

Validation is carved by source package (`data.group_key`, `jcaps.train.config_blocks.
debian_tags_config`): sibling packages share near-identical descriptions.
"""

from jcaps.train.config_blocks import debian_tags_config, parse_argument


def get_config(arg: str = ""):
    argument = parse_argument(arg)
    config = debian_tags_config("sgm", num_epochs=3, smoke=argument.smoke)
    model = config.model
    model.decoder_dim = 256
    model.label_embedding_dim = 0  # 0: embedding_dim
    model.attention_dim = 0  # 0: decoder_dim
    model.global_embedding = False  # sgm_ge_debian_tags.py: True
    model.decoding = "beam"  # [ref] beam 5
    model.beam_size = 5
    model.max_steps = 30  # [ref]; at most 17 tags a package in train
    model.length_penalty = 0.0
    if argument.smoke:
        model.decoder_dim = 16
        model.beam_size = 2
        model.max_steps = 6
    return config
