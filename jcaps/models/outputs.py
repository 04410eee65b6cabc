"""`ModelOutput`, what every model's call returns.

One structure for all eight models, so that the loss, the metrics, prediction and the
explanations read named fields and never have to guess a model's kind from the keys or ranks of
what it returned. It is a `flax.struct.dataclass`, a pytree: it passes through `jax.jit`,
`jax.vmap`, `jax.lax.scan` and `jax.value_and_grad(..., has_aux=True)` like the arrays it holds.
A field a model does not compute is None (no leaves).
"""

from __future__ import annotations

import jax
from flax import struct


@struct.dataclass
class ModelOutput:
    """A model's outputs on a batch of B examples, J classes (or labels).

    Every model sets `scores`; the text models also `embeddings`; the other fields are the
    intermediates of the model that computes them, None otherwise.

    Attributes:
        scores: [B, J] one score per class, higher = more likely; what they are depends on the
            model (its family in `jcaps.train.families` turns them into a loss and probabilities):
              logits of a softmax: fastText, input-cell LSTM, dilated FCN, CCCapsNet with the
                linear classifier;
              class-capsule lengths in [0, 1): iCapsNets Short / Long, CCCapsNet with the
                capsule classifier;
              logits of J independent sigmoids: binary relevance;
              SGM: each label's log-probability at the teacher-forced step that gives it the
                most, over the steps up to EOS (`step_logits`); SGM's own decision is the label
                sequence it generates (`SGM.predict`), these rank the labels of one pass.
        embeddings: [B, ..., D] the vectors a text model read at its input positions (words,
            characters, or CCCapsNet's composed CWC / CC vectors; iCapsNets Long [B, M, N, D]):
            what the attribution methods differentiate and perturb. None for the input-cell
            LSTM, whose positions' vectors are the series itself, and for iCapsNets called with
            `regions`.
        features: [B, H] CCCapsNet: the pooled BiGRU output.
        primary_capsules: [B, I, d_p] the capsules routed into the class capsules: iCapsNets'
            primary capsules (squashed when `squash_primary`), CCCapsNet's feature capsules
            (`features` cut into H / capsule_dim capsules).
        class_capsules: [B, J, d_c] the class capsules, whose lengths are `scores`.
        coupling: [B, I, J] the routing's coupling coefficients (each row sums to 1; less with
            the orphan class of dynamic routing).
        capsule_selection: [B, I, J] iCapsNets: how much each primary capsule counts for each
            class in the local interpretation (the coupling, or the routing contributions; the
            model's `capsule_selection`).
        word_attention: iCapsNets: each head's attention over the words, alpha, [B, I, N]
            (Short) or [B, I, M, N] (Long, per sentence); zero at PADs.
        sentence_attention: [B, I, M] iCapsNets Long: each head's attention over the
            sentences, rho; zero at empty sentences.
        position_logits: [B, L, J] dilated FCN: the class logits at each position, whose
            maximum over the real positions is `scores`.
        elementwise_attention: [B, L, F] dilated FCN with simplified / local attention: the
            weight on each position's channels (a softmax over the channels, or over the
            positions with `attention_axis="time"`).
        head_attention: [B, H, L, L] dilated FCN with dot-product attention: each head's
            weights, query position by key position.
        input_attention_logits: [B, T, r] input-cell LSTM: the logits S of its r attention
            hops over the inputs, before the causal softmax that gives every A_t.
        hop_attention: [B, r, T] input-cell LSTM's self-attention baseline: its r hops'
            weights over the time steps.
        step_logits: [B, S, V] SGM: the masked logits of each teacher-forced decoder step over
            its V = num_special + J tokens (the loss scores them).
        source_attention: [B, S, L] SGM: each decoder step's attention over the source words.
    """

    scores: jax.Array
    embeddings: jax.Array | None = None
    features: jax.Array | None = None
    primary_capsules: jax.Array | None = None
    class_capsules: jax.Array | None = None
    coupling: jax.Array | None = None
    capsule_selection: jax.Array | None = None
    word_attention: jax.Array | None = None
    sentence_attention: jax.Array | None = None
    position_logits: jax.Array | None = None
    elementwise_attention: jax.Array | None = None
    head_attention: jax.Array | None = None
    input_attention_logits: jax.Array | None = None
    hop_attention: jax.Array | None = None
    step_logits: jax.Array | None = None
    source_attention: jax.Array | None = None


@struct.dataclass
class DecodedLabels:
    """The label sets SGM generates (`SGM.predict`, greedy or beam search) for B examples.

    Attributes:
        labels: [B, J] float32 multi-hot of the labels before the first EOS: the prediction.
        sequence: [B, max_steps] int32 the decoded ids (num_special + label index, then EOS,
            then PAD).
        length: [B] int32 the number of labels in each sequence.
        log_prob: [B] float32 each sequence's log-probability.
    """

    labels: jax.Array
    sequence: jax.Array
    length: jax.Array
    log_prob: jax.Array
