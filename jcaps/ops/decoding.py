"""Label-sequence decoding for sequence-generation multi-label models (SGM): greedy and beam search.

Pure functions on arrays, usable under `jit` and `vmap`. Both decoders are one `lax.while_loop`
with static shapes; the step function and the static sizes are closed over (or passed as static
arguments of the caller's `jit`). Decoding is batched: `state` is any pytree of arrays whose
leading dimension is the batch.

Label vocabulary: `num_special` special ids (PAD, BOS, EOS among them), then the labels: id
`num_special + j` is label j. A label set is generated as a sequence that ends with EOS. The
ids are arguments (`pad_id`, `bos_id`, `eos_id`, `num_special`): the vocabulary belongs to
the data (`jcaps.data.vocab`: PAD 0, UNK 1, BOS 2, EOS 3, labels from 4).

SGM output layer (Yang et al. 2018, Sec. 2.2, eq. 7-8), with the mask vector

    I_t[l] = -inf  if l is a special id but EOS, or label l was emitted before step t;   0 otherwise
    y_t = softmax(o_t + I_t)

so no label is predicted twice and EOS is always possible. The global embedding (Sec. 2.3,
eq. 9-11) feeds the decoder with the whole previous distribution,

    ebar = sum_l y_{t-1}[l] e_l,   H = sigmoid(W1 e + W2 ebar),   g(y_{t-1}) = (1 - H) * e + H * ebar,

which is why the step function receives y_{t-1} (after masking) as well as the previous token.

Beam search. The reference implementation's beam search drops both the mask I_t and the
global-embedding history: its beams can repeat labels, and y_{t-1} is not reordered with the
beams it belongs to. Here both live in the loop carry together with the decoder state, the
previous token, the cumulative log probability, the finished flag and the token history, and
after every step all of them are reordered by the beam back-pointers, so each beam is decoded
exactly as greedy decoding would decode that prefix.

Step function contract:

  step_fn(state, previous_token [N] int32, previous_probs [N, V] float32)
      -> (logits [N, V], new_state)

`state` is a pytree of arrays with leading dimension N (N = B for greedy, B * K for beam search,
beam k of example b in row b * K + k). At the first step previous_token is BOS and
previous_probs is one_hot(BOS). Rows that have finished are still fed (PAD and their last
distribution) because shapes are static; their outputs are ignored.

References:
  Yang, Sun, Li, Ma, Wu, Wang. SGM: Sequence Generation Model for Multi-label Classification.
  COLING 2018 (Sec. 2.2 the masked softmax, Sec. 2.3 the global embedding, Sec. 3.3 beam search).
"""

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

StepFn = Callable[[Any, jax.Array, jax.Array], tuple[jax.Array, Any]]


class DecodeResult(NamedTuple):
    """One decoded label sequence per example.

    Attributes:
      tokens: [B, max_steps] int32 label ids in generation order, EOS after the last label, PAD
        after EOS. A sequence still open at `max_steps` has no EOS.
      length: [B] int32, the number of labels before EOS.
      log_prob: [B] float32, sum of the (masked) log probabilities of the generated tokens.
      emitted: [B, V] bool, True at the ids emitted before EOS; never a special id.
    """

    tokens: jax.Array
    length: jax.Array
    log_prob: jax.Array
    emitted: jax.Array


# ---------------------------------------------------------------------------------------------
# Label mask (shared by training and both decoders)
# ---------------------------------------------------------------------------------------------


def _masked_value(dtype) -> float:
    """A large negative finite logit: exp() of it underflows to exactly 0 in a softmax, and
    unlike -inf it keeps log-softmax and 0 * log p products finite."""
    return max(float(jnp.finfo(dtype).min), -1e9)


def _allowed_tokens(emitted: jax.Array, eos_id: int, num_special: int) -> jax.Array:
    """[..., V] bool: True where the next token may be chosen (EOS and labels not yet emitted)."""
    ids = jax.lax.broadcasted_iota(jnp.int32, emitted.shape, emitted.ndim - 1)
    is_eos = ids == eos_id
    return is_eos | ((ids >= num_special) & ~emitted)


def label_mask_logits(logits: jax.Array, emitted: jax.Array, *, eos_id: int, num_special: int) -> jax.Array:
    """The SGM mask I_t applied to logits: o_t + I_t (Yang et al. 2018, eq. 8).

        out[l] = logits[l]   for EOS and for labels not in `emitted`
        out[l] = -1e9        for the other special ids (PAD, UNK, BOS) and emitted labels

    The mask value is a large negative finite number (the dtype's minimum if that is larger),
    so a softmax gives those tokens exactly 0 without NaN, and as EOS is always allowed every
    row keeps at least one finite logit. The masked logits are replaced, not offset, so they
    receive zero gradient. Teacher-forced training uses this same function (with `emitted` =
    the labels of the target prefix), so training and decoding see the same distribution.

    Args:
      logits: [..., V] decoder outputs o_t.
      emitted: [..., V] bool, True at labels already emitted; its value at EOS is ignored.
      eos_id: the id of EOS.
      num_special: the number of special ids; id num_special + j is label j.

    Returns:
      [..., V] masked logits, dtype of `logits`.

    Example:
      >>> import jax.numpy as jnp
      >>> from jcaps.ops.decoding import label_mask_logits
      >>> emitted = jnp.array([False, False, False, False, True, False])  # label 0 (id 4) emitted
      >>> print(label_mask_logits(jnp.zeros(6), emitted, eos_id=3, num_special=4))
      [-1.e+09 -1.e+09 -1.e+09  0.e+00 -1.e+09  0.e+00]
    """
    allowed = _allowed_tokens(jnp.asarray(emitted).astype(bool), eos_id, num_special)
    return jnp.where(allowed, logits, jnp.asarray(_masked_value(logits.dtype), logits.dtype))


def emitted_to_multi_hot(emitted: jax.Array, *, num_special: int) -> jax.Array:
    """[..., V] emitted ids -> [..., V - num_special] float32 multi-hot; column j is label j.

    Example:
      >>> import jax.numpy as jnp
      >>> from jcaps.ops.decoding import emitted_to_multi_hot
      >>> print(emitted_to_multi_hot(jnp.array([False, False, False, False, True, False, True]), num_special=4))
      [1. 0. 1.]
    """
    return emitted[..., num_special:].astype(jnp.float32)


def mark_emitted(emitted: jax.Array, token: jax.Array, *, num_special: int) -> jax.Array:
    """emitted [..., V] with token [...] marked where it is a label; a special id (PAD, BOS,
    EOS, ...) marks nothing. How both decoders, and teacher forcing, track the emitted set.

    Example:
      >>> import jax.numpy as jnp
      >>> from jcaps.ops.decoding import mark_emitted
      >>> emitted = jnp.zeros((2, 6), bool)
      >>> print(mark_emitted(emitted, jnp.array([5, 3]), num_special=4).astype(int))
      [[0 0 0 0 0 1]
       [0 0 0 0 0 0]]
    """
    is_label = (token >= num_special)[..., None]
    return emitted | (jax.nn.one_hot(token, emitted.shape[-1], dtype=jnp.bool_) & is_label)


# ---------------------------------------------------------------------------------------------
# Shared helpers
# ---------------------------------------------------------------------------------------------


def _batch_size(state) -> int:
    leaves = jax.tree.leaves(state)
    if not leaves:
        raise ValueError("decoding needs a state with at least one array (its leading dim is the batch)")
    sizes = {leaf.shape[0] for leaf in leaves}
    if len(sizes) != 1:
        raise ValueError(f"state leaves disagree on the batch size (leading dims {sorted(sizes)})")
    return sizes.pop()


def _check_sizes(num_tokens: int, max_steps: int, num_special: int) -> None:
    if num_tokens <= num_special:
        raise ValueError(f"num_tokens={num_tokens} leaves no label after the {num_special} special ids")
    if max_steps < 1:
        raise ValueError(f"max_steps must be at least 1, got {max_steps}")


def _num_labels(tokens: jax.Array, num_special: int) -> jax.Array:
    """[..., T] tokens -> [...] int32, the number of label ids among them."""
    return jnp.sum(tokens >= num_special, axis=-1, dtype=jnp.int32)


def _step_distribution(logits, emitted, mask_emitted, eos_id, num_special):
    """Masked log-softmax [..., V] float32 and the allowed-token mask [..., V]."""
    allowed = _allowed_tokens(emitted if mask_emitted else jnp.zeros_like(emitted), eos_id, num_special)
    masked = jnp.where(allowed, logits.astype(jnp.float32), _masked_value(jnp.float32))
    return jax.nn.log_softmax(masked, axis=-1), allowed


# ---------------------------------------------------------------------------------------------
# Greedy decoding
# ---------------------------------------------------------------------------------------------


class _GreedyCarry(NamedTuple):
    step: jax.Array  # [] int32
    state: Any  # pytree, leading dim B
    previous_token: jax.Array  # [B] int32
    previous_probs: jax.Array  # [B, V] float32, masked y_{t-1}
    emitted: jax.Array  # [B, V] bool
    finished: jax.Array  # [B] bool
    log_prob: jax.Array  # [B] float32
    tokens: jax.Array  # [B, T] int32


def greedy_decode(
    step_fn: StepFn,
    state: Any,
    *,
    num_tokens: int,
    max_steps: int,
    pad_id: int,
    bos_id: int,
    eos_id: int,
    num_special: int,
    mask_emitted: bool = True,
    eos_threshold: float | jax.Array = 0.0,
) -> DecodeResult:
    """Greedy label-sequence decoding: y_t = softmax(o_t + I_t), token_t = argmax y_t, or with
    `eos_threshold` > 0: token_t = EOS if y_t[EOS] >= eos_threshold, else the most likely label.

    Argmax stops a row as soon as EOS is the single most likely token, even when the
    probability of going on, 1 - y_t[EOS], is larger but shared among several labels (a model
    unsure which label comes next, not whether one does). `eos_threshold = 0.5` stops only when
    stopping is more likely than going on; when every label is emitted or masked, EOS is chosen
    whatever its probability.

    A row is finished once it emits EOS; later tokens are PAD and add nothing to its log
    probability (the row is still fed, as shapes are static, and its outputs are ignored). The
    loop stops when every row is finished or after `max_steps` steps; a row still open then
    ends there without EOS.

    Args:
      step_fn: `(state, previous_token [B], previous_probs [B, V]) -> (logits [B, V], state)`.
      state: pytree of arrays with leading dim B (the decoder state after the encoder).
      num_tokens: V, the size of the label vocabulary including the special ids (static).
      max_steps: T, the most tokens generated per row, EOS included (static).
      pad_id: the id written after EOS.
      bos_id: the id read at the first step.
      eos_id: the id that ends a sequence.
      num_special: the number of special ids; id num_special + j is label j.
      mask_emitted: mask labels already emitted (SGM's I_t). The special ids but EOS are
        always masked.
      eos_threshold: 0 for argmax decoding; in (0, 1], the probability of EOS at which a row
        stops (may be traced).

    Returns:
      `DecodeResult` with tokens [B, T], length [B], log_prob [B], emitted [B, V].

    Example:
      A step function that always prefers label 1 (id 5), then label 0 (id 4), then EOS:

      >>> import jax.numpy as jnp
      >>> from jcaps.ops.decoding import greedy_decode
      >>> def step_fn(state, previous_token, previous_probs):
      ...     return jnp.broadcast_to(jnp.array([0.0, 0, 0, 1, 2, 3]), previous_probs.shape), state
      >>> result = greedy_decode(step_fn, jnp.zeros((2, 1)), num_tokens=6, max_steps=4,
      ...                        pad_id=0, bos_id=2, eos_id=3, num_special=4)
      >>> print(result.tokens)
      [[5 4 3 0]
       [5 4 3 0]]
      >>> print(result.length)
      [2 2]
    """
    _check_sizes(num_tokens, max_steps, num_special)
    batch = _batch_size(state)
    bos = jnp.full((batch,), bos_id, jnp.int32)
    init = _GreedyCarry(
        step=jnp.zeros((), jnp.int32),
        state=state,
        previous_token=bos,
        previous_probs=jax.nn.one_hot(bos, num_tokens, dtype=jnp.float32),
        emitted=jnp.zeros((batch, num_tokens), jnp.bool_),
        finished=jnp.zeros((batch,), jnp.bool_),
        log_prob=jnp.zeros((batch,), jnp.float32),
        tokens=jnp.full((batch, max_steps), pad_id, jnp.int32),
    )

    def cond(carry: _GreedyCarry):
        return (carry.step < max_steps) & ~jnp.all(carry.finished)

    def body(carry: _GreedyCarry):
        logits, new_state = step_fn(carry.state, carry.previous_token, carry.previous_probs)
        log_probs, allowed = _step_distribution(logits, carry.emitted, mask_emitted, eos_id, num_special)
        token = _greedy_token(log_probs, allowed, eos_id, eos_threshold)
        token_log_prob = jnp.take_along_axis(log_probs, token[:, None], axis=-1)[:, 0]
        token = jnp.where(carry.finished, pad_id, token)
        return _GreedyCarry(
            step=carry.step + 1,
            state=new_state,
            previous_token=token,
            previous_probs=jnp.exp(log_probs),
            emitted=mark_emitted(carry.emitted, token, num_special=num_special),
            finished=carry.finished | (token == eos_id),
            log_prob=carry.log_prob + jnp.where(carry.finished, 0.0, token_log_prob),
            tokens=carry.tokens.at[:, carry.step].set(token),
        )

    final = jax.lax.while_loop(cond, body, init)
    return DecodeResult(final.tokens, _num_labels(final.tokens, num_special), final.log_prob, final.emitted)


def _greedy_token(log_probs: jax.Array, allowed: jax.Array, eos_id: int, eos_threshold) -> jax.Array:
    """[B] int32: argmax of `log_probs` [B, V] (eos_threshold 0), else EOS where its probability
    reaches `eos_threshold` or no label is allowed, and the most likely allowed label elsewhere."""
    argmax = jnp.argmax(log_probs, axis=-1).astype(jnp.int32)
    is_eos = jax.lax.broadcasted_iota(jnp.int32, log_probs.shape, 1) == eos_id
    labels_allowed = allowed & ~is_eos
    best_label = jnp.argmax(jnp.where(labels_allowed, log_probs, -jnp.inf), axis=-1).astype(jnp.int32)
    eos_probability = jnp.exp(log_probs[:, eos_id])
    stop = (eos_probability >= eos_threshold) | ~jnp.any(labels_allowed, axis=-1)
    thresholded = jnp.where(stop, eos_id, best_label)
    return jnp.where(jnp.asarray(eos_threshold) > 0, thresholded, argmax)


# ---------------------------------------------------------------------------------------------
# Beam search
# ---------------------------------------------------------------------------------------------


class _BeamCarry(NamedTuple):
    step: jax.Array  # [] int32
    state: Any  # pytree, leading dim B * K (beam k of example b in row b * K + k)
    previous_token: jax.Array  # [B, K] int32
    previous_probs: jax.Array  # [B, K, V] float32, masked y_{t-1} of each beam
    emitted: jax.Array  # [B, K, V] bool
    score: jax.Array  # [B, K] float32, cumulative log prob; -inf for an empty beam
    finished: jax.Array  # [B, K] bool
    tokens: jax.Array  # [B, K, T] int32


def _flat_beam_index(parent: jax.Array, beams: int) -> jax.Array:
    """parent [B, K'] beam ids -> [B K'] rows of the flat [B K, ...] layout (row b K + k)."""
    example = jax.lax.broadcasted_iota(jnp.int32, parent.shape, 0)
    return (example * beams + parent).reshape(-1)


def _gather_beams(x: jax.Array, parent: jax.Array) -> jax.Array:
    """x [B, K, ...] -> [B, K', ...] with row (b, k) = x[b, parent[b, k]]; parent [B, K'] int32.

    One gather on the flat [B K, ...] view: it compiles faster than `take_along_axis` on the
    [B, K, ...] view, and it is the layout the step-function state already has."""
    batch, beams = x.shape[:2]
    rows = x.reshape((batch * beams,) + x.shape[2:])[_flat_beam_index(parent, beams)]
    return rows.reshape(parent.shape + x.shape[2:])


def beam_search(
    step_fn: StepFn,
    state: Any,
    *,
    num_tokens: int,
    beam_size: int,
    max_steps: int,
    pad_id: int,
    bos_id: int,
    eos_id: int,
    num_special: int,
    length_penalty: float = 0.0,
    mask_emitted: bool = True,
) -> DecodeResult:
    """Beam search over label sequences with the mask and the global-embedding input per beam.

    Every step, each live beam k of example b extends with every allowed token v:

        candidate[b, k, v] = score[b, k] + log softmax(o_t + I_t)[b, k, v]

    and the K best of the K * V candidates of each example become the new beams. The mask
    I_t, the previous distribution y_{t-1} and the decoder state are each beam's own: the carry
    (state, previous token, y_{t-1}, emitted labels, score, finished flag, token history) is
    reordered by the back-pointers after every step. (The reference implementation's beam
    search drops the mask and the global-embedding history; see the module docstring.)

    Details:
      * At the first step only beam 0 is live (the others score -inf), so the K beams start
        from K different tokens rather than K copies of the best one. Beams that find no
        allowed continuation stay at -inf, count as finished and are never chosen.
      * A finished beam (it emitted EOS) keeps its score and extends only with PAD, at zero
        cost, so it competes with the live beams for its slot.
      * The loop stops when every beam of every example is finished, or after `max_steps`
        steps; a sequence still open then ends there.
      * The result is the beam with the best score / length ** length_penalty, with length the
        number of generated tokens (labels, plus 1 for EOS); `length_penalty = 0` ranks by the
        raw log probability. The penalty only ranks the final beams, not the pruning.

    Args:
      step_fn: `(state, previous_token [B K], previous_probs [B K, V]) -> (logits [B K, V],
        state)`, rows ordered as example-major, beam-minor.
      state: pytree of arrays with leading dim B; each example's state is copied to its K beams.
      num_tokens: V, the size of the label vocabulary including the special ids (static).
      beam_size: K (static).
      max_steps: T, the most tokens generated per beam, EOS included (static).
      pad_id: the id written after EOS, a finished beam's only continuation.
      bos_id: the id read at the first step.
      eos_id: the id that ends a sequence.
      num_special: the number of special ids; id num_special + j is label j.
      length_penalty: exponent of the length normalisation of the final choice (may be traced).
      mask_emitted: mask labels already emitted (SGM's I_t). The special ids but EOS are
        always masked.

    Returns:
      `DecodeResult` of the chosen beam: tokens [B, T], length [B], log_prob [B] (raw sum of
      log probabilities), emitted [B, V].

    Example:
      Greedy decoding takes label 0 (id 4) first, the most probable first token, then has only
      an even chance left for each continuation; beam search finds label 1 (id 5) then label 0,
      the more probable sequence.

      >>> import jax.numpy as jnp
      >>> from jcaps.ops.decoding import beam_search, greedy_decode
      >>> next_logits = jnp.zeros((6, 6))  # row: the previous token
      >>> next_logits = next_logits.at[2, 4:].set(jnp.array([0.5, 0.35]))  # after BOS
      >>> next_logits = next_logits.at[5, 4].set(9.0)  # after label 1, label 0
      >>> def step_fn(state, previous_token, previous_probs):
      ...     return next_logits[previous_token], state
      >>> ids = dict(pad_id=0, bos_id=2, eos_id=3, num_special=4)
      >>> print(greedy_decode(step_fn, jnp.zeros((1, 1)), num_tokens=6, max_steps=4, **ids).tokens)
      [[4 3 0 0]]
      >>> print(beam_search(step_fn, jnp.zeros((1, 1)), num_tokens=6, beam_size=2, max_steps=4, **ids).tokens)
      [[5 4 3 0]]
    """
    _check_sizes(num_tokens, max_steps, num_special)
    if beam_size < 1:
        raise ValueError(f"beam_size must be at least 1, got {beam_size}")
    batch, beams, vocab = _batch_size(state), beam_size, num_tokens
    bos = jnp.full((batch, beams), bos_id, jnp.int32)
    only_first_beam = jax.lax.broadcasted_iota(jnp.int32, (batch, beams), 1) == 0
    init = _BeamCarry(
        step=jnp.zeros((), jnp.int32),
        state=jax.tree.map(lambda x: jnp.repeat(x, beams, axis=0), state),
        previous_token=bos,
        previous_probs=jax.nn.one_hot(bos, vocab, dtype=jnp.float32),
        emitted=jnp.zeros((batch, beams, vocab), jnp.bool_),
        score=jnp.where(only_first_beam, 0.0, -jnp.inf).astype(jnp.float32),
        finished=jnp.zeros((batch, beams), jnp.bool_),
        tokens=jnp.full((batch, beams, max_steps), pad_id, jnp.int32),
    )
    # A finished beam's only continuation: PAD at zero cost.
    pad_only = jnp.where(jax.lax.broadcasted_iota(jnp.int32, (batch, beams, vocab), 2) == pad_id, 0.0, -jnp.inf)

    def cond(carry: _BeamCarry):
        return (carry.step < max_steps) & ~jnp.all(carry.finished)

    def body(carry: _BeamCarry):
        logits, new_state = step_fn(
            carry.state, carry.previous_token.reshape(batch * beams), carry.previous_probs.reshape(batch * beams, vocab)
        )
        log_probs, allowed = _step_distribution(
            logits.reshape(batch, beams, vocab), carry.emitted, mask_emitted, eos_id, num_special
        )
        # -inf (not the finite mask value) so a masked token can only be picked by an empty beam.
        step_scores = jnp.where(carry.finished[..., None], pad_only, jnp.where(allowed, log_probs, -jnp.inf))
        candidates = (carry.score[..., None] + step_scores).reshape(batch, beams * vocab)
        score, flat_index = jax.lax.top_k(candidates, beams)
        parent, token = flat_index // vocab, (flat_index % vocab).astype(jnp.int32)
        was_finished = _gather_beams(carry.finished, parent)
        token = jnp.where(was_finished, pad_id, token)
        return _BeamCarry(
            step=carry.step + 1,
            state=jax.tree.map(lambda x: x[_flat_beam_index(parent, beams)], new_state),
            previous_token=token,
            previous_probs=_gather_beams(jnp.exp(log_probs), parent),
            emitted=mark_emitted(_gather_beams(carry.emitted, parent), token, num_special=num_special),
            score=score,
            finished=was_finished | (token == eos_id) | (score == -jnp.inf),
            tokens=_gather_beams(carry.tokens, parent).at[:, :, carry.step].set(token),
        )

    final = jax.lax.while_loop(cond, body, init)
    num_labels = _num_labels(final.tokens, num_special)
    # Generated tokens: the labels plus EOS where there is one. A live beam always has >= 1.
    length = num_labels + jnp.any(final.tokens == eos_id, axis=-1).astype(jnp.int32)
    normaliser = jnp.power(jnp.maximum(length, 1).astype(jnp.float32), length_penalty)
    best = jnp.argmax(final.score / normaliser, axis=-1)[:, None]  # [B, 1]

    def pick(x):
        return _gather_beams(x, best)[:, 0]

    return DecodeResult(pick(final.tokens), pick(num_labels), pick(final.score), pick(final.emitted))
