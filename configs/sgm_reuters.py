"""SGM (Yang et al., COLING 2018): multi-label classification as label-sequence generation, on
Reuters-21578 ModApte (90 topics, 1.24 labels a document): docs/sgm.md#equations. Without the global
embedding; `sgm_ge_reuters.py` is the same model with it, `br_reuters.py` the binary-relevance
baseline.

Local files (jsonl with `labels`: modapte_train.jsonl / modapte_test.jsonl):
    python train.py --config configs/sgm_reuters.py --workdir /tmp/sgm \
        --config.data.dir=PATH/reuters21578
    python -m jcaps.predict --workdir /tmp/sgm --text "Oil prices rose as OPEC cut output"
Offline smoke run on generated multi-label data (seconds):
    python train.py --config configs/sgm_reuters.py:smoke --workdir /tmp/sgm_smoke

`PATH/reuters21578` holds the ModApte split of Reuters-21578 (from the UCI Machine Learning
Repository, or NLTK's `reuters` corpus, which is that split) as `modapte_train.jsonl` and
`modapte_test.jsonl`: one `{"text": ..., "labels": [topic, ...]}` object a line.

Data: 47 training and 14 test documents of ModApte have no text at all (only a title that the
files leave out); `data.drop_bad_rows` leaves them out and the run prints and records how
many (WORKDIR/dropped_rows.json). Labels are generated most frequent first (`data.label_order`).

[decision] Sizes are smaller than the paper's defaults (embedding 512, encoder 256, decoder
512, 2 layers): 7,770 documents do not need them and 2 CPU cores could not train them in an
hour. Decoding is beam search (beam 5); validation micro-F1 selects the model. The data,
encoder and training keys that `br_reuters.py` shares are `jcaps.train.config_blocks.reuters_config`.

[decision] 20 epochs: chosen on validation micro-F1 among more epochs, a lower learning rate,
stories of 256 tokens and a 256-wide encoder (`studies/tuning/results/sgm_reuters/results.json`:
0.901 against 0.884 with the 10 epochs it had).

Measured (docs/sgm.md, `studies/tuning/results/sgm_reuters/results.json`, each run on one core
of the 2-core machine beside another): test micro-F1 0.859 / 0.853 / 0.859 on seeds 0 / 1 / 2
(mean 0.857; with 10 epochs 0.845 / 0.847 / 0.843), 11 to 15 minutes a run; TF-IDF + one-vs-rest
linear SVM, its n-gram range and C chosen on validation, reaches 0.864, above SGM.

Data-dependent choices (docs/training.md, "Adapting a config to new data"): no class weights
(multi-label); 20 epochs with evaluation once an epoch, for a split of this size (fewer epochs
on a larger one).
"""

from jcaps.train.config_blocks import parse_argument, reuters_config, sgm_decoder


def get_config(arg: str = ""):
    argument = parse_argument(arg)
    config = reuters_config("sgm", num_epochs=20, smoke=argument.smoke)
    sgm_decoder(config, length_penalty=0.0, smoke=argument.smoke)
    return config
