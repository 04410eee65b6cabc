"""`jcaps.interpret`'s methods on models that are not jcaps': a Flax NNX text classifier and a
plain JAX function whose padding vector reaches its output, each called as f(vectors, tokens)
with the token ids passed through `args`."""

from __future__ import annotations

import functools
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from jcaps import interpret

B, T, D, C, VOCAB = 6, 9, 8, 3, 40
rng = np.random.default_rng(0)
TOKENS = rng.integers(1, VOCAB, size=(B, T)).astype(np.int32)
TOKENS[1, 6:] = 0  # padded rows
TOKENS[4, 3:] = 0
MASK = TOKENS > 0
# A non-zero PAD vector (row 0): a model that does not mask sees it.
TABLE = rng.normal(size=(VOCAB, D)).astype(np.float32)
VECTORS = jnp.asarray(TABLE[TOKENS])
W1 = jnp.asarray(rng.normal(size=(D, D)).astype(np.float32) * 0.5)
W2 = jnp.asarray(rng.normal(size=(D, C)).astype(np.float32))


class TextClassifier(nnx.Module):
    """Convolution over the word vectors, max over the real positions, a linear layer."""

    def __init__(self, rngs: nnx.Rngs, kernel_size: int = 3):
        self.conv = nnx.Conv(D, 16, kernel_size=(kernel_size,), rngs=rngs)
        self.out = nnx.Linear(16, C, rngs=rngs)

    def __call__(self, vectors, tokens):
        hidden = jax.nn.relu(self.conv(vectors))
        pooled = jnp.max(jnp.where((tokens > 0)[..., None], hidden, -1e9), axis=1)
        return self.out(pooled)


def padding_reaches_the_output(vectors, tokens):
    """A plain function summing over every position, the padding's (non-zero) vectors included."""
    del tokens
    return jnp.einsum("btd,dc->bc", jnp.tanh(vectors @ W1), W2) / T


NNX_MODEL = TextClassifier(nnx.Rngs(0))
MODELS = {"nnx": lambda vectors, tokens: NNX_MODEL(vectors, tokens), "plain": padding_reaches_the_output}
TARGET = np.array([0, 1, 2, 0, 1, 2], np.int32)
TWO_TARGETS = np.stack([TARGET, (TARGET + 1) % C], axis=1)


# Small budgets, where a test is about shapes and plumbing rather than accuracy.
SMALL = {"n_steps": 8, "n_samples": 32, "n_permutations": 2}  # 32 > T: the regressions are well posed


def small(name: str) -> dict:
    return {option: SMALL[option] for option in interpret.METHODS[name].options if option in SMALL}


def call(name, f, x=VECTORS, target=TARGET, **kwargs):
    method = interpret.METHODS[name]
    key = jax.random.key(0) if method.needs_key else None
    return method.function(f, x, target, mask=jnp.asarray(MASK), args=(jnp.asarray(TOKENS),), key=key, **kwargs)


def value_change(f, target=TARGET):
    """f(x) - f(x'), x' the zero baseline at the real positions and x at the padding."""
    baseline = jnp.where(jnp.asarray(MASK)[..., None], 0.0, VECTORS)
    full, empty = f(VECTORS, jnp.asarray(TOKENS)), f(baseline, jnp.asarray(TOKENS))
    return np.asarray(full - empty)[np.arange(B), target]


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("name", sorted(interpret.METHODS))
def test_every_method_explains_the_model_eagerly_and_under_jit(model, name):
    f, options = MODELS[model], small(name)
    eager = np.asarray(call(name, f, **options))
    assert eager.shape == (B, T) and np.all(np.isfinite(eager)) and np.all(eager[~MASK] == 0)
    method = interpret.METHODS[name]
    explain = jax.jit(functools.partial(method.function, f, **options))
    key = jax.random.key(0) if method.needs_key else None
    jitted = np.asarray(explain(VECTORS, TARGET, mask=jnp.asarray(MASK), args=(jnp.asarray(TOKENS),), key=key))
    np.testing.assert_allclose(jitted, eager, rtol=1e-4, atol=1e-5)
    # Two outputs an example: one batched call, each row as the single-target call gives it.
    both = np.asarray(explain(VECTORS, TWO_TARGETS, mask=jnp.asarray(MASK), args=(jnp.asarray(TOKENS),), key=key))
    assert both.shape == (B, 2, T)
    if not method.needs_key:  # the sampling methods draw other coalitions for a bigger batch
        np.testing.assert_allclose(both[:, 0], eager, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(both[:, 1], np.asarray(call(name, f, target=TWO_TARGETS[:, 1], **options)),
                                   rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("model", sorted(MODELS))
def test_shapley_estimates_are_efficient_and_integrated_gradients_complete(model):
    f = MODELS[model]
    change = value_change(f)
    for name in ("kernel_shap", "shapley_sampling"):
        np.testing.assert_allclose(np.asarray(call(name, f, n_samples=64) if name == "kernel_shap"
                                              else call(name, f, n_permutations=4)).sum(-1), change, atol=1e-4)
    # Completeness error |sum - (f(x) - f(x'))| / |f(x) - f(x')|, its median over the examples as
    # the reports give it: below 1e-3 at 256 steps; the NNX model's ReLU and max-pooling kinks
    # leave the worst example at about 1e-3.
    errors = [np.abs(np.asarray(call("integrated_gradients", f, n_steps=steps)).sum(-1) - change) / np.abs(change)
              for steps in (16, 256)]
    assert np.median(errors[1]) < 1e-3 and np.max(errors[1]) < 5e-3
    assert np.max(errors[1]) < np.max(errors[0])  # and falls with the steps


def test_padding_that_reaches_the_output_is_not_a_player():
    """The plain model sees its padding's vectors: were they players (set to the baseline), the
    scores would not sum to f(x) - f(x'); each padded position keeps its vector instead."""
    f = padding_reaches_the_output
    baseline_everywhere = np.asarray(f(jnp.zeros_like(VECTORS), jnp.asarray(TOKENS)))[np.arange(B), TARGET]
    full = np.asarray(f(VECTORS, jnp.asarray(TOKENS)))[np.arange(B), TARGET]
    padded = ~MASK.all(-1)
    assert np.all(np.abs((full - baseline_everywhere) - value_change(f))[padded] > 1e-3)
    scores = np.asarray(call("kernel_shap", f, n_samples=64)).sum(-1)
    np.testing.assert_allclose(scores, value_change(f), atol=1e-4)


@pytest.mark.parametrize("name, option", [("integrated_gradients", {"n_steps": 16}), ("occlusion", {}),
                                          ("kernel_shap", {"n_samples": 32}), ("lime", {"n_samples": 32}),
                                          ("shapley_sampling", {"n_permutations": 2})])
def test_results_do_not_depend_on_max_rows(name, option):
    f = MODELS["nnx"]
    one_copy = np.asarray(call(name, f, max_rows=B, **option))
    at_once = np.asarray(call(name, f, max_rows=100_000, **option))
    np.testing.assert_allclose(one_copy, at_once, rtol=1e-6, atol=1e-6)


def shifted_linear(vectors, tokens):
    """An affine L mixing each position with the one before it (a convolution of width 2)."""
    del tokens
    previous = jnp.pad(vectors, ((0, 0), (1, 0), (0, 0)))[:, :-1]
    return previous @ W1.T * 0.5 + vectors @ W1 + 0.1


def after_shifted_linear(z, tokens):
    return jnp.einsum("btd,dc->bc", jnp.where((tokens > 0)[..., None], jnp.tanh(z), 0.0), W2) / T


def behind_shifted_linear(vectors, tokens):
    return after_shifted_linear(shifted_linear(vectors, tokens), tokens)


@pytest.mark.parametrize("name", sorted(n for n, m in interpret.METHODS.items() if "affine_prefix" in m.options))
def test_behind_an_affine_prefix_a_method_gives_the_same_scores(name):
    """f = g(L(x)) with L affine in x and mixing positions (a convolution of width 2, radius 1):
    the method run behind L (`affine_prefix`: integrated gradients integrates behind it, the
    sampling methods score their coalitions from L's per-position changes, occlusion reads each
    occluded L from s = 2r + 1 calls) gives the scores of the method run on f, for one target an
    example and for two (the args repeated with the rows), in chunks of two copies of the rows a
    call. A radius smaller than L's (0) changes them: the radius is what the method relies on."""
    f, prefix = behind_shifted_linear, (shifted_linear, after_shifted_linear)
    options = {**small(name), "max_rows": 2 * B}
    radii = (None, 1, 2) if "prefix_radius" in interpret.METHODS[name].options else (None,)
    for target in (TARGET, TWO_TARGETS):
        plain = np.asarray(call(name, f, target=target, **options))
        assert np.abs(plain).max() > 1e-3
        for radius in radii:
            reach = {} if radius is None else {"prefix_radius": radius}
            behind = np.asarray(call(name, f, target=target, affine_prefix=prefix, **reach, **options))
            np.testing.assert_allclose(behind, plain, rtol=1e-4, atol=1e-5, err_msg=f"prefix_radius={radius}")
    if "prefix_radius" in interpret.METHODS[name].options:
        too_short = np.asarray(call(name, f, affine_prefix=prefix, prefix_radius=0, **options))
        assert np.abs(too_short - np.asarray(call(name, f, **options))).max() > 1e-3


def test_vmap_over_keys():
    f = MODELS["nnx"]
    keys = jax.random.split(jax.random.key(1), 3)
    # Jitted: one compilation of the vmapped method instead of one for each of its operations.
    scores = jax.jit(jax.vmap(lambda key: interpret.kernel_shap(f, VECTORS, TARGET, mask=jnp.asarray(MASK),
                                                                args=(jnp.asarray(TOKENS),), key=key,
                                                                n_samples=32)))(keys)
    assert scores.shape == (3, B, T)
    np.testing.assert_allclose(np.asarray(scores).sum(-1), np.broadcast_to(value_change(f), (3, B)), atol=1e-4)


@pytest.mark.parametrize("name", sorted(n for n, m in interpret.METHODS.items() if m.needs_key))
def test_with_a_key_an_example_its_scores_do_not_depend_on_the_batch(name):
    """[B] keys, one an example: an example's scores are those of the example explained alone
    with its key, whichever rows share its batch and wherever it stands in it; with [B, 2]
    targets each target's scores are its own single-target call's.

    Jitted (one function for every call, so that calls of one shape compile once): eagerly, each
    new shape compiles every op of the method on its own, which takes several times longer. The
    eager call gives the jitted one's scores (`test_every_method_explains_the_model_eagerly_and_under_jit`)."""
    f, options = MODELS["nnx"], small(name)
    keys = jax.random.split(jax.random.key(3), B)
    method = jax.jit(functools.partial(interpret.METHODS[name].function, f, **options))
    tokens, mask = jnp.asarray(TOKENS), jnp.asarray(MASK)
    batched = method(VECTORS, TARGET, mask=mask, args=(tokens,), key=keys)
    order = np.array([3, 0, 5, 1, 4, 2])
    shuffled = method(VECTORS[order], TARGET[order], mask=mask[order], args=(tokens[order],), key=keys[order])
    np.testing.assert_allclose(np.asarray(shuffled), np.asarray(batched)[order], rtol=1e-5, atol=1e-6)
    alone = method(VECTORS[2:3], TARGET[2:3], mask=mask[2:3], args=(tokens[2:3],), key=keys[2:3])
    np.testing.assert_allclose(np.asarray(alone)[0], np.asarray(batched)[2], rtol=1e-5, atol=1e-6)
    two = method(VECTORS, TWO_TARGETS, mask=mask, args=(tokens,), key=keys)
    second = method(VECTORS, TWO_TARGETS[:, 1], mask=mask, args=(tokens,), key=keys)
    np.testing.assert_allclose(np.asarray(two)[:, 1], np.asarray(second), rtol=1e-5, atol=1e-6)
    # One key for the batch: rows draw differently from one another (not one draw shared).
    if name != "random":
        twice, pair = np.array([0, 0]), np.array([0, 1])
        assert not np.allclose(np.asarray(batched)[0], np.asarray(method(
            VECTORS[twice], TARGET[twice], mask=mask[twice], args=(tokens[twice],), key=keys[pair]))[1])


def test_bad_arguments_get_one_line_naming_them():
    f, tokens = MODELS["nnx"], (jnp.asarray(TOKENS),)
    cases = [
        (lambda: interpret.occlusion(VECTORS, f, TARGET, args=tokens), r"^f: expected the model"),
        (lambda: interpret.occlusion(f, VECTORS, TARGET, mask=jnp.asarray(MASK)[..., None], args=tokens),
         r"^mask: expected bool \[B, T\] = \[6, 9\]"),
        (lambda: interpret.occlusion(f, VECTORS, TARGET, mask=jnp.asarray(MASK, jnp.float32), args=tokens), r"^mask:"),
        (lambda: interpret.occlusion(f, VECTORS, np.zeros(B + 1, np.int32), args=tokens), r"^target: .*B = 6"),
        (lambda: interpret.occlusion(f, VECTORS, TARGET.astype(np.float32), args=tokens), r"^target:"),
        (lambda: interpret.occlusion(f, VECTORS, TARGET, args=(jnp.asarray(TOKENS[:2]),)), r"^args\[0\]: .*B = 6"),
        (lambda: interpret.occlusion(f, VECTORS, TARGET, args=jnp.asarray(TOKENS)), r"^args: expected a tuple"),
        (lambda: interpret.integrated_gradients(f, VECTORS, TARGET, args=tokens, n_steps=2.5), r"^n_steps: .*2\.5"),
        (lambda: interpret.kernel_shap(f, VECTORS, TARGET, args=tokens), r"^key: kernel_shap draws"),
        (lambda: interpret.kernel_shap(f, VECTORS, TARGET, args=tokens, key=jax.random.split(jax.random.key(0), 2)),
         r"^key: expected one PRNG key or 6 of them"),
        (lambda: interpret.occlusion(f, VECTORS, TARGET, args=tokens, baseline=jnp.zeros((2, 2))), r"^baseline:"),
        (lambda: interpret.integrated_gradients(f, jnp.asarray(TOKENS), TARGET, args=tokens), r"^x: expected float inputs"),
        (lambda: jax.jit(functools.partial(interpret.integrated_gradients, f))(VECTORS, TARGET, args=tokens,
                                                                               n_steps=jnp.int32(8)),
         r"^n_steps: a Python int"),
        (lambda: interpret.occlusion(f, VECTORS, TARGET, args=tokens, prefix_radius=1), r"^prefix_radius: .*affine_prefix"),
        (lambda: interpret.lime(f, VECTORS, TARGET, args=tokens, key=jax.random.key(0), prefix_radius=-1,
                                affine_prefix=(shifted_linear, after_shifted_linear)), r"^prefix_radius: expected an int >= 0"),
        (lambda: interpret.occlusion(f, VECTORS, TARGET, args=tokens, prefix_radius=1,
                                     affine_prefix=(lambda v, t: shifted_linear(v, t).reshape(B, -1), None)),
         r"^prefix_radius: the affine prefix's outputs must be \[B, T, \.\.\.\]"),
    ]
    for run, message in cases:
        with pytest.raises((ValueError, TypeError), match=message) as caught:
            run()
        assert "\n" not in str(caught.value)


@pytest.mark.parametrize("name", list(interpret.METHODS))
def test_no_method_gives_a_silent_answer_to_a_wrong_target_output_or_empty_batch(name):
    f = MODELS["plain"]
    wrong = [
        (dict(target=np.full(B, C, np.int32)), rf"^target: expected class indices in \[0, {C}\) .* got {C}$"),
        (dict(target=-1), r"^target: expected class indices in \[0, 3\) .* got -1$"),
        (dict(target=np.stack([TARGET, TARGET + C], axis=1)), r"^target: expected class indices .* got 3$"),
        (dict(f=lambda vectors, tokens: f(vectors, tokens)[:, 0]),
         rf"^f: expected f\(x, \*args\) to return scores \[B, C\] with B = {B} \(x's batch\), got shape \({B},\)$"),
        (dict(f=lambda vectors, tokens: f(vectors, tokens)[:2]), r"^f: expected .* got shape \(2, 3\)$"),
    ]
    weights = jnp.ones((D, C))
    wrong.append((dict(f=lambda vector, tokens: jnp.mean(vector, axis=0) @ weights.T),  # a model of one example
                  r"^f: f\(x, \*args\) fails on x of shape \(6, 9, 8\) \(.*\); f takes a batch: wrap .* in jax.vmap$"))
    for changes, message in wrong:
        model = changes.pop("f", f)
        with pytest.raises(ValueError, match=message):
            call(name, model, **changes)
    method = interpret.METHODS[name]
    key = jax.random.key(0) if method.needs_key else None
    for empty in (VECTORS[:0], VECTORS[:, :0]):
        with pytest.raises(ValueError, match=r"^x: expected .* at least one example of one position"):
            method.function(f, empty, 0, key=key, args=(jnp.asarray(TOKENS[: empty.shape[0], : empty.shape[1]]),))


def test_mask_none_means_every_position_is_real():
    f = MODELS["nnx"]
    scores = interpret.kernel_shap(f, VECTORS, TARGET, args=(jnp.asarray(TOKENS),), key=jax.random.key(0),
                                   n_samples=32)
    assert np.all(np.asarray(scores)[~MASK] != 0)


def test_aggregate_sums_subword_scores_into_words():
    scores = np.array([[0.5, 0.25, -1.0, 2.0, 0.0], [1.0, 1.0, 1.0, 0.0, 0.0]], np.float32)
    word_ids = np.array([[0, 0, 1, 2, -1], [0, 1, 1, -1, -1]])
    expected = np.zeros((2, 5), np.float32)
    for row in range(2):
        for score, word in zip(scores[row], word_ids[row]):
            if word >= 0:
                expected[row, word] += score
    np.testing.assert_allclose(np.asarray(interpret.aggregate(scores, word_ids)), expected)
    np.testing.assert_allclose(np.asarray(jax.jit(functools.partial(interpret.aggregate, num_words=3))(
        scores, word_ids)), expected[:, :3])
    with pytest.raises(ValueError, match=r"^word_ids: expected int"):
        interpret.aggregate(scores, word_ids[:, :3])


def planted_task(size: int, seed: int):
    """Texts of filler tokens with one keyword of their class (ids 1..3) at a random position."""
    draw = np.random.default_rng(seed)
    labels = draw.integers(0, C, size=size)
    tokens = draw.integers(C + 1, VOCAB, size=(size, T)).astype(np.int32)
    where = draw.integers(0, T, size=size)
    tokens[np.arange(size), where] = labels + 1
    return tokens, labels.astype(np.int32), where


@pytest.mark.slow
def test_on_planted_evidence_the_methods_rank_the_keyword_first():
    table = jnp.asarray(TABLE)
    # Width-1 filters: the evidence a position carries is its own word's (a wider filter shares
    # the keyword's evidence with its neighbours, which the methods then rightly credit).
    model = TextClassifier(nnx.Rngs(1), kernel_size=1)
    optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
    tokens, labels, _ = planted_task(600, seed=1)

    @nnx.jit
    def step(model, optimizer, tokens, labels):
        def loss(model):
            logits = model(table[tokens], tokens)
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

        grads = nnx.grad(loss)(model)
        optimizer.update(model, grads)

    with jax.numpy_dtype_promotion("standard"):  # optax's updates mix Python scalars and int32 counts
        for _ in range(30):
            for start in range(0, 600, 60):
                step(model, optimizer, jnp.asarray(tokens[start:start + 60]), jnp.asarray(labels[start:start + 60]))

    test_tokens, test_labels, where = planted_task(64, seed=2)
    vectors = jnp.asarray(TABLE[test_tokens])

    def f(vectors, tokens):
        return model(vectors, tokens)

    predicted = np.asarray(jnp.argmax(f(vectors, jnp.asarray(test_tokens)), axis=-1))
    correct = predicted == test_labels
    assert correct.mean() > 0.9  # the task is learnt
    for name, options in (("integrated_gradients", {}), ("occlusion", {}), ("kernel_shap", {}), ("lime", {})):
        method = interpret.METHODS[name]
        # Jitted: one compilation instead of one per operation (the eager call gives the same
        # scores: `test_every_method_explains_the_model_eagerly_and_under_jit`).
        explain = jax.jit(functools.partial(method.function, f, **options))
        scores = np.asarray(explain(vectors, predicted, args=(jnp.asarray(test_tokens),),
                                    key=jax.random.key(3) if method.needs_key else None))
        hits = np.argmax(scores, axis=-1) == where
        assert hits[correct].mean() >= 0.95, (name, hits[correct].mean())


def keyword_model(vectors, tokens):
    """Class c's logit: the summed |vector| of the keyword of c (token id c + 1) in the text; every
    other token is ignored, so a keyword is the whole evidence for its class."""
    keyword = jax.nn.one_hot(tokens - 1, C, dtype=vectors.dtype)  # [B, T, C]; ids 0 and > C: none
    return jnp.einsum("btc,bt->bc", keyword, jnp.sum(jnp.abs(vectors), axis=-1))


def test_a_model_of_ones_own_gets_faithfulness_checks_and_the_report(tmp_path):
    """The whole face on a user's function: faithfulness, the sanity checks (randomisation against
    another model, localisation on the planted keywords) and the HTML report. Integrated gradients
    finds the keyword and random does not; random's scores ignore the model and are flagged."""
    tokens, labels, where = planted_task(16, seed=4)
    vectors, args = jnp.asarray(TABLE[tokens]), (jnp.asarray(tokens),)
    methods = ("integrated_gradients", "occlusion", "random")
    scores = {name: call_on(name, keyword_model, vectors, labels, args) for name in methods}
    faithful = {name: interpret.faithfulness(keyword_model, vectors, labels, s, args=args) for name, s in scores.items()}
    ig, random = (float(np.mean(faithful[m]["comprehensiveness"])) for m in ("integrated_gradients", "random"))
    assert ig > random + 0.2, (ig, random)

    evidence = np.zeros(tokens.shape, bool)
    evidence[np.arange(len(tokens)), where] = True
    summary = interpret.checks.sanity_checks(
        keyword_model, vectors, labels, methods=methods, args=args, key=jax.random.key(0),
        randomised=(("all", padding_reaches_the_output),), evidence=evidence,
        method_options={"integrated_gradients": {"n_steps": 16}},
    )
    assert summary["integrated_gradients"]["pointing_game"] == 1.0 and summary["random"]["pointing_game"] < 0.5
    assert summary["random"]["randomisation_flagged"] and not summary["integrated_gradients"]["randomisation_flagged"]
    assert summary["random"]["max_sensitivity"] is None  # random is not a function of the inputs
    assert summary["integrated_gradients"]["degenerate"] == 0.0 and summary["settings"]["limit"] == len(tokens)

    words = [[f"w{t}" for t in row] for row in tokens.tolist()]
    path = interpret.report.write_html(tmp_path / "report.html", words, scores, targets=[f"class {c}" for c in labels],
                                       faithfulness=faithful, checks=summary)
    page = Path(path).read_text(encoding="utf-8")
    assert "Sanity checks" in page and f"{ig:.4f}" in page and "class 2" in page
    assert page.count('class="example"') == len(tokens) and all(f">{m}</label>" in page for m in methods)
    with pytest.raises(ValueError, match=r"^scores_by_method\['occlusion'\]: expected \[B, T\] with B = 16"):
        interpret.report.write_html(tmp_path / "bad.html", words, {"occlusion": scores["occlusion"][:3]})
    with pytest.raises(ValueError, match=r"^methods: expected names in interpret.METHODS"):
        interpret.checks.sanity_checks(keyword_model, vectors, labels, methods=("integrated_gradient",), args=args)


def call_on(name, f, x, target, args):
    method = interpret.METHODS[name]
    key = jax.random.key(0) if method.needs_key else None
    options = {"n_steps": 16} if name == "integrated_gradients" else {}
    return np.asarray(method.function(f, x, target, args=args, key=key, **options))
