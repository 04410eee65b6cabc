"""A small, learnable, offline text classification task written as `zhang_csv` files
(single-label) or `jsonl` files with `labels` (multi-label).

Each class owns a few keywords; a document is filler words from a shared pool with two to
four keywords of its class mixed in, in a few sentences (multi-label: of each of its one to
three classes). A bag-of-words model reaches near-perfect accuracy, a model that ignores the
words stays at chance: that makes it a test that training learns, and a quick start that needs
no download.

`decoys` adds that many single keywords of other classes to each document. Without them a
model may learn one class as the absence of the others' keywords (CCCapsNet does), and its
explanations then have no planted evidence to point at for that class; with one decoy, every
class must be read from its own keywords, which outnumber the decoy.
"""

from __future__ import annotations

import csv
import json
import os

import numpy as np

CLASSES = ("world", "sports", "business", "science")
KEYWORDS = {
    "world": ("minister", "election", "embassy", "treaty", "parliament", "refugees"),
    "sports": ("striker", "tournament", "coach", "goal", "season", "champion"),
    "business": ("shares", "profit", "investors", "merger", "quarterly", "market"),
    "science": ("laboratory", "researchers", "genome", "telescope", "software", "physics"),
}
FILLER = [
    "the",
    "a",
    "of",
    "in",
    "on",
    "for",
    "with",
    "today",
    "said",
    "after",
    "over",
    "new",
    "report",
    "says",
    "this",
    "week",
    "people",
    "first",
    "year",
    "group",
    "last",
    "two",
    "three",
    "local",
    "city",
    "officials",
    "could",
    "would",
    "about",
    "more",
    "than",
]


def _document(rng: np.random.Generator, labels: list[int], decoys: int = 0) -> str:
    words = list(rng.choice(FILLER, size=int(rng.integers(8, 40))))
    for label in labels:
        for keyword in rng.choice(KEYWORDS[CLASSES[label]], size=int(rng.integers(2, 5))):
            words.insert(int(rng.integers(len(words) + 1)), str(keyword))
    others = [c for c in range(len(CLASSES)) if c not in labels]
    for _ in range(decoys):  # no draws at 0, so documents without decoys stay those of before
        words.insert(int(rng.integers(len(words) + 1)), str(rng.choice(KEYWORDS[CLASSES[int(rng.choice(others))]])))
    sentences = [" ".join(words[i : i + 9]) for i in range(0, len(words), 9)]
    return ". ".join(s.capitalize() for s in sentences) + "."


def make_documents(size: int, seed: int, decoys: int = 0) -> list[tuple[int, str]]:
    """`size` (class index 1..J, text) pairs; deterministic in `seed`."""
    rng = np.random.default_rng(seed)
    documents = []
    for _ in range(size):
        label = int(rng.integers(len(CLASSES)))
        documents.append((label + 1, _document(rng, [label], decoys)))
    return documents


def make_multilabel_documents(size: int, seed: int, decoys: int = 0) -> list[dict]:
    """`size` `{"text", "labels": [class names], "source": group}` records with one to three
    classes each, the first class more often than the others (so label frequencies differ);
    consecutive records share a `source` in groups of one to three (for `data.group_key`)."""
    rng = np.random.default_rng(seed)
    weights = np.array([4.0, 2.0, 1.5, 1.0]) / 8.5
    # A stream of its own, so that the texts and labels are those of the same seed without groups.
    group_starts = np.cumsum(np.random.default_rng([seed, 1]).integers(1, 4, size=size))
    documents = []
    for i in range(size):
        count = int(rng.integers(1, 4))
        labels = sorted(int(i) for i in rng.choice(len(CLASSES), size=count, replace=False, p=weights))
        documents.append(
            {
                "text": _document(rng, labels, decoys),
                "labels": [CLASSES[i] for i in labels],
                "source": f"source-{int(np.searchsorted(group_starts, i, side='right'))}",
            }
        )
    return documents


def _folder_name(prefix: str, train_size: int, test_size: int, seed: int, decoys: int) -> str:
    return f"{prefix}n{train_size}-{test_size}-s{seed}" + (f"-d{decoys}" if decoys else "")


def write_zhang_csv(directory: str, train_size: int, test_size: int, seed: int, decoys: int = 0) -> str:
    """Writes `train.csv`, `test.csv` and `classes.txt` under `directory/<sizes-seed-decoys>`;
    returns it."""
    folder = os.path.join(directory, _folder_name("", train_size, test_size, seed, decoys))
    if os.path.isfile(os.path.join(folder, "classes.txt")):  # written last
        return folder
    os.makedirs(folder, exist_ok=True)
    for split, size, split_seed in (("train", train_size, seed), ("test", test_size, seed + 1)):
        # Written to a temporary name first so an interrupted write is never mistaken for data;
        # the process's own, as two processes may write the same (identical) files at once.
        tmp = os.path.join(folder, f".{split}.csv.tmp.{os.getpid()}")
        with open(tmp, "w", newline="", encoding="utf-8") as f:
            csv.writer(f).writerows(make_documents(size, split_seed, decoys))
        os.replace(tmp, os.path.join(folder, f"{split}.csv"))
    tmp = os.path.join(folder, f".classes.txt.tmp.{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(CLASSES) + "\n")
    os.replace(tmp, os.path.join(folder, "classes.txt"))
    return folder


def write_multilabel_jsonl(directory: str, train_size: int, test_size: int, seed: int, decoys: int = 0) -> str:
    """Writes multi-label `train.jsonl` and `test.jsonl` under `directory/<sizes-seed-decoys>`;
    returns it."""
    folder = os.path.join(directory, _folder_name("multilabel-grouped-", train_size, test_size, seed, decoys))
    if os.path.isfile(os.path.join(folder, "test.jsonl")):  # written last
        return folder
    os.makedirs(folder, exist_ok=True)
    for split, size, split_seed in (("train", train_size, seed), ("test", test_size, seed + 1)):
        tmp = os.path.join(folder, f".{split}.jsonl.tmp.{os.getpid()}")
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(record) + "\n" for record in make_multilabel_documents(size, split_seed, decoys))
        os.replace(tmp, os.path.join(folder, f"{split}.jsonl"))
    return folder
