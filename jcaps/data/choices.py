"""The values each enumerated `data.*` key takes, in one place: the readers that act on them and
`jcaps.train.config.validate`, which checks a config before any data is read, share them. Each
is a `Literal` type; `jcaps.choices.check_choice` refuses any other value.

This module imports nothing of jcaps, so the config module can use it without loading TFDS or JAX.
"""

from typing import Literal

# data.source: 'auto' (local files when data.dir is set, else the TFDS catalogue), or forced.
Source = Literal["auto", "tfds", "local", "synthetic"]
# data.format of text data (jcaps.data.builders) and of numeric sequences (jcaps.data.series).
TextFormat = Literal["zhang_csv", "jsonl", "text_labels"]
SeriesFormat = Literal["ts", "idx", "boxes"]
# data.label_order: the order in which a multi-label example's labels are generated.
LabelOrder = Literal["frequency", "alphabetical", "given"]
# data.normalize (series only): the standardisation fitted on the training part.
Normalization = Literal["time_feature", "feature", "none"]
