"""`attribute(f, x, target, method=...)`: a method of the table run once, its scores returned with
everything they depend on as one `Explanation`, which slices, saves, loads, renders itself in a
notebook and converts to SHAP's.

    explanation = attribution.attribute(f, x, target, method="integrated_gradients", mask=mask, n_steps=64)
    explanation.scores                  # [B, T] (or [B, K, T] for [B, K] targets)
    explanation.completeness_error      # [B]: how far the scores are from summing to f(x) - f(x')
    explanation[:2].save("/tmp/two.jsonl")
    again = attribution.Explanation.load("/tmp/two.jsonl")

The file is the JSON lines a corpus run writes (`python -m jcaps.interpret ... --out OUT` writes
`OUT/attributions.jsonl`), so `Explanation.load` reads a corpus run back too (one method's
scores at a time).
"""

from __future__ import annotations

import dataclasses
import html
import importlib
import json
import os
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jcaps.attribution._compiled import compiled_once
from jcaps.attribution._kernels import key_count
from jcaps.attribution.methods import METHODS, _game
from jcaps.viz.html import signed_heatmap_html

# The most examples a notebook shows (the rest are counted).
SHOWN_EXAMPLES = 20


@dataclasses.dataclass(frozen=True)
class Explanation:
    """One method's scores of B examples and what they depend on: a pytree (its arrays are the
    leaves, the rest static), so it passes through `jax.jit` and `jax.vmap`.

    Attributes:
      scores: [B, T] float32 (or [B, K, T] for K outputs an example), one score a position (with
        `groups`: a group id), 0 at padding; NaN for an example the method could not explain
        (f not finite at x or at the baseline).
      target: [B] (or [B, K]) int, the output explained; -1 in a slot of a loaded file where an
        example had fewer explained outputs than the others (its scores are 0).
      mask: [B, T] bool, the real positions.
      completeness_error: [B] (or [B, K]) float32, |sum of the scores - (f(x) - f(x'))| /
        |f(x) - f(x')|, for the methods whose scores sum to that change (integrated gradients,
        up to its quadrature error; KernelSHAP and Shapley sampling, exactly but for rounding);
        None for the others.
      output: [B] (or [B, K]) float32, f's explained output at x (what `to_shap` calls the
        prediction); None where unknown (a loaded corpus run).
      baseline_output: the same at the baseline x', for the methods that use one; None else.
      key: the PRNG key(s) the method drew from, or None.
      groups: [B, T] int, the groups that were the players (`groups` of the methods), or None.
      method: the method's name in `METHODS`.
      options: ((option, value), ...) the method's options as passed (its defaults are in
        `METHODS[method].options`).
      tokens: B tuples of strings, one an example's real position (its words), or None; the
        notebook shows them and `save` writes them.
      classes: the names of f's outputs, in order, or None; `save` writes each target's name
        beside its index (as a corpus run does) and the notebook shows it.
    """

    scores: jax.Array
    target: jax.Array
    mask: jax.Array
    completeness_error: jax.Array | None = None
    output: jax.Array | None = None
    baseline_output: jax.Array | None = None
    key: jax.Array | None = None
    groups: jax.Array | None = None
    method: str = ""
    options: tuple[tuple[str, Any], ...] = ()
    tokens: tuple[tuple[str, ...], ...] | None = None
    classes: tuple[str, ...] | None = None

    def __len__(self) -> int:
        return int(self.scores.shape[0])

    def __getitem__(self, index) -> Explanation:
        """The examples at `index` (an int, a slice, or ints or a bool mask over B) as an
        `Explanation` of their own; an int keeps the batch axis ([1, T])."""
        if isinstance(index, (int, np.integer)):
            if not -len(self) <= index < len(self):
                raise IndexError(f"index: {index} is outside the {len(self)} examples")
            index = slice(int(index) % len(self), int(index) % len(self) + 1)
        picked = np.arange(len(self))[index]
        if picked.ndim != 1:
            raise IndexError(f"index: expected an int, a slice or a 1-D selection of the {len(self)} examples")
        arrays: dict[str, Any] = {
            name: None if value is None else value[picked] for name, value in self._arrays().items() if name != "key"
        }
        key = self.key
        if key is not None and key_count(key, len(self)) is not None:
            key = key[picked]
        tokens = None if self.tokens is None else tuple(self.tokens[i] for i in picked.tolist())
        return dataclasses.replace(self, **arrays, key=key, tokens=tokens)

    def _arrays(self) -> dict[str, jax.Array | None]:
        return {field: getattr(self, field) for field in _DATA_FIELDS}

    @property
    def several_targets(self) -> bool:
        return self.scores.ndim == 3

    def _by_output(self) -> list[tuple[int, int, np.ndarray]]:
        """(example, target, scores [T]) of every explained output, examples in order."""
        scores, targets = np.asarray(self.scores), np.asarray(self.target)
        if not self.several_targets:
            return [(b, int(targets[b]), scores[b]) for b in range(len(self))]
        return [
            (b, int(targets[b, k]), scores[b, k])
            for b in range(len(self))
            for k in range(targets.shape[1])
            if targets[b, k] >= 0
        ]

    def save(self, path: str | os.PathLike) -> str:
        """Writes one JSON line an example, in the corpus run's format (`index`, `tokens`,
        `explanations`: [{`target`, `scores`: {method: [T]}, `completeness_error`: {method: e}}]),
        with what a corpus run keeps in its run.json on each line (`method`, `options` that JSON
        holds, `mask`, `key`, `groups`, `output`, `baseline_output`, `classes`). Floats are written as
        Python floats: a float32 loads back equal."""
        mask = np.asarray(self.mask)
        scores, targets = np.asarray(self.scores, np.float32), np.asarray(self.target)
        if not self.several_targets:
            scores, targets = scores[:, None], targets[:, None]
        per_output = {
            name: None if value is None else np.asarray(value)
            for name, value in (
                ("completeness_error", self.completeness_error),
                ("output", self.output),
                ("baseline_output", self.baseline_output),
            )
        }
        for name, value in per_output.items():
            if value is not None and not self.several_targets:
                per_output[name] = value[:, None]
        keys = None if self.key is None else np.asarray(jax.random.key_data(self.key) if _typed(self.key) else self.key)
        options = {name: value for name, value in self.options if _json_value(value)}
        lines = []
        for b in range(len(self)):
            explanations = []
            for k in range(targets.shape[1]):
                if targets[b, k] < 0:
                    continue
                target = int(targets[b, k])
                entry: dict[str, Any] = (
                    {"target": self.classes[target], "target_index": target}
                    if self.classes is not None
                    else {"target": target}
                )
                entry["scores"] = {self.method: scores[b, k].tolist()}
                for name, value in per_output.items():
                    if value is not None:
                        entry[name] = (
                            {self.method: float(value[b, k])} if name == "completeness_error" else float(value[b, k])
                        )
                explanations.append(entry)
            line: dict[str, Any] = {
                "index": b,
                "method": self.method,
                "options": options,
                "mask": mask[b].tolist(),
                "several_targets": self.several_targets,
            }
            if self.tokens is not None:
                line["tokens"] = list(self.tokens[b])
            if self.classes is not None:
                line["classes"] = list(self.classes)
            line["explanations"] = explanations
            if keys is not None:
                line["key"] = (keys[b] if keys.ndim == 2 else keys).tolist()
                line["key_per_example"] = keys.ndim == 2
                line["key_typed"] = _typed(self.key)
            if self.groups is not None:
                line["groups"] = np.asarray(self.groups)[b].tolist()
            lines.append(json.dumps(line))
        with open(path, "w", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))
        return str(path)

    @classmethod
    def load(
        cls, path: str | os.PathLike, *, method: str | None = None, classes: Sequence[str] | None = None
    ) -> Explanation:
        """An `Explanation` from `save`'s file or a corpus run's `attributions.jsonl`. A file
        with several methods' scores (a corpus run) needs `method`. Examples of different
        lengths are padded (mask False); examples with fewer explained outputs than the most
        have target -1 in the slots left. `classes`: the names of the model's outputs, in order,
        kept on the result; a file that names its targets without their indices needs them."""
        rows: list[dict] = []
        numbers: list[int] = []
        with open(path, encoding="utf-8") as f:
            for number, text in enumerate(f, 1):
                if not text.strip():
                    continue
                numbers.append(number)
                try:
                    rows.append(json.loads(text))
                except json.JSONDecodeError as error:
                    raise ValueError(f"{path}:{number}: not a JSON line of explanations ({error.msg})") from None
        if not rows:
            raise ValueError(f"{path}: holds no explanations")
        if classes is None and "classes" in rows[0]:
            classes = rows[0]["classes"]
        methods = sorted({m for row in rows for entry in row.get("explanations", []) for m in entry.get("scores", {})})
        if method is None:
            if len(methods) != 1:
                raise ValueError(f"method: {path} holds the scores of {', '.join(methods) or 'no method'}; name one")
            method = methods[0]
        elif method not in methods:
            raise ValueError(f"method: {path} holds no scores of {method!r} (it has {', '.join(methods)})")
        length = max(len(row["mask"]) if "mask" in row else _scored_length(row, method) for row in rows)
        outputs = max(len(row.get("explanations", [])) for row in rows)
        batch = len(rows)
        scores = np.zeros((batch, outputs, length), np.float32)
        targets = np.full((batch, outputs), -1, np.int32)
        mask = np.zeros((batch, length), bool)
        per_output = {name: np.zeros((batch, outputs), np.float32) for name in _PER_OUTPUT}
        present = {name: False for name in _PER_OUTPUT}
        for b, row in enumerate(rows):
            if "mask" in row:
                mask[b, : len(row["mask"])] = row["mask"]
            else:  # a corpus line: its scores are those of its real positions, in order
                mask[b, : _scored_length(row, method)] = True
            for k, entry in enumerate(row.get("explanations", [])):
                values = entry["scores"].get(method)
                if values is None:
                    continue
                targets[b, k] = _target_index(entry, classes, path, number=numbers[b])
                scores[b, k, : len(values)] = values
                for name in _PER_OUTPUT:
                    value = entry.get(name)
                    if isinstance(value, dict):
                        value = value.get(method)
                    if value is not None:
                        per_output[name][b, k] = value
                        present[name] = True
        first = rows[0]
        several = first.get("several_targets", outputs != 1)
        if not several:
            scores, targets = scores[:, 0], targets[:, 0]
            per_output = {name: value[:, 0] for name, value in per_output.items()}
        key = None
        if "key" in first:
            raw = np.asarray([row["key"] for row in rows] if first.get("key_per_example") else first["key"], np.uint32)
            key = jax.random.wrap_key_data(jnp.asarray(raw)) if first.get("key_typed") else jnp.asarray(raw)
        groups = None
        if "groups" in first:
            groups = np.full((batch, length), -1, np.int32)
            for b, row in enumerate(rows):
                groups[b, : len(row["groups"])] = row["groups"]
        tokens = tuple(tuple(row["tokens"]) for row in rows) if all("tokens" in row for row in rows) else None
        options = first.get("options", {})
        return cls(
            scores=jnp.asarray(scores),
            target=jnp.asarray(targets),
            mask=jnp.asarray(mask),
            **{name: jnp.asarray(value) if present[name] else None for name, value in per_output.items()},
            key=key,
            groups=None if groups is None else jnp.asarray(groups),
            method=method,
            options=tuple(sorted(options.items())),
            tokens=tokens,
            classes=None if classes is None else tuple(str(name) for name in classes),
        )

    def _repr_html_(self) -> str:
        """The examples' tokens coloured by their scores, as the report colours them (orange
        raises the explained output, blue lowers it), one line an explained output."""
        lines = []
        outputs = self._by_output()
        shown = [entry for entry in outputs if entry[0] < SHOWN_EXAMPLES]
        mask = np.asarray(self.mask)
        for b, target, scores in shown:
            name = target if self.classes is None else self.classes[target]
            real = scores[mask[b]] if self.groups is None else scores
            words = (
                list(self.tokens[b])
                if self.tokens is not None
                else [f"[{t}]" for t in (np.flatnonzero(mask[b]) if self.groups is None else range(len(scores)))]
            )
            values = real[: len(words)].tolist()
            lines.append(
                f'<p><span style="color:#666">example {b} · {self.method} of output {html.escape(str(name))}:</span> '
                f"{signed_heatmap_html(words[: len(values)], values)}</p>"
            )
        more = len(self) - min(len(self), SHOWN_EXAMPLES)
        note = f'<p style="color:#666">and {more} more examples</p>' if more else ""
        return f'<div class="jcaps-explanation">{"".join(lines)}{note}</div>'

    def to_shap(self):
        """The scores as a `shap.Explanation` (SHAP must be installed; jcaps does not need it):
        values [B, T] (or [B, T, K], SHAP's order, for K outputs), base values f(x') where known,
        data the tokens where known."""
        try:
            shap = importlib.import_module("shap")
        except ImportError as error:
            raise ImportError("to_shap needs SHAP: pip install shap") from error
        values = np.asarray(self.scores)
        base = None if self.baseline_output is None else np.asarray(self.baseline_output)
        if self.several_targets:
            values = np.swapaxes(values, 1, 2)
        data = None
        if self.tokens is not None:
            width = values.shape[1]
            data = np.array([list(row) + [""] * (width - len(row)) for row in self.tokens], dtype=object)
        return shap.Explanation(values=values, base_values=base, data=data)


_DATA_FIELDS = ("scores", "target", "mask", "completeness_error", "output", "baseline_output", "key", "groups")
_PER_OUTPUT = ("completeness_error", "output", "baseline_output")
jax.tree_util.register_dataclass(
    Explanation, data_fields=list(_DATA_FIELDS), meta_fields=["method", "options", "tokens", "classes"]
)


def _target_index(entry: dict, classes: Sequence[str] | None, path, *, number: int) -> int:
    """The index of the output an entry explains: its `target_index`, its `target` when that is
    an int, else its `target`'s place in `classes`."""
    if "target_index" in entry:
        return int(entry["target_index"])
    target = entry["target"]
    if isinstance(target, int):
        return target
    if classes is None:
        raise ValueError(
            f"classes: {path} names the outputs it explains ({target!r}, ...) without their indices: pass "
            "classes=[...], the model's output names in order"
        )
    if target not in classes:
        raise ValueError(f"classes: {path}:{number} explains {target!r}, which is not among the classes given")
    return list(classes).index(target)


def _typed(key) -> bool:
    return jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)


def _json_value(value) -> bool:
    return isinstance(value, (bool, int, float, str)) or value is None


def _scored_length(row: dict, method: str) -> int:
    return max((len(entry["scores"].get(method, [])) for entry in row.get("explanations", [])), default=0)


@compiled_once(uses_baseline=None)
def _explained_outputs(f, x, target, *, mask=None, args=(), key=None, baseline=None, groups=None) -> jax.Array:
    """[2, B] (or [2, B, K]): f's explained output at x and at the baseline a method used (its
    players at the baseline, the rest as in x)."""
    del key
    game = _game(f, x, target, mask, args, baseline, takes_ids=True, groups=groups)
    both = game.stacked_f(jnp.concatenate([game.x, game.baseline]))  # [2R, C]
    selected = jnp.take_along_axis(
        both.astype(jnp.float32), jnp.tile(jnp.clip(game.targets, 0, game.classes - 1), 2)[:, None], axis=1
    )[:, 0].reshape(2, -1)
    if game.num_targets is None:
        return selected
    return jnp.swapaxes(selected.reshape(2, game.num_targets, game.batch), 1, 2)


def attribute(
    f: Callable[..., jax.Array],
    x,
    target,
    *,
    method: str = "integrated_gradients",
    mask=None,
    args=(),
    key=None,
    baseline=None,
    groups=None,
    tokens: Sequence[Sequence[str]] | None = None,
    classes: Sequence[str] | None = None,
    **options,
) -> Explanation:
    """Runs `method` of `METHODS` (its signature and options: `jcaps.attribution.methods`) and
    returns its scores as an `Explanation`, with f's explained output at x and, for a method
    that uses a baseline, at the baseline, and the completeness error of the methods whose
    scores sum to the change between them. `tokens`: each example's words, and `classes`: the
    names of f's outputs, kept for display and saving. Under `jax.jit`, bind f, `method`, `tokens` and the options with
    `functools.partial`, as for the methods."""
    if method not in METHODS:
        raise ValueError(f"method: expected one of {', '.join(METHODS)}, got {method!r}")
    entry = METHODS[method]
    unknown = sorted(set(options) - set(entry.options))
    if unknown:
        raise ValueError(f"{unknown[0]}: not an option of {method} (its options: {', '.join(entry.options)})")
    with_groups = {} if groups is None else {"groups": groups}
    scores = entry.function(f, x, target, mask=mask, args=args, key=key, baseline=baseline, **with_groups, **options)
    ends = _explained_outputs(f, x, target, mask=mask, args=args, baseline=baseline, **with_groups)
    output, baseline_output = ends[0], (ends[1] if entry.uses_baseline else None)
    completeness = None
    if (entry.completeness or entry.efficiency) and baseline_output is not None:
        change = output - baseline_output
        completeness = jnp.abs(jnp.sum(scores, axis=-1) - change) / jnp.maximum(jnp.abs(change), 1e-12)
    batch = int(scores.shape[0])
    if tokens is not None:
        if len(tokens) != batch:
            raise ValueError(f"tokens: expected {batch} sequences of words (one an example), got {len(tokens)}")
        tokens = tuple(tuple(str(word) for word in row) for row in tokens)
    return Explanation(
        scores=scores,
        target=jnp.asarray(target) if jnp.ndim(target) else jnp.broadcast_to(jnp.asarray(target), (batch,)),
        mask=jnp.ones(scores.shape[:1] + scores.shape[-1:], bool) if mask is None else jnp.asarray(mask),
        completeness_error=completeness,
        output=output,
        baseline_output=baseline_output,
        key=key,
        groups=None if groups is None else jnp.asarray(groups, jnp.int32),
        method=method,
        options=tuple(sorted(options.items())),
        tokens=tokens,
        classes=None if classes is None else tuple(str(name) for name in classes),
    )
