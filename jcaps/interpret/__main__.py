"""`python -m jcaps.interpret --workdir W [--split test] [--limit N] [--methods ...] [--faithfulness]
[--config.data.dir=D]`.

Explains the predictions of any trained workdir, every model name, on the whole split (or its
first `--limit` examples), and writes to `--out` (default WORKDIR/interpretation), see
`jcaps.interpret.explain`. The run streams its lines to disk, resumes where it stopped when the
same command runs again (a finished one does nothing), splits each batch over the local devices
and, with `--num_processes`, over processes (`jcaps.interpret.corpus`):
  - `attributions.jsonl`: per example its tokens, prediction and every method's per-token scores;
  - `faithfulness.json` (with `--faithfulness`): comprehensiveness, sufficiency, deletion and
    insertion AUC of each method and of a random ranking, with 95 % bootstrap intervals;
  - `report.html`: the faithfulness table, then the examples grouped by the prediction explained,
    their tokens coloured by the method picked in a selector.
iCapsNets workdirs also get their capsule interpretation (`local.jsonl`, `global.json`, `C.png`;
`--k1`, `--k2`; see `jcaps.interpret.report`), shown in the report too; series workdirs (the
input-cell attention LSTM and its baselines) one PNG of input and saliency maps per example and
`saliency.json` (`jcaps.interpret.series_report`).
"""

import dataclasses
import functools
import os

from absl import flags

from jcaps import cli, strict_json
from jcaps.attribution.methods import METHODS
from jcaps.errors import UserError
from jcaps.files import refuse_linked_folder, replacing
from jcaps.interpret.options import NATIVE_METHODS, REMOVALS, Options, method_flags

# The flags are defined from the table of methods and `jcaps.interpret.options` alone (neither
# loads JAX), and JAX and the modules that explain are imported by `main`: `--help` answers
# without loading them. A method added to the table before this module runs is offered, its
# flags with it.

DEFAULT_CHECK_LIMIT = 200  # examples the sanity checks use when --limit is not given
DEFAULT_SERIES_FIGURES = 8

flags.DEFINE_string("workdir", None, "A workdir written by jcaps train.", required=True)
flags.DEFINE_string("split", "test", "Split to explain.")
flags.DEFINE_string("out", None, "Output directory (default WORKDIR/interpretation).")
flags.DEFINE_integer(
    "limit",
    None,
    "Explain the first N examples (default: the whole split; the sanity checks use "
    f"the first {DEFAULT_CHECK_LIMIT}, series figures the first {DEFAULT_SERIES_FIGURES}).",
)
flags.DEFINE_list(
    "methods",
    None,
    "Methods to run (default: all but the sampling methods, and the model's own): "
    f"among {', '.join(METHODS)} and the models' own, {', '.join(NATIVE_METHODS)}.",
)
flags.DEFINE_bool("faithfulness", False, "Also measure each method's faithfulness (faithfulness.json).")
flags.DEFINE_bool(
    "checks",
    False,
    "Also run the sanity checks of each method (checks.json; jcaps.interpret.checks): "
    "parameter randomisation, max-sensitivity, complexity, degenerate rankings, localisation.",
)
flags.DEFINE_enum("removal", "pad", list(REMOVALS), "Faithfulness: a removed token becomes PAD or UNK.")
METHOD_FLAGS = method_flags()
for _flag, _declared in METHOD_FLAGS.items():
    if isinstance(_declared.default, bool):
        flags.DEFINE_bool(_flag, _declared.default, _declared.help)
    elif isinstance(_declared.default, float):
        flags.DEFINE_float(_flag, _declared.default, _declared.help)
    elif isinstance(_declared.default, str):
        flags.DEFINE_string(_flag, _declared.default, _declared.help)
    else:  # counts, and copies a call (None: the model's)
        flags.DEFINE_integer(_flag, _declared.default, _declared.help)
flags.DEFINE_integer("batch_size", 32, "Examples per batch.")
flags.DEFINE_integer("k1", 3, "iCapsNets: capsules selected per example (top by coupling to the prediction).")
flags.DEFINE_integer("k2", 2, "iCapsNets: positions selected per capsule (top by attention).")
flags.DEFINE_bool(
    "keep_punctuation",
    False,
    "iCapsNets: list punctuation-only tokens among each cell's "
    "most frequent K-gram words in global.json (left out by default).",
)
flags.DEFINE_integer("report_examples", 12, "Examples per explained class or label shown in report.html.")
flags.DEFINE_integer("seed", 0, "Seed of SmoothGrad's noise, the random ranking and the bootstrap.")
flags.DEFINE_enum(
    "progress",
    "auto",
    ["auto", "bar", "lines", "none"],
    "The progress line: examples/s and the time left (auto: a bar on a terminal, lines otherwise).",
)
cli.define_data_location_flags()
cli.define_parameters_flag()
cli.define_process_flags()
FLAGS = flags.FLAGS


def _is_count(default) -> bool:
    """Whether a method flag of this default is a count (at least 1): ints, and copies a call."""
    return default is None or (isinstance(default, int) and not isinstance(default, bool))


def _check_flags(model_config) -> tuple[str, ...]:
    """The methods to run; a one-line user error for anything out of range."""
    from jcaps.attribution.methods import METHODS
    from jcaps.interpret import explain

    counts = [flag for flag, declared in METHOD_FLAGS.items() if _is_count(declared.default)]
    for name in ("limit", *counts, "batch_size", "k1", "k2", "report_examples"):
        value = getattr(FLAGS, name)
        if value is not None and value < 1:
            raise UserError(f"--{name} must be at least 1, not {value}")
    offered = explain.offered_methods(model_config)
    methods = tuple(FLAGS.methods) if FLAGS.methods else explain.model_methods(model_config)
    known = set(METHODS) | set(NATIVE_METHODS)  # the table as it stands, entries added at run time too
    for method in methods:
        if method not in known:
            raise UserError(f"--methods: unknown method {method!r}", hint=f"methods: {', '.join(sorted(known))}")
        if method not in offered:
            raise UserError(
                f"--methods: a {model_config.name} model has no {method!r} explanation",
                hint=f"its methods: {', '.join(offered)}",
            )
    return methods


def main(argv):
    del argv
    import jax

    from jcaps.interpret import checks, corpus, explain
    from jcaps.interpret.report import interpret_workdir
    from jcaps.interpret.series_report import saliency_report
    from jcaps.train.mesh import process_local
    from jcaps.train.workdir import check_split, load_trained, read_config
    from jcaps.viz.html import capsule_global_html, checks_markdown, information_text

    config = read_config(FLAGS.workdir)
    methods = _check_flags(config.model)
    out = FLAGS.out or os.path.join(FLAGS.workdir, "interpretation")
    if not FLAGS.out:  # the workdir's own folder: a link there would send every output elsewhere
        refuse_linked_folder(out)
    cli.initialize_processes()
    trained = load_trained(
        FLAGS.workdir, with_data=True, data_overrides=cli.data_location_overrides(), parameters=FLAGS.parameters
    )
    # Each process explains its rows alone: the parameters, restored together, as its own copy.
    trained = dataclasses.replace(trained, params=process_local(trained.params))
    size = check_split(trained, FLAGS.split, FLAGS.workdir)
    explained = min(FLAGS.limit or size, size)
    options = Options(
        removal=FLAGS.removal, k1=FLAGS.k1, k2=FLAGS.k2, **{flag: getattr(FLAGS, flag) for flag in METHOD_FLAGS}
    )
    explain_split = functools.partial(
        corpus.explain_workdir,
        trained,
        FLAGS.split,
        out,
        methods=methods,
        limit=FLAGS.limit or 0,
        with_faithfulness=FLAGS.faithfulness,
        options=options,
        batch_size=FLAGS.batch_size,
        report_examples=FLAGS.report_examples,
        seed=FLAGS.seed,
        progress=FLAGS.progress,
    )
    settings = corpus.run_settings(
        trained, FLAGS.split, methods, FLAGS.limit or 0, FLAGS.faithfulness, options, FLAGS.batch_size, FLAGS.seed
    )
    if corpus.finished_run(out, settings) is not None:
        if jax.process_index() == 0:
            print(
                f"{out} holds the finished explanations of these settings ({explained} examples of {FLAGS.split}); "
                "nothing to do"
            )
        return

    # The whole-split analyses are one process's: the others only explain their rows.
    is_main = jax.process_index() == 0
    extra_html, closing = "", []
    if is_main and explain.native_method(config.model) == "capsules":
        summary = interpret_workdir(
            trained, FLAGS.split, out, FLAGS.limit or 0, FLAGS.k1, FLAGS.k2, keep_punctuation=FLAGS.keep_punctuation
        )
        extra_html = capsule_global_html(summary, os.path.join(out, "C.png"))
        sparsity = summary["sparsity"]
        closing.append(
            f"share of each class's examples in its top {sparsity['top']} capsules: "
            f"{sparsity['overall']:.3f}; MI(class; capsule) / H(class): "
            f"{information_text(summary['class_capsule_information']['normalized'])}"
        )
    elif is_main and trained.family.kind == "series":
        summary = saliency_report(trained, FLAGS.split, out, FLAGS.limit or DEFAULT_SERIES_FIGURES)
        shares = " ".join(f"{s:.2f}" for s in summary["mean_share_by_tenth"])
        closing.append(
            f"wrote {len(summary['examples'])} saliency figures; mean share of saliency per tenth of "
            f"the series: {shares}"
        )

    summary_of_checks = None
    if is_main and FLAGS.checks:
        summary_of_checks = checks.check_workdir(
            trained,
            FLAGS.split,
            methods,
            limit=FLAGS.limit or DEFAULT_CHECK_LIMIT,
            options=options,
            batch_size=FLAGS.batch_size,
            seed=FLAGS.seed,
        )
        extra_html += checks.html_table(summary_of_checks)
    faithfulness = explain_split(extra_html=extra_html)
    if not is_main:
        return
    if summary_of_checks is not None:
        with replacing(os.path.join(out, "checks.json")) as f:
            strict_json.dump(summary_of_checks, f, indent=1)
        if FLAGS.faithfulness:
            with replacing(os.path.join(out, "faithfulness.json")) as f:
                strict_json.dump({**faithfulness, "checks": summary_of_checks}, f, indent=1)
        closing.append("checks (checks.json):\n" + checks_markdown(summary_of_checks).rstrip())
    for method, values in faithfulness.items():
        closing.append(
            f"{method}: comprehensiveness {values['comprehensiveness']:.4f} sufficiency "
            f"{values['sufficiency']:.4f} deletion AUC {values['deletion_auc']:.4f} insertion AUC "
            f"{values['insertion_auc']:.4f} ({values['seconds_per_100']:.2f} s per 100)"
        )
    print(
        f"explained {explained} examples of {FLAGS.split} with "
        f"{', '.join(methods)}; wrote {out}/attributions.jsonl, report.html"
        + (", faithfulness.json" if FLAGS.faithfulness else "")
        + (", checks.json" if FLAGS.checks else "")
    )
    for line in closing:
        print(line)


if __name__ == "__main__":
    cli.run(main)
