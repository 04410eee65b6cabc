"""Explanations of every jcaps model behind one interface: per-position scores [R, P], and the
files `python -m jcaps.interpret` writes from them.

A row r of an explained batch is one prediction: an example and the output c explained, the
predicted class (single-label models), each predicted label (binary relevance: its sigmoid), or
each generated label (SGM: the log-probability of that label at the step that emitted it,
teacher-forced on the generated sequence). Positions are an example's tokens (iCapsNets Long:
its M x N words, sentence by sentence) or a series' time steps. What a row is, which vectors
stand at its positions and what the model's own explanation is are its `ModelHooks`
(`jcaps.interpret.hooks`): this module reads them, and knows no model by name.

Methods (the names used by `python -m jcaps.interpret --methods` and as keys everywhere):
  every method of `jcaps.interpret.METHODS` (gradient, gradient_x_input, integrated_gradients,
      smoothgrad, occlusion, kernel_shap, shapley_sampling, lime, random: a method added to the
      table is offered here too), explaining the model as a function of its input vectors (word,
      character or composed CWC / CC vectors; a series' values), every model; random is the
      ranking every faithfulness score is compared with. The sampling methods cost hundreds of
      forward passes an example and run only when named;
  capsules
      iCapsNets' local interpretation: how many of the selected K-grams cover each word;
  attention
      the model's own attention over positions: the dilated FCN's (dot-product variants: the
      weight each position receives, averaged over heads and queries; simplified / local over
      time: averaged over channels; over channels it ranks nothing and is not offered), SGM's
      source attention at the step that emitted the label, the input-cell attention of the last
      step (averaged over hops) and the structured self-attention of the LSTM baseline.
fastText, CCCapsNet, binary relevance and the plain LSTM baselines have no position-level
explanation of their own (fastText averages its words; CCCapsNet's capsules route pooled BiGRU
features, not positions): they offer the methods of `METHODS` alone.

`jcaps.interpret.corpus.explain_workdir` writes the explanations of a trained workdir on a
split as `attributions.jsonl`, `faithfulness.json` and `report.html`:

attributions.jsonl, one JSON object per example: `index`, `text` (text models), `tokens` (the
example's words, characters or time steps, one per position), `label` (true class or labels),
`prediction` (predicted classes or labels, in order) and `explanations`: one entry per
explained prediction, `{"target" (its name), "target_index" (the output of the model explained),
"probability", "scores": {method: [one score per token]}}`,
with `completeness_error` ({method: |sum of its scores - (f(x) - f(x'))| / |f(x) - f(x')|}) for the methods whose
scores sum to that difference (`Method.completeness`: integrated gradients) and `faithfulness`
({method: {metric: value}}) when it was measured. The lines are in the order of the examples.

faithfulness.json, with `--faithfulness`: one key per method, random included:
`{"comprehensiveness", "sufficiency", "deletion_auc", "insertion_auc": mean over the explained
predictions, "ci95": {metric: [low, high]} (bootstrap over them), "seconds_per_100": wall time of
the method per 100 explained predictions, "rows": how many}`; a method of `Method.completeness` adds its
`completeness_error` (median and 95th percentile), and every entry the removal used.
"""

from __future__ import annotations

import dataclasses
import functools
import time
import zlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from jcaps.attribution import _kernels as attribution
from jcaps.attribution._faithfulness import METRICS, faithfulness
from jcaps.attribution.methods import METHODS
from jcaps.data.vocab import NUM_SPECIAL
from jcaps.interpret import capsules as capsule_interpretation
from jcaps.interpret.hooks import TOKEN_REMOVALS, ModelHooks, apply_rows, hooks_of
from jcaps.interpret.options import NATIVE_METHODS, NATIVE_NOTES, REMOVALS, Options, check_names
from jcaps.train.families import ModelFamily
from jcaps.train.mesh import batch_sharded, replicated
from jcaps.train.workdir import refuse_non_finite

if TYPE_CHECKING:
    import flax.linen as nn
    import ml_collections

# The families' token removals are those the command line offers without importing them.
check_names(
    "jcaps.interpret.hooks.TOKEN_REMOVALS",
    tuple(name for name, _ in TOKEN_REMOVALS),
    REMOVALS,
    "jcaps.interpret.options",
)

SCORE_DECIMALS = 5


def native_method(model_config) -> str | None:
    """The model's own position-level explanation ('capsules', 'attention') or None."""
    explanation = hooks_of(model_config.name)
    if explanation.has_native is not None and not explanation.has_native(model_config):
        return None
    return explanation.native


def native_note(model_config, *, methods: Sequence[str]) -> str:
    """What the model's own explanation is, or why it has none and which of `methods` (those
    that ran) explain its tokens instead (the report shows it)."""
    native = native_method(model_config)
    if native:
        return NATIVE_NOTES[native]
    reason = hooks_of(model_config.name).no_native_reason
    explaining = [method.replace("_", " ") for method in methods if method != "random"]
    return (
        f"A {model_config.name} model has no position-level explanation of its own"
        + (f": {reason}." if reason else ".")
        + (f" Its tokens are explained here by {', '.join(explaining)}." if explaining else "")
    )


def model_methods(model_config) -> tuple[str, ...]:
    """The methods run when none are named, in report order (random last): those of `METHODS`
    but the sampling methods (`Method.sampling`) and, for a model whose positions share one
    gradient (`ModelHooks.shared_gradient`), those of the gradient alone (which would rank
    nothing), and the model's own explanation."""
    native = native_method(model_config)
    shared_gradient = hooks_of(model_config.name).shared_gradient
    quick = tuple(
        name
        for name, method in METHODS.items()
        if not method.sampling and name != "random" and not (shared_gradient and method.gradient_only)
    )
    return quick + ((native,) if native else ()) + ("random",)


def offered_methods(model_config) -> tuple[str, ...]:
    """Every method the model offers: `model_methods`, then those that run only when named (the
    sampling methods, which cost hundreds of forward passes an example; the methods of the
    gradient alone on a model whose positions share one gradient), random last."""
    default = model_methods(model_config)
    named_only = tuple(name for name in METHODS if name not in default)
    return default[:-1] + named_only + ("random",)


def removal(explanation: ModelHooks, options: Options) -> tuple[str, float]:
    """(name, value) of what a removed position becomes: `options.removal` where the model's
    positions offer it (tokens: PAD or UNK), else their only one (a series step: zeros)."""
    offered = dict(explanation.removals)
    name = options.removal if options.removal in offered else explanation.removals[0][0]
    return name, offered[name]


@dataclasses.dataclass(frozen=True, eq=False)
class _ExplainedModel:
    """A trained model's pure functions over rows, from its `ModelHooks`; hashed by
    identity, so jit treats it as static.

    x [R, ...] are the explained inputs of the rows (token ids, or a series), side [R, ...] the
    module's second input or None (a series' mask; SGM: the generated label sequence)."""

    model: nn.Module
    family: ModelFamily
    model_config: ml_collections.ConfigDict

    @property
    def hooks(self) -> ModelHooks:
        return hooks_of(self.model_config.name)

    @property
    def generates(self) -> bool:
        """Whether the model generates its labels (a family without probabilities): its rows are
        the generated labels, explained at the step that emitted each."""
        return self.family.probabilities is None

    def mask(self, x: jax.Array, side: jax.Array | None) -> jax.Array:
        """[R, P] True at real positions."""
        return self.hooks.positions(x, side)[1]

    def vectors(self, params, x, side) -> jax.Array:
        """[R, P, D] the vectors attributions differentiate against."""
        return self.hooks.vectors(self.model, params, x, side)

    def outputs(self, params, x, side) -> jax.Array:
        """[R, C] the explained outputs."""
        return self.hooks.explained_outputs(apply_rows(self.model, params, x, side), side)

    def of_vectors(self, params):
        """f(vectors [R, P, D], x, side=None) -> [R, C], the explained outputs read with these
        vectors: the model as the methods of `METHODS` explain it, the rows' x and side its
        per-example inputs."""

        def f(vectors, x, side=None):
            outputs = self.hooks.apply_to_vectors(self.model, params, x, side, vectors)
            return self.hooks.explained_outputs(outputs, side)

        return f

    def affine_prefix(self, params):
        """(L, g) with `of_vectors(params)` = g(L(vectors, x), x, side) and L affine in the
        vectors, or None: the family's `affine_prefix` (iCapsNets start with the region
        convolution), as integrated gradients' `affine_prefix` takes it."""
        if self.hooks.affine_prefix is None:
            return None
        split = self.hooks.affine_prefix(self.model, params, self.model_config)
        if split is None:
            return None
        linear, after = split

        def linear_of_vectors(vectors, x, side=None):
            return linear(x, vectors)

        def outputs_after(z, x, side=None):
            return self.hooks.explained_outputs(after(x, z), side)

        return linear_of_vectors, outputs_after

    def prefix_radius(self) -> int | None:
        """How far the affine prefix's L reaches (the methods' `prefix_radius`), or None."""
        if self.hooks.prefix_radius is None:
            return None
        return self.hooks.prefix_radius(self.model_config)

    def probabilities(self, params, x, side) -> jax.Array:
        """[R, C] the probability of each explainable output (faithfulness reads these)."""
        outputs = apply_rows(self.model, params, x, side)
        if self.hooks.probabilities is not None:
            return self.hooks.probabilities(outputs, side)
        assert self.family.probabilities is not None  # a family without them explains with its own
        return self.family.probabilities(outputs)

    def native(self, method: str, params, x, side, targets, options: Options) -> jax.Array:
        """[R, P] the model's own explanation (`method`: capsules or attention) of each row's output."""
        outputs = apply_rows(self.model, params, x, side)
        if method == "attention":
            assert self.hooks.attention is not None  # a model whose native explanation is attention
            return self.hooks.attention(outputs, x, side, targets)
        local = capsule_interpretation.batched_local_interpretation_of(
            outputs, targets, x > 0, k1=options.k1, k2=options.k2, kernel_size=self.model_config.kernel_size
        )
        return local["word_scores"].reshape(x.shape[0], -1).astype(jnp.float32)


def example_keys(seed_key: jax.Array, method: str, indices: np.ndarray, targets: jax.Array) -> jax.Array:
    """[R] PRNG keys, one a prediction: the seed's key folded with the method's name, the
    example's index in its split and the output explained."""
    method_key = jax.random.fold_in(seed_key, zlib.crc32(method.encode()) & 0x7FFFFFFF)
    per_example = jax.vmap(lambda i, t: jax.random.fold_in(jax.random.fold_in(method_key, i), t))
    return per_example(jnp.asarray(indices, jnp.uint32), jnp.asarray(targets, jnp.uint32))


@functools.partial(jax.jit, static_argnames=("explained_model", "method", "options"))
def _scores(explained_model: _ExplainedModel, method: str, params, x, side, targets, key, options: Options, shift=None):
    """[R, P] scores of one method (0 at padding) and, for a method of `Method.completeness`, [R]
    completeness errors.
    `shift` [R, P, D]: explain the input vectors plus it (the model's own explanation does not
    take one)."""
    mask = explained_model.mask(x, side)
    if method in NATIVE_METHODS:
        native = explained_model.native(method, params, x, side, targets, options)
        return jnp.where(mask, native, 0.0).astype(jnp.float32), None
    vectors = explained_model.vectors(params, x, side)
    if shift is not None:
        vectors = vectors + shift.astype(vectors.dtype)
    f = explained_model.of_vectors(params)
    args = (x,) if side is None else (x, side)
    entry = METHODS[method]
    method_options = options.of_method(method, x.shape[0], dict(explained_model.hooks.copies_per_call))
    if "affine_prefix" in entry.options:
        method_options["affine_prefix"] = explained_model.affine_prefix(params)
    if "prefix_radius" in entry.options and method_options.get("affine_prefix") is not None:
        method_options["prefix_radius"] = explained_model.prefix_radius()
    scores = entry.function(f, vectors, targets, mask=mask, args=args, key=key, **method_options)
    if not entry.completeness:
        return scores, None

    def both_ends(stacked):  # [2 R, P, D]: the vectors and the baseline
        return f(stacked, *(jnp.concatenate([a, a]) for a in args))

    # The baseline the method took: zeros at the real positions, the vectors at padding.
    baseline = jnp.where(mask[..., None], 0.0, vectors)
    return scores, attribution.completeness_error(both_ends, vectors, targets, scores, baseline=baseline)


@functools.partial(jax.jit, static_argnames=("explained_model", "options"))
def _faithfulness(explained_model: _ExplainedModel, params, x, side, targets, scores, options: Options):
    by_position, mask = explained_model.hooks.positions(x, side)

    def probability_fn(flat, *side_input):  # side, when the model has one, is f's per-example input
        return explained_model.probabilities(params, flat.reshape(x.shape), side_input[0] if side_input else None)

    _, replacement = removal(explained_model.hooks, options)
    return faithfulness(
        probability_fn,
        by_position,
        targets,
        scores,
        mask=mask,
        args=() if side is None else (side,),
        baseline=replacement,
        probabilities=None,
    )


@functools.partial(jax.jit, static_argnames=("explained_model",))
def _vectors(explained_model: _ExplainedModel, params, x, side):
    """[R, P, D] the input vectors of the rows, in one compiled call (eagerly, each of the
    model's operations compiles on its own)."""
    return explained_model.vectors(params, x, side)


@functools.partial(jax.jit, static_argnames=("explained_model",))
def _forward(explained_model: _ExplainedModel, params, x, side):
    """The explained outputs of the rows [R, C]: what one forward pass costs."""
    return explained_model.outputs(params, x, side)


@functools.partial(jax.jit, static_argnames=("explained_model",))
def _predict(explained_model: _ExplainedModel, params, x, side):
    """The decoded labels (`DecodedLabels`) of a model that generates them, else the class
    probabilities [R, J]."""
    probabilities = explained_model.family.probabilities
    if probabilities is None:  # the model generates its labels (`generates`)
        return explained_model.model.apply({"params": params}, x, method="predict")
    return probabilities(apply_rows(explained_model.model, params, x, side))


@dataclasses.dataclass
class ExplainedBatch:
    """The explanations of one batch, as NumPy arrays (rows beyond `len(example)` dropped).

    Attributes:
      example: [R] the batch row of each explained prediction.
      target: [R] the output explained (class or label id; SGM: the generating step).
      target_name: [R] the name of the class or label explained.
      probability: [R] its probability.
      mask: [R, P] True at real positions.
      scores: {method: [R, P]}.
      completeness_error: {method: [R]}, of the methods of `Method.completeness` that ran.
      faithfulness: {method: {metric: [R]}} (empty unless asked for).
      predictions: [B] for each batch row, its predicted classes or labels (names, in order).
      seconds: {method: wall seconds of its scores for the batch (compiling included the first
        time a shape is seen)}.
    """

    example: np.ndarray
    target: np.ndarray
    target_name: list
    probability: np.ndarray
    mask: np.ndarray
    scores: dict
    completeness_error: dict
    faithfulness: dict
    predictions: list
    seconds: dict


@dataclasses.dataclass
class ExplainedRows:
    """The predictions of one batch to explain (`Explainer.rows`): `example` [R] their batch
    rows, `target_name`, and the padded row inputs `x`, `side`, `targets` the jitted functions
    take, `mask` [R, P] the real positions."""

    example: np.ndarray
    target_name: list
    x: jax.Array
    side: jax.Array | None
    targets: jax.Array
    mask: np.ndarray


class Explainer:
    """Explains batches of one trained model (`jcaps.train.workdir.load_trained`).

    Example:
      trained = load_trained(workdir, with_data=True)
      explainer = Explainer(trained)
      for batch in trained.dataset.eval_batches("test", 32, limit=100):
          explained = explainer.explain(batch, ("integrated_gradients", "random"), with_faithfulness=True)
    """

    def __init__(self, trained, options: Options = Options(), seed: int = 0, mesh: Mesh | None = None):
        """`mesh`: explain each batch split over its 'data' axis (`jcaps.train.mesh.data_mesh`):
        the parameters replicated, the batch's rows sharded; the batch size a multiple of its size."""
        self.trained = trained
        self.options = options
        self._mesh = mesh
        self.params = trained.params if mesh is None else jax.device_put(trained.params, replicated(mesh))
        self.explained_model = _ExplainedModel(trained.model, trained.family, trained.config.model)
        self.methods = offered_methods(trained.config.model)
        self.names = trained.dataset.labels.names
        self._key = self._seed_key = jax.random.key(seed)

    def _inputs(self, batch: dict):
        """x and side of the batch: its arrays the family names, but the label sequence of a model
        that generates its labels (`_rows` gives each row its generated sequence)."""
        names = self.trained.family.inputs
        side = self._placed(batch[names[1]]) if len(names) > 1 and not self.explained_model.generates else None
        return self._placed(batch[names[0]]), side

    def _placed(self, rows):
        """A batch-major array on the mesh, its rows split over the devices (or as it is)."""
        return jnp.asarray(rows) if self._mesh is None else jax.device_put(rows, batch_sharded(self._mesh))

    def _rows(self, batch: dict, x, side) -> tuple[list, list, list]:
        """Each explained prediction as (batch row, target, name, probability), the side input
        of its row (SGM: the generated sequence), and every batch row's predictions."""
        real = np.flatnonzero(np.asarray(batch["weight"]) > 0)
        predicted = jax.device_get(_predict(self.explained_model, self.params, x, side))
        rows, sides = [], []
        predictions: list[list[str]] = [[] for _ in range(len(batch["weight"]))]
        if self.explained_model.generates:  # predicted: the decoded labels
            sequences, lengths = predicted.sequence, predicted.length
            step_log_probs = _forward(self.explained_model, self.params, x, self._placed(sequences))
            step_probabilities = jax.device_get(jnp.exp(step_log_probs))
            refuse_non_finite(self.trained, step_probabilities[real], "label probabilities")
            for b in real:
                for step in range(int(lengths[b])):
                    name = self.names[int(sequences[b, step]) - NUM_SPECIAL]
                    rows.append((b, step, name, float(step_probabilities[b, step])))
                    sides.append(sequences[b])
                    predictions[b].append(name)
            return rows, sides, predictions
        probabilities = predicted  # the class probabilities [R, J]
        refuse_non_finite(self.trained, probabilities[real], "probabilities")
        for b in real:
            for j in self.explained_model.hooks.chosen_outputs(probabilities[b], self.trained.config.model):
                rows.append((b, j, self.names[j], float(probabilities[b, j])))
                predictions[b].append(self.names[j])
        return rows, sides, predictions

    def _check_methods(self, methods: tuple[str, ...]) -> None:
        unknown = [m for m in methods if m not in self.methods]
        if unknown:
            raise ValueError(
                f"{self.trained.config.model.name} has no method {', '.join(unknown)}; "
                f"its methods: {', '.join(self.methods)}"
            )

    def explain(
        self, batch: dict, methods: tuple[str, ...], with_faithfulness: bool = False, *, keyed_by_example: bool = False
    ) -> ExplainedBatch:
        """Scores of `methods` for every prediction of `batch` (an `eval_batches` batch). With
        `keyed_by_example`, a prediction's random draws come from a key of the seed, the method,
        the example's index and the output explained (`example_keys`), so its scores do not
        depend on the batch it is explained in: a resumed or sharded run gives the same."""
        self._check_methods(methods)
        x, side = self._inputs(batch)
        rows, sides, predictions = self._rows(batch, x, side)
        count = len(rows)
        if count == 0:  # nothing predicted (a multi-label model may predict no label)
            return self._nothing(x, side, methods, with_faithfulness, predictions)
        take, row_x, row_side, targets = self._row_inputs(batch, x, side, rows, sides)
        scores, completeness, faithful, seconds = {}, {}, {}, {}
        for method in methods:
            if keyed_by_example:
                key = example_keys(self._seed_key, method, np.asarray(batch["index"])[take], targets)
            else:
                self._key, key = jax.random.split(self._key)
            start = time.perf_counter()
            values, error = _scores(
                self.explained_model, method, self.params, row_x, row_side, targets, key, self.options
            )
            scores[method] = np.asarray(values)[:count]
            seconds[method] = time.perf_counter() - start
            if error is not None:
                completeness[method] = np.asarray(error)[:count]
            if with_faithfulness:
                metrics = _faithfulness(
                    self.explained_model, self.params, row_x, row_side, targets, values, self.options
                )
                faithful[method] = {k: np.asarray(v)[:count] for k, v in metrics.items()}
        return ExplainedBatch(
            example=take[:count],
            target=np.asarray(targets)[:count],
            target_name=[r[2] for r in rows],
            probability=np.asarray([r[3] for r in rows], np.float32),
            mask=self._mask(row_x, row_side)[:count],
            scores=scores,
            completeness_error=completeness,
            faithfulness=faithful,
            predictions=predictions,
            seconds=seconds,
        )

    def _mask(self, row_x, row_side) -> np.ndarray:
        return np.asarray(self.explained_model.mask(row_x, row_side))

    def rows(self, batch: dict) -> ExplainedRows | None:
        """The predictions of `batch` to explain, as `rows_scores` takes them (None: none)."""
        x, side = self._inputs(batch)
        rows, sides, _ = self._rows(batch, x, side)
        if not rows:
            return None
        take, row_x, row_side, targets = self._row_inputs(batch, x, side, rows, sides)
        return ExplainedRows(
            take[: len(rows)], [r[2] for r in rows], row_x, row_side, targets, self._mask(row_x, row_side)[: len(rows)]
        )

    def vectors(self, rows: ExplainedRows) -> np.ndarray:
        """[R, P, D] the input vectors the methods explain, of every (padded) row."""
        return np.asarray(_vectors(self.explained_model, self.params, rows.x, rows.side))

    def rows_scores(self, rows: ExplainedRows, method: str, params=None, shift=None) -> np.ndarray:
        """[R, P] scores of `method` for `rows`, with other parameters (the same targets) or with
        the input vectors shifted by `shift` [R_padded, P, D]."""
        self._check_methods((method,))
        self._key, key = jax.random.split(self._key)
        params = self.params if params is None else params
        values, _ = _scores(
            self.explained_model,
            method,
            params,
            rows.x,
            rows.side,
            rows.targets,
            key,
            self.options,
            None if shift is None else jnp.asarray(shift),
        )
        return np.asarray(values)[: len(rows.example)]

    def _row_inputs(self, batch, x, side, rows, sides):
        """(batch row of each row, inputs [R, ...], side inputs, targets [R]); rows are padded
        (repeating the first) to a multiple of the batch size, so each bucket compiles once."""
        count = len(rows)
        size = max(1, -(-count // len(batch["weight"]))) * len(batch["weight"])
        take = np.array([r[0] for r in rows] + [rows[0][0]] * (size - count))
        targets = jnp.asarray([r[1] for r in rows] + [0] * (size - count), jnp.int32)
        row_side = None
        if sides:
            row_side = jnp.asarray(np.stack(sides + [sides[0]] * (size - count)))
        elif side is not None:
            row_side = side[take]
        return take, self._placed(x[take]), None if row_side is None else self._placed(row_side), self._placed(targets)

    def seconds(self, batch: dict, method: str | None, repeats: int = 5) -> float:
        """The median wall time, after one warm-up (compiling) call, of `method`'s scores of the
        batch's predictions, or (`method` None) of one forward pass computing the explained
        outputs of the same rows."""
        x, side = self._inputs(batch)
        rows, sides, _ = self._rows(batch, x, side)
        if not rows:
            raise ValueError("the batch has no prediction to explain")
        _, row_x, row_side, targets = self._row_inputs(batch, x, side, rows, sides)
        if method is None:
            run = functools.partial(_forward, self.explained_model, self.params, row_x, row_side)
        else:
            run = functools.partial(
                _scores, self.explained_model, method, self.params, row_x, row_side, targets, self._key, self.options
            )
        jax.block_until_ready(run())
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            jax.block_until_ready(run())
            times.append(time.perf_counter() - start)
        return float(np.median(times))

    def _nothing(self, x, side, methods, with_faithfulness, predictions) -> ExplainedBatch:
        positions = self.explained_model.mask(x, side).shape[1]
        empty = np.zeros((0,), np.float32)
        return ExplainedBatch(
            example=np.zeros((0,), np.int64),
            target=np.zeros((0,), np.int32),
            target_name=[],
            probability=empty,
            mask=np.zeros((0, positions), bool),
            scores={method: np.zeros((0, positions), np.float32) for method in methods},
            completeness_error={
                method: empty for method in methods if method in METHODS and METHODS[method].completeness
            },
            faithfulness={method: {metric: empty for metric in METRICS + ("probability",)} for method in methods}
            if with_faithfulness
            else {},
            predictions=predictions,
            seconds={method: 0.0 for method in methods},
        )


def position_words(trained, split: str, index: int, x_row: np.ndarray) -> list[str | None]:
    """The word (character, time step) at each flattened position of an example; None at
    padding. Words come from the tokenizer, so unknown words keep their spelling."""
    dataset = trained.dataset
    if trained.family.kind == "series":
        return [f"t{t}" for t in range(x_row.shape[0])]
    words = dataset.tokenize(dataset.text(split, index))
    if dataset.nested:
        width = x_row.shape[-1]
        flat: list[str | None] = [None] * (x_row.shape[0] * width)
        for m, sentence in enumerate(words[: x_row.shape[0]]):
            for n, word in enumerate(sentence[:width]):
                flat[m * width + n] = word
        return flat
    return [words[p] if p < len(words) else None for p in range(x_row.shape[-1])]


def true_labels(trained, batch: dict, b: int | np.integer):
    names = trained.dataset.labels.names
    if "labels" in batch:
        return [names[j] for j in np.flatnonzero(batch["labels"][b] > 0)]
    return names[int(batch["label"][b])] if "label" in batch else None
