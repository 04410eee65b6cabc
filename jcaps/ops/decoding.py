"""Label-sequence decoding for sequence-generation multi-label models (SGM): greedy and beam search.

Pure functions on arrays, usable under `jit` and `vmap`. Both decoders are one `lax.while_loop`
with static shapes; the step function and the static sizes are closed over (or passed as static
arguments of the caller's `jit`). Decoding is batched: `state` is any pytree of arrays whose
leading dimension is the batch.

Label vocabulary: PAD 0, UNK 1, BOS 2, EOS 3, then the labels (id `NUM_SPECIAL + j` is label j).
A label set is generated as a sequence that ends with EOS.

SGM output layer (Yang et al. 2018, Sec. 2.2, eq. 7-8), with the mask vector

    I_t[l] = -inf  if l is PAD, UNK or BOS, or label l was emitted before step t;   0 otherwise
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

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
NUM_SPECIAL = 4
SPECIAL_NAMES = ("<pad>", "<unk>", "<bos>", "<eos>")

StepFn = Callable[[Any, jax.Array, jax.Array], tuple[jax.Array, Any]]


class DecodeResult(NamedTuple):
    """One decoded label sequence per example.

    Attributes:
      tokens: [B, max_steps] int32 label ids in generation order, EOS after the last label, PAD
        after EOS. A sequence still open at `max_steps` has no EOS.
      length: [B] int32, the number of labels before EOS.
      log_prob: [B] float32, sum of the (masked) log probabilities of the generated tokens.
      emitted: [B, V] bool, True at the ids emitted before EOS; never PAD, UNK, BOS or EOS.
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


def _allowed_tokens(emitted: jax.Array) -> jax.Array:
    """[..., V] bool: True where the next token may be chosen (EOS and labels not yet emitted)."""
    ids = jax.lax.broadcasted_iota(jnp.int32, emitted.shape, emitted.ndim - 1)
    is_eos = ids == EOS_ID
    return is_eos | ((ids >= NUM_SPECIAL) & ~emitted)


def label_mask_logits(logits: jax.Array, emitted: jax.Array) -> jax.Array:
    """The SGM mask I_t applied to logits: o_t + I_t (Yang et al. 2018, eq. 8).

        out[l] = logits[l]   for EOS and for labels not in `emitted`
        out[l] = -1e9        for PAD, UNK, BOS and emitted labels

    The mask value is a large negative finite number (the dtype's minimum if that is larger),
    so a softmax gives those tokens exactly 0 without NaN, and as EOS is always allowed every
    row keeps at least one finite logit. The masked logits are replaced, not offset, so they
    receive zero gradient. Teacher-forced training uses this same function (with `emitted` =
    the labels of the target prefix), so training and decoding see the same distribution.

    Args:
      logits: [..., V] decoder outputs o_t.
      emitted: [..., V] bool, True at labels already emitted; its value at EOS is ignored.

    Returns:
      [..., V] masked logits, dtype of `logits`.
    """
    allowed = _allowed_tokens(jnp.asarray(emitted).astype(bool))
    return jnp.where(allowed, logits, jnp.asarray(_masked_value(logits.dtype), logits.dtype))


def emitted_to_multi_hot(emitted: jax.Array) -> jax.Array:
    """[..., V] emitted ids -> [..., V - NUM_SPECIAL] float32 multi-hot; column j is label j."""
    return emitted[..., NUM_SPECIAL:].astype(jnp.float32)


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


def _check_sizes(num_tokens: int, max_steps: int) -> None:
    if num_tokens <= NUM_SPECIAL:
        raise ValueError(f"num_tokens={num_tokens} leaves no label after the {NUM_SPECIAL} special ids")
    if max_steps < 1:
        raise ValueError(f"max_steps must be at least 1, got {max_steps}")


def _add_token(emitted: jax.Array, token: jax.Array) -> jax.Array:
    """emitted [..., V] | one_hot(token) for label tokens; specials (PAD, EOS, ...) add nothing."""
    is_label = (token >= NUM_SPECIAL)[..., None]
    return emitted | (jax.nn.one_hot(token, emitted.shape[-1], dtype=jnp.bool_) & is_label)


def _num_labels(tokens: jax.Array) -> jax.Array:
    """[..., T] tokens -> [...] int32, the number of label ids among them."""
    return jnp.sum(tokens >= NUM_SPECIAL, axis=-1, dtype=jnp.int32)


def _step_distribution(logits, emitted, mask_emitted):
    """Masked log-softmax [..., V] float32 and the allowed-token mask [..., V]."""
    allowed = _allowed_tokens(emitted if mask_emitted else jnp.zeros_like(emitted))
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
    mask_emitted: bool = True,
) -> DecodeResult:
    """Greedy label-sequence decoding: y_t = softmax(o_t + I_t), token_t = argmax y_t.

    A row is finished once it emits EOS; later tokens are PAD and add nothing to its log
    probability (the row is still fed, as shapes are static, and its outputs are ignored). The
    loop stops when every row is finished or after `max_steps` steps; a row still open then
    ends there without EOS.

    Args:
      step_fn: `(state, previous_token [B], previous_probs [B, V]) -> (logits [B, V], state)`.
      state: pytree of arrays with leading dim B (the decoder state after the encoder).
      num_tokens: V, the size of the label vocabulary including the 4 special ids (static).
      max_steps: T, the most tokens generated per row, EOS included (static).
      mask_emitted: mask labels already emitted (SGM's I_t). PAD, UNK and BOS are always masked.

    Returns:
      `DecodeResult` with tokens [B, T], length [B], log_prob [B], emitted [B, V].
    """
    _check_sizes(num_tokens, max_steps)
    batch = _batch_size(state)
    bos = jnp.full((batch,), BOS_ID, jnp.int32)
    init = _GreedyCarry(
        step=jnp.zeros((), jnp.int32),
        state=state,
        previous_token=bos,
        previous_probs=jax.nn.one_hot(bos, num_tokens, dtype=jnp.float32),
        emitted=jnp.zeros((batch, num_tokens), jnp.bool_),
        finished=jnp.zeros((batch,), jnp.bool_),
        log_prob=jnp.zeros((batch,), jnp.float32),
        tokens=jnp.full((batch, max_steps), PAD_ID, jnp.int32),
    )

    def cond(carry: _GreedyCarry):
        return (carry.step < max_steps) & ~jnp.all(carry.finished)

    def body(carry: _GreedyCarry):
        logits, new_state = step_fn(carry.state, carry.previous_token, carry.previous_probs)
        log_probs, _ = _step_distribution(logits, carry.emitted, mask_emitted)
        token = jnp.argmax(log_probs, axis=-1).astype(jnp.int32)
        token_log_prob = jnp.max(log_probs, axis=-1)  # the argmax token's
        token = jnp.where(carry.finished, PAD_ID, token)
        return _GreedyCarry(
            step=carry.step + 1,
            state=new_state,
            previous_token=token,
            previous_probs=jnp.exp(log_probs),
            emitted=_add_token(carry.emitted, token),
            finished=carry.finished | (token == EOS_ID),
            log_prob=carry.log_prob + jnp.where(carry.finished, 0.0, token_log_prob),
            tokens=carry.tokens.at[:, carry.step].set(token),
        )

    final = jax.lax.while_loop(cond, body, init)
    return DecodeResult(final.tokens, _num_labels(final.tokens), final.log_prob, final.emitted)


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
      num_tokens: V, the size of the label vocabulary including the 4 special ids (static).
      beam_size: K (static).
      max_steps: T, the most tokens generated per beam, EOS included (static).
      length_penalty: exponent of the length normalisation of the final choice (may be traced).
      mask_emitted: mask labels already emitted (SGM's I_t). PAD, UNK and BOS are always masked.

    Returns:
      `DecodeResult` of the chosen beam: tokens [B, T], length [B], log_prob [B] (raw sum of
      log probabilities), emitted [B, V].
    """
    _check_sizes(num_tokens, max_steps)
    if beam_size < 1:
        raise ValueError(f"beam_size must be at least 1, got {beam_size}")
    batch, beams, vocab = _batch_size(state), beam_size, num_tokens
    bos = jnp.full((batch, beams), BOS_ID, jnp.int32)
    only_first_beam = jax.lax.broadcasted_iota(jnp.int32, (batch, beams), 1) == 0
    init = _BeamCarry(
        step=jnp.zeros((), jnp.int32),
        state=jax.tree.map(lambda x: jnp.repeat(x, beams, axis=0), state),
        previous_token=bos,
        previous_probs=jax.nn.one_hot(bos, vocab, dtype=jnp.float32),
        emitted=jnp.zeros((batch, beams, vocab), jnp.bool_),
        score=jnp.where(only_first_beam, 0.0, -jnp.inf).astype(jnp.float32),
        finished=jnp.zeros((batch, beams), jnp.bool_),
        tokens=jnp.full((batch, beams, max_steps), PAD_ID, jnp.int32),
    )
    # A finished beam's only continuation: PAD at zero cost.
    pad_only = jnp.where(jax.lax.broadcasted_iota(jnp.int32, (batch, beams, vocab), 2) == PAD_ID, 0.0, -jnp.inf)

    def cond(carry: _BeamCarry):
        return (carry.step < max_steps) & ~jnp.all(carry.finished)

    def body(carry: _BeamCarry):
        logits, new_state = step_fn(
            carry.state, carry.previous_token.reshape(batch * beams), carry.previous_probs.reshape(batch * beams, vocab)
        )
        log_probs, allowed = _step_distribution(logits.reshape(batch, beams, vocab), carry.emitted, mask_emitted)
        # -inf (not the finite mask value) so a masked token can only be picked by an empty beam.
        step_scores = jnp.where(carry.finished[..., None], pad_only, jnp.where(allowed, log_probs, -jnp.inf))
        candidates = (carry.score[..., None] + step_scores).reshape(batch, beams * vocab)
        score, flat_index = jax.lax.top_k(candidates, beams)
        parent, token = flat_index // vocab, (flat_index % vocab).astype(jnp.int32)
        was_finished = _gather_beams(carry.finished, parent)
        token = jnp.where(was_finished, PAD_ID, token)
        return _BeamCarry(
            step=carry.step + 1,
            state=jax.tree.map(lambda x: x[_flat_beam_index(parent, beams)], new_state),
            previous_token=token,
            previous_probs=_gather_beams(jnp.exp(log_probs), parent),
            emitted=_add_token(_gather_beams(carry.emitted, parent), token),
            score=score,
            finished=was_finished | (token == EOS_ID) | (score == -jnp.inf),
            tokens=_gather_beams(carry.tokens, parent).at[:, :, carry.step].set(token),
        )

    final = jax.lax.while_loop(cond, body, init)
    num_labels = _num_labels(final.tokens)
    # Generated tokens: the labels plus EOS where there is one. A live beam always has >= 1.
    length = num_labels + jnp.any(final.tokens == EOS_ID, axis=-1).astype(jnp.int32)
    normaliser = jnp.power(jnp.maximum(length, 1).astype(jnp.float32), length_penalty)
    best = jnp.argmax(final.score / normaliser, axis=-1)[:, None]  # [B, 1]

    def pick(x):
        return _gather_beams(x, best)[:, 0]

    return DecodeResult(pick(final.tokens), pick(num_labels), pick(final.score), pick(final.emitted))
