"""Why the global interpretation of a trained iCapsNets Short model selects the capsules it does,
and how it varies over training seeds.

    python -m studies.icapsnet_global.icapsnet_global --workdir W [--split test] [--limit N] [--out FILE.json] [--tiny]
    python -m studies.icapsnet_global.icapsnet_global --seeds 0,1,2,3,4 --out DIR [--data_dir D] [--jobs 2]
        [--config studies/icapsnet_global/config.py[:ARG]] [--set KEY=VALUE ...] [--tiny]

Seeds: trains the config (by default the shipped AG News config on the study's model variant,
variants.py) once per seed (`python -m studies.icapsnet_global.train`, `--config.train.seed=S`,
in DIR/runs/seedS;
`--set KEY=VALUE` passes `--config.KEY=VALUE` to every run, for a candidate setting;
`--data_dir` the AG News folder, else the TFDS catalogue dataset; `--jobs 2` trains two seeds
at once, one core each; an interrupted study resumes when the same command runs again), then
analyses each run's selected model on the test split as below and writes DIR/results.json:
{"runs": {"seedS": {"seed", "accuracy", "selection" (the rule), "mi_over_h" (under it),
"mi_over_h_coupling", "mi_over_h_contribution", "top3_share", "most_selected" {class:
capsule}, "shared_capsules" [{"capsule", "classes"}], "steps", "train_seconds", "knobs" {the
`BASELINE_KNOBS` it trained with}}}, "summary":
{"accuracy" | "mi_over_h": {"mean", "std", "min", "max"}}, "settings": {"config", "set"},
"_run"}. `--tiny` trains the `:smoke` config for one epoch per seed instead (seconds; the tests
run it).

One workdir:

Loads W (`jcaps.train.workdir.load_trained`, the parameters training reported as final), runs
the model over the split and prints, with the predicted class j of each example:

  * accuracy, and the selection of the paper (i* = argmax_i c[i, j]) and the model's own
    (`capsule_selection`: the same, or argmax_i of the contributions): share of the most
    selected capsule per class, top-3 share, MI(class; i*) / H(class);
  * the coupling coefficients: entropy of each row c[i, :] / log J (0 = one-hot, 1 = uniform),
    c[i*, j] and the gap to the runner-up capsule, how often each capsule routes most of its
    weight to j (argmax_j c[i, j] = j);
  * the primary capsule lengths |pc_i| per capsule, and how often i* is the longest capsule;
  * the attention: entropy of alpha[i, :] / log N and, per capsule, the tokens it puts its
    top weight on;
  * the class capsule head on its own (the shared transform u_hat[i, j] = W_j pc_i + b_j):
    accuracy with each capsule alone, and without it; the cosine between two primary
    capsules of one example; the share of |s_j| each capsule contributes;
  * the other selection rules the same outputs allow, each with its MI / H(class):
    contribution (argmax_i c[i, j] <u_hat[i, j], v_j> / |v_j|), centred coupling (c[i, j]
    minus capsule i's mean coupling to j over the split), leave-one-out (the capsule whose
    removal shortens v_j most);
  * the routing iterations r = 1..5 applied to the trained primary capsules (the model was
    trained with its own r; other r only show how routing sharpens the coupling).

`--out` also writes the numbers as JSON, with "_run": {commit, date, machine, load:
`recording.provenance.run_metadata`}. No training; about 20 s on 2 CPU cores for the AG News test split.
`--tiny` reads the first 16 examples of the split: a check that it runs, seconds on a `:smoke`
workdir (the tests run it). docs/icapsnets.md quotes its output in its analysis of the global interpretation.
"""

from __future__ import annotations

import argparse
import collections
import json
import os

import jax
import jax.numpy as jnp
import numpy as np

from jcaps.interpret.capsules import class_capsule_information, is_punctuation, shared_capsules
from jcaps.ops.capsules import (
    shared_prediction_vectors,
    unshared_prediction_vectors,
)
from jcaps.train.config import from_json
from jcaps.train.workdir import load_trained
from jcaps.viz.html import information_text
from recording.provenance import run_metadata
from studies import ROOT
from studies.icapsnet_global.paper import BASELINE_KNOBS
from studies.icapsnet_global.variants import MODEL_NAME, register
from studies.training_runs import final_test_metrics, train_pending, wall_seconds

TOP_POSITIONS = 1  # attention positions per capsule kept for the token statistics
TINY_LIMIT = 16


def _forward(trained):
    """tokens -> the per-example arrays the statistics need (jitted)."""

    @jax.jit
    def forward(tokens):
        out = trained.apply(tokens)
        mask = tokens > 0
        alpha = out.word_attention
        length = jnp.maximum(mask.sum(-1), 2)
        entropy = -jnp.sum(jnp.where(alpha > 0, alpha * jnp.log(jnp.where(alpha > 0, alpha, 1)), 0), -1)
        top = jax.lax.top_k(alpha, TOP_POSITIONS)[1]  # [B, I, k]
        return {
            "scores": out.scores,
            "coupling": out.coupling,
            "selection": out.capsule_selection,
            "primary": out.primary_capsules,
            "alpha_entropy": entropy / jnp.log(length)[:, None],
            "top_tokens": jnp.take_along_axis(tokens[:, None, :], top, axis=-1),
        }

    return forward


def _head(trained, routing_iterations=None):
    """primary [B, I, d_p], keep [B, I] -> (class capsules [B, J, d_c], coupling, u_hat): the
    model's capsule head on given primary capsules, with capsules left out where keep is 0."""
    params, model = trained.params, trained.config.model
    iterations = routing_iterations or model.routing_iterations

    @jax.jit
    def head(primary, keep):
        # [J, d_c, d_p]: one W_j for every capsule (the paper's Eq. 8); [I, J, d_c, d_p]: W_ij.
        predict = shared_prediction_vectors if params["class_kernel"].ndim == 3 else unshared_prediction_vectors
        u_hat = predict(primary, params["class_kernel"], bias=params["class_bias"])
        v, c = trained.model.apply({"params": params}, u_hat, keep, iterations, method="route")
        return v, c, u_hat

    return head


def _nmi(predicted, selected, num_classes, num_capsules):
    C = np.zeros((num_classes, num_capsules), np.int64)
    np.add.at(C, (predicted, selected), 1)
    return C, class_capsule_information(C)["normalized"]


def _selection_summary(C, names):
    per_class = {}
    for j, name in enumerate(names):
        row = C[j]
        if row.sum():
            per_class[name] = {"capsule": int(row.argmax()), "share": float(row.max() / row.sum())}
    top3 = float(-np.sort(-C, axis=1)[:, :3].sum() / C.sum())
    return {"most_selected": per_class, "top3_share": top3, "nmi": class_capsule_information(C)["normalized"]}


def _quantiles(x):
    return {q: float(np.quantile(x, float(q))) for q in ("0.05", "0.5", "0.95")}


def analyse(workdir, split="test", limit=0):
    register()
    trained = load_trained(workdir, with_data=True)
    if trained.config.model.name not in ("icapsnet_short", MODEL_NAME):
        raise SystemExit(f"{workdir}: an icapsnet_short or {MODEL_NAME} workdir is needed, "
                         f"not {trained.config.model.name}")
    names = list(trained.dataset.labels.names)
    vocab = trained.dataset.vocab
    forward = _forward(trained)
    batch_size = trained.config.train.eval_batch_size or trained.config.train.batch_size
    parts = collections.defaultdict(list)
    for batch in trained.dataset.eval_batches(split, batch_size, limit=limit):
        keep = batch["weight"] > 0
        out = jax.device_get(forward(batch["tokens"]))
        for key, value in out.items():
            parts[key].append(np.asarray(value)[keep])
        parts["label"].append(np.asarray(batch["label"])[keep])
    data = {key: np.concatenate(value) for key, value in parts.items()}
    scores, coupling, primary, labels = data["scores"], data["coupling"], data["primary"], data["label"]
    predicted = scores.argmax(-1)
    n, num_capsules, num_classes = coupling.shape
    rows = np.arange(n)
    report = {"workdir": workdir, "split": split, "examples": int(n), "class_names": names}
    report["accuracy"] = float(np.mean(predicted == labels))

    # The paper's selection.
    c_pred = coupling[rows, :, predicted]  # [n, I]
    paper = c_pred.argmax(-1)
    C, _ = _nmi(predicted, paper, num_classes, num_capsules)
    report["paper_selection"] = {**_selection_summary(C, names), "C": C.tolist()}
    # The model's own (`capsule_selection`): what `python -m jcaps.interpret` reports.
    rule = trained.config.model.get("capsule_selection", "coupling")
    C, _ = _nmi(predicted, data["selection"][rows, :, predicted].argmax(-1), num_classes, num_capsules)
    report["model_selection"] = {"rule": rule, **_selection_summary(C, names), "C": C.tolist()}

    # Coupling statistics.
    row_entropy = -np.sum(coupling * np.log(np.clip(coupling, 1e-12, None)), -1) / np.log(num_classes)
    ordered = -np.sort(-c_pred, axis=-1)
    report["coupling"] = {
        "row_entropy_over_log_J": _quantiles(row_entropy),
        "row_max": _quantiles(coupling.max(-1)),
        "c_pred_of_selected": _quantiles(ordered[:, 0]),
        "c_pred_runner_up": _quantiles(ordered[:, 1]),
        "c_pred_gap_top1_top2": _quantiles(ordered[:, 0] - ordered[:, 1]),
        "c_pred_mean_per_capsule": c_pred.mean(0).round(4).tolist(),
        "routes_most_to_predicted_per_capsule": (coupling.argmax(-1) == predicted[:, None]).mean(0).round(3).tolist(),
    }

    # Primary capsule lengths.
    lengths = np.linalg.norm(primary, axis=-1)  # [n, I]
    longest = lengths.argmax(-1)
    report["primary_lengths"] = {
        "mean_per_capsule": lengths.mean(0).round(3).tolist(),
        "std_per_capsule": lengths.std(0).round(3).tolist(),
        "longest_is_selected": float(np.mean(longest == paper)),
        "longest_capsule_counts": np.bincount(longest, minlength=num_capsules).tolist(),
        "selected_rank_by_length": _quantiles(np.sum(lengths > lengths[rows, paper][:, None], -1)),
    }

    # Attention.
    top_tokens = data["top_tokens"][:, :, 0]  # [n, I]
    words = np.array(list(vocab.tokens), dtype=object)
    attention = {"entropy_over_log_N_per_capsule": data["alpha_entropy"].mean(0).round(3).tolist(), "top_tokens": {}}
    for i in range(num_capsules):
        counts = collections.Counter(words[top_tokens[:, i]].tolist())
        punctuation = sum(c for w, c in counts.items() if is_punctuation(w))
        attention["top_tokens"][i] = {
            "most_common": counts.most_common(8),
            "punctuation_share": punctuation / n,
        }
    report["attention"] = attention

    # The capsule head on its own: ablations, directions, contributions.
    head = _head(trained)
    full = np.ones((n, num_capsules), np.float32)

    def run_head(keep, iterations=None):
        fn = head if iterations is None else _head(trained, iterations)
        outs = [jax.device_get(fn(primary[s:s + 1024], keep[s:s + 1024])) for s in range(0, n, 1024)]
        return tuple(np.concatenate([o[k] for o in outs]) for k in range(3))

    v, _, u_hat = run_head(full)
    class_lengths = np.linalg.norm(v, axis=-1)
    report["head_reproduces_model"] = float(np.max(np.abs(class_lengths - scores)))
    alone, without, loo_length = [], [], np.zeros((n, num_capsules))
    for i in range(num_capsules):
        only = np.zeros_like(full)
        only[:, i] = 1
        alone.append(float(np.mean(np.linalg.norm(run_head(only)[0], axis=-1).argmax(-1) == labels)))
        rest = full.copy()
        rest[:, i] = 0
        v_rest = run_head(rest)[0]
        without.append(float(np.mean(np.linalg.norm(v_rest, axis=-1).argmax(-1) == labels)))
        loo_length[:, i] = class_lengths[rows, predicted] - np.linalg.norm(v_rest[rows, predicted], axis=-1)
    unit = primary / np.maximum(lengths[..., None], 1e-9)
    cosine = np.einsum("nid,nkd->nik", unit, unit)
    off_diagonal = cosine[:, ~np.eye(num_capsules, dtype=bool)]
    v_pred = v[rows, predicted]  # [n, d_c]
    direction = v_pred / np.linalg.norm(v_pred, axis=-1, keepdims=True)
    projection = np.einsum("nid,nd->ni", u_hat[rows, :, predicted], direction)
    contribution = c_pred * projection  # each capsule's part of s_j along v_j
    contribution_share = contribution / contribution.sum(-1, keepdims=True)
    report["head"] = {
        "accuracy_capsule_alone": [round(a, 4) for a in alone],
        "accuracy_without_capsule": [round(a, 4) for a in without],
        "cosine_between_primary_capsules": _quantiles(off_diagonal.ravel()),
        "contribution_share_per_capsule": contribution_share.mean(0).round(3).tolist(),
        "bias_norm": np.linalg.norm(np.asarray(trained.params["class_bias"]), axis=-1).round(3).tolist(),
    }

    # Other selection rules on the same outputs.
    mean_coupling = np.stack([
        coupling[predicted == j, :, j].mean(0) if np.any(predicted == j) else np.zeros(num_capsules)
        for j in range(num_classes)
    ])  # [J, I]
    centred = c_pred - mean_coupling[predicted]
    rules = {
        "paper: argmax_i c[i, j]": paper,
        "contribution: argmax_i c[i, j] <u_hat[i, j], v_j / |v_j|>": contribution.argmax(-1),
        "centred coupling: argmax_i c[i, j] - mean c[i, j]": centred.argmax(-1),
        "leave-one-out: argmax_i |v_j| - |v_j without i|": loo_length.argmax(-1),
        "longest primary capsule": longest,
    }
    report["selection_rules"] = {
        name: _selection_summary(_nmi(predicted, chosen, num_classes, num_capsules)[0], names)
        for name, chosen in rules.items()
    }

    # Routing iterations at test time.
    iterations = {}
    for r in (1, 2, 3, 4, 5):
        v_r, c_r, _ = run_head(full, r)
        p_r = np.linalg.norm(v_r, axis=-1).argmax(-1)
        chosen = c_r[rows, :, p_r].argmax(-1)
        ent = -np.sum(c_r * np.log(np.clip(c_r, 1e-12, None)), -1) / np.log(num_classes)
        iterations[r] = {
            "accuracy": float(np.mean(p_r == labels)),
            "row_entropy_median": float(np.median(ent)),
            "nmi": _nmi(p_r, chosen, num_classes, num_capsules)[1],
        }
    report["routing_iterations"] = iterations
    return report


def _print(report):
    print(f"{report['workdir']} on {report['split']}: {report['examples']} examples, accuracy {report['accuracy']:.4f}")
    print(f"head on the returned primary capsules reproduces the scores to {report['head_reproduces_model']:.1e}")
    for title, sel in (("paper selection (argmax_i c[i, j])", report["paper_selection"]),
                       (f"model selection ({report['model_selection']['rule']})", report["model_selection"])):
        print(f"{title}:",
              ", ".join(f"{k} capsule {v['capsule']} {v['share']:.3f}" for k, v in sel["most_selected"].items()),
              f"| top-3 share {sel['top3_share']:.3f} | MI/H(class) {information_text(sel['nmi'])}")
    c = report["coupling"]
    print("coupling row entropy / log J (5/50/95 %):", c["row_entropy_over_log_J"])
    print("coupling row max:", c["row_max"])
    print("c[i*, j] of the selected capsule:", c["c_pred_of_selected"], "runner-up:", c["c_pred_runner_up"])
    print("gap c[i*, j] - runner-up:", c["c_pred_gap_top1_top2"])
    print("mean c[i, j] per capsule:", c["c_pred_mean_per_capsule"])
    print("share of examples where capsule i routes most to j:", c["routes_most_to_predicted_per_capsule"])
    p = report["primary_lengths"]
    print("mean |pc_i| per capsule:", p["mean_per_capsule"])
    print("std |pc_i| per capsule:", p["std_per_capsule"])
    print(f"selected capsule is the longest in {p['longest_is_selected']:.3f} of examples; "
          f"longest counts {p['longest_capsule_counts']}")
    a = report["attention"]
    print("alpha entropy / log N per capsule:", a["entropy_over_log_N_per_capsule"])
    for i, t in a["top_tokens"].items():
        print(f"  capsule {i:2d}: punctuation {t['punctuation_share']:.2f}; top-attended", t["most_common"])
    h = report["head"]
    print("accuracy with one capsule alone:", h["accuracy_capsule_alone"])
    print("accuracy without one capsule:", h["accuracy_without_capsule"])
    print("cosine between primary capsules of one example:", h["cosine_between_primary_capsules"])
    print("mean share of s_j along v_j per capsule:", h["contribution_share_per_capsule"])
    print("|b| of the prediction vectors:", h["bias_norm"])
    print("selection rules (MI/H(class), top-3 share, most selected per class):")
    for name, s in report["selection_rules"].items():
        most = ", ".join(f"{v['capsule']}:{v['share']:.2f}" for v in s["most_selected"].values())
        print(f"  {name}: MI/H {information_text(s['nmi'])}, top-3 {s['top3_share']:.3f}, [{most}]")
    print("routing iterations at test time:")
    for r, s in report["routing_iterations"].items():
        print(f"  r={r}: accuracy {s['accuracy']:.4f}, coupling entropy median {s['row_entropy_median']:.3f}, "
              f"MI/H {information_text(s['nmi'])}")


def knobs_of(workdir: str) -> dict:
    """The `BASELINE_KNOBS` values the run in `workdir` trained with (its config.json, under
    today's key names)."""
    with open(os.path.join(workdir, "config.json"), encoding="utf-8") as f:
        model = from_json(f.read()).model
    return {key: model.get(key, value) for key, value in BASELINE_KNOBS.items()}


def seed_summary(workdir: str, seed: int) -> dict:
    """The figures of one seed's run: test accuracy and the model's selection (`analyse`), with
    MI / H under the paper's rule (coupling) and the contribution rule beside it."""
    report = analyse(workdir, "test")
    selection = report["model_selection"]
    rules = report["selection_rules"]
    most_selected = {name: entry["capsule"] for name, entry in selection["most_selected"].items()}
    with open(os.path.join(workdir, "train.log"), encoding="utf-8") as f:
        log = f.read()
    seconds = wall_seconds(log)
    return {"seed": seed, "accuracy": report["accuracy"], "selection": selection["rule"], "mi_over_h": selection["nmi"],
            "mi_over_h_coupling": report["paper_selection"]["nmi"],
            "mi_over_h_contribution": next(v["nmi"] for k, v in rules.items() if k.startswith("contribution")),
            "top3_share": selection["top3_share"], "most_selected": most_selected,
            "shared_capsules": shared_capsules(most_selected), "steps": final_test_metrics(workdir)["step"],
            "train_seconds": seconds, "knobs": knobs_of(workdir)}


def _spread(values: list[float | None]) -> dict:
    """Mean, std, min and max over the seeds; MI / H is None for a run that predicts one class,
    which counts as a missing value (`missing`), never as 0."""
    known = [v for v in values if v is not None]
    if not known:
        return {"mean": None, "std": None, "min": None, "max": None, "missing": len(values)}
    return {"mean": float(np.mean(known)), "std": float(np.std(known)), "min": float(np.min(known)),
            "max": float(np.max(known)), "missing": len(values) - len(known)}


def seed_study(args) -> dict:
    """Trains every seed of `args.seeds` that has not finished, then summarises them all."""
    seeds = [int(seed) for seed in args.seeds.split(",") if seed]
    config = args.config + (",smoke" if args.tiny and ":" in args.config else ":smoke" if args.tiny else "")
    runs = []
    for seed in seeds:
        workdir = os.path.join(args.out, "runs", f"seed{seed}")
        flags = [f"--config={config}", f"--workdir={workdir}", f"--config.train.seed={seed}",
                 "--config.train.progress=lines", *(f"--config.{setting}" for setting in args.set)]
        if args.data_dir:
            flags.append(f"--config.data.dir={args.data_dir}")
        if args.tiny:
            flags.append("--config.train.num_epochs=1")
        if args.cache_dir:
            flags.append(f"--config.data.cache_dir={args.cache_dir}")
        runs.append((workdir, flags))
    train_pending(runs, args.jobs, module="studies.icapsnet_global.train")
    per_seed = {f"seed{seed}": seed_summary(workdir, seed) for seed, (workdir, _) in zip(seeds, runs)}
    return {"runs": per_seed,
            "summary": {key: _spread([run[key] for run in per_seed.values()]) for key in ("accuracy", "mi_over_h")},
            "settings": {"config": os.path.relpath(config, ROOT), "set": list(args.set)}}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--workdir", help="analyse this trained workdir")
    target.add_argument("--seeds", help="train and analyse one run per seed, comma-separated (needs --out DIR)")
    parser.add_argument("--split", default="test")
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--out", default=None, help="--workdir: a JSON file; --seeds: the study's folder")
    parser.add_argument("--config", default=os.path.join(ROOT, "studies", "icapsnet_global", "config.py"))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="--seeds: a config override of every run (repeatable)")
    parser.add_argument("--data_dir", default="", help="--seeds: the AG News folder (zhang_csv)")
    parser.add_argument("--jobs", type=int, default=1, help="--seeds: trainings at once (each pinned to a core)")
    parser.add_argument("--cache_dir", default="", help="--seeds: prepared-data cache")
    parser.add_argument("--tiny", action="store_true",
                        help=f"--workdir: the first {TINY_LIMIT} examples; --seeds: one-epoch smoke runs (seconds)")
    args = parser.parse_args()
    metadata = run_metadata(args.tiny)
    if args.seeds:
        if not args.out:
            parser.error("--seeds needs --out DIR")
        if any("=" not in setting for setting in args.set):
            parser.error(f"--set takes KEY=VALUE, got {args.set}")
        os.makedirs(args.out, exist_ok=True)
        results = {**seed_study(args), "_run": metadata}
        with open(os.path.join(args.out, "results.json"), "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
        for name, run in results["runs"].items():
            shared = "; ".join(f"capsule {e['capsule']}: {', '.join(e['classes'])}" for e in run["shared_capsules"])
            print(f"{name}: accuracy {run['accuracy']:.4f}, MI/H {information_text(run['mi_over_h'])}, "
                  f"top-3 share {run['top3_share']:.3f}, shared capsules: {shared or 'none'}")
        for key, spread in results["summary"].items():
            if spread["mean"] is not None:
                print(f"{key}: mean {spread['mean']:.4f}, std {spread['std']:.4f}, range [{spread['min']:.4f}, "
                      f"{spread['max']:.4f}]" + (f", {spread['missing']} undefined" if spread["missing"] else ""))
        return
    report = analyse(args.workdir, args.split, TINY_LIMIT if args.tiny else args.limit)
    report["_run"] = metadata
    _print(report)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1, default=str)


if __name__ == "__main__":
    main()
