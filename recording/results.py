"""A run's results file, OUT/results.json: read back, and written again after every row."""

from __future__ import annotations

import json
import os


def earlier_results(out: str) -> dict:
    """OUT/results.json of an earlier call, so that rows measured then (other models, other
    shapes) stay beside the new ones; {} when there is none."""
    path = os.path.join(out, "results.json")
    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def write_results(out: str, results: dict) -> None:
    """OUT/results.json, written again after every row so an interrupted run keeps its rows."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "results.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=2)
