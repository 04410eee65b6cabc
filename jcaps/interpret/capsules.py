"""Local and global interpretation of iCapsNets (Wang, Hu, Ji 2020), docs/icapsnets.md#interpretation-sec-ii-f.

Capsules are ranked by the model's `capsule_selection` output [I, J]: the coupling c[i, j] (the paper), or
the contribution of capsule i to class capsule j (`capsule_selection="contribution"`,
`jcaps.ops.capsules.routing_contributions`); below, sel[i, j].

Local, per example with predicted class j: the top-k1 primary capsules i by sel[i, j];
for each, the top-k2 positions n by word attention alpha[i, n]; each position maps back to the
K-gram its region embedding covers; a word's score is how many selected K-grams contain it.
Long documents first pick, per selected capsule, its sentence m* = argmax_m rho[i, m].

Global, over a split: each example adds one count to cell C[j, i*] with i* = argmax_i sel[i, j],
and the words of its top K-gram (k1 = k2 = 1) to that cell's word counter; the most frequent
words of a cell name what its capsule captures. Two numbers summarise C: the share of each
class's examples in its few fullest cells (`sparsity`), and how much the selected capsule tells
about the predicted class, MI(class; capsule) / H(class) (`class_capsule_information`). The first
is met trivially when one capsule is selected for every class; the second is then 0.

The array functions take one example and are pure JAX; the `batched_*` versions are the same
functions `vmap`ped over a leading batch axis and jit-compiled, with the sizes k1, k2 and
kernel_size static. `GlobalInterpretation` accumulates on the host.

Conventions:
  * Padding is trailing: a sequence's valid length is the number of True entries of its mask,
    and K-grams are clipped to [0, valid_length).
  * Fewer valid candidates than asked for (k2 > valid length, k1 > number of live capsules, an
    empty document): the missing picks are -1, in descending-score order after the real ones.
    Their spans are empty, [0, 0), so they cover no word and add nothing to word scores. A
    capsule is live when its selection row is not all zero (padded capsules have zero rows).
  * Ties go to the lower index (`lax.top_k`), so results are deterministic.
"""

import collections
import functools
import unicodedata
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jcaps.models.outputs import ModelOutput

NOT_SELECTED = -1


def _top_valid(scores: jax.Array, valid: jax.Array, k: int) -> jax.Array:
    """Indices of the k largest `scores` among `valid` entries, best first.

    Args:
      scores: [n] float.
      valid: [n] bool.
      k: how many to pick; may exceed n or the number of valid entries.

    Returns:
      [k] int32; `NOT_SELECTED` (-1) where fewer than k entries are valid.
    """
    candidates = jnp.where(valid, scores, -jnp.inf)
    if k > candidates.shape[0]:
        candidates = jnp.pad(candidates, (0, k - candidates.shape[0]), constant_values=-jnp.inf)
    values, indices = jax.lax.top_k(candidates, k)
    return jnp.where(values > -jnp.inf, indices, NOT_SELECTED).astype(jnp.int32)


def kgram_spans(positions: jax.Array, valid_length: jax.Array, kernel_size: int) -> jax.Array:
    """Words covered by the region embedding at each position ("same" conv of odd width K).

    Position n covers [n - (K-1)/2, n + (K-1)/2], clipped to [0, valid_length).

    Args:
      positions: [...] int; `NOT_SELECTED` entries get the empty span [0, 0).
      valid_length: int, broadcastable to `positions` with the same rank.
      kernel_size: K, odd.

    Returns:
      [..., 2] int32: (start, end) with end exclusive.
    """
    half_width = (kernel_size - 1) // 2
    start = jnp.clip(positions - half_width, 0, valid_length)
    end = jnp.clip(positions + half_width + 1, 0, valid_length)
    selected = positions != NOT_SELECTED
    return jnp.stack([jnp.where(selected, start, 0), jnp.where(selected, end, 0)], axis=-1).astype(jnp.int32)


def _check_kernel_size(kernel_size: int) -> None:
    if kernel_size < 1 or kernel_size % 2 == 0:
        raise ValueError(f"kernel_size must be odd and positive, got {kernel_size}.")


def local_interpretation_long(
    alpha: jax.Array,
    rho: jax.Array,
    selection: jax.Array,
    predicted: jax.Array,
    mask: jax.Array,
    *,
    k1: int,
    k2: int,
    kernel_size: int,
) -> dict[str, jax.Array]:
    """Local interpretation of one long (hierarchical) document.

    For each of the top-k1 capsules i by c[i, predicted]: its sentence m* = argmax_m rho[i, m]
    over non-empty sentences, then the top-k2 word positions n of alpha[i, m*, :] over valid
    words, each mapped to its K-gram inside sentence m*.

    Args:
      alpha: [I, M, N] word attention per capsule and sentence.
      rho: [I, M] sentence attention per capsule.
      selection: [I, J] the scores capsules are ranked by (the model's `capsule_selection`).
      predicted: int scalar, the predicted class j.
      mask: [M, N] bool, True at real words.
      k1: capsules to select.
      k2: positions to select per capsule.
      kernel_size: K of the region-embedding convolution (odd).

    Returns:
      dict with
        capsules: [k1] int32, best first;
        sentences: [k1] int32, m* of each selected capsule;
        positions: [k1, k2] int32, word positions inside that sentence, best first;
        spans: [k1, k2, 2] int32, (start, end) of each K-gram inside that sentence;
        word_scores: [M, N] int32, how many of the k1·k2 selected K-grams contain each word
          (a K-gram picked twice counts twice); 0 at padding.
      Missing picks are -1 with empty spans (see the module docstring).
    """
    _check_kernel_size(kernel_size)
    mask = jnp.asarray(mask, bool)
    num_sentences, num_positions = mask.shape

    capsule_live = jnp.any(selection != 0, axis=-1)
    capsules = _top_valid(jnp.take(selection, predicted, axis=1), capsule_live, k1)
    # Missing picks index row 0 only to keep shapes static; they are masked out below.
    capsule_rows = jnp.maximum(capsules, 0)

    sentence_nonempty = jnp.any(mask, axis=-1)
    best_sentence = jax.vmap(lambda scores: _top_valid(scores, sentence_nonempty, 1)[0])
    sentences = jnp.where(capsules != NOT_SELECTED, best_sentence(rho[capsule_rows]), NOT_SELECTED)
    sentence_rows = jnp.maximum(sentences, 0)

    word_alpha = alpha[capsule_rows, sentence_rows]  # [k1, N]
    word_valid = mask[sentence_rows] & (sentences != NOT_SELECTED)[:, None]  # [k1, N]
    positions = jax.vmap(functools.partial(_top_valid, k=k2))(word_alpha, word_valid)
    valid_lengths = jnp.sum(word_valid, axis=-1)
    spans = kgram_spans(positions, valid_lengths[:, None], kernel_size)

    word_index = jnp.arange(num_positions)[None, None, :]
    covered = (spans[..., :1] <= word_index) & (word_index < spans[..., 1:])  # [k1, k2, N]
    cover_counts = jnp.sum(covered, axis=1, dtype=jnp.int32)  # [k1, N]
    # one_hot of NOT_SELECTED is all zeros, so missing sentences add nothing.
    in_sentence = jax.nn.one_hot(sentences, num_sentences, dtype=jnp.int32)  # [k1, M]
    word_scores = jnp.einsum("km,kn->mn", in_sentence, cover_counts)
    return {
        "capsules": capsules,
        "sentences": sentences,
        "positions": positions,
        "spans": spans,
        "word_scores": jnp.where(mask, word_scores, 0),
    }


def local_interpretation(
    alpha: jax.Array,
    selection: jax.Array,
    predicted: jax.Array,
    mask: jax.Array,
    *,
    k1: int,
    k2: int,
    kernel_size: int,
) -> dict[str, jax.Array]:
    """Local interpretation of one short document (one sequence of N positions).

    A short document is a long one with a single sentence, so this reuses
    `local_interpretation_long` with M = 1.

    Args:
      alpha: [I, N] word attention per primary capsule, 0 at padding.
      selection: [I, J] the scores capsules are ranked by (the model's `capsule_selection`).
      predicted: int scalar, the predicted class j.
      mask: [N] bool, True at real words.
      k1, k2, kernel_size: as in `local_interpretation_long`.

    Returns:
      dict with capsules [k1], positions [k1, k2], spans [k1, k2, 2] and word_scores [N], as in
      `local_interpretation_long`.
    """
    single_sentence = local_interpretation_long(
        alpha[:, None, :],
        jnp.ones((alpha.shape[0], 1), alpha.dtype),
        selection,
        predicted,
        jnp.asarray(mask, bool)[None, :],
        k1=k1,
        k2=k2,
        kernel_size=kernel_size,
    )
    return {
        "capsules": single_sentence["capsules"],
        "positions": single_sentence["positions"],
        "spans": single_sentence["spans"],
        "word_scores": single_sentence["word_scores"][0],
    }


def global_assignment(
    selection: jax.Array,
    predicted: jax.Array,
    alpha: jax.Array,
    mask: jax.Array,
    *,
    kernel_size: int,
) -> dict[str, jax.Array]:
    """The cell (predicted, i*) and top K-gram one short document adds to the global counts.

    Args:
      selection: [I, J]; predicted: int scalar; alpha: [I, N]; mask: [N] bool.
      kernel_size: K (odd).

    Returns:
      dict with capsule (i* = argmax_i c[i, predicted]), position (its top position) and
      span [2] (its K-gram); -1 and [0, 0) when there is none.
    """
    top = local_interpretation(alpha, selection, predicted, mask, k1=1, k2=1, kernel_size=kernel_size)
    return {"capsule": top["capsules"][0], "position": top["positions"][0, 0], "span": top["spans"][0, 0]}


def global_assignment_long(
    selection: jax.Array,
    predicted: jax.Array,
    alpha: jax.Array,
    rho: jax.Array,
    mask: jax.Array,
    *,
    kernel_size: int,
) -> dict[str, jax.Array]:
    """`global_assignment` for a long document; also returns the K-gram's sentence.

    Args:
      selection: [I, J]; predicted: int scalar; alpha: [I, M, N]; rho: [I, M]; mask: [M, N] bool.
      kernel_size: K (odd).

    Returns:
      dict with capsule, sentence, position and span [2] (the span indexes words of `sentence`).
    """
    top = local_interpretation_long(alpha, rho, selection, predicted, mask, k1=1, k2=1, kernel_size=kernel_size)
    return {
        "capsule": top["capsules"][0],
        "sentence": top["sentences"][0],
        "position": top["positions"][0, 0],
        "span": top["spans"][0, 0],
    }


def _batched(
    per_example: Callable[..., dict[str, jax.Array]], static_argnames: tuple[str, ...]
) -> Callable[..., dict[str, jax.Array]]:
    """`per_example` vmapped over a leading batch axis of every array argument, then jitted."""

    @functools.partial(jax.jit, static_argnames=static_argnames)
    def batched(*arrays, **sizes):
        return jax.vmap(functools.partial(per_example, **sizes))(*arrays)

    # jit's wrapper has the function's __name__ (functools.wraps), which jax's JitWrapped type omits.
    batched.__name__ = f"batched_{per_example.__name__}"  # type: ignore[attr-defined]
    batched.__doc__ = (
        f"Batched `{per_example.__name__}`: every array argument and result gains a leading "
        f"batch axis B; {', '.join(static_argnames)} are static (keyword-only)."
    )
    return batched


batched_local_interpretation = _batched(local_interpretation, ("k1", "k2", "kernel_size"))
batched_local_interpretation_long = _batched(local_interpretation_long, ("k1", "k2", "kernel_size"))
batched_global_assignment = _batched(global_assignment, ("kernel_size",))
batched_global_assignment_long = _batched(global_assignment_long, ("kernel_size",))


def batched_local_interpretation_of(
    outputs: ModelOutput, targets: jax.Array, mask: jax.Array, **sizes
) -> dict[str, jax.Array]:
    """The batched local interpretation of an iCapsNets model's `outputs` (the word attention
    alpha, the capsule selection and, for Long, the sentence attention rho) for the classes
    `targets` [B], mask [B, N] (Long: [B, M, N]) True at real words; `sizes`: k1, k2, kernel_size."""
    if outputs.sentence_attention is None:  # Short
        return batched_local_interpretation(outputs.word_attention, outputs.capsule_selection, targets, mask, **sizes)
    return batched_local_interpretation_long(
        outputs.word_attention, outputs.sentence_attention, outputs.capsule_selection, targets, mask, **sizes
    )


def is_punctuation(word: str) -> bool:
    """True for a non-empty token made only of Unicode punctuation (categories P*: `,` `(` `-`
    `'` `%` `&` `#` ...). Symbols (`$`, `+`), digits and letters are not punctuation."""
    return bool(word) and all(unicodedata.category(character).startswith("P") for character in word)


def class_capsule_information(C: np.ndarray) -> dict:
    """How much the selected capsule says about the predicted class, from the counts C [J, I].

    With p(j, i) = C[j, i] / sum(C):

        MI(class; capsule) = sum_{j, i} p(j, i) log(p(j, i) / (p(j) p(i)))
        H(class)           = -sum_j p(j) log p(j)

    in nats; `normalized` = MI / H(class) lies in [0, 1]: 0 when the capsule is independent of
    the class (one capsule selected for every class, whatever the top-3 share says), 1 when each
    capsule is selected for one class only (the capsule names the class).

    Returns:
      {"mutual_information", "class_entropy", "normalized"}; each None for an empty C, and
      `normalized` None when a single class is predicted (H(class) = 0).
    """
    counts = np.asarray(C, np.float64)
    total = counts.sum()
    if total <= 0:
        return {"mutual_information": None, "class_entropy": None, "normalized": None}
    joint = counts / total
    p_class, p_capsule = joint.sum(axis=1), joint.sum(axis=0)
    nonzero = joint > 0
    expected = np.outer(p_class, p_capsule)
    information = float(np.sum(joint[nonzero] * np.log(joint[nonzero] / expected[nonzero])))
    class_entropy = float(-np.sum(p_class[p_class > 0] * np.log(p_class[p_class > 0])))
    # Rounding can leave MI a hair below 0 or above H(class).
    information = min(max(information, 0.0), class_entropy)
    return {
        "mutual_information": information,
        "class_entropy": class_entropy,
        "normalized": information / class_entropy if class_entropy > 0 else None,
    }


def most_selected_capsules(C: np.ndarray, class_names: Sequence[str]) -> dict[str, int]:
    """{class: the capsule selected for most of its examples} from the counts C [J, I], for the
    classes predicted at least once (ties: the lower capsule index)."""
    return {name: int(np.argmax(row)) for name, row in zip(class_names, np.asarray(C)) if row.sum() > 0}


def shared_capsules(most_selected: dict[str, int]) -> list[dict]:
    """[{"capsule": i, "classes": [...]}] for every capsule that is the most-selected one of two
    or more classes (`most_selected_capsules`): the collapse a top-cell share cannot show (each
    class can have all its examples in one cell while every class has the same cell)."""
    classes_of = collections.defaultdict(list)
    for name, capsule in most_selected.items():
        classes_of[capsule].append(name)
    return [{"capsule": capsule, "classes": names} for capsule, names in sorted(classes_of.items()) if len(names) > 1]


class GlobalInterpretation:
    """Host-side accumulator of the global interpretation over a split.

    `C[j, i]` counts the examples predicted as class j whose most-coupled capsule is i; each cell
    also counts the words of those examples' top K-grams.

    `keep_punctuation`: whether the most-frequent-word lists (`top_words`, `to_json`) include
    tokens made only of punctuation (`is_punctuation`). The counts always hold every word. The
    accumulator lists what it is given by default; `jcaps.interpret.report.interpret_workdir`
    leaves punctuation out by default, since in news text the agency tag's brackets and commas
    otherwise fill every list.

    Example (Short; for Long, index each example's words by out["sentence"] first):
      acc = GlobalInterpretation(num_classes=J, num_capsules=I, keep_punctuation=False)
      for batch in split:
        out = batched_global_assignment(selection, predicted, alpha, mask, kernel_size=3)
        acc.update(predicted, out["capsule"],
                   [words[start:end] for words, (start, end) in zip(batch_words, out["span"])])
      summary = acc.to_json(class_names)
    """

    def __init__(self, num_classes: int, num_capsules: int, *, keep_punctuation: bool = True):
        self.C = np.zeros((num_classes, num_capsules), np.int64)
        self.keep_punctuation = keep_punctuation
        self._word_counts: dict[tuple[int, ...], collections.Counter] = collections.defaultdict(collections.Counter)

    def update(self, predicted: Sequence[int], i_star: Sequence[int], kgram_words: Sequence[Sequence[str]]) -> None:
        """Adds one batch.

        Args:
          predicted: [B] predicted classes.
          i_star: [B] most-coupled capsule of each example; examples with -1 (no live capsule)
            are skipped.
          kgram_words: B lists, the words of each example's top K-gram.
        """
        classes, capsules = np.asarray(predicted), np.asarray(i_star)
        if not len(classes) == len(capsules) == len(kgram_words):
            raise ValueError(
                f"batch sizes differ: {len(classes)} predictions, {len(capsules)} capsules, {len(kgram_words)} K-grams."
            )
        for j, i, words in zip(classes.tolist(), capsules.tolist(), kgram_words):
            if i == NOT_SELECTED:
                continue
            self.C[j, i] += 1
            self._word_counts[j, i].update(words)

    def top_words(self, cell: tuple[int, int], n: int = 10) -> list[tuple[str, int]]:
        """The n most frequent K-gram words of cell (class j, capsule i); ties alphabetical;
        without punctuation-only tokens unless `keep_punctuation`."""
        counts = self._word_counts.get(tuple(cell), collections.Counter())
        items = [(word, count) for word, count in counts.items() if self.keep_punctuation or not is_punctuation(word)]
        return sorted(items, key=lambda item: (-item[1], item[0]))[:n]

    def _fullest_cells_mass(self, top: int) -> np.ndarray:
        """[J] examples of each class in its `top` fullest cells."""
        return -np.sort(-self.C, axis=1)[:, :top].sum(axis=1)

    def top_cell_mass(self, top: int = 3) -> np.ndarray:
        """[J] fraction of each class's examples that fall in its `top` fullest cells.

        Near 1 means a class is explained by few capsules (a sparse C); NaN for classes never
        predicted. One capsule selected for every class also gives 1: read it beside
        `class_capsule_information`.
        """
        totals = self.C.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(totals > 0, self._fullest_cells_mass(top) / totals, np.nan)

    def sparsity(self, class_names: Sequence[str], top: int = 3) -> dict:
        """Sparsity summary: per-class and overall fraction of the mass in the top cells."""
        total = self.C.sum()
        return {
            "top": top,
            "per_class": {
                name: (None if np.isnan(value) else float(value))
                for name, value in zip(class_names, self.top_cell_mass(top))
            },
            "overall": float(self._fullest_cells_mass(top).sum() / total) if total else None,
        }

    def most_selected(self, class_names: Sequence[str]) -> dict[str, int]:
        """`most_selected_capsules` of the counts so far."""
        return most_selected_capsules(self.C, class_names)

    def shared_capsules(self, class_names: Sequence[str]) -> list[dict]:
        """`shared_capsules` of the counts so far."""
        return shared_capsules(self.most_selected(class_names))

    def class_capsule_information(self) -> dict:
        """MI(predicted class; selected capsule) / H(class) of the counts so far, with MI and
        H(class) in nats (see the module function `class_capsule_information`)."""
        return class_capsule_information(self.C)

    def to_json(self, class_names: Sequence[str], n_words: int = 10, top: int = 3) -> dict:
        """JSON-ready summary: C, the non-empty cells with their top words, the sparsity, the
        class-capsule information, each class's most-selected capsule and the capsules shared
        that way by two or more classes."""
        if len(class_names) != self.C.shape[0]:
            raise ValueError(f"{len(class_names)} class names for {self.C.shape[0]} classes.")
        cells = [
            {
                "class": class_names[j],
                "capsule": i,
                "count": int(self.C[j, i]),
                "top_words": [[word, count] for word, count in self.top_words((j, i), n_words)],
            }
            for j, i in zip(*(axis.tolist() for axis in np.nonzero(self.C)))
        ]
        return {
            "C": self.C.tolist(),
            "class_names": list(class_names),
            "cells": cells,
            "sparsity": self.sparsity(class_names, top),
            "class_capsule_information": self.class_capsule_information(),
            "most_selected": self.most_selected(class_names),
            "shared_capsules": self.shared_capsules(class_names),
        }
