"""The models' padding id is the data layer's (the models cannot import it)."""

import numpy as np

from jcaps.data import vocab
from jcaps.models.token_ids import PAD_ID, padding_mask


def test_pad_id_is_the_vocabularys():
    assert PAD_ID == vocab.PAD
    built = vocab.Vocabulary.build([["a", "b"]])
    np.testing.assert_array_equal(padding_mask(built.encode([vocab.PAD_TOKEN, "a"])), [False, True])
