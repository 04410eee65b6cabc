"""`train_step` and `eval_step` on hand-made batches of a linear model, checked against the loss,
gradient, SGD update and counts worked out with NumPy."""

import dataclasses
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from jcaps.models.outputs import ModelOutput
from jcaps.train.families import ModelFamily, binary_relevance_labels, binary_relevance_loss, sigmoid_probabilities
from jcaps.train.families import softmax_cross_entropy, softmax_probabilities
from jcaps.train import mesh as mesh_lib
from jcaps.train.steps import TrainState, compile_steps, eval_step, train_step

LEARNING_RATE = 0.5
# W [D=2, J=3] and four examples, the last one padding (weight 0): it must change nothing.
W = np.array([[0.5, -1.0, 0.0], [1.0, 0.5, -0.5]], np.float32)
X = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, -1.0], [9.0, 9.0]], np.float32)
LABEL = np.array([0, 2, 1, 1], np.int32)
WEIGHT = np.array([1.0, 1.0, 1.0, 0.0], np.float32)


class Linear(nn.Module):
    """scores = x W: [B, D] -> [B, J]."""

    num_classes: int

    @nn.compact
    def __call__(self, x, train: bool = False):
        del train
        kernel = self.param("kernel", nn.initializers.zeros, (x.shape[-1], self.num_classes))
        return ModelOutput(scores=x @ kernel)


# The model reads the batch's "tokens" (here features), the input binary_relevance_labels passes.
SINGLE_LABEL = ModelFamily(Linear, softmax_cross_entropy, softmax_probabilities)
MULTI_LABEL = ModelFamily(
    Linear, binary_relevance_loss, sigmoid_probabilities, loss_keys=("threshold",), predict_labels=binary_relevance_labels
)


def state_of(kernel) -> TrainState:
    model = Linear(num_classes=kernel.shape[1])
    return TrainState.create(
        apply_fn=model.apply, params={"kernel": jnp.asarray(kernel)}, tx=optax.sgd(LEARNING_RATE),
        rng=jax.random.key(0),
    )


def softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_train_step_is_one_sgd_step_on_the_weighted_mean_loss():
    batch = {"tokens": X, "label": LABEL, "weight": WEIGHT}
    state, metrics = jax.jit(lambda s, b: train_step(s, b, family=SINGLE_LABEL, model_config=None))(state_of(W), batch)

    p = softmax(X.astype(np.float64) @ W)
    one_hot = np.eye(3)[LABEL]
    real = WEIGHT / WEIGHT.sum()  # the padded row weighs nothing
    loss = -np.sum(real * np.log(p[np.arange(4), LABEL]))
    grad = X.T @ ((p - one_hot) * real[:, None])  # dL/dW of the mean cross-entropy of x W
    accuracy = np.sum(real * (np.argmax(X @ W, -1) == LABEL))

    np.testing.assert_allclose(metrics["loss"], loss, rtol=1e-6)
    np.testing.assert_allclose(metrics["grad_norm"], np.linalg.norm(grad), rtol=1e-6)
    np.testing.assert_allclose(metrics["param_norm"], np.linalg.norm(W), rtol=1e-6)
    np.testing.assert_allclose(metrics["accuracy"], accuracy)
    np.testing.assert_allclose(state.params["kernel"], W - LEARNING_RATE * grad, rtol=1e-6, atol=1e-7)
    assert int(state.step) == 1


def test_eval_step_sums_loss_count_and_confusion_over_real_examples():
    batch = {"tokens": X, "label": LABEL, "weight": WEIGHT}
    mesh = mesh_lib.data_mesh()
    step = functools.partial(eval_step, family=SINGLE_LABEL, model_config=None, num_classes=3, mesh=mesh)
    sums = jax.jit(step)(state_of(W), batch)
    # Scores x W: [0.5, -1, 0] -> 0 (true 0); [2, 1, -1] -> 0 (true 2); [-0.5, -1.5, 0.5] -> 2 (true 1).
    confusion = np.zeros((3, 3))
    confusion[0, 0] = confusion[2, 0] = confusion[1, 2] = 1
    p = softmax(X[:3].astype(np.float64) @ W)
    np.testing.assert_allclose(sums["loss_sum"], -np.sum(np.log(p[np.arange(3), LABEL[:3]])), rtol=1e-6)
    assert float(sums["count"]) == 3.0
    np.testing.assert_array_equal(sums["confusion"], confusion)


@pytest.mark.parametrize("threshold", [0.5, 0.8])
def test_eval_step_counts_predicted_label_sets(threshold):
    kernel = np.array([[2.0, -2.0], [0.0, 1.0]], np.float32)
    x = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [5.0, 5.0]], np.float32)
    labels = np.array([[1, 0], [1, 1], [1, 1], [0, 0]], np.float32)
    # sigmoid(x W): [0.88, 0.12], [0.5, 0.73], [0.88, 0.27]: at 0.5 the sets are {0}, {0, 1},
    # {0}; at 0.8 they are {0}, {}, {0}.
    predicted = {0.5: [[1, 0], [1, 1], [1, 0]], 0.8: [[1, 0], [0, 0], [1, 0]]}[threshold]
    model_config = ml_collections.ConfigDict({"threshold": threshold})
    batch = {"tokens": x, "labels": labels, "weight": WEIGHT}
    sums = eval_step(
        state_of(kernel), batch, family=MULTI_LABEL, model_config=model_config, num_classes=2, mesh=mesh_lib.data_mesh()
    )

    predicted, target = np.array(predicted), labels[:3]
    np.testing.assert_array_equal(sums["true_positive"], np.sum(predicted * target, 0))
    np.testing.assert_array_equal(sums["false_positive"], np.sum(predicted * (1 - target), 0))
    np.testing.assert_array_equal(sums["false_negative"], np.sum((1 - predicted) * target, 0))
    np.testing.assert_allclose(sums["exact_match_sum"], np.sum(np.all(predicted == target, -1)))
    np.testing.assert_allclose(sums["predicted_labels_sum"], predicted.sum())
    f1 = 2 * np.sum(predicted * target, -1) / (predicted.sum(-1) + target.sum(-1))
    np.testing.assert_allclose(sums["example_f1_sum"], f1.sum(), rtol=1e-6)
    assert "confusion" not in sums


def _decoded_until_done(apply_fn, params, batch, model_config):
    """A decoder's shape: a `while_loop` that runs until every row of its batch is done (here
    when its counter passes the row's first feature), then sets the labels it reached."""
    del apply_fn, params, model_config
    limit = batch["tokens"][:, 0]

    def cond(carry):
        return ~jnp.all(carry > limit)

    counter = jax.lax.while_loop(cond, lambda carry: carry + 1.0, jnp.zeros_like(limit))
    return jnp.stack([counter > 1.0, counter > 5.0], axis=-1).astype(jnp.float32)


def _while_loop_computations(hlo: str) -> list[str]:
    """The text of every computation of an HLO module that a `while` runs as its condition or body."""
    blocks, name, lines = {}, None, []
    for line in hlo.splitlines():
        if line and not line.startswith(" ") and line.rstrip().endswith("{"):
            name, lines = line.split()[1] if line.startswith("ENTRY") else line.split()[0], []
        elif line.startswith("}") and name is not None:
            blocks[name.lstrip("%")], name = "\n".join(lines), None
        elif name is not None:
            lines.append(line)
    called = set()
    for text in blocks.values():
        for op in text.splitlines():
            if " while(" in op:
                parts = op.split(", ")
                called.update(p.split("=")[1].lstrip("%") for p in parts if p.startswith(("condition=", "body=")))
    return [blocks[name] for name in called]


def test_a_decoders_loop_runs_on_each_devices_rows_alone():
    """On a mesh of two devices the eval step decodes each device's rows in a loop of its own:
    no collective runs inside a `while` (one would at every decoded token), and the label sets
    are those of each row's own stopping point."""
    family = dataclasses.replace(MULTI_LABEL, predict_labels=_decoded_until_done)
    mesh = mesh_lib.data_mesh()
    assert mesh.size == 2
    config = ml_collections.ConfigDict({"model": {"threshold": 0.5}})
    _, evaluate = compile_steps(config, family, 2, mesh)
    batch = {
        "tokens": np.array([[0.0, 0.0], [3.0, 0.0], [9.0, 0.0], [1.0, 0.0]], np.float32),
        "labels": np.array([[1, 0], [1, 0], [1, 1], [0, 0]], np.float32),
        "weight": np.ones(4, np.float32),
    }
    batch = mesh_lib.global_batch(batch, mesh)
    state = jax.device_put(state_of(np.zeros((2, 2), np.float32)), mesh_lib.replicated(mesh))

    loops = _while_loop_computations(evaluate.lower(state, batch).compile().as_text())
    assert loops and not any("all-reduce" in text for text in loops)
    # Each device stops at its own rows' largest limit: counters 4, 4 on the first device (rows
    # with limits 0 and 3) and 10, 10 on the second (limits 9 and 1).
    sums = evaluate(state, batch)
    predicted, target = np.array([[1, 0], [1, 0], [1, 1], [1, 1]]), np.array([[1, 0], [1, 0], [1, 1], [0, 0]])
    np.testing.assert_array_equal(sums["true_positive"], np.sum(predicted * target, 0))
    np.testing.assert_array_equal(sums["predicted_labels_sum"], predicted.sum())
