"""The token ids the text models read: [..., L] int word (or character) ids, PAD_ID wherever
there is no token (after each sequence's end).

PAD_ID is the data layer's `jcaps.data.vocab.PAD`: the models do not import the data layer, and
a test checks that the two agree.
"""

import jax

PAD_ID = 0


def padding_mask(tokens: jax.Array) -> jax.Array:
    """tokens [..., L] int -> [..., L] bool, True at real tokens."""
    return tokens != PAD_ID
