"""The values each enumerated `data.*` key takes, in one place: the readers that act on them and
`jcaps.train.config.validate`, which checks a config before any data is read, share them.

This module imports nothing, so the config module can use it without loading TFDS or JAX.
"""

# data.source: 'auto' (local files when data.dir is set, else the TFDS catalogue), or forced.
SOURCES = ("auto", "tfds", "local", "synthetic")
# data.format of text data (jcaps.data.builders) and of numeric sequences (jcaps.data.series).
TEXT_FORMATS = ("zhang_csv", "jsonl", "text_labels")
SERIES_FORMATS = ("ts", "idx", "boxes")
# data.label_order: the order in which a multi-label example's labels are generated.
LABEL_ORDERS = ("frequency", "alphabetical", "given")
# data.normalize (series only): the standardisation fitted on the training part.
NORMALIZATIONS = ("time_feature", "feature", "none")
