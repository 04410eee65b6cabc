"""iCapsNets Short (Wang, Hu, Ji 2020) on AG News: docs/icapsnets.md#defaults-and-decisions, except the sizes and
one W_ij per (primary capsule, class) pair in place of the paper's shared W_j (see below).

Local files (zhang_csv: train.csv, test.csv, classes.txt):
    python train.py --config configs/icapsnet_short_ag_news.py --workdir /tmp/ic \
        --config.data.dir=PATH/ag_news
    python -m jcaps.interpret --workdir /tmp/ic --split test --out /tmp/ic/interp
    python -m studies.icapsnet_global.icapsnet_global --workdir /tmp/ic     # why C looks as it does
TFDS catalogue (downloads `ag_news_subset` on first use):
    python train.py --config configs/icapsnet_short_ag_news.py --workdir /tmp/ic
Offline smoke run on generated data:
    python train.py --config configs/icapsnet_short_ag_news.py:smoke --workdir /tmp/ic_smoke

`PATH/ag_news` is a folder of AG News in the format of Zhang et al. (2015): `train.csv` and
`test.csv` with rows `class,title,description` (class 1..4) and `classes.txt`, as in the
`ag_news_csv` archive they released with their datasets.

Expected on the 10,648-row local train set, 2 CPU cores: a minute or a few (by the machine's
load; 0.8 to 1.0 minutes a run, two at a time, in the seed table of docs/icapsnets.md) and test
accuracy about 0.88: 0.876, 0.880 and 0.872 on seeds 0 to 2 with the HTML entities decoded (the
tokenizer since it decodes them; `studies/tuning/results/icapsnet_short_ag_news/results.json`,
where no other setting tried won on validation), 0.872 to 0.886 over seeds 0 to 4
(`studies/icapsnet_global/results/shipped/results.json`). Three settings depart from the
paper's model so that its global interpretation holds on every seed (docs/icapsnets.md, "Which
capsule a class rests on"): ReLU after the region convolution, k-means routing (cosine
agreement) and capsules selected by their contribution to the class capsule. With the paper's
dot-product routing a few "hub" capsules, long for every text, lead every class, and the
selected capsule says little about the class: MI(class; capsule) / H(class) 0.385-0.403 on
seeds 0-2 (`--config.model.conv_activation=none --config.model.routing=dynamic
--config.model.capsule_selection=coupling`), against 0.79-1.00 on seeds 0-4 with the three.
`python -m studies.icapsnet_global.icapsnet_global --seeds 0,1,2,3,4 --out DIR` measures it per
seed. The paper's shared W_j (--config.model.shared_transform=True): one capsule selected for every class.
TF-IDF + linear SVM on the same split, weighted as here and chosen on validation: 0.880
(`studies/training/results/ag_news/results.json`); the shipped config is under it (0.872-0.880).

Data-dependent choices (docs/training.md, "Adapting a config to new data"):
`train.class_weights=balanced`: the train split is skewed and the test set balanced; on data
whose test set is skewed as train is, use `none`; 5 epochs with evaluation every 79 steps, for a
split of this size (fewer epochs on a larger one).
"""

from jcaps.train.config import base_config
from jcaps.train.config_blocks import ag_news_data, parse_argument, text_smoke


def get_config(arg: str = ""):
    argument = parse_argument(arg)
    config = base_config()
    model = config.model
    model.name = "icapsnet_short"
    # [decision] Smaller than the paper's d_e 300, d_w 256, I 32. Chosen when it led at
    # the defaults by 0.875 to 0.859 (paper's routing, older dropout masks); with today's code
    # the defaults without dropout or class weights give 0.880 on seed 0, within this config's
    # seed spread (0.880-0.890): the smaller model stays for its 40 % fewer parameters
    # (studies/training/results/ag_news/results.json).
    model.embed_dim = 200
    model.kernel_size = 3
    model.region_dim = 128
    model.num_capsules = 16
    model.query_dim = 64
    model.primary_dim = 16
    model.class_dim = 16
    model.routing_iterations = 3
    # [decision] CCCapsNet's k-means routing (cosine agreement) instead of the paper's dynamic
    # routing, whose dot-product agreement rewards long capsules (see the docstring).
    model.routing = "kmeans"
    model.conv_activation = "relu"  # [decision] ReLU regions (none before; docs/icapsnets.md compares)
    model.attention_scale = False  # [decision] 1/sqrt(d_q) scaling off
    model.squash_primary = True  # [decision]
    model.routing_similarity = "paper"  # [ref] dynamic: <u_hat, v>; k-means: cosine
    # [decision] interpretation ranks capsules by c_ij <u_hat_ij, s_j> / |s_j| (their parts of
    # |s_j|), not by c_ij alone (the paper): k-means coupling stays near uniform.
    model.capsule_selection = "contribution"
    # One W_ij per (primary capsule, class) pair (the paper's Eq. 7) instead of its shared W_j
    # (Eq. 8). With W_j shared, every capsule is a classifier for every class and the global
    # interpretation picks one capsule for all of them (MI(class; capsule) / H(class) 0.044 at
    # test accuracy 0.875, measured before the present dropout masks; the W_ij figures of that
    # time no longer reproduce). The shared form: --config.model.shared_transform=True.
    model.shared_transform = False
    model.embedding_dropout = 0.5
    model.loss = "margin"  # [decision]; '+'-separated terms among margin, focal, cross_entropy

    ag_news_data(config)
    config.data.max_len = 400
    config.data.min_count = 2

    config.train.batch_size = 64
    config.train.num_epochs = 5
    config.train.learning_rate = 1e-3
    config.train.log_every_steps = 50
    # The local train split is skewed, the test set balanced (see fasttext_ag_news.py).
    config.train.class_weights = "balanced"
    config.train.eval_every_steps = 79  # half an epoch of the local split; the best validation model is kept
    if argument.smoke:
        text_smoke(config)
        config.data.min_count = 1
        config.train.eval_every_steps = 0
        config.model.embedding_dropout = 0.0
        config.model.update(embed_dim=16, region_dim=16, num_capsules=4, query_dim=8, primary_dim=8, class_dim=8)
    return config
