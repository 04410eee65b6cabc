"""The flax.linen modules of the five papers' models and their baselines, one file each; every
one is called as `model(*inputs, train=...)` and returns a `ModelOutput` (`jcaps.models.outputs`):
`scores` [B, J], one score per class (logits, capsule lengths, or SGM's per-label
log-probabilities; the field's documentation says which model gives which), the vectors its
explanations start from (`embeddings`) and its own intermediates (attention weights, couplings,
capsules, SGM's per-step logits), None where a model has none. Which module a config names, and
how its scores become a loss and probabilities, is the training layer's model table
(`jcaps.train.families`)."""
