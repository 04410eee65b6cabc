"""Explain any JAX classifier: every attribution method under one signature.

    from jcaps import interpret

    scores = interpret.integrated_gradients(f, x, target, mask=mask, args=(tokens,), n_steps=64)

`f(x, *args) -> [B, C]` is the model to explain, any batched JAX function: a Flax (linen or NNX)
or Equinox module's call, or plain JAX. It must treat examples independently (no batch-wide
statistics). `x` [B, T, ...] are the inputs attributed, T positions of any trailing shape (word
vectors [B, T, D], a series [B, T, F]); `args` are per-example side inputs of f with the same
leading axis B (token ids, masks), which the methods repeat with x wherever they score several
copies of the batch at once: f never sees a tiled batch it has to untangle. `target` is the
explained output of each example, [B] (or one int), or K outputs each, [B, K]. `mask` [B, T]
bool marks the real positions (None: all real).

Every method returns one score a position, 0 at padding: [B, T], or [B, K, T] for [B, K]
targets (one batched call, not K). Before any work, one line names the argument at fault: a
target outside [0, C) (C read from f's output shape), an output of f that is not [B, C], an
empty batch or length, one unbatched example ([T, ...] with a mask [T]). A target traced under
`jax.jit` cannot be read: one outside [0, C) gives NaN scores, never plausible numbers. Where
f(x), or f at the baseline for a method that uses one (all but gradient, gradient_x_input,
smoothgrad and random), is not finite for an example, its scores are NaN, and a call outside
`jax.jit` warns once with the count. The baseline x' is zeros unless `baseline` is given ([B,
T, ...] or broadcastable to x). The contract, for any model:
  * Positions outside the mask are not players: they keep their input values in every
    evaluation, so a model whose padding reaches its output still satisfies what follows.
  * integrated_gradients: the scores sum to f(x) - f(x') (x' = the baseline at the real positions,
    x at the others) up to the Riemann error, which goes to 0 with n_steps (completeness).
  * kernel_shap and shapley_sampling: the scores sum to exactly f(x) - f(x') (efficiency).
  * occlusion: f(x) - f(x with position t at the baseline).
  * gradient: ||d f / d x_t||; gradient_x_input: sum over x_t's values of x_t * d f / d x_t;
    smoothgrad: ||mean over noisy copies of |d f / d x_t| ||; lime: the coefficients of a local
    linear surrogate; random: uniform random scores (the baseline ranking).
f's raw outputs are explained (logits, capsule lengths: what f returns). Options count what
their names say: `n_steps` points of the path, `n_samples` noisy copies (SmoothGrad) or
coalitions (KernelSHAP, LIME) an example, `n_permutations` orders an example, `stddev` a
fraction of each example's value range, `kernel_width` a cosine distance (0 to 1), `alpha` a
ridge penalty, `max_rows` rows a call of f.

Words as players: occlusion, kernel_shap, shapley_sampling, lime and random take `groups` [B, T]
int, each position's group id (0 <= g < T: a word's subword tokens, a span, a sentence) or -1
(a position of no group, which keeps its value like padding). Each group is then one player,
present or absent with all of its positions, and the scores are [B, T] over the group ids: entry
g is group g's score (0 for an id no real position has), the shape `aggregate` gives the
gradient methods' position scores summed into the same groups; efficiency holds over the
groups. `groups_of_word_ids` turns a tokenizer's `word_ids()` into `groups`.

Beside the table: `expected_gradients` (integrated gradients over a distribution of baselines,
which the caller gives) and `noise_tunnel`, which wraps any method of the table in noisy copies
of its input (SmoothGrad, SmoothGrad², VarGrad).

`max_rows` bounds the rows one call of f sees: integrated gradients' interpolation steps,
occlusion's occluded copies and the sampling methods' coalitions are sent through f as many at a
time as fit, so a recurrence runs at a large batch; the results do not depend on it.

Options (`n_steps`, `n_samples`, ..., `max_rows`) are Python values: under `jax.jit` bind them
(and f) with `functools.partial`; x, target, mask, args, key and baseline may be traced:

    explain = jax.jit(functools.partial(interpret.integrated_gradients, f, n_steps=64))
    scores = explain(x, target, mask=mask, args=(tokens,))

Called eagerly (outside a `jax.jit` of the caller's), a method compiles one program the first
time and reuses it for later calls on the same model, options and shapes: f is split as
equinox's `filter_jit` splits a module, its array leaves (an NNX or Equinox module's parameters,
a `jax.tree_util.Partial(linen_module.apply, params)`'s) being inputs of the program, so new
parameter values are used, never stale ones. A function that reaches arrays it does not show (a
closure over parameters, a global array) runs as before, compiling as it goes: pass its arrays
as a pytree (a `Partial`) or as `args` to have it compiled once (`jcaps.attribution._compiled`).

`METHODS` is the table of every method: its function, its options with their defaults, and
whether it draws random numbers (then `key` is required). `key` is one PRNG key, or [B] keys, one
an example: each example's random draws come from its own key, so its scores are the same
whichever batch it is explained in (what a resumable run over a corpus needs).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal

from jcaps.attribution._compiled import compiled_once
from jcaps.attribution._deferred import DeferredModule
from jcaps.choices import check_choice

if TYPE_CHECKING:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from jcaps.attribution import _arguments as arguments
    from jcaps.attribution import _kernels as attribution
else:  # imported by the first method called: the table alone loads no JAX
    jax = DeferredModule("jax")
    jnp = DeferredModule("jax.numpy")
    np = DeferredModule("numpy")
    arguments = DeferredModule("jcaps.attribution._arguments")
    attribution = DeferredModule("jcaps.attribution._kernels")

# The most rows one call of f scores by default: sized so that integrated gradients with 300 steps
# on CCCapsNet (batch 32, length 256) stays under 2 GB by XLA's account
# (benchmarks/max_rows_memory.py).
DEFAULT_MAX_ROWS = 256


# How integrated gradients integrates along its path (`integrated_gradients`' `rule`).
IntegrationRule = Literal["midpoint", "gausslegendre"]

# What a method's flag may set besides its keyword options: the copies of the rows one call of f
# scores (the command passes `max_rows` = copies x rows).
COPIES_PER_CALL = "copies_per_call"


@dataclasses.dataclass(frozen=True)
class Flag:
    """A command-line flag of a method (`python -m jcaps.interpret --FLAG`)."""

    option: str  # the method's keyword option it sets, or `COPIES_PER_CALL`
    help: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class Method:
    """An entry of `METHODS`: a method and its traits, which every user of the table (the workdir
    explainer and its command line, the sanity checks, the reports) reads instead of its name.

    Attributes:
      function: `function(f, x, target, *, mask, args, key, baseline, max_rows, **options)`.
      needs_key: it draws random numbers: `key` is required.
      completeness: its scores sum to f(x) - f(x') up to an error that more of its budget
        shrinks (integrated gradients' quadrature): the explainer reports the error.
      efficiency: its scores sum to exactly f(x) - f(x') (the Shapley values' efficiency), up
        to rounding.
      uses_baseline: its scores depend on the baseline x' (the gradients at x do not).
      of_inputs: its scores are a function of the input values (the sanity checks perturb them);
        random's are not.
      sampling: it costs hundreds of forward passes an example: the explainer runs it only when
        it is named.
      gradient_only: its scores read the gradient at x alone (its norm), so a model that gives
        every position the same gradient (one that averages its inputs) scores them all the same.
      copies_per_call: how many copies of the rows one call of f scores in the explainer's runs
        where neither its settings nor the model give a number (`max_rows` = copies x rows;
        `benchmarks/copies_per_call.py` times the alternatives on a CPU); None: the method takes
        no more rows a call than the batch.
      flags: its command-line flags, {flag: `Flag`}; a flag several methods declare sets each.
    """

    function: Callable[..., jax.Array]
    needs_key: bool = False
    completeness: bool = False
    efficiency: bool = False
    uses_baseline: bool = True
    of_inputs: bool = True
    sampling: bool = False
    gradient_only: bool = False
    copies_per_call: int | None = None
    flags: Mapping[str, Flag] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        options = self.options
        for flag, declared in self.flags.items():
            if declared.option != COPIES_PER_CALL and declared.option not in options:
                raise ValueError(
                    f"flags: {flag!r} sets {declared.option!r}, which is not an option of "
                    f"{self.function.__name__} ({', '.join(options)})"
                )

    @functools.cached_property
    def options(self) -> dict[str, Any]:
        """The method's keyword options and their defaults, from its signature (read once)."""
        return _options(self.function)


@dataclasses.dataclass(frozen=True)
class _Game:
    """The arguments of a call, checked and flattened: K targets become K copies of the batch."""

    f: Callable[..., jax.Array]  # f(x, *args) -> [B, C], the model explained
    args: tuple  # f's per-example inputs, [R, ...] each
    x: jax.Array  # [R, T, ...], R = K * B
    targets: jax.Array  # [R]
    mask: jax.Array  # [R, T]
    baseline: jax.Array  # [R, T, ...]: the baseline at the players' positions, x at the others
    groups: jax.Array | None  # [R, T] each position's group (-1: none), or None: positions are players
    batch: int  # B
    num_targets: int | None  # K, or None for [B] targets
    classes: int  # C, the outputs of f

    def stacked(self, function: Callable[..., jax.Array]) -> Callable[[jax.Array], jax.Array]:
        """function(x, *args) as a function of k copies of the R rows stacked [k * R, ...]: the
        args repeated k times, as the kernels call it."""
        rows = self.x.shape[0]

        def of_copies(stacked: jax.Array) -> jax.Array:
            copies = stacked.shape[0] // rows
            return function(stacked, *(_tile(a, copies) for a in self.args))

        return of_copies

    @property
    def stacked_f(self) -> Callable[[jax.Array], jax.Array]:  # [k * R, T, ...] -> [k * R, C]
        return self.stacked(self.f)

    def split_at(self, affine_prefix: tuple[Callable, Callable] | None) -> tuple[Callable, Callable | None]:
        """(f, linear_map) for the kernels: f stacked and None, or for an `affine_prefix` (L, g)
        g stacked and L of the rows (their args given)."""
        if affine_prefix is None:
            return self.stacked_f, None
        linear, after = affine_prefix

        def linear_map(values: jax.Array) -> jax.Array:
            return linear(values, *self.args)

        return self.stacked(after), linear_map

    def finished(self, scores: jax.Array, method: str, *, at_baseline: bool) -> jax.Array:
        """The [R, T] scores of `method` as returned: NaN for a row whose target is outside
        [0, C) (a traced target, unchecked) or whose f(x), or f at the baseline where the method
        uses one (`at_baseline`), is not finite; [K * B, T] -> [B, K, T] (or [B, T] for [B]
        targets). An eager call warns once when some rows are not finite."""
        rows = self.x.shape[0]
        inputs = jnp.concatenate([self.x, self.baseline]) if at_baseline else self.x
        outputs = self.stacked_f(inputs)  # [R or 2R, C]
        copies = inputs.shape[0] // rows
        in_range = (self.targets >= 0) & (self.targets < self.classes)
        selected = jnp.take_along_axis(outputs, _tile(jnp.clip(self.targets, 0, self.classes - 1), copies)[:, None], 1)
        finite = jnp.all(jnp.isfinite(selected[:, 0]).reshape(copies, rows), axis=0)
        scores = jnp.where((in_range & finite)[:, None], scores, jnp.nan)
        if not isinstance(finite, jax.core.Tracer) and not bool(jnp.all(finite)):
            examples = int(np.sum(~np.asarray(finite).reshape(-1, self.batch).all(axis=0)))
            where = "f(x) or f at the baseline" if at_baseline else "f(x)"
            warnings.warn(
                f"{method}: {where} is not finite for {examples} of {self.batch} examples: their scores are NaN",
                RuntimeWarning,
                stacklevel=3,
            )
        if self.num_targets is None:
            return scores
        return jnp.swapaxes(scores.reshape((self.num_targets, self.batch) + scores.shape[1:]), 0, 1)


def _tile(array: jax.Array, k: int) -> jax.Array:
    return jnp.tile(array, (k,) + (1,) * (array.ndim - 1))


def _game(f, x, target, mask, args, baseline, *, takes_ids: bool = False, groups=None) -> _Game:
    """Checks the arguments (one-line errors naming the argument and the shape expected) and
    flattens them into one batch of K * B rows. A method that `takes_ids` (it only swaps inputs
    for the baseline's) explains integer x too (token ids), against an integer baseline; the
    same methods take `groups`."""
    arguments.checked_model(f)
    x = jnp.asarray(x)
    integer = jnp.issubdtype(x.dtype, jnp.integer)
    if x.ndim < 2 or not (jnp.issubdtype(x.dtype, jnp.floating) or (takes_ids and integer)) or 0 in x.shape[:2]:
        expected = "float or int inputs" if takes_ids else "float inputs"
        hint = (
            "; a gradient method differentiates f in x: explain a model of token ids at its embedding layer "
            "(jcaps.attribution.at_layer)"
            if integer and not takes_ids
            else ""
        )
        raise ValueError(
            f"x: expected {expected} [B, T, ...] (T positions), at least one example of one position, got "
            f"{x.dtype} of shape {x.shape}{hint}"
        )
    if integer and baseline is not None and not jnp.issubdtype(jnp.asarray(baseline).dtype, jnp.integer):
        raise ValueError(
            f"baseline: x holds ids ({x.dtype}), so the baseline is an id (a PAD, UNK or mask id), not "
            f"{jnp.asarray(baseline).dtype} values"
        )
    batch, length = x.shape[:2]
    if x.ndim == 2 and mask is not None and jnp.ndim(mask) == 1 and jnp.shape(mask)[0] == batch:
        raise ValueError(
            f"x: got one example ({x.dtype} of shape {x.shape} with a mask of shape {jnp.shape(mask)}): the methods "
            "take a batch, x [B, T, ...] and mask [B, T]; pass x[None] and mask[None]"
        )
    target = arguments.checked_target(target, batch)
    mask = arguments.checked_mask(mask, batch, length)
    args = arguments.checked_args(args, batch)
    classes = arguments.checked_classes(f, x, args, batch)
    arguments.checked_target_range(target, classes)
    baseline = arguments.checked_baseline(baseline, x)
    groups = arguments.checked_groups(groups, batch, length)
    playing = mask if groups is None else mask & (groups >= 0)
    # positions outside the mask (or of no group) are not players: they keep their values
    baseline = jnp.where(playing.reshape(playing.shape + (1,) * (x.ndim - 2)), baseline, x)
    num_targets = None
    if target.ndim == 2:
        num_targets = target.shape[1]
        x, mask, baseline = (_tile(a, num_targets) for a in (x, mask, baseline))
        groups = None if groups is None else _tile(groups, num_targets)
        args = tuple(_tile(a, num_targets) for a in args)
        targets = target.T.reshape(-1).astype(jnp.int32)
    else:
        targets = jnp.broadcast_to(target.astype(jnp.int32), (batch,))
    return _Game(f, args, x, targets, mask, baseline, groups, batch, num_targets, classes)


def _checked_prefix_radius(prefix_radius, affine_prefix, game: _Game) -> int | None:
    """`prefix_radius`: None, or an int >= 0 given with an `affine_prefix` (which needs float x)."""
    if affine_prefix is not None and not jnp.issubdtype(game.x.dtype, jnp.floating):
        raise ValueError(f"affine_prefix: L is affine in float inputs, and x holds ids ({game.x.dtype})")
    if prefix_radius is None:
        return None
    if affine_prefix is None:
        raise ValueError("prefix_radius: says how far an affine_prefix's L reaches; pass affine_prefix=(L, g) with it")
    return arguments.checked_count("prefix_radius", prefix_radius, minimum=0)


def _position_scores(values: jax.Array, mask: jax.Array, reduce: str) -> jax.Array:
    """[R, T, ...] per-value attributions -> [R, T]: their sum, or their L2 norm."""
    flat = values.reshape(values.shape[:2] + (-1,)).astype(jnp.float32)
    scores = jnp.sum(flat, axis=-1) if reduce == "sum" else jnp.linalg.norm(flat, axis=-1)
    return jnp.where(mask, scores, 0.0)


def _require_key(name: str, key, game: _Game) -> jax.Array:
    """The key of a method that draws random numbers: one PRNG key, or one an example ([B] keys,
    repeated for each of K targets), which makes each example's scores its own key's alone."""
    if key is None:
        raise ValueError(f"key: {name} draws random numbers: pass a PRNG key (jax.random.key(0))")
    if attribution.key_count(key, game.batch) is None or game.num_targets is None:
        return key
    return key[jnp.tile(jnp.arange(game.batch), game.num_targets)]


@compiled_once(uses_baseline=True)
def integrated_gradients(
    f,
    x,
    target,
    *,
    mask=None,
    args=(),
    key=None,
    baseline=None,
    n_steps: int = 50,
    rule: IntegrationRule = "midpoint",
    affine_prefix: tuple[Callable, Callable] | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
) -> jax.Array:
    """Integrated gradients (Sundararajan et al. 2017) from the baseline x' (default zeros) to x,
    summed over each position's values (module docstring).

    `n_steps` points of the path, integrated by `rule`: "midpoint" (the Riemann midpoint rule,
    equal weights) or "gausslegendre" (Gauss-Legendre's nodes and weights, Captum's default,
    which Captum names `method`): for a smooth model the same `n_steps` give a smaller
    completeness error (`docs/explaining.md` has a table).

    `affine_prefix` (L, g), for a model whose first layer is affine in x (a convolution of the
    inputs): f(x, *args) = g(L(x, *args), *args). The straight path from x' to x maps to the
    straight path from L(x') to L(x), so the path is integrated behind L and its mean gradient
    brought back once through L's transpose: the same scores, each step costing g alone."""
    del key
    game = _game(f, x, target, mask, args, baseline)
    steps = arguments.checked_count("n_steps", n_steps)
    check_choice("rule", rule, IntegrationRule)
    max_rows = arguments.checked_count("max_rows", max_rows)
    stacked_f, linear_map = game.split_at(affine_prefix)
    attributions = attribution.integrated_gradients(
        stacked_f,
        game.x,
        game.targets,
        baseline=game.baseline,
        n_steps=steps,
        rule=rule,
        max_rows=max_rows,
        linear_map=linear_map,
    )
    return game.finished(_position_scores(attributions, game.mask, "sum"), "integrated_gradients", at_baseline=True)


@compiled_once(uses_baseline=False)
def gradient(
    f, x, target, *, mask=None, args=(), key=None, baseline=None, max_rows: int = DEFAULT_MAX_ROWS
) -> jax.Array:
    """||d f / d x_t||_2 of each position (no baseline; `max_rows` is not used: one backward
    pass a batch)."""
    del key, baseline
    arguments.checked_count("max_rows", max_rows)
    game = _game(f, x, target, mask, args, None)
    grads = attribution.input_gradients(game.stacked_f, game.x, game.targets)
    return game.finished(_position_scores(grads, game.mask, "norm"), "gradient", at_baseline=False)


@compiled_once(uses_baseline=False)
def gradient_x_input(
    f, x, target, *, mask=None, args=(), key=None, baseline=None, max_rows: int = DEFAULT_MAX_ROWS
) -> jax.Array:
    """sum over each position's values of x * d f / d x (Shrikumar et al. 2016); no baseline
    (the implicit one is zeros)."""
    del key, baseline
    arguments.checked_count("max_rows", max_rows)
    game = _game(f, x, target, mask, args, None)
    grads = attribution.input_gradients(game.stacked_f, game.x, game.targets)
    return game.finished(_position_scores(game.x * grads, game.mask, "sum"), "gradient_x_input", at_baseline=False)


@compiled_once(uses_baseline=False)
def smoothgrad(
    f,
    x,
    target,
    *,
    mask=None,
    args=(),
    key=None,
    baseline=None,
    n_samples: int = 25,
    stddev: float = 0.15,
    max_rows: int = DEFAULT_MAX_ROWS,
) -> jax.Array:
    """SmoothGrad (Smilkov et al. 2017) of the raw output, the L2 norm of each position's values:
    `n_samples` noisy copies of x, the noise's standard deviation `stddev` times each example's
    value range (max - min of its values); no baseline."""
    del baseline
    arguments.checked_count("max_rows", max_rows)
    game = _game(f, x, target, mask, args, None)
    maps = attribution.smoothgrad(
        game.stacked_f,
        game.x,
        game.targets,
        _require_key("smoothgrad", key, game),
        n_samples=arguments.checked_count("n_samples", n_samples),
        stddev=stddev,
    )
    return game.finished(_position_scores(maps, game.mask, "norm"), "smoothgrad", at_baseline=False)


@compiled_once(uses_baseline=True)
def occlusion(
    f,
    x,
    target,
    *,
    mask=None,
    args=(),
    key=None,
    baseline=None,
    groups=None,
    affine_prefix: tuple[Callable, Callable] | None = None,
    prefix_radius: int | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
) -> jax.Array:
    """f(x) - f(x with position t at the baseline), for every real position t; the baseline is
    zeros unless given (for token ids, an id: PAD's, UNK's or a mask id). `max_rows` rows a call:
    that many occluded copies over the batch's rows at once. With `groups` (module docstring),
    each group is left out whole: f(x) - f(x with group g's positions at the baseline).

    `affine_prefix` (L, g) with `prefix_radius` r, for a model whose first layer is affine in x
    and local (a convolution of width 2r + 1, 'same' padding): L(x, *args) is [B, T, ...], its
    value at position p reading x only at positions within r of p. Occluding t then changes L
    at |p - t| <= r alone, and positions s = 2r + 1 apart change it at disjoint windows, so all T
    occluded inputs of g come from s calls of L instead of T (`attribution.occlusion`): the same
    scores. Without the radius the prefix saves nothing, and f is scored as usual."""
    del key
    game = _game(f, x, target, mask, args, baseline, takes_ids=True, groups=groups)
    radius = _checked_prefix_radius(prefix_radius, affine_prefix, game)
    max_rows = arguments.checked_count("max_rows", max_rows)
    stacked_f, linear_map = game.split_at(affine_prefix if radius is not None else None)
    scores = attribution.occlusion(
        stacked_f,
        game.x,
        game.targets,
        game.mask,
        baseline=game.baseline,
        max_rows=max_rows,
        linear_map=linear_map,
        prefix_radius=radius,
        groups=game.groups,
    )
    return game.finished(scores, "occlusion", at_baseline=True)


def _sampling_estimate(
    estimate,
    name: str,
    f,
    x,
    target,
    mask,
    args,
    key,
    baseline,
    groups,
    max_rows: int,
    affine_prefix,
    prefix_radius,
    **budget,
):
    """A sampling method of `attribution` (`estimate`) on the game of these arguments; with
    `affine_prefix` (L, g) the coalitions are scored behind L (`attribution.coalition_values`)."""
    game = _game(f, x, target, mask, args, baseline, takes_ids=True, groups=groups)
    radius = _checked_prefix_radius(prefix_radius, affine_prefix, game)
    budget = {option: arguments.checked_count(option, value) for option, value in budget.items()}
    key = _require_key(name, key, game)
    max_rows = arguments.checked_count("max_rows", max_rows)
    stacked_f, linear_map = game.split_at(affine_prefix)
    scores = estimate(
        stacked_f,
        game.x,
        game.targets,
        game.mask,
        key,
        baseline=game.baseline,
        max_rows=max_rows,
        linear_map=linear_map,
        prefix_radius=radius,
        groups=game.groups,
        **budget,
    )
    return game.finished(scores, name, at_baseline=True)


@compiled_once(uses_baseline=True)
def kernel_shap(
    f,
    x,
    target,
    *,
    mask=None,
    args=(),
    key=None,
    baseline=None,
    n_samples: int = 256,
    groups=None,
    affine_prefix: tuple[Callable, Callable] | None = None,
    prefix_radius: int | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
) -> jax.Array:
    """Shapley values by KernelSHAP (`attribution.shapley_kernel_design`), `n_samples`
    coalitions an example (one row of f each); they sum to f(x) - f(x'), x' the baseline (zeros
    unless given; for token ids, an id).

    `affine_prefix` (L, g), f(x, *args) = g(L(x, *args), *args) with L affine in x: each
    coalition's input to g is L(x') plus the changes its positions make to L, computed once for
    every position, so a coalition costs g and a small product instead of f (the same
    estimate); worth it where L dominates f and coalitions outnumber positions. With
    `prefix_radius` (as `occlusion`'s) those changes cost 2r + 1 calls of L instead of T."""
    return _sampling_estimate(
        attribution.kernel_shap,
        "kernel_shap",
        f,
        x,
        target,
        mask,
        args,
        key,
        baseline,
        groups,
        max_rows,
        affine_prefix,
        prefix_radius,
        n_samples=n_samples,
    )


@compiled_once(uses_baseline=True)
def shapley_sampling(
    f,
    x,
    target,
    *,
    mask=None,
    args=(),
    key=None,
    baseline=None,
    n_permutations: int = 8,
    groups=None,
    affine_prefix: tuple[Callable, Callable] | None = None,
    prefix_radius: int | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
) -> jax.Array:
    """Shapley values from `n_permutations` antithetic orders an example (T + 1 rows of f each);
    they sum to f(x) - f(x'), x' the baseline (zeros unless given; for token ids, an id).
    `affine_prefix` and `prefix_radius` as `kernel_shap`'s."""
    return _sampling_estimate(
        attribution.shapley_sampling,
        "shapley_sampling",
        f,
        x,
        target,
        mask,
        args,
        key,
        baseline,
        groups,
        max_rows,
        affine_prefix,
        prefix_radius,
        n_permutations=n_permutations,
    )


@compiled_once(uses_baseline=True)
def lime(
    f,
    x,
    target,
    *,
    mask=None,
    args=(),
    key=None,
    baseline=None,
    n_samples: int = 256,
    kernel_width: float = 0.25,
    alpha: float = 1.0,
    groups=None,
    affine_prefix: tuple[Callable, Callable] | None = None,
    prefix_radius: int | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
) -> jax.Array:
    """LIME's local linear surrogate over `n_samples` coalitions (Ribeiro et al. 2016): a ridge
    regression of penalty `alpha` weighted by the text kernel of width `kernel_width` (a cosine
    distance, 0 to 1; LIME's 25 over its distance of 100 d); an absent position takes the
    baseline (zeros unless given; for token ids, an id). `affine_prefix` and `prefix_radius` as
    `kernel_shap`'s."""
    for name, value in (("kernel_width", kernel_width), ("alpha", alpha)):
        if isinstance(value, jax.core.Tracer) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"{name}: expected a Python number > 0, got {value!r}")
    return _sampling_estimate(
        functools.partial(attribution.lime, kernel_width=float(kernel_width), alpha=float(alpha)),
        "lime",
        f,
        x,
        target,
        mask,
        args,
        key,
        baseline,
        groups,
        max_rows,
        affine_prefix,
        prefix_radius,
        n_samples=n_samples,
    )


@compiled_once(uses_baseline=False)
def random(
    f, x, target, *, mask=None, args=(), key=None, baseline=None, groups=None, max_rows: int = DEFAULT_MAX_ROWS
) -> jax.Array:
    """Uniform random scores at the real positions (with `groups`, at the groups' ids): the
    ranking every faithfulness score is compared with (no baseline; f is called once, to check
    its output)."""
    del baseline
    arguments.checked_count("max_rows", max_rows)
    game = _game(f, x, target, mask, args, None, takes_ids=True, groups=groups)
    players = attribution.player_mask(game.mask, game.groups)
    return game.finished(
        attribution.random_scores(_require_key("random", key, game), players), "random", at_baseline=False
    )


@compiled_once(uses_baseline=False)
def expected_gradients(
    f,
    x,
    target,
    *,
    mask=None,
    args=(),
    key=None,
    baseline=None,
    n_samples: int = 64,
    max_rows: int = DEFAULT_MAX_ROWS,
) -> jax.Array:
    """Expected gradients (Erion et al. 2021), GradientSHAP (Lundberg & Lee 2017; Captum's
    `GradientShap` without its input noise): integrated gradients over a distribution of
    baselines, `n_samples` (baseline, path point) draws an example, summed over each position's
    values. An example's scores sum to f(x) - E[f(x')] over the baselines, up to the sampling
    error (which falls as 1 / sqrt(n_samples)).

    `baseline` (required): the distribution, [N, T, ...], N inputs of x's trailing shape drawn
    uniformly (reference data: other texts' vectors, zeros among them if wanted), used at each
    example's real positions only. It is not in `METHODS`, whose methods take one baseline an
    example (zeros by default) and give each example scores that do not depend on its batch: the
    distribution is the caller's choice. NaN scores mark an example whose f(x) is not finite."""
    game = _game(f, x, target, mask, args, None)
    samples = arguments.checked_count("n_samples", n_samples)
    max_rows = arguments.checked_count("max_rows", max_rows)
    x = jnp.asarray(x)
    if baseline is None:
        raise ValueError(
            "baseline: expected_gradients draws its baselines from a distribution: pass baseline=[N, T, ...] "
            "(reference inputs of x's trailing shape)"
        )
    references = jnp.asarray(baseline)
    if references.ndim != x.ndim or references.shape[1:] != x.shape[1:] or references.shape[0] == 0:
        raise ValueError(
            f"baseline: expected the baselines to draw from, [N, T, ...] with [T, ...] = {tuple(x.shape[1:])} "
            f"(x's), got shape {tuple(references.shape)}"
        )
    attributions = attribution.expected_gradients(
        game.stacked_f,
        game.x,
        game.targets,
        _require_key("expected_gradients", key, game),
        references=references.astype(game.x.dtype),
        mask=game.mask,
        n_samples=samples,
        max_rows=max_rows,
    )
    return game.finished(_position_scores(attributions, game.mask, "sum"), "expected_gradients", at_baseline=False)


# How `noise_tunnel` combines a method's scores over noisy copies of the input.
NoiseTunnelKind = Literal["smoothgrad", "smoothgrad_sq", "vargrad"]


def noise_tunnel(
    method: str | Callable[..., jax.Array],
    *,
    kind: NoiseTunnelKind = "smoothgrad",
    n_samples: int = 10,
    stddev: float = 0.15,
) -> Callable[..., jax.Array]:
    """A method of the table's signature that runs `method` (a function of `METHODS`, or its
    name) on `n_samples` noisy copies of x and combines its scores (Captum's `NoiseTunnel`):
    their mean ("smoothgrad", Smilkov et al. 2017), the mean of their squares ("smoothgrad_sq")
    or their variance ("vargrad", Adebayo et al. 2018).

    The noise is N(0, (stddev * (max(x) - min(x)))^2) at each real position, the range that of
    each example's own values (as SmoothGrad's `stddev`), and padding is left as it is. The
    copies run one after another (`lax.map`): memory is that of one call of `method`. The
    returned function needs a `key` (it draws the noise); the method's own options pass through
    it (`noise_tunnel("integrated_gradients")(f, x, target, key=key, n_steps=32)`)."""
    function = METHODS[method].function if isinstance(method, str) else method
    check_choice("kind", kind, NoiseTunnelKind)
    copies = arguments.checked_count("n_samples", n_samples)
    if isinstance(stddev, bool) or not isinstance(stddev, (int, float)) or not stddev >= 0:
        raise ValueError(f"stddev: expected a Python number >= 0, got {stddev!r}")

    def tunnel(f, x, target, *, mask=None, args=(), key=None, baseline=None, **options) -> jax.Array:
        game = _game(f, x, target, mask, args, baseline)  # checks the arguments once, before any work
        x = jnp.asarray(x)
        if key is None:
            raise ValueError("key: a noise tunnel draws random numbers: pass a PRNG key (jax.random.key(0))")
        real = game.mask[: game.batch]  # the mask of the B examples (the first block of rows)
        real = real.reshape(real.shape + (1,) * (x.ndim - 2))
        flat = x.reshape(x.shape[0], -1)
        scale = (stddev * (jnp.max(flat, axis=1) - jnp.min(flat, axis=1))).reshape((-1,) + (1,) * (x.ndim - 1))
        # Each example's noise and its method's draws come from its own key, as for every method.
        example_keys = attribution.row_keys(key, game.batch)

        def one_copy(copy: jax.Array) -> jax.Array:
            keys = jax.vmap(lambda k: jax.random.split(jax.random.fold_in(k, copy)))(example_keys)  # [B, 2]
            noise = jax.vmap(lambda k: jax.random.normal(k, x.shape[1:], x.dtype))(keys[:, 0])
            noisy = jnp.where(real, x + scale * noise, x)
            return function(f, noisy, target, mask=mask, args=args, key=keys[:, 1], baseline=baseline, **options)

        scores = jax.lax.map(one_copy, jnp.arange(copies))  # [M, B, (K,) T]
        if kind == "smoothgrad":
            return jnp.mean(scores, axis=0)
        if kind == "smoothgrad_sq":
            return jnp.mean(jnp.square(scores), axis=0)
        return jnp.var(scores, axis=0)

    return tunnel


def at_layer(
    method: str | Callable[..., jax.Array], embed: Callable[..., jax.Array], after: Callable[..., jax.Array]
) -> Callable[..., jax.Array]:
    """`method` (a function of `METHODS`, or its name) explaining a model of token ids (or of any
    input it cannot differentiate) at a layer: f(ids, *args) = after(embed(ids, *args), ids, *args).

        explain = at_layer("integrated_gradients", embed, after)
        scores = explain(ids, target, mask=ids > 0, n_steps=64)  # [B, T]

    The returned function takes the ids, `explain(ids, target, *, mask=None, args=(), key=None,
    baseline=None, **options)`, and runs the method on the layer's output h = embed(ids, *args)
    [B, T, ...] with `after` as the model and the ids (then args) as its side inputs: one score
    a position, summed over h's trailing axes. Completeness holds at the layer (integrated
    gradients' scores sum to after(h) - after(h')), the baseline h' being zeros unless given
    (the layer's output for PAD ids, say). `jcaps.interpret.layers` splits a linen or NNX module
    at a named submodule into (embed, after). The perturbation methods also take the ids
    themselves, with a baseline id."""
    function = METHODS[method].function if isinstance(method, str) else method

    def explain(ids, target, *, mask=None, args=(), key=None, baseline=None, **options) -> jax.Array:
        args = tuple(args)
        return function(
            after, embed(ids, *args), target, mask=mask, args=(ids, *args), key=key, baseline=baseline, **options
        )

    return explain


def _options(function: Callable) -> dict[str, Any]:
    """The method-specific keyword options of `function` and their defaults."""
    common = {"mask", "args", "key", "baseline", "groups"}
    return {
        name: p.default
        for name, p in inspect.signature(function).parameters.items()
        if p.kind is p.KEYWORD_ONLY and name not in common
    }


def _sampling_chunk() -> Flag:
    return Flag(
        COPIES_PER_CALL,
        "KernelSHAP, permutation sampling, LIME: coalitions scored at once (default: the model's; 8 on a CPU).",
    )


# The one table of methods: the command line, the workdir explainer, the checks and the reports
# read it; its order is theirs.
METHODS: dict[str, Method] = {
    "gradient": Method(function=gradient, gradient_only=True, uses_baseline=False),
    "gradient_x_input": Method(function=gradient_x_input, uses_baseline=False),
    "integrated_gradients": Method(
        function=integrated_gradients,
        completeness=True,
        # one point at a time: larger stacks fall out of a CPU's cache on the convolutional and
        # averaging models (`ModelHooks.copies_per_call` gives a recurrent model's)
        copies_per_call=1,
        flags={
            "ig_steps": Flag("n_steps", "Integrated gradients: interpolation points."),
            "ig_chunk": Flag(
                COPIES_PER_CALL,
                "Integrated gradients: points evaluated at once (default: the model's; 1 for most on a CPU, "
                "more for a recurrent one or on an accelerator).",
            ),
        },
    ),
    "smoothgrad": Method(
        function=smoothgrad,
        needs_key=True,
        uses_baseline=False,
        gradient_only=True,
        flags={"smoothgrad_samples": Flag("n_samples", "SmoothGrad: noisy copies averaged.")},
    ),
    "occlusion": Method(
        function=occlusion,
        copies_per_call=4,
        flags={
            "occlusion_chunk": Flag(
                COPIES_PER_CALL, "Occlusion: positions occluded at once (default: the model's; 4 on a CPU)."
            )
        },
    ),
    "kernel_shap": Method(
        function=kernel_shap,
        needs_key=True,
        efficiency=True,
        sampling=True,
        copies_per_call=8,
        flags={
            "shap_samples": Flag("n_samples", "KernelSHAP: coalitions an example."),
            "sampling_chunk": _sampling_chunk(),
        },
    ),
    "shapley_sampling": Method(
        function=shapley_sampling,
        needs_key=True,
        efficiency=True,
        sampling=True,
        copies_per_call=8,
        flags={
            "shapley_permutations": Flag(
                "n_permutations", "Permutation sampling: orders an example (half of them the others' reverses)."
            ),
            "sampling_chunk": _sampling_chunk(),
        },
    ),
    "lime": Method(
        function=lime,
        needs_key=True,
        sampling=True,
        copies_per_call=8,
        flags={"lime_samples": Flag("n_samples", "LIME: coalitions an example."), "sampling_chunk": _sampling_chunk()},
    ),
    "random": Method(function=random, needs_key=True, of_inputs=False, uses_baseline=False),
}


def aggregate(scores: jax.Array, word_ids: jax.Array, *, num_words: int | None = None) -> jax.Array:
    """Token scores summed into words, for any tokenizer.

    Args:
      scores: [..., T] one score a token (a method's output: [B, T], or [B, K, T]).
      word_ids: [..., T] int, the word of each token (0, 1, ...; -1 for a token of no word:
        padding, special tokens), as a tokenizer's `word_ids()` gives them (`groups_of_word_ids`);
        [B, T] word ids serve [B, K, T] scores.
      num_words: W, the most words a row has (static); None: T.

    Returns:
      [..., W] float32, each word's summed score (0 for a word with no token).
    """
    scores, word_ids = jnp.asarray(scores), jnp.asarray(word_ids)
    if scores.ndim == 3 and word_ids.ndim == 2 and word_ids.shape == (scores.shape[0], scores.shape[2]):
        word_ids = jnp.broadcast_to(word_ids[:, None], scores.shape)
    if scores.shape != word_ids.shape or not jnp.issubdtype(word_ids.dtype, jnp.integer):
        raise ValueError(
            f"word_ids: expected int of scores' shape {scores.shape}, got {word_ids.dtype} of shape {word_ids.shape}"
        )
    words = scores.shape[-1] if num_words is None else arguments.checked_count("num_words", num_words)
    one_hot = jax.nn.one_hot(word_ids, words, dtype=jnp.float32)  # -1 -> all zeros
    return jnp.einsum("...t,...tw->...w", scores.astype(jnp.float32), one_hot)


def groups_of_word_ids(word_ids, *, length: int | None = None) -> np.ndarray:
    """`groups` [B, T] from a tokenizer's word ids: each row's `word_ids()` (Hugging Face
    `tokenizers` and `transformers`: one word index a token, None for a special token), or any
    lists of word indices.

    Args:
      word_ids: B lists (or one list: B = 1) of ints >= 0 or None.
      length: T, the rows' padded length (static); None: the longest row's.

    Returns:
      int32 [B, T]: each token's word, -1 for a special token or padding (a position of no group).
    """
    rows = [word_ids] if word_ids and not isinstance(word_ids[0], (list, tuple)) else list(word_ids)
    longest = max((len(row) for row in rows), default=0)
    width = longest if length is None else arguments.checked_count("length", length)
    if not rows or longest > width:
        raise ValueError(
            f"word_ids: expected B rows of at most length = {width} word ids, got {len(rows)} rows of up to {longest}"
        )
    groups = np.full((len(rows), width), -1, np.int32)
    for r, row in enumerate(rows):
        for t, word in enumerate(row):
            if word is None:
                continue
            if isinstance(word, bool) or not isinstance(word, (int, np.integer)) or not 0 <= word < width:
                raise ValueError(f"word_ids[{r}][{t}]: expected a word index in [0, {width}) or None, got {word!r}")
            groups[r, t] = word
    return groups
