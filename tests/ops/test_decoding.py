"""Greedy and beam search against NumPy references, an exhaustive search and label-set invariants."""
import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcaps.data.vocab import BOS, EOS, NUM_SPECIAL, PAD, UNK
from jcaps.ops import decoding

# The label vocabulary's special ids, as the decoders take them.
IDS = {"pad_id": PAD, "bos_id": BOS, "eos_id": EOS, "num_special": NUM_SPECIAL}

# ---------------------------------------------------------------- scorers (JAX step functions)


def recurrent_step(params, state, previous_token, previous_probs):
    """A tiny random recurrent scorer: its logits depend on the state, the token and y_{t-1}."""
    h = jnp.tanh(state["h"] @ params["A"] + params["E"][previous_token] + previous_probs @ params["P"])
    return h @ params["O"] + params["eos_bias"], {"h": h}


def recurrent_scorer(seed, batch=3, vocab=10, hidden=6, eos_bias=0.0, scale=2.0):
    rng = np.random.default_rng(seed)
    params = {
        "A": rng.normal(size=(hidden, hidden)),
        "E": rng.normal(size=(vocab, hidden)),
        "P": rng.normal(size=(vocab, hidden)),
        "O": scale * rng.normal(size=(hidden, vocab)),
        "eos_bias": eos_bias * np.eye(vocab)[EOS][None, :],
    }
    state = {"h": rng.normal(size=(batch, hidden))}
    return jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), (params, state))


# Filled by `history_step` while a decoder runs: for every call, the largest gap between the
# y_{t-1} a row was fed and the masked softmax that row's own previous call produced.
SEEN_PROBS_ERRORS = []


def history_step(params, state, previous_token, previous_probs):
    """A scorer whose logits depend on each row's whole history (tokens fed and y_{t-1} fed), so
    a beam carrying another beam's state, mask or distribution decodes differently."""
    vocab = previous_probs.shape[-1]
    fed = state["fed"] + jax.nn.one_hot(previous_token, vocab)
    probs_sum = state["probs_sum"] + previous_probs
    logits = state["c"] + params["E"][previous_token] + 2.0 * jnp.tanh(fed @ params["M1"] + probs_sum @ params["M2"])
    # The masked softmax this row's decoder must feed back next call, built here independently.
    ids = jnp.broadcast_to(jnp.arange(vocab), fed.shape)
    allowed = (ids == EOS) | ((ids >= NUM_SPECIAL) & (fed == 0))
    expected = jax.nn.softmax(jnp.where(allowed, logits, -jnp.inf), axis=-1)
    jax.debug.callback(SEEN_PROBS_ERRORS.append, jnp.max(jnp.abs(previous_probs - state["expected"])))
    return logits, {"c": state["c"], "fed": fed, "probs_sum": probs_sum, "expected": expected}


def history_scorer(seed, batch=3, vocab=10, eos_bias=-1.0):
    rng = np.random.default_rng(seed)
    params = {
        "E": rng.normal(size=(vocab, vocab)),
        "M1": 1.5 * rng.normal(size=(vocab, vocab)),
        "M2": 1.5 * rng.normal(size=(vocab, vocab)),
    }
    c = rng.normal(size=(batch, vocab))
    c[:, EOS] += eos_bias
    return params, c


def history_state(c):
    batch, vocab = c.shape
    zeros = np.zeros((batch, vocab))
    expected = np.tile(np.eye(vocab)[BOS], (batch, 1))
    state = {"c": c, "fed": zeros, "probs_sum": zeros, "expected": expected}
    return jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), state)


# ---------------------------------------------------------------- jitted decoders (params traced)


@functools.partial(jax.jit, static_argnames=("step", "max_steps", "mask_emitted"))
def greedy(params, state, *, step, max_steps, mask_emitted=True):
    vocab = params["E"].shape[0]
    return decoding.greedy_decode(
        functools.partial(step, params),
        state,
        num_tokens=vocab,
        max_steps=max_steps,
        mask_emitted=mask_emitted,
        **IDS,
    )


@functools.partial(jax.jit, static_argnames=("step", "beam_size", "max_steps"))
def beam(params, state, length_penalty=0.0, *, step, beam_size, max_steps):
    # length_penalty is traced: one compilation serves every penalty.
    vocab = params["E"].shape[0]
    return decoding.beam_search(
        functools.partial(step, params),
        state,
        num_tokens=vocab,
        beam_size=beam_size,
        max_steps=max_steps,
        length_penalty=length_penalty,
        **IDS,
    )


# ---------------------------------------------------------------- NumPy references (one example)


def np_history_step(params, state, previous_token, previous_probs):
    fed = state["fed"] + np.eye(len(previous_probs))[previous_token]
    probs_sum = state["probs_sum"] + previous_probs
    logits = state["c"] + params["E"][previous_token] + 2.0 * np.tanh(fed @ params["M1"] + probs_sum @ params["M2"])
    return logits, {"c": state["c"], "fed": fed, "probs_sum": probs_sum}


def np_masked_log_softmax(logits, emitted):
    ids = np.arange(len(logits))
    allowed = (ids == EOS) | ((ids >= NUM_SPECIAL) & ~np.isin(ids, list(emitted)))
    top = logits[allowed].max()
    log_z = top + np.log(np.sum(np.exp(logits[allowed] - top)))
    return np.where(allowed, logits - log_z, -np.inf), allowed


def np_initial_beam(c):
    vocab = len(c)
    state = {"c": c, "fed": np.zeros(vocab), "probs_sum": np.zeros(vocab)}
    return {"score": 0.0, "tokens": [], "state": state, "token": BOS, "probs": np.eye(vocab)[BOS],
            "emitted": set(), "finished": False}


def np_extend(params, beam, token, log_probs, new_state):
    return {"score": beam["score"] + log_probs[token], "tokens": beam["tokens"] + [token], "state": new_state,
            "token": token, "probs": np.exp(log_probs), "emitted": beam["emitted"] | {token} - {EOS},
            "finished": token == EOS}


def np_sequence_length(beam):
    return len(beam["tokens"])  # the generated tokens: labels, then EOS if there is one


def np_beam_search(params, c, beam_size, max_steps, length_penalty):
    """Textbook beam search: a Python list of beams, each a dict with its own history."""
    beams = [np_initial_beam(c)]
    for _ in range(max_steps):
        if all(b["finished"] for b in beams):
            break
        candidates = []  # (score, beam index, token, new beam)
        for k, b in enumerate(beams):
            if b["finished"]:
                candidates.append((b["score"], k, PAD, b))
                continue
            logits, new_state = np_history_step(params, b["state"], b["token"], b["probs"])
            log_probs, allowed = np_masked_log_softmax(logits, b["emitted"])
            for v in np.flatnonzero(allowed):
                candidates.append((b["score"] + log_probs[v], k, v, np_extend(params, b, v, log_probs, new_state)))
        candidates.sort(key=lambda cand: (-cand[0], cand[1], cand[2]))
        beams = [cand[3] for cand in candidates[:beam_size]]
    ranks = [b["score"] / max(np_sequence_length(b), 1) ** length_penalty for b in beams]
    return beams[int(np.argmax(ranks))]


def np_sequence_score(params, c, tokens):
    """Log probability of one label sequence under the masked scorer."""
    b = np_initial_beam(c)
    for token in tokens:
        logits, new_state = np_history_step(params, b["state"], b["token"], b["probs"])
        log_probs, _ = np_masked_log_softmax(logits, b["emitted"])
        b = np_extend(params, b, token, log_probs, new_state)
    return b["score"]


def padded(tokens, max_steps):
    return np.array(list(tokens) + [PAD] * (max_steps - len(tokens)))


def assert_valid_label_sets(result, max_steps):
    """Labels before EOS are distinct real labels, PAD after it, and length/emitted agree."""
    tokens, length, emitted = map(np.asarray, (result.tokens, result.length, result.emitted))
    assert tokens.shape[1] == max_steps
    for row, n, row_emitted in zip(tokens, length, emitted):
        eos = np.flatnonzero(row == EOS)
        end = eos[0] if eos.size else max_steps
        labels = row[:end]
        assert np.all(labels >= NUM_SPECIAL), row
        assert len(set(labels.tolist())) == len(labels), row
        assert np.all(row[end + 1:] == PAD), row
        assert n == len(labels)
        np.testing.assert_array_equal(np.flatnonzero(row_emitted), np.sort(labels))
    assert np.all(np.isfinite(np.asarray(result.log_prob)))


# ---------------------------------------------------------------- label mask


@jax.jit
def mask_and_softmax(logits, emitted):
    masked = decoding.label_mask_logits(logits, emitted, eos_id=EOS, num_special=NUM_SPECIAL)
    return masked, jax.nn.softmax(masked.astype(jnp.float32), axis=-1)


def test_label_mask_logits_blocks_specials_and_emitted_labels():
    vocab = 9
    rng = np.random.default_rng(0)
    logits = jnp.asarray(100.0 * rng.normal(size=(5, vocab)), jnp.float32)
    emitted = jnp.asarray(rng.random((5, vocab)) < 0.5).at[-1].set(True)  # last row: everything emitted
    masked, probs = mask_and_softmax(logits, emitted)
    ids = np.arange(vocab)
    blocked = np.isin(ids, [PAD, UNK, BOS])[None, :] | (np.asarray(emitted) & (ids != EOS)[None, :])
    assert np.all(np.asarray(masked)[blocked] <= -1e8)
    np.testing.assert_array_equal(np.asarray(masked)[~blocked], np.asarray(logits)[~blocked])
    probs = np.asarray(probs)
    assert not np.any(np.isnan(probs))
    assert np.all(probs[blocked] == 0)
    np.testing.assert_allclose(probs[-1], np.eye(vocab)[EOS])
    multi_hot = decoding.emitted_to_multi_hot(emitted, num_special=NUM_SPECIAL)
    np.testing.assert_array_equal(np.asarray(multi_hot), np.asarray(emitted)[:, 4:])


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_label_mask_logits_low_precision_stays_finite(dtype):
    logits = jnp.full((2, 6), 50.0, dtype)
    masked, probs = mask_and_softmax(logits, jnp.ones((2, 6), bool))
    assert masked.dtype == dtype and np.all(np.isfinite(np.asarray(masked, np.float32)))
    np.testing.assert_allclose(np.asarray(probs), np.eye(6)[[EOS] * 2])


# ---------------------------------------------------------------- greedy vs beam size 1


@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
def test_beam_size_one_equals_greedy(length_penalty):
    for seed in range(4):
        params, state = recurrent_scorer(seed, eos_bias=-1.0)
        expected = greedy(params, state, step=recurrent_step, max_steps=8)
        got = beam(params, state, length_penalty, step=recurrent_step, beam_size=1, max_steps=8)
        np.testing.assert_array_equal(got.tokens, expected.tokens)
        np.testing.assert_array_equal(got.length, expected.length)
        np.testing.assert_array_equal(got.emitted, expected.emitted)
        np.testing.assert_allclose(got.log_prob, expected.log_prob, rtol=1e-6)


# ---------------------------------------------------------------- label-set invariants


@pytest.mark.parametrize("eos_bias", [0.0, -4.0])
def test_decoders_emit_valid_label_sets(eos_bias):
    # eos_bias -4: most sequences hold all 6 labels, then the EOS that is the only token left.
    lengths = []
    for seed in range(3):
        params, state = recurrent_scorer(seed, eos_bias=eos_bias)
        results = [greedy(params, state, step=recurrent_step, max_steps=8)]
        results.append(beam(params, state, step=recurrent_step, beam_size=3, max_steps=8))
        for result in results:
            assert_valid_label_sets(result, 8)
            lengths += np.asarray(result.length).tolist()
    assert max(lengths) == 6 and (eos_bias < 0 or min(lengths) < 6)


def test_greedy_without_emitted_mask_repeats_labels_but_never_specials():
    params, state = recurrent_scorer(0)
    # Constant logits preferring PAD, UNK, BOS, then label 5: only the fixed mask stops PAD.
    bias = np.array([[9.0, 8, 7, -5, 0, 6, 0, 0, 0, 0]], np.float32)
    params = {**params, "O": jnp.zeros_like(params["O"]), "eos_bias": jnp.asarray(bias)}
    repeated = greedy(params, state, step=recurrent_step, max_steps=8, mask_emitted=False)
    np.testing.assert_array_equal(repeated.tokens, np.full((3, 8), 5))
    np.testing.assert_array_equal(repeated.length, [8] * 3)
    masked = greedy(params, state, step=recurrent_step, max_steps=8)
    assert_valid_label_sets(masked, 8)
    np.testing.assert_array_equal(masked.tokens[:, 0], [5] * 3)


# ---------------------------------------------------------------- NumPy beam search and per-beam history


@pytest.mark.parametrize("beam_size", [1, 4])
def test_decoders_match_numpy_reference_and_carry_each_beams_history(beam_size):
    # 5 steps for 6 labels: some sequences are still open at max_steps and end there.
    max_steps, lengths = 5, []
    for seed, length_penalty in itertools.product(range(3), (0.0, 1.0)):
        params, c = history_scorer(seed)
        jparams = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), params)
        SEEN_PROBS_ERRORS.clear()
        if beam_size == 1:  # greedy decoding is beam search with one beam
            got = greedy(jparams, history_state(c), step=history_step, max_steps=max_steps)
        else:
            got = beam(jparams, history_state(c), length_penalty, step=history_step, beam_size=beam_size,
                       max_steps=max_steps)
        got = jax.tree.map(np.asarray, got)
        # Every beam (finished ones included) was fed the masked softmax of its own previous step.
        assert SEEN_PROBS_ERRORS and max(SEEN_PROBS_ERRORS) < 1e-5
        for b in range(c.shape[0]):
            expected = np_beam_search(params, c[b], beam_size, max_steps, length_penalty)
            np.testing.assert_array_equal(got.tokens[b], padded(expected["tokens"], max_steps))
            assert got.length[b] == len(expected["emitted"])
            np.testing.assert_allclose(got.log_prob[b], expected["score"], rtol=1e-5, atol=1e-5)
            np.testing.assert_array_equal(np.flatnonzero(got.emitted[b]), sorted(expected["emitted"]))
        lengths += got.length.tolist()
    assert min(lengths) < max_steps - 1 and max(lengths) == max_steps  # both endings are covered


@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
def test_wide_beam_finds_the_best_label_sequence(length_penalty):
    # 3 labels, 4 steps: 16 complete sequences (every ordered subset, then EOS). A beam that wide
    # keeps every prefix, so it must return the exhaustive optimum; at the first step 12 of its
    # beams have no allowed continuation and must never win.
    vocab, max_steps, beam_size = NUM_SPECIAL + 3, 4, 16
    labels = range(NUM_SPECIAL, vocab)
    sequences = [list(p) + [EOS] for n in range(4) for p in itertools.permutations(labels, n)]
    assert len(sequences) == beam_size
    for seed in range(2):
        params, c = history_scorer(seed, batch=2, vocab=vocab, eos_bias=0.0)
        jparams = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), params)
        got = beam(jparams, history_state(c), length_penalty, step=history_step, beam_size=beam_size,
                   max_steps=max_steps)
        got = jax.tree.map(np.asarray, got)
        for b in range(c.shape[0]):
            scores = [np_sequence_score(params, c[b], s) for s in sequences]
            ranks = [score / len(s) ** length_penalty for score, s in zip(scores, sequences)]
            best = int(np.argmax(ranks))
            np.testing.assert_array_equal(got.tokens[b], padded(sequences[best], max_steps))
            np.testing.assert_allclose(got.log_prob[b], scores[best], rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- jit and early stop


def test_decoders_stop_early_under_jit():
    calls = []

    def eos_first(state, previous_token, previous_probs):
        del previous_probs
        jax.debug.callback(calls.append, previous_token)
        logits = jnp.broadcast_to(jnp.asarray([0.0, 0.0, 0.0, 5.0, 1.0]), (previous_token.shape[0], 5))
        return logits + state["x"], state

    state = {"x": jnp.zeros((2, 1))}
    result = jax.jit(lambda s: decoding.greedy_decode(eos_first, s, num_tokens=5, max_steps=8, **IDS))(state)
    assert len(calls) == 1
    np.testing.assert_array_equal(result.tokens, np.tile(padded([EOS], 8), (2, 1)))
    np.testing.assert_array_equal(result.length, [0, 0])
    assert not np.any(np.asarray(result.emitted))

    # Beam 2: EOS, and the only label; after it only EOS is allowed, so all beams end at step 2.
    calls.clear()
    result = jax.jit(lambda s: decoding.beam_search(eos_first, s, num_tokens=5, beam_size=2, max_steps=8, **IDS))(
        state
    )
    assert len(calls) == 2
    np.testing.assert_array_equal(result.tokens, np.tile(padded([EOS], 8), (2, 1)))
    np.testing.assert_array_equal(result.length, [0, 0])
    np.testing.assert_allclose(result.log_prob, np.full(2, jax.nn.log_softmax(jnp.asarray([5.0, 1.0]))[0]))


# ---------------------------------------------------------------- greedy decoding with an EOS threshold


def np_greedy_with_eos_threshold(params, c, max_steps, eos_threshold):
    """One row: stop when P(EOS) >= eos_threshold (or no label is left), else the best label."""
    b = np_initial_beam(c)
    for _ in range(max_steps):
        logits, new_state = np_history_step(params, b["state"], b["token"], b["probs"])
        log_probs, allowed = np_masked_log_softmax(logits, b["emitted"])
        labels = [v for v in np.flatnonzero(allowed) if v != EOS]
        stop = np.exp(log_probs[EOS]) >= eos_threshold or not labels
        token = EOS if stop else max(labels, key=lambda v: log_probs[v])
        b = np_extend(params, b, token, log_probs, new_state)
        if token == EOS:
            break
    return b


@functools.partial(jax.jit, static_argnames=("max_steps",))
def greedy_with_eos_threshold(params, state, eos_threshold, *, max_steps):
    return decoding.greedy_decode(functools.partial(history_step, params), state, num_tokens=params["E"].shape[0],
                                  max_steps=max_steps, eos_threshold=eos_threshold, **IDS)


def test_eos_threshold_matches_numpy_reference_and_goes_on_longer():
    lengths = {}
    for threshold in (0.2, 0.5, 0.9, 1.0):
        lengths[threshold] = []
        for seed in range(3):
            params, c = history_scorer(seed, eos_bias=1.0)
            jparams = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), params)
            got = jax.tree.map(np.asarray, greedy_with_eos_threshold(jparams, history_state(c), threshold, max_steps=8))
            assert_valid_label_sets(got, 8)
            for b in range(c.shape[0]):
                expected = np_greedy_with_eos_threshold(params, c[b], 8, threshold)
                np.testing.assert_array_equal(got.tokens[b], padded(expected["tokens"], 8))
                np.testing.assert_allclose(got.log_prob[b], expected["score"], rtol=1e-5, atol=1e-5)
            lengths[threshold] += got.length.tolist()
    # A higher threshold never stops sooner; at 1 (EOS certain) every one of the 6 labels is emitted.
    assert np.all(np.diff([lengths[t] for t in sorted(lengths)], axis=0) >= 0)
    assert lengths[1.0] == [6] * len(lengths[1.0]) and min(lengths[0.2]) < 6


def test_eos_threshold_zero_is_argmax_decoding():
    params, c = history_scorer(1, eos_bias=1.0)
    jparams = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), params)
    argmax = greedy(jparams, history_state(c), step=history_step, max_steps=8)
    thresholded = greedy_with_eos_threshold(jparams, history_state(c), 0.0, max_steps=8)
    np.testing.assert_array_equal(argmax.tokens, thresholded.tokens)
