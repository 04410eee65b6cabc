"""The flax.linen modules of the five papers' models, one file each; every one is called as
`model(*inputs, train=...)` and returns a dict with `scores` [B, J] and its explanations.
Which module a config names, and how its outputs become a loss and probabilities, is the
training layer's model table (`jcaps.train.families`)."""
