"""Groups as players (`groups` of occlusion, KernelSHAP, Shapley sampling, LIME and random): the
Shapley values of the groups, enumerated here over every coalition of groups, and the one-line
errors of the argument."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcaps import attribution

B, T, D, C = 3, 8, 3, 3
rng = np.random.default_rng(0)
X = rng.normal(size=(B, T, D)).astype(np.float32)
MASK = np.arange(T)[None, :] < np.array([8, 6, 3])[:, None]
# Row 0: four words of 1-3 tokens and a special token (-1) first; row 1: ids out of order and
# one id (5) never used; row 2: a single group.
GROUPS = np.array([
    [-1, 0, 0, 1, 2, 2, 2, 3],
    [3, 3, 0, 1, 1, 3, -1, -1],
    [0, 0, 0, -1, -1, -1, -1, -1],
])
TARGET = np.array([0, 2, 1])
W1, W2 = rng.normal(size=(D, C)).astype(np.float32), rng.normal(size=(D, C)).astype(np.float32)


def interacting(x):
    """[K, T, D] -> [K, C]: a product of sums, so a group's value depends on the others."""
    return jnp.tanh(jnp.einsum("ktd,dc->kc", x, W1)) * jnp.einsum("ktd,dc->kc", x, W2)


def exact_group_shapley(f, x, mask, groups, target, baseline=0.0):
    """[B, T]: entry g the exact Shapley value of group g, by enumeration over every coalition
    of groups (positions of no group, and padding, keep their values)."""
    phi = np.zeros((len(x), T))
    for b in range(len(x)):
        players = sorted({int(g) for g, real in zip(groups[b], mask[b]) if real and g >= 0})
        m = len(players)

        def value(coalition, b=b):
            kept = np.isin(groups[b], list(coalition)) | ~mask[b] | (groups[b] < 0)
            row = np.where(kept[:, None], x[b], baseline)
            return float(np.asarray(f(jnp.asarray(row[None], jnp.float32)))[0, target[b]])

        values = {frozenset(s): value(s) for r in range(m + 1) for s in itertools.combinations(players, r)}
        for g in players:
            for s, v in values.items():
                if g not in s:
                    weight = math.factorial(len(s)) * math.factorial(m - len(s) - 1) / math.factorial(m)
                    phi[b, g] += weight * (values[s | {g}] - v)
    return phi


def group_value_change(f, x, mask, groups, target):
    """f(x) - f(x with every grouped real position at zero), a row each: what efficiency sums to."""
    playing = mask & (groups >= 0)
    full = np.asarray(f(jnp.asarray(x)))[np.arange(B), target]
    empty = np.asarray(f(jnp.asarray(np.where(playing[..., None], 0.0, x))))[np.arange(B), target]
    return full - empty


@pytest.fixture(scope="module")
def exact():
    return exact_group_shapley(interacting, X, MASK, GROUPS, TARGET)


def test_kernel_shap_over_every_coalition_of_groups_is_the_exact_shapley_value(exact):
    for seed in (0, 1):
        phi = attribution.kernel_shap(interacting, X, TARGET, mask=MASK, groups=GROUPS, key=jax.random.key(seed),
                                      n_samples=2**4 - 2)
        np.testing.assert_allclose(np.asarray(phi), exact, atol=1e-5)
    assert np.all(exact[1, [2, 4, 5, 6, 7]] == 0)  # ids no real position has


def test_shapley_sampling_over_two_groups_is_exact_and_efficient_at_any_budget(exact):
    """An order and its reverse are every order of two players: exact; with more, each order is
    efficient, so the mean is."""
    two = np.array([[0, 0, 1, 1, 1, 0, 1, -1]] * B)
    exact_two = exact_group_shapley(interacting, X, MASK, two, TARGET)
    phi = attribution.shapley_sampling(interacting, X, TARGET, mask=MASK, groups=two, key=jax.random.key(0),
                                       n_permutations=2)
    np.testing.assert_allclose(np.asarray(phi), exact_two, atol=1e-5)
    change = group_value_change(interacting, X, MASK, GROUPS, TARGET)
    for budget in (2, 6):
        phi = attribution.shapley_sampling(interacting, X, TARGET, mask=MASK, groups=GROUPS, key=jax.random.key(1),
                                           n_permutations=budget)
        np.testing.assert_allclose(np.asarray(phi).sum(-1), change, atol=1e-5)
    many = attribution.shapley_sampling(interacting, X, TARGET, mask=MASK, groups=GROUPS, key=jax.random.key(2),
                                        n_permutations=512)
    np.testing.assert_allclose(np.asarray(many), exact, atol=0.05)


def test_kernel_shap_over_groups_is_efficient_at_any_budget():
    change = group_value_change(interacting, X, MASK, GROUPS, TARGET)
    for budget in (2, 5):
        phi = attribution.kernel_shap(interacting, X, TARGET, mask=MASK, groups=GROUPS, key=jax.random.key(3),
                                      n_samples=budget)
        np.testing.assert_allclose(np.asarray(phi).sum(-1), change, atol=1e-5)


def test_occlusion_of_a_group_leaves_all_of_its_positions_out_together():
    phi = np.asarray(attribution.occlusion(interacting, X, TARGET, mask=MASK, groups=GROUPS))
    full = np.asarray(interacting(jnp.asarray(X)))[np.arange(B), TARGET]
    for b in range(B):
        for g in range(T):
            members = MASK[b] & (GROUPS[b] == g)
            if not members.any():
                assert phi[b, g] == 0
                continue
            left_out = np.asarray(interacting(jnp.asarray(np.where(members[:, None], 0.0, X[b])[None])))[0, TARGET[b]]
            np.testing.assert_allclose(phi[b, g], full[b] - left_out, atol=1e-5)


def test_on_a_model_additive_in_its_groups_lime_and_aggregated_occlusion_agree_with_shapley():
    """f = sum over positions: a group's Shapley value is the sum of its positions' effects, which
    `aggregate` of the positions' occlusion gives, and LIME's coefficient (no shrinkage)."""

    def additive(x):
        return jnp.einsum("ktd,dc->kc", jnp.tanh(x), W1)

    exact = exact_group_shapley(additive, X, MASK, GROUPS, TARGET)
    by_positions = attribution.aggregate(attribution.occlusion(additive, X, TARGET, mask=MASK),
                                         jnp.where(jnp.asarray(MASK), jnp.asarray(GROUPS), -1))
    np.testing.assert_allclose(np.asarray(by_positions), exact, atol=1e-5)
    lime = attribution.lime(additive, X, TARGET, mask=MASK, groups=GROUPS, key=jax.random.key(0), n_samples=64,
                            alpha=1e-6)
    np.testing.assert_allclose(np.asarray(lime), exact, atol=1e-3)


def test_token_ids_several_targets_and_jit_take_groups():
    """Ids swapped for a PAD id a word at a time, [B, K] targets as K batched games, the groups
    traced under jit."""
    ids = jnp.asarray(rng.integers(1, 5, size=(B, T)))
    table = jnp.asarray(rng.normal(size=(5, D)).astype(np.float32))

    def of_ids(tokens):
        return interacting(table[tokens])

    expected = exact_group_shapley(interacting, np.asarray(table[ids]), MASK, GROUPS, TARGET,
                                   baseline=np.asarray(table[0]))
    explain = jax.jit(lambda groups, key: attribution.kernel_shap(of_ids, ids, TARGET, mask=MASK, groups=groups,
                                                                  key=key, baseline=0, n_samples=14))
    np.testing.assert_allclose(np.asarray(explain(jnp.asarray(GROUPS), jax.random.key(0))), expected, atol=1e-5)
    targets = np.stack([TARGET, (TARGET + 1) % C], axis=1)
    both = attribution.occlusion(interacting, X, targets, mask=MASK, groups=GROUPS)
    assert both.shape == (B, 2, T)
    for k in range(2):
        np.testing.assert_allclose(np.asarray(both[:, k]), np.asarray(attribution.occlusion(
            interacting, X, targets[:, k], mask=MASK, groups=GROUPS)), atol=1e-6)


def test_random_scores_only_the_groups_ids():
    scores = np.asarray(attribution.random(interacting, X, TARGET, mask=MASK, groups=GROUPS, key=jax.random.key(0)))
    for b in range(B):
        used = np.isin(np.arange(T), GROUPS[b][MASK[b]])
        assert np.all(scores[b][~used] == 0) and np.all(scores[b][used] > 0)


@pytest.mark.parametrize("groups, message", [
    (GROUPS[:, :4], r"groups: expected int \[B, T\] = \[3, 8\] .*got int32 of shape \(3, 4\)"),
    (GROUPS.astype(np.float32), r"groups: expected int \[B, T\] = \[3, 8\] .*got float32"),
    (np.where(GROUPS == 3, 8, GROUPS), r"groups: expected group ids in \[0, 8\) .* or -1 for none, got 8"),
    (np.where(GROUPS == 3, -2, GROUPS), r"groups: expected group ids in \[0, 8\) .* got -2"),
])
def test_bad_groups_are_one_line_naming_the_argument(groups, message):
    for method in (attribution.occlusion, attribution.kernel_shap):
        with pytest.raises(ValueError, match=message) as raised:
            method(interacting, X, TARGET, mask=MASK, groups=groups, key=jax.random.key(0))
        assert "\n" not in str(raised.value)


def test_groups_are_not_an_option_of_the_methods_that_do_not_take_them():
    assert "groups" not in attribution.METHODS["kernel_shap"].options
    with pytest.raises(TypeError, match="groups"):
        attribution.integrated_gradients(interacting, X, TARGET, mask=MASK, groups=GROUPS)


def test_groups_of_word_ids_reads_a_tokenizers_word_ids():
    # what `tokenizers.Encoding.word_ids` gives for "[CLS] un ##believ ##able news [SEP]"
    rows = [[None, 0, 0, 0, 1, None], [None, 0, None]]
    groups = attribution.groups_of_word_ids(rows, length=8)
    np.testing.assert_array_equal(groups, [[-1, 0, 0, 0, 1, -1, -1, -1], [-1, 0, -1, -1, -1, -1, -1, -1]])
    assert groups.dtype == np.int32
    np.testing.assert_array_equal(attribution.groups_of_word_ids([None, 0, 1]), [[-1, 0, 1]])
    with pytest.raises(ValueError, match=r"word_ids: expected B rows of at most length = 2 word ids"):
        attribution.groups_of_word_ids(rows, length=2)
    with pytest.raises(ValueError, match=r"word_ids\[1\]\[1\]: expected a word index in \[0, 3\) or None, got 'a'"):
        attribution.groups_of_word_ids([[0, 1, 2], [0, "a"]])
