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
target outside [0, C) (C read from f's output shape; a target traced under `jax.jit` cannot be
read and is not checked), an output of f that is not [B, C], an empty batch or length. The
contract, for any model:
  * Positions outside the mask are not players: they keep their input values in every
    evaluation, so a model whose padding reaches its output still satisfies what follows.
  * integrated_gradients: the scores sum to f(x) - f(x') (x' = the baseline at the real positions,
    x at the others) up to the Riemann error, which goes to 0 with n_steps (completeness).
  * kernel_shap and shapley_sampling: the scores sum to exactly f(x) - f(x') (efficiency).
  * occlusion: f(x) - f(x with position t at the baseline).
  * gradient: ||d f / d x_t||; gradient_x_input: sum over x_t's values of x_t * d f / d x_t;
    smoothgrad: ||mean over noisy copies of |d f / d x_t| ||; lime: the coefficients of a local
    linear surrogate; random: uniform random scores (the baseline ranking).
f's raw outputs are explained (logits, capsule lengths: what f returns).

`max_rows` bounds the rows one call of f sees: integrated gradients' interpolation steps,
occlusion's occluded copies and the sampling methods' coalitions are sent through f as many at a
time as fit, so a recurrence runs at a large batch; the results do not depend on it.

Options (`n_steps`, `n_samples`, ..., `max_rows`) are Python values: under `jax.jit` bind them
(and f) with `functools.partial`; x, target, mask, args, key and baseline may be traced:

    explain = jax.jit(functools.partial(interpret.integrated_gradients, f, n_steps=64))
    scores = explain(x, target, mask=mask, args=(tokens,))

`METHODS` is the table of every method: its function, its options with their defaults, and
whether it draws random numbers (then `key` is required). `key` is one PRNG key, or [B] keys, one
an example: each example's random draws come from its own key, so its scores are the same
whichever batch it is explained in (what a resumable run over a corpus needs).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from jcaps.attribution._deferred import DeferredModule

if TYPE_CHECKING:
    import jax
    import jax.numpy as jnp

    from jcaps.attribution import _arguments as arguments
    from jcaps.attribution import _kernels as attribution
else:  # imported by the first method called: the table alone loads no JAX
    jax = DeferredModule("jax")
    jnp = DeferredModule("jax.numpy")
    arguments = DeferredModule("jcaps.attribution._arguments")
    attribution = DeferredModule("jcaps.attribution._kernels")

# The most rows one call of f scores by default: sized so that integrated gradients with 300 steps
# on CCCapsNet (batch 32, length 256) stays under 2 GB by XLA's account
# (benchmarks/max_rows_memory.py).
DEFAULT_MAX_ROWS = 256


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
      of_inputs: its scores are a function of the input values (the sanity checks perturb them);
        random's are not.
      sampling: it costs hundreds of forward passes an example: the explainer runs it only when
        it is named.
      copies_per_call: how many copies of the rows one call of f scores in the explainer's runs
        where neither its settings nor the model give a number (`max_rows` = copies x rows;
        chosen with `benchmarks/copies_per_call.py` on a CPU); None: the method takes no more rows a call
        than the batch.
      flags: its command-line flags, {flag: `Flag`}; a flag several methods declare sets each.
    """

    function: Callable[..., jax.Array]
    needs_key: bool = False
    completeness: bool = False
    of_inputs: bool = True
    sampling: bool = False
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

    @property
    def options(self) -> dict[str, Any]:
        """The method's keyword options and their defaults, from its signature."""
        return _options(self.function)


@dataclasses.dataclass(frozen=True)
class _Game:
    """The arguments of a call, checked and flattened: K targets become K copies of the batch."""

    f: Callable[..., jax.Array]  # f(x, *args) -> [B, C], the model explained
    args: tuple  # f's per-example inputs, [R, ...] each
    x: jax.Array  # [R, T, ...], R = K * B
    targets: jax.Array  # [R]
    mask: jax.Array  # [R, T]
    baseline: jax.Array  # [R, T, ...]: the baseline at real positions, x at the others
    batch: int  # B
    num_targets: int | None  # K, or None for [B] targets

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

    def unflatten(self, scores: jax.Array) -> jax.Array:
        """[K * B, T] -> [B, K, T] (or [B, T] for [B] targets)."""
        if self.num_targets is None:
            return scores
        return jnp.swapaxes(scores.reshape((self.num_targets, self.batch) + scores.shape[1:]), 0, 1)


def _tile(array: jax.Array, k: int) -> jax.Array:
    return jnp.tile(array, (k,) + (1,) * (array.ndim - 1))


def _game(f, x, target, mask, args, baseline) -> _Game:
    """Checks the arguments (one-line errors naming the argument and the shape expected) and
    flattens them into one batch of K * B rows."""
    arguments.checked_model(f)
    x = jnp.asarray(x)
    if x.ndim < 2 or not jnp.issubdtype(x.dtype, jnp.floating) or 0 in x.shape[:2]:
        raise ValueError(
            f"x: expected float inputs [B, T, ...] (T positions), at least one example of one position, got "
            f"{x.dtype} of shape {x.shape}"
        )
    batch, length = x.shape[:2]
    target = arguments.checked_target(target, batch)
    mask = arguments.checked_mask(mask, batch, length)
    args = arguments.checked_args(args, batch)
    arguments.checked_target_range(target, arguments.checked_classes(f, x, args, batch))
    baseline = arguments.checked_baseline(baseline, x)
    real = mask.reshape(mask.shape + (1,) * (x.ndim - 2))
    baseline = jnp.where(real, baseline, x)  # positions outside the mask are not players
    num_targets = None
    if target.ndim == 2:
        num_targets = target.shape[1]
        x, mask, baseline = (_tile(a, num_targets) for a in (x, mask, baseline))
        args = tuple(_tile(a, num_targets) for a in args)
        targets = target.T.reshape(-1).astype(jnp.int32)
    else:
        targets = jnp.broadcast_to(target.astype(jnp.int32), (batch,))
    return _Game(f, args, x, targets, mask, baseline, batch, num_targets)


def _checked_prefix_radius(prefix_radius, affine_prefix) -> int | None:
    """`prefix_radius`: None, or an int >= 0 given with an `affine_prefix`."""
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
    affine_prefix: tuple[Callable, Callable] | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
) -> jax.Array:
    """Integrated gradients (Sundararajan et al. 2017), midpoint rule with `n_steps` points,
    summed over each position's values (module docstring).

    `affine_prefix` (L, g), for a model whose first layer is affine in x (a convolution of the
    inputs): f(x, *args) = g(L(x, *args), *args). The straight path from x' to x maps to the
    straight path from L(x') to L(x), so the path is integrated behind L and its mean gradient
    brought back once through L's transpose: the same scores, each step costing g alone."""
    del key
    game = _game(f, x, target, mask, args, baseline)
    steps = arguments.checked_count("n_steps", n_steps)
    max_rows = arguments.checked_count("max_rows", max_rows)
    stacked_f, linear_map = game.split_at(affine_prefix)
    attributions = attribution.integrated_gradients(
        stacked_f,
        game.x,
        game.targets,
        baseline=game.baseline,
        n_steps=steps,
        max_rows=max_rows,
        linear_map=linear_map,
    )
    return game.unflatten(_position_scores(attributions, game.mask, "sum"))


def gradient(
    f, x, target, *, mask=None, args=(), key=None, baseline=None, max_rows: int = DEFAULT_MAX_ROWS
) -> jax.Array:
    """||d f / d x_t||_2 of each position."""
    del key, baseline
    arguments.checked_count("max_rows", max_rows)
    game = _game(f, x, target, mask, args, None)
    grads = attribution.input_gradients(game.stacked_f, game.x, game.targets)
    return game.unflatten(_position_scores(grads, game.mask, "norm"))


def gradient_x_input(
    f, x, target, *, mask=None, args=(), key=None, baseline=None, max_rows: int = DEFAULT_MAX_ROWS
) -> jax.Array:
    """sum over each position's values of x * d f / d x (Shrikumar et al. 2016)."""
    del key, baseline
    arguments.checked_count("max_rows", max_rows)
    game = _game(f, x, target, mask, args, None)
    grads = attribution.input_gradients(game.stacked_f, game.x, game.targets)
    return game.unflatten(_position_scores(game.x * grads, game.mask, "sum"))


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
    """SmoothGrad (Smilkov et al. 2017) of the raw output, the L2 norm of each position's values."""
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
    return game.unflatten(_position_scores(maps, game.mask, "norm"))


def occlusion(
    f,
    x,
    target,
    *,
    mask=None,
    args=(),
    key=None,
    baseline=None,
    affine_prefix: tuple[Callable, Callable] | None = None,
    prefix_radius: int | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
) -> jax.Array:
    """f(x) - f(x with position t at the baseline), for every real position t.

    `affine_prefix` (L, g) with `prefix_radius` r, for a model whose first layer is affine in x
    and local (a convolution of width 2r + 1, 'same' padding): L(x, *args) is [B, T, ...], its
    value at position p reading x only at positions within r of p. Occluding t then changes L
    at |p - t| <= r alone, and positions s = 2r + 1 apart change it at disjoint windows, so all T
    occluded inputs of g come from s calls of L instead of T (`attribution.occlusion`): the same
    scores. Without the radius the prefix saves nothing, and f is scored as usual."""
    del key
    game = _game(f, x, target, mask, args, baseline)
    radius = _checked_prefix_radius(prefix_radius, affine_prefix)
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
    )
    return game.unflatten(scores)


def _sampling_estimate(
    estimate, name: str, f, x, target, mask, args, key, baseline, max_rows: int, affine_prefix, prefix_radius, **budget
):
    """A sampling method of `attribution` (`estimate`) on the game of these arguments; with
    `affine_prefix` (L, g) the coalitions are scored behind L (`attribution.coalition_values`)."""
    game = _game(f, x, target, mask, args, baseline)
    radius = _checked_prefix_radius(prefix_radius, affine_prefix)
    budget = {option: arguments.checked_count(option, value) for option, value in budget.items()}
    key = _require_key(name, key, game)
    max_rows = arguments.checked_count("max_rows", max_rows)
    stacked_f, linear_map = game.split_at(affine_prefix)
    return game.unflatten(
        estimate(
            stacked_f,
            game.x,
            game.targets,
            game.mask,
            key,
            baseline=game.baseline,
            max_rows=max_rows,
            linear_map=linear_map,
            prefix_radius=radius,
            **budget,
        )
    )


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
    affine_prefix: tuple[Callable, Callable] | None = None,
    prefix_radius: int | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
) -> jax.Array:
    """Shapley values by KernelSHAP (`attribution.shapley_kernel_design`), `n_samples`
    coalitions an example; they sum to f(x) - f(x').

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
        max_rows,
        affine_prefix,
        prefix_radius,
        n_samples=n_samples,
    )


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
    affine_prefix: tuple[Callable, Callable] | None = None,
    prefix_radius: int | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
) -> jax.Array:
    """Shapley values from `n_permutations` antithetic orders; they sum to f(x) - f(x').
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
        max_rows,
        affine_prefix,
        prefix_radius,
        n_permutations=n_permutations,
    )


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
    affine_prefix: tuple[Callable, Callable] | None = None,
    prefix_radius: int | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
) -> jax.Array:
    """LIME's local linear surrogate over `n_samples` coalitions (Ribeiro et al. 2016): a ridge
    regression of penalty `alpha` weighted by the text kernel of width `kernel_width` (a cosine
    distance, 0 to 1; LIME's 25 over its distance of 100 d). `affine_prefix` and
    `prefix_radius` as `kernel_shap`'s."""
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
        max_rows,
        affine_prefix,
        prefix_radius,
        n_samples=n_samples,
    )


def random(f, x, target, *, mask=None, args=(), key=None, baseline=None, max_rows: int = DEFAULT_MAX_ROWS) -> jax.Array:
    """Uniform random scores at the real positions: the ranking every faithfulness score is
    compared with."""
    del baseline
    arguments.checked_count("max_rows", max_rows)
    game = _game(f, x, target, mask, args, None)
    return game.unflatten(attribution.random_scores(_require_key("random", key, game), game.mask))


def _options(function: Callable) -> dict[str, Any]:
    """The method-specific keyword options of `function` and their defaults."""
    common = {"mask", "args", "key", "baseline"}
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
    "gradient": Method(function=gradient),
    "gradient_x_input": Method(function=gradient_x_input),
    "integrated_gradients": Method(
        function=integrated_gradients,
        completeness=True,
        # one point at a time: larger stacks fall out of a CPU's cache on the convolutional and
        # averaging models (`Explanation.copies_per_call` gives a recurrent model's)
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
    "random": Method(function=random, needs_key=True, of_inputs=False),
}


def aggregate(scores: jax.Array, word_ids: jax.Array, *, num_words: int | None = None) -> jax.Array:
    """Token scores summed into words, for any tokenizer.

    Args:
      scores: [..., T] one score a token (a method's output).
      word_ids: [..., T] int, the word of each token (0, 1, ...; -1 for a token of no word:
        padding, special tokens), as a tokenizer's `word_ids()` gives them.
      num_words: W, the most words a row has (static); None: T.

    Returns:
      [..., W] float32, each word's summed score (0 for a word with no token).
    """
    scores, word_ids = jnp.asarray(scores), jnp.asarray(word_ids)
    if scores.shape != word_ids.shape or not jnp.issubdtype(word_ids.dtype, jnp.integer):
        raise ValueError(
            f"word_ids: expected int of scores' shape {scores.shape}, got {word_ids.dtype} of shape {word_ids.shape}"
        )
    words = scores.shape[-1] if num_words is None else arguments.checked_count("num_words", num_words)
    one_hot = jax.nn.one_hot(word_ids, words, dtype=jnp.float32)  # -1 -> all zeros
    return jnp.einsum("...t,...tw->...w", scores.astype(jnp.float32), one_hot)
