"""Per-example classification losses.

Every loss returns one value per example, shape [...] for scores [..., num_classes]; the caller
averages them (with example weights where batches are padded). Labels are integer class ids
[...] or, equivalently, one-hot targets [..., num_classes]. Losses compute in float32 at least:
bfloat16 (or float16) scores are upcast first, so a mixed-precision model's loss and its
gradient carry float32's precision down to the scores.

References:
    Sabour, Frosst, Hinton. Dynamic Routing Between Capsules. NeurIPS 2017 (eq. 4, margin loss).
    Lin, Goyal, Girshick, He, Dollar. Focal Loss for Dense Object Detection. ICCV 2017 (eq. 5).
    Ren, Lu. Compositional Coding Capsule Network with K-Means Routing for Text Classification.
    Pattern Recognition Letters 2022 (margin + focal loss on capsule lengths).
"""

import jax
import jax.numpy as jnp

from jcaps.ops._arrays import at_least_float32


def _one_hot(labels: jax.Array, scores: jax.Array) -> jax.Array:
    """Integer labels [...] become one-hot [..., C]; targets already [..., C] pass through."""
    labels = jnp.asarray(labels)
    if labels.ndim == scores.ndim:
        return labels.astype(scores.dtype)
    return jax.nn.one_hot(labels, scores.shape[-1], dtype=scores.dtype)


def margin_loss(
    lengths: jax.Array,
    labels: jax.Array,
    *,
    m_plus: float = 0.9,
    m_minus: float = 0.1,
    lam: float = 0.5,
) -> jax.Array:
    """Capsule margin loss (Sabour et al. 2017, eq. 4).

        L = sum_j T_j relu(m+ - l_j)^2 + lam (1 - T_j) relu(l_j - m-)^2

    Args:
        lengths: [..., J] output capsule lengths l_j = |v_j|.
        labels: [...] int class ids, or [..., J] one-hot (multi-hot also works) targets T.
        m_plus: lower margin for the target capsule.
        m_minus: upper margin for the other capsules.
        lam: down-weighting of the absent-class term.

    Returns:
        [...] per-example loss.

    Example:
        >>> import jax.numpy as jnp
        >>> import numpy as np
        >>> from jcaps.ops import margin_loss
        >>> lengths = jnp.array([[0.95, 0.05], [0.5, 0.5]])
        >>> print(np.asarray(margin_loss(lengths, jnp.array([0, 0]))).round(4))  # 0; 0.4^2 + 0.5 * 0.4^2
        [0.   0.24]
    """
    lengths = at_least_float32(lengths)
    targets = _one_hot(labels, lengths)
    present = targets * jnp.square(jax.nn.relu(m_plus - lengths))
    absent = lam * (1.0 - targets) * jnp.square(jax.nn.relu(lengths - m_minus))
    return jnp.sum(present + absent, axis=-1)


def focal_loss(scores: jax.Array, labels: jax.Array, *, alpha: float = 0.25, gamma: float = 2.0) -> jax.Array:
    """Softmax focal loss (Lin et al. 2017, eq. 5), as CCCapsNet applies it to capsule lengths.

        p = softmax(scores)[y],  L = -alpha (1 - p)^gamma log p

    `log p` comes from `log_softmax` and `1 - p` from `-expm1(log p)`, so neither is computed by
    subtracting nearly equal numbers.

    Args:
        scores: [..., C] class scores (capsule lengths in CCCapsNet, or logits).
        labels: [...] int class ids, or [..., C] one-hot targets.
        alpha: weighting factor.
        gamma: focusing parameter, >= 0.

    Returns:
        [...] per-example loss.

    Example:
        >>> import jax.numpy as jnp
        >>> import numpy as np
        >>> from jcaps.ops import focal_loss
        >>> print(np.asarray(focal_loss(jnp.array([[0.0, 0.0], [4.0, 0.0]]), jnp.array([0, 0]))).round(4))
        [0.0433 0.    ]
    """
    scores = at_least_float32(scores)
    log_p = jnp.sum(_one_hot(labels, scores) * jax.nn.log_softmax(scores, axis=-1), axis=-1)
    return -alpha * jnp.power(-jnp.expm1(log_p), gamma) * log_p


def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Softmax cross-entropy, `-log softmax(logits)[y]`.

    Args:
        logits: [..., C].
        labels: [...] int class ids, or [..., C] one-hot (or soft) targets.

    Returns:
        [...] per-example loss.

    Example:
        >>> import jax.numpy as jnp
        >>> import numpy as np
        >>> from jcaps.ops import cross_entropy
        >>> logits = jnp.array([[0.0, 0.0], [2.0, 0.0]])
        >>> print(np.asarray(cross_entropy(logits, jnp.array([0, 1]))).round(4))  # log 2; log(1 + e^2)
        [0.6931 2.1269]
    """
    logits = at_least_float32(logits)
    return -jnp.sum(_one_hot(labels, logits) * jax.nn.log_softmax(logits, axis=-1), axis=-1)


def sigmoid_binary_cross_entropy(logits: jax.Array, multi_hot: jax.Array) -> jax.Array:
    """Multi-label loss: independent binary cross-entropies summed over labels.

        L = sum_k -[y_k log sigmoid(x_k) + (1 - y_k) log(1 - sigmoid(x_k))]
          = sum_k softplus(x_k) - y_k x_k

    Args:
        logits: [..., C].
        multi_hot: [..., C] targets in {0, 1} (or probabilities).

    Returns:
        [...] per-example loss.

    Example:
        >>> import jax.numpy as jnp
        >>> import numpy as np
        >>> from jcaps.ops import sigmoid_binary_cross_entropy
        >>> loss = sigmoid_binary_cross_entropy(jnp.zeros((1, 3)), jnp.array([[1, 0, 1]]))
        >>> print(np.asarray(loss).round(4))  # 3 log 2
        [2.0794]
    """
    logits = at_least_float32(logits)
    multi_hot = jnp.asarray(multi_hot).astype(logits.dtype)
    return jnp.sum(jax.nn.softplus(logits) - multi_hot * logits, axis=-1)


def sequence_cross_entropy(logits: jax.Array, targets: jax.Array, *, pad_id: int = 0) -> jax.Array:
    """Token cross-entropy of a generated sequence, averaged over its non-padding targets.

        L = sum_t [y_t != pad] -log softmax(logits_t)[y_t] / max(sum_t [y_t != pad], 1)

    The end-of-sequence target counts as a token (the model must learn where to stop). Padded
    steps add nothing to the value or the gradient, whatever their logits hold (finite).

    Args:
        logits: [..., S, V] per-step logits.
        targets: [..., S] int target ids; `pad_id` marks padding.
        pad_id: the padding id.

    Returns:
        [...] per-example loss; 0 for a sequence of padding only.

    Example:
        Uniform logits over V = 5 tokens cost log 5 per target; the two padded steps add nothing:

        >>> import jax.numpy as jnp
        >>> import numpy as np
        >>> from jcaps.ops import sequence_cross_entropy
        >>> print(np.asarray(sequence_cross_entropy(jnp.zeros((1, 4, 5)), jnp.array([[3, 2, 0, 0]]))).round(4))
        [1.6094]
    """
    valid = jnp.asarray(targets) != pad_id
    per_token = cross_entropy(logits, targets)
    total = jnp.sum(jnp.where(valid, per_token, jnp.zeros_like(per_token)), axis=-1)
    return total / jnp.maximum(jnp.sum(valid, axis=-1), 1).astype(per_token.dtype)
