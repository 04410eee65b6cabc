"""Models that take token ids: a linen and an NNX module of their own, trained on planted
keywords, explained by every method of the table: the perturbation methods on the ids with a
baseline id, the gradient methods at the embedding layer (`at_layer` with
`jcaps.interpret.layers`)."""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from jcaps import attribution
from jcaps.interpret.layers import linen_split, nnx_split
from tests.interpret.test_any_model import VOCAB, C, T, planted_task

D, PAD = 8, 0
GRADIENT_METHODS = tuple(n for n, m in attribution.METHODS.items() if m.of_inputs and n not in
                         ("occlusion", "kernel_shap", "shapley_sampling", "lime"))


class LinenClassifier(nn.Module):
    """Embedding, a width-1 convolution, max over positions, a linear layer."""

    def setup(self):
        self.embed = nn.Embed(VOCAB, D)
        self.conv = nn.Conv(16, kernel_size=(1,))
        self.out = nn.Dense(C)

    def __call__(self, tokens):
        hidden = jax.nn.relu(self.conv(self.embed(tokens)))
        # PAD positions count as 0 (a removed word adds nothing; an all-PAD text is finite)
        return self.out(jnp.max(jnp.where((tokens > 0)[..., None], hidden, 0.0), axis=1))


class NNXClassifier(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.embed = nnx.Embed(VOCAB, D, rngs=rngs)
        self.conv = nnx.Conv(D, 16, kernel_size=(1,), rngs=rngs)
        self.out = nnx.Linear(16, C, rngs=rngs)

    def __call__(self, tokens):
        hidden = jax.nn.relu(self.conv(self.embed(tokens)))
        # PAD positions count as 0 (a removed word adds nothing; an all-PAD text is finite)
        return self.out(jnp.max(jnp.where((tokens > 0)[..., None], hidden, 0.0), axis=1))


def trained_linen():
    model = LinenClassifier()
    tokens, labels, _ = planted_task(600, seed=1)
    params = model.init(jax.random.key(0), jnp.asarray(tokens[:2]))["params"]
    optimizer = optax.adam(1e-2)
    state = optimizer.init(params)

    @jax.jit
    def step(params, state, tokens, labels):
        def loss(params):
            logits = model.apply({"params": params}, tokens)
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

        updates, state = optimizer.update(jax.grad(loss)(params), state, params)
        return optax.apply_updates(params, updates), state

    with jax.numpy_dtype_promotion("standard"):
        for _ in range(30):
            for start in range(0, 600, 60):
                params, state = step(params, state, jnp.asarray(tokens[start:start + 60]),
                                     jnp.asarray(labels[start:start + 60]))
    variables = {"params": params}
    return (lambda ids: model.apply(variables, ids)), linen_split(model, variables, "embed")


def trained_nnx():
    model = NNXClassifier(nnx.Rngs(1))
    optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
    tokens, labels, _ = planted_task(600, seed=1)

    @nnx.jit
    def step(model, optimizer, tokens, labels):
        def loss(model):
            return optax.softmax_cross_entropy_with_integer_labels(model(tokens), labels).mean()

        optimizer.update(model, nnx.grad(loss)(model))

    with jax.numpy_dtype_promotion("standard"):
        for _ in range(30):
            for start in range(0, 600, 60):
                step(model, optimizer, jnp.asarray(tokens[start:start + 60]), jnp.asarray(labels[start:start + 60]))
    return (lambda ids: model(ids)), nnx_split(model, "embed")


@pytest.fixture(scope="module", params=["linen", "nnx"])
def trained(request):
    return {"linen": trained_linen, "nnx": trained_nnx}[request.param]()


def scores_of(name: str, f, split, tokens, targets, **options):
    method = attribution.METHODS[name]
    key = jax.random.key(3) if method.needs_key else None
    if name in GRADIENT_METHODS:  # at the embedding layer
        explain = attribution.at_layer(name, *split)
        return np.asarray(explain(tokens, targets, mask=tokens > 0, key=key, **options))
    # on the ids themselves, a removed token becoming PAD
    explain = jax.jit(functools.partial(method.function, f, baseline=PAD, **options))
    return np.asarray(explain(tokens, targets, mask=tokens > 0, key=key))


@pytest.mark.slow
def test_every_method_explains_a_model_of_token_ids_and_finds_the_planted_keyword(trained):
    f, split = trained
    tokens, labels, where = planted_task(64, seed=2)
    tokens = jnp.asarray(tokens)
    predicted = np.asarray(jnp.argmax(f(tokens), axis=-1))
    correct = predicted == labels
    assert correct.mean() > 0.9  # the task is learnt
    for name in attribution.METHODS:
        scores = scores_of(name, f, split, tokens, jnp.asarray(predicted))
        assert scores.shape == (64, T) and np.isfinite(scores).all(), name
        if name in ("integrated_gradients", "occlusion", "kernel_shap", "lime"):
            hits = np.argmax(scores, axis=-1) == where
            assert hits[correct].mean() >= 0.95, (name, hits[correct].mean())


@pytest.mark.slow
def test_completeness_holds_at_the_embedding_layer(trained):
    f, (embed, after) = trained
    tokens, _, _ = planted_task(16, seed=3)
    tokens = jnp.asarray(tokens)
    np.testing.assert_allclose(after(embed(tokens), tokens), f(tokens), rtol=1e-5, atol=1e-5)  # the split is f
    target = jnp.argmax(f(tokens), axis=-1)
    scores = attribution.at_layer("integrated_gradients", embed, after)(tokens, target, n_steps=256)
    h = embed(tokens)
    change = np.asarray(after(h, tokens) - after(jnp.zeros_like(h), tokens))[np.arange(16), np.asarray(target)]
    error = np.abs(np.asarray(scores).sum(-1) - change) / np.abs(change)
    assert error.max() < 1e-3, error


def test_perturbation_methods_take_ids_and_the_gradient_methods_say_where_to_go():
    def count_of_id_one(ids):  # [B, T] int -> [B, 2]
        ones = jnp.sum(ids == 1, axis=1).astype(jnp.float32)
        return jnp.stack([ones, -ones], axis=1)

    ids = jnp.array([[1, 5, 1, 0], [7, 1, 2, 0]])
    occluded = attribution.occlusion(count_of_id_one, ids, 0, mask=ids > 0, baseline=PAD)
    np.testing.assert_array_equal(occluded, [[1, 0, 1, 0], [0, 1, 0, 0]])
    shap = attribution.kernel_shap(count_of_id_one, ids, 0, mask=ids > 0, key=jax.random.key(0), n_samples=64)
    np.testing.assert_allclose(shap, [[1, 0, 1, 0], [0, 1, 0, 0]], atol=1e-5)
    with pytest.raises(ValueError, match=r"^x: expected float inputs .* got int32 of shape \(2, 4\); a gradient method "
                                         r"differentiates f in x: explain a model of token ids at its embedding layer"):
        attribution.integrated_gradients(count_of_id_one, ids, 0)
    with pytest.raises(ValueError, match=r"^baseline: x holds ids \(int32\), so the baseline is an id"):
        attribution.occlusion(count_of_id_one, ids, 0, baseline=0.5)


def test_a_layer_the_model_does_not_have_is_named():
    model = LinenClassifier()
    variables = model.init(jax.random.key(0), jnp.ones((1, T), jnp.int32))
    embed, _ = linen_split(model, variables, "embedding")
    with pytest.raises(ValueError, match="^layer: LinenClassifier called no submodule at 'embedding'"):
        embed(jnp.ones((1, T), jnp.int32))
    with pytest.raises(ValueError, match="^layer: NNXClassifier has no submodule at 'encoder/embed'"):
        nnx_split(NNXClassifier(nnx.Rngs(0)), "encoder/embed")
