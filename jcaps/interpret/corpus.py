"""Explaining a whole split: `explain_workdir`, streamed to disk, resumable, sharded.

`python -m jcaps.interpret --workdir W --split test` explains every prediction of the split
(`--limit N`: of its first N examples) batch by batch:

  * Streamed. Each batch's lines are appended to the output once explained, and everything
    summarised (faithfulness.json, the report's sample of each class) is read back from the
    file, so host memory does not grow with the split.
  * Resumable. A run killed at any moment (`kill -9` included) and started again with the same
    command continues after the last batch whose lines were whole on disk: every example is
    explained once, with the scores an uninterrupted run gives (a prediction's random draws come
    from the seed, the method, the example's index and the output explained, not from the order
    of work: `explain.example_keys`). A finished run says so and does nothing; a second run on
    the same output stops at once with the lock's message; a rerun with other settings replaces
    a finished run and is refused beside an unfinished one.
  * Sharded. Each batch is split over the local devices (the 'data' mesh training uses) and over
    processes (`jax.distributed`): process p of P explains rows [p B/P, (p + 1) B/P) of every
    global batch of B rows, padded as the whole batch is, so each device sees the rows it would
    in one process; process 0 merges the processes' lines into one file sorted by example.

OUT holds, besides the files `jcaps.interpret.explain` describes:
  run.json: the settings of the run (split, methods, options, ...) and, once every file is
    written, "finished": true;
  while it runs, for process P of N: attributions.part-P-of-N.jsonl (its lines) and
  attributions.part-P-of-N.progress.json (how many of its batches, and bytes of its lines, are
  final; a line beyond them is cut off when the run resumes).
"""

from __future__ import annotations

import dataclasses
import heapq
import json
import os
from collections.abc import Iterator

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh

from jcaps import strict_json
from jcaps.attribution._faithfulness import METRICS, summarise
from jcaps.attribution.checks import ranks_nothing
from jcaps.data.batching import Shard
from jcaps.errors import UserError, writing
from jcaps.files import no_follow, replacing
from jcaps.folder_lock import exclusive
from jcaps.interpret.explain import (
    SCORE_DECIMALS,
    Explainer,
    native_note,
    position_words,
    removal,
    true_labels,
)
from jcaps.interpret.hooks import hooks_of
from jcaps.interpret.options import Options
from jcaps.train import mesh as mesh_lib
from jcaps.train.progress import Progress
from jcaps.viz.html import write_explanation_report

# What a full disk during an explanation run asks for: its lines are kept as they are written.
RESUME_HINT = (
    "free some space (or pass an --out on a larger disk) and run the same command again: it resumes "
    "from the explanations already written"
)

RUN_FILE = "run.json"
ATTRIBUTIONS = "attributions.jsonl"


@dataclasses.dataclass(frozen=True)
class _Part:
    """Process `index` of `count`: its lines and its progress file in OUT."""

    out: str
    index: int
    count: int

    @property
    def lines(self) -> str:
        return os.path.join(self.out, f"attributions.part-{self.index}-of-{self.count}.jsonl")

    @property
    def progress(self) -> str:
        return os.path.join(self.out, f"attributions.part-{self.index}-of-{self.count}.progress.json")


def _write_whole(path: str, text: str) -> None:
    """Writes `path` so that it holds the old text or the new, never a part (a rename)."""
    with writing("the explanations", path, RESUME_HINT), replacing(path) as f:
        f.write(text)


def _read_json(path: str) -> dict | None:
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _saved_progress(part: _Part) -> dict:
    """The progress a part saved (each saves it after every batch, and when it is done)."""
    state = _read_json(part.progress)
    assert state is not None, part.progress
    return state


def run_settings(
    trained, split: str, methods, limit: int, with_faithfulness: bool, options: Options, batch_size: int, seed: int
) -> dict:
    """What the explanations depend on: a run resumes only under the same (run.json)."""
    settings = {
        "split": split,
        "methods": list(methods),
        "limit": limit,
        "faithfulness": with_faithfulness,
        "options": options.settings(),
        "batch_size": batch_size,
        "seed": seed,
        "parameters": {"which": trained.parameters, "step": int(trained.selected_step)},
        "processes": jax.process_count(),
    }
    return json.loads(json.dumps(settings))  # as run.json holds them


def _check_settings(out: str, settings: dict) -> dict | None:
    """The saved run of OUT when it has the same settings; None when there is none, or when a
    finished run of other settings is there (it is replaced); a one-line `UserError` when an
    unfinished run of other settings is (its work would be lost)."""
    saved = _read_json(os.path.join(out, RUN_FILE))
    if saved is None:
        return None
    differing = sorted(
        k for k in settings.keys() | saved["settings"].keys() if settings.get(k) != saved["settings"].get(k)
    )
    if differing:
        changes = "; ".join(f"{k}: {saved['settings'].get(k)!r} -> {settings.get(k)!r}" for k in differing)
        if saved.get("finished"):
            if jax.process_index() == 0:
                print(f"{out}: replacing the finished explanations of other settings ({changes})", flush=True)
            return None
        raise UserError(
            f"{out} holds explanations made with other settings ({changes})",
            hint="pass the same flags to resume, or another --out",
        )
    return saved


def _records(trained, split: str, batch: dict, explained, methods, with_faithfulness: bool) -> Iterator[dict]:
    """The attributions.jsonl record of each real example of an explained batch."""
    is_text = trained.family.kind == "text"
    inputs = batch["tokens"] if is_text else batch["series"]
    for b in np.flatnonzero(np.asarray(batch["weight"]) > 0):
        index = int(batch["index"][b])
        words = position_words(trained, split, index, np.asarray(inputs[b]))
        record = {
            "index": index,
            "text": trained.dataset.text(split, index) if is_text else None,
            "tokens": [w for w in words if w is not None],
            "label": true_labels(trained, batch, b),
            "prediction": explained.predictions[b],
            "explanations": [],
        }
        for r in np.flatnonzero(explained.example == b):
            real = explained.mask[r]
            entry = {
                "target": explained.target_name[r],
                "target_index": int(explained.target[r]),
                "probability": round(float(explained.probability[r]), 6),
                "scores": {
                    method: np.round(explained.scores[method][r][real], SCORE_DECIMALS).tolist() for method in methods
                },
            }
            if explained.completeness_error:
                entry["completeness_error"] = {
                    method: round(float(errors[r]), 6) for method, errors in explained.completeness_error.items()
                }
            if with_faithfulness:
                entry["faithfulness"] = {
                    method: {metric: round(float(values[metric][r]), 6) for metric in METRICS}
                    for method, values in explained.faithfulness.items()
                }
            record["explanations"].append(entry)
        yield record


def _local_mesh(batch_rows: int) -> Mesh:
    """The 'data' mesh over as many of this process's devices as divide its rows of a batch
    (every device when the batch size is a multiple of their number)."""
    devices = jax.local_devices()
    count = max(n for n in range(1, len(devices) + 1) if batch_rows % n == 0)
    return mesh_lib.data_mesh(devices[:count])


def _explain_part(
    trained,
    split: str,
    part: _Part,
    *,
    methods,
    limit: int,
    with_faithfulness: bool,
    options: Options,
    batch_size: int,
    seed: int,
    progress: str,
) -> None:
    """Explains this process's rows of every batch not yet final, appending their lines."""
    state = _read_json(part.progress) or {
        "batches": 0,
        "bytes": 0,
        "done": False,
        "seconds": {},
        "rows": 0,
        "first_seconds": {},
        "first_rows": 0,
    }
    if state["done"]:
        return
    first = state["batches"]  # the first batch this run explains
    shard = Shard(part.index, part.count)
    rows = shard.rows(batch_size)
    explainer = Explainer(trained, options, seed=seed, mesh=_local_mesh(rows.stop - rows.start))
    size = len(trained.dataset.splits[split].source)
    examples = min(size, limit) if limit else size
    total_batches = -(-examples // batch_size)
    done_examples = min(state["batches"] * batch_size, examples)
    meter = Progress(progress, examples, initial=done_examples, enabled=part.index == 0, unit="example")
    with writing("the explanations", part.lines, RESUME_HINT):
        lines = open(part.lines, "a+b", opener=no_follow)  # noqa: SIM115 (held for the loop below)
    with lines:
        lines.truncate(state["bytes"])  # lines of a batch that did not become final
        lines.seek(state["bytes"])
        batches = trained.dataset.eval_batches(split, batch_size, limit=limit)
        for number, batch in enumerate(batches):
            if number < state["batches"]:
                continue
            mine = {k: v[rows] for k, v in batch.items()}
            explained = explainer.explain(mine, tuple(methods), with_faithfulness, keyed_by_example=True)
            text = "".join(
                strict_json.dumps(record, ensure_ascii=False) + "\n"
                for record in _records(trained, split, mine, explained, methods, with_faithfulness)
            )
            with writing("the explanations", part.lines, RESUME_HINT):
                lines.write(text.encode("utf-8"))
                lines.flush()
                os.fsync(lines.fileno())
            # Seconds a method takes, the first batch of each run (which compiles) apart: it is
            # counted only when nothing else is.
            timed = "seconds" if number > first else "first_seconds"
            if timed == "seconds" or number == 0:
                for method, spent in explained.seconds.items():
                    state[timed][method] = state[timed].get(method, 0.0) + spent
                state[timed.replace("seconds", "rows")] += len(explained.example)
            state["batches"], state["bytes"] = number + 1, lines.tell()
            _write_whole(part.progress, json.dumps(state))
            done_examples = min((number + 1) * batch_size, examples)
            meter.update(done_examples, {})
    meter.close()
    state["done"] = state["batches"] >= total_batches
    _write_whole(part.progress, json.dumps(state))


def _merged_lines(parts: list[_Part]) -> Iterator[str]:
    """Every part's lines, in the order of their examples (each part is in that order already)."""

    def keyed(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                yield json.loads(line)["index"], line

    for _, line in heapq.merge(*(keyed(part.lines) for part in parts), key=lambda item: item[0]):
        yield line


def _completeness_errors(entry: dict) -> dict[str, float]:
    """{method: completeness error} of an explained prediction's line (a line written before the
    errors were kept by method holds integrated gradients' alone, a number)."""
    errors = entry.get("completeness_error", {})
    return errors if isinstance(errors, dict) else {"integrated_gradients": errors}


def _summarise(
    trained,
    out: str,
    methods,
    *,
    with_faithfulness: bool,
    options: Options,
    seed: int,
    report_examples: int,
    timings: dict,
    rows_timed: int,
) -> tuple[dict, dict, dict, dict]:
    """(faithfulness summary, the report's examples by explained output, {method: completeness errors},
    {method: share of its explained predictions that rank nothing}), read from
    OUT/attributions.jsonl line by line."""
    values: dict[str, dict[str, list[float]]] = {method: {metric: [] for metric in METRICS} for method in methods}
    errors: dict[str, list[float]] = {}
    degenerate = {method: [0, 0] for method in methods}  # rows that rank nothing, rows of 2+ tokens
    shown: dict[str, list] = {}
    rows = 0
    with open(os.path.join(out, ATTRIBUTIONS), encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            for entry in record["explanations"]:
                rows += 1
                for method, error in _completeness_errors(entry).items():
                    errors.setdefault(method, []).append(error)
                for method, scores in entry["scores"].items():
                    if len(scores) >= 2:
                        tally = degenerate.setdefault(method, [0, 0])
                        tally[0] += ranks_nothing(scores)
                        tally[1] += 1
                for method, metrics in entry.get("faithfulness", {}).items():
                    for metric in METRICS:
                        values[method][metric].append(metrics[metric])
                group = shown.setdefault(entry["target"], [])
                if len(group) < report_examples:
                    group.append(
                        {
                            **{k: v for k, v in entry.items() if k != "faithfulness"},
                            "index": record["index"],
                            "tokens": record["tokens"],
                            "label": record["label"],
                            "prediction": record["prediction"],
                        }
                    )
    summary = {}
    if with_faithfulness:
        for method in methods:
            summary[method] = {
                **summarise(values[method], seed=seed),
                "seconds_per_100": round(100 * timings.get(method, 0.0) / max(rows_timed, 1), 4),
                "rows": rows,
                "removal": removal(hooks_of(trained.config.model.name), options)[0],
            }
        for method, of_method in errors.items():
            if method in summary:
                summary[method]["completeness_error"] = {
                    "median": float(np.median(of_method)),
                    "p95": float(np.percentile(of_method, 95)),
                }
    return summary, shown, errors, {method: count / max(counted, 1) for method, (count, counted) in degenerate.items()}


def finished_run(out: str, settings: dict) -> dict | None:
    """The run.json of OUT when its run finished with `settings` (its summary included), else None."""
    saved = _read_json(os.path.join(out, RUN_FILE))
    return saved if saved is not None and saved.get("finished") and saved["settings"] == settings else None


def explain_workdir(
    trained,
    split: str,
    out: str,
    *,
    methods: tuple[str, ...],
    limit: int = 0,
    with_faithfulness: bool = False,
    options: Options = Options(),
    batch_size: int = 32,
    report_examples: int = 12,
    seed: int = 0,
    extra_html: str = "",
    progress: str = "none",
) -> dict:
    """Writes the explanations of `trained` (`load_trained(..., with_data=True)`) on `split` to
    `out` (module docstring), resuming a run that stopped; returns the faithfulness summary ({}
    without `with_faithfulness`). `progress`: the progress line's mode (`jcaps.train.progress`)."""
    processes = jax.process_count()
    if batch_size % processes:
        raise UserError(f"--batch_size={batch_size} must be a multiple of the number of processes ({processes})")
    os.makedirs(out, exist_ok=True)
    part = _Part(out, jax.process_index(), processes)
    settings = run_settings(trained, split, methods, limit, with_faithfulness, options, batch_size, seed)
    with exclusive(
        out,
        called="the output folder",
        run="an explanation run",
        advice="wait for it or stop it (it resumes where it stopped), or pass another --out",
        hint=RESUME_HINT,
        name=".lock" if part.index == 0 else f".lock-{part.index}",
    ):
        saved = _check_settings(out, settings)
        if saved is not None and saved.get("finished"):
            return saved["summary"]
        if saved is None and part.index == 0:  # a new run, or one replacing a finished run's files
            _write_whole(os.path.join(out, RUN_FILE), json.dumps({"settings": settings, "finished": False}, indent=1))
        _explain_part(
            trained,
            split,
            part,
            methods=methods,
            limit=limit,
            with_faithfulness=with_faithfulness,
            options=options,
            batch_size=batch_size,
            seed=seed,
            progress=progress,
        )
    if processes > 1:
        multihost_utils.sync_global_devices("jcaps.interpret: every part explained")
    summary = {}
    if part.index == 0:
        summary = _finish(
            trained,
            split,
            out,
            settings,
            methods=methods,
            with_faithfulness=with_faithfulness,
            options=options,
            seed=seed,
            report_examples=report_examples,
            extra_html=extra_html,
        )
    if processes > 1:
        multihost_utils.sync_global_devices("jcaps.interpret: merged")
    return summary


def _finish(
    trained,
    split: str,
    out: str,
    settings: dict,
    *,
    methods,
    with_faithfulness: bool,
    options: Options,
    seed: int,
    report_examples: int,
    extra_html: str,
) -> dict:
    """Merges the parts into attributions.jsonl, summarises it into faithfulness.json and
    report.html, marks the run finished and removes the parts."""
    parts = [_Part(out, index, settings["processes"]) for index in range(settings["processes"])]
    path = os.path.join(out, ATTRIBUTIONS)
    with writing("the explanations", path, RESUME_HINT), replacing(path) as merged:
        merged.writelines(_merged_lines(parts))
    states = [_saved_progress(part) for part in parts]
    steady = "" if any(state["rows"] for state in states) else "first_"  # the first batch only when alone
    timings: dict[str, float] = {}
    for state in states:
        for method, spent in state[steady + "seconds"].items():
            timings[method] = timings.get(method, 0.0) + spent
    summary, shown, errors, degenerate = _summarise(
        trained,
        out,
        methods,
        with_faithfulness=with_faithfulness,
        options=options,
        seed=seed,
        report_examples=report_examples,
        timings=timings,
        rows_timed=sum(state[steady + "rows"] for state in states),
    )
    if with_faithfulness:
        path = os.path.join(out, "faithfulness.json")
        with writing("the faithfulness summary", path, RESUME_HINT), replacing(path) as f:
            strict_json.dump(summary, f, indent=1)
    is_text = trained.family.kind == "text"
    write_explanation_report(
        os.path.join(out, "report.html"),
        title=f"{trained.config.model.name} on {split}: explanations",
        methods=methods,
        groups=shown,
        faithfulness=summary,
        completeness={method: float(np.median(of_method)) for method, of_method in errors.items()},
        degenerate=degenerate,
        joiner="" if is_text and trained.config.data.tokenizer.endswith("chars") else " ",
        extra_html=extra_html,
        note=native_note(trained.config.model, methods=methods),
    )
    _write_whole(
        os.path.join(out, RUN_FILE),
        strict_json.dumps({"settings": settings, "finished": True, "summary": summary}, indent=1),
    )
    for part in parts:
        for leftover in (part.lines, part.progress):
            if os.path.exists(leftover):
                os.remove(leftover)
    return summary
