"""Learning-rate schedules (valid for any number of steps) and parameter groups."""

import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from jcaps.errors import ConfigError
from jcaps.train.config import base_config, load
from jcaps.train.optim import learning_rate_schedule, make_optimizer

CCCAPSNET = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "configs", "cccapsnet_ag_news.py"
)


@pytest.mark.parametrize("kind", ["constant", "cosine", "linear", "warmup_cosine", "steps"])
@pytest.mark.parametrize("num_steps", [1, 2, 1000])
def test_every_schedule_is_defined_for_any_length(kind, num_steps):
    train = base_config().train
    train.schedule, train.learning_rate, train.warmup_fraction = kind, 1e-3, 0.05
    train.decay_boundaries = (0.5,)
    schedule = learning_rate_schedule(train, num_steps)
    values = np.array([float(schedule(step)) for step in range(num_steps + 1)])
    assert np.all(np.isfinite(values)) and np.all(values >= 0) and values.max() <= 1e-3 * (1 + 1e-6)


def test_warmup_cosine_rises_to_the_peak_then_decays():
    train = base_config().train
    train.schedule, train.learning_rate, train.warmup_fraction = "warmup_cosine", 3e-3, 0.1
    schedule = learning_rate_schedule(train, 100)
    assert float(schedule(0)) == 0.0
    assert float(schedule(10)) == pytest.approx(3e-3)
    assert float(schedule(55)) == pytest.approx(1.5e-3, rel=1e-3)
    assert float(schedule(100)) == pytest.approx(0.0, abs=1e-9)


PARAMS = {"embedding": {"a": jnp.ones(2)}, "encoder": {"b": jnp.ones(3)}, "classifier": {"c": jnp.ones(1)}}


def _update_sizes(tx, num_updates, grad=1.0):
    """-update of the first leaf of each group, per step, for constant gradients."""
    state, sizes = tx.init(PARAMS), []
    for _ in range(num_updates):
        updates, state = tx.update(jax.tree.map(lambda p: jnp.full_like(p, grad), PARAMS), state, PARAMS)
        sizes.append([-float(updates[g][k][0]) for g, k in (("embedding", "a"), ("encoder", "b"), ("classifier", "c"))])
    return np.array(sizes)


def cccapsnet_reference_recipe():
    """CCCapsNet's config with the authors' optimiser settings (the config's differ, see its docstring)."""
    train = load(CCCAPSNET).train
    train.update(learning_rate=1e-3, schedule="steps")
    train.param_groups = ml_collections.ConfigDict(
        {"embedding": {}, "encoder": {}, "classifier": {"learning_rate": 1e-4}}
    )
    return train


def test_parameter_groups_have_their_learning_rates_on_one_schedule():
    train = cccapsnet_reference_recipe()
    # Adam's first steps on a constant gradient move each parameter by the learning rate:
    # 1e-3 (embedding, encoder) and 1e-4 (classifier), x0.1 from 50 % and again from 70 %.
    sizes = _update_sizes(make_optimizer(train, 10), 10)
    decay = np.array([1.0] * 5 + [0.1] * 2 + [0.01] * 3)[:, None]
    np.testing.assert_allclose(sizes, decay * np.array([[1e-3, 1e-3, 1e-4]]), rtol=1e-4)


def test_a_parameter_group_sets_its_own_learning_rate():
    train = cccapsnet_reference_recipe()
    train.param_groups.embedding.learning_rate = 2e-2
    sizes = _update_sizes(make_optimizer(train, 10), 1)
    np.testing.assert_allclose(sizes[0], [2e-2, 1e-3, 1e-4], rtol=1e-4)


def test_parameter_groups_clip_the_norm_of_all_gradients_together():
    train = cccapsnet_reference_recipe()
    train.optimizer = "sgd"
    train.grad_clip_norm = 1.0
    # Six gradient entries of 10: global norm 10 sqrt(6), so each is clipped to 1 / sqrt(6).
    sizes = _update_sizes(make_optimizer(train, 10), 1, grad=10.0)
    np.testing.assert_allclose(sizes[0], np.array([1e-3, 1e-3, 1e-4]) / np.sqrt(6), rtol=1e-5)


def test_every_top_level_parameter_subtree_needs_a_group():
    train = cccapsnet_reference_recipe()
    del train.param_groups["encoder"]
    with pytest.raises(ConfigError, match=r"no group for the parameters encoder"):
        make_optimizer(train, 10).init(PARAMS)
