"""`python -m jcaps.predict --workdir W (--text "..." | --input FILE) [--top_k K | --threshold P]`.

Prints one JSON line per text, in UTF-8. Single-label models: the predicted `label`, and the
probabilities of the top-k labels (all labels without --top_k). Multi-label models: the
predicted label set (`labels`); binary relevance also prints per-label probabilities (the top
k, or all) and takes `--threshold` (default: the model's `threshold`); a sequence-generation
model prints its labels in the order it generated them (the first k with --top_k).

`--input` reads one text a line ('-': standard input), in UTF-8, and answers every line, in
order, with its number: `{"line": N, ...}`; standard input is answered line by line, as it
arrives. A blank line (or one the tokenizer finds no token in) is answered `{"line": N,
"empty": true}`, without a label. A line of a file that is not UTF-8 stops the command before
anything is predicted, naming FILE:LINE (one of standard input stops it at that line);
`--errors replace` reads its bad bytes as U+FFFD instead. `--text` values are read the same
way, their undecodable bytes as U+FFFD. The text is echoed up to `--echo_chars` characters
(`"text_truncated": true` and the full length `text_chars` when it is longer; 0 echoes
nothing). With `--input`, the speed (texts/s) is printed on standard error at the end.
Compiled programs are kept in
`--compilation_cache` (default 'auto', $XDG_CACHE_HOME/jcaps/jax), never in the cache the
workdir's config names: a workdir is data, and a cache holds executables.
"""

from __future__ import annotations

import codecs
import functools
import itertools
import os
import sys
import time
from collections.abc import Iterable, Iterator

import numpy as np
from absl import flags

from jcaps import cli, strict_json
from jcaps.choices import check_choice
from jcaps.data.vocab import NUM_SPECIAL
from jcaps.errors import UserError

FLAGS = flags.FLAGS

ERRORS = ("strict", "replace")
TRUNCATION_MARK = "…"


# ---------------------------------------------------------------------------------------------
# Reading texts.
# ---------------------------------------------------------------------------------------------


def clean_text(text: str) -> str:
    """`text` as valid Unicode: bytes Python could not decode (command-line arguments carry them
    as lone surrogates) and any other lone surrogate become U+FFFD, so the JSON printed is UTF-8."""
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeEncodeError:  # a surrogate that does not stand for a byte
        return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)


def stream_lines(stream: Iterable[bytes], name: str, errors: str = "strict") -> Iterator[tuple[int, str]]:
    """`(line number, text)` for every line of `stream` (bytes), each as soon as it is read, blank
    lines included; the line break (`\\n` or `\\r\\n`) and a UTF-8 byte order mark are dropped. A
    line that is not UTF-8 is a UserError naming `name:LINE` (`errors="strict"`) or has U+FFFD
    for its bad bytes ("replace")."""
    check_choice("--errors", errors, ERRORS, UserError)
    for number, raw in enumerate(stream, 1):
        if raw.endswith(b"\n"):
            raw = raw[:-1]
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        if number == 1 and raw.startswith(codecs.BOM_UTF8):
            raw = raw[len(codecs.BOM_UTF8) :]
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            if errors == "strict":
                raise UserError(
                    f"{name}:{number}: not UTF-8 (byte 0x{raw[error.start]:02x} at byte {error.start + 1} of the line)",
                    hint="convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8), or pass --errors replace "
                    "to read its undecodable bytes as U+FFFD",
                ) from None
            text = raw.decode("utf-8", "replace")
        yield number, text


def decode_lines(stream: Iterable[bytes], name: str, errors: str = "strict") -> list[tuple[int, str]]:
    """Every line of `stream` (`stream_lines`), all read before the first is used."""
    return list(stream_lines(stream, name, errors))


def read_input(path: str, errors: str = "strict") -> Iterable[tuple[int, str]]:
    """`decode_lines` of the file `path` (a line that is not UTF-8 stops the command before
    anything is predicted), or for '-' `stream_lines` of standard input, each line answered as
    it arrives (a bad line stops the command there)."""
    if path == "-":
        return stream_lines(sys.stdin.buffer, "<stdin>", errors)
    try:
        with open(path, "rb") as stream:
            return decode_lines(stream, path, errors)
    except FileNotFoundError:
        raise UserError(
            f"--input {path}: no such file", hint="pass a file with one text a line, or - for standard input"
        ) from None
    except OSError as error:
        raise UserError(f"--input {path}: cannot read it ({error.strerror or error})") from None


def echo(text: str, limit: int) -> dict:
    """The `text` fields of an output line: at most `limit` characters of it (none for 0)."""
    if limit <= 0:
        return {}
    if len(text) <= limit:
        return {"text": text}
    return {"text": text[:limit] + TRUNCATION_MARK, "text_truncated": True, "text_chars": len(text)}


# ---------------------------------------------------------------------------------------------
# Predicting.
# ---------------------------------------------------------------------------------------------


def check_ranges(top_k: int | None = None, batch_size: int = 64, threshold: float | None = None) -> None:
    """UserErrors for options out of their ranges (checked before the workdir is loaded)."""
    if top_k is not None and top_k < 1:
        raise UserError(f"--top_k must be at least 1, not {top_k}", hint="leave --top_k out to print every label")
    if batch_size < 1:
        raise UserError(f"--batch_size must be at least 1, not {batch_size}")
    if threshold is not None and not 0.0 < threshold < 1.0:
        raise UserError(f"--threshold must lie between 0 and 1 (both excluded), not {threshold}")


def check_options(trained, top_k: int | None = None, batch_size: int = 64, threshold: float | None = None) -> None:
    """UserErrors for options out of range or not fitting the workdir's model."""
    family, name = trained.family, trained.config.model.name
    if family.kind != "text":
        raise UserError(
            f"{name} reads series, not text: jcaps.predict classifies text",
            hint="evaluate it with jcaps.evaluate and explain it with jcaps.interpret",
        )
    check_ranges(top_k, batch_size, threshold)
    if threshold is not None and (family.predict_labels is None or family.probabilities is None):
        raise UserError(
            f"--threshold applies to multi-label models with per-label scores, not to {name}",
            hint="leave --threshold out",
        )


def predict(
    trained, texts: list[str], top_k: int | None = None, batch_size: int = 64, threshold: float | None = None
) -> list[dict]:
    """The prediction for each text (see the module docstring; no `text` or `line` fields)."""
    return list(iter_predictions(trained, texts, top_k, batch_size, threshold))


def iter_predictions(
    trained, texts: Iterable[str], top_k: int | None = None, batch_size: int = 64, threshold: float | None = None
) -> Iterator[dict]:
    """`predict`, one text after another, `batch_size` texts a forward pass. Options are
    checked before the first text is read."""
    check_options(trained, top_k, batch_size, threshold)
    return _predictions(trained, texts, top_k, batch_size, threshold)


def _predictions(trained, texts, top_k, batch_size, threshold) -> Iterator[dict]:
    import jax

    from jcaps.train.workdir import refuse_non_finite

    family, dataset = trained.family, trained.dataset
    names = dataset.labels.names
    k = top_k or len(names)
    multi_label = family.predict_labels is not None
    generates = multi_label and family.probabilities is None
    run = jax.jit(functools.partial(_generate if generates else _probabilities, trained.model, family))
    cut = trained.config.model.get("threshold", 0.5) if threshold is None else threshold

    def answer(row) -> dict:
        if generates:
            # Label-sequence ids: NUM_SPECIAL + label index until EOS (the decoder writes nothing
            # after it).
            sequence, length = row
            return {"labels": [names[int(i) - NUM_SPECIAL] for i in sequence[: int(length)]][:k]}
        order = np.argsort(-row, kind="stable")
        top = {names[int(i)]: round(float(row[i]), 6) for i in order[:k]}
        if multi_label:
            return {"labels": [names[int(i)] for i in order if row[i] >= cut], "threshold": cut, "probabilities": top}
        return {"label": names[int(order[0])], "probabilities": top}

    for chunk in _chunks(texts, batch_size):
        encoded = [dataset.encode_text(text) if text.strip() else None for text in chunk]
        present = [(i, tokens) for i, tokens in enumerate(encoded) if tokens is not None and tokens.size]
        filled = [i for i, _ in present]
        results: list[dict] = [{"empty": True} for _ in chunk]
        if filled:
            tokens = _pad(dataset, [row_tokens for _, row_tokens in present], batch_size)
            outputs = jax.device_get(run(trained.params, tokens))
            if not generates:
                refuse_non_finite(trained, outputs, "probabilities")
            rows = zip(outputs.sequence, outputs.length) if generates else outputs
            for i, row in zip(filled, rows):
                results[i] = answer(row)
        yield from results


def _probabilities(model, family, params, tokens):
    return family.probabilities(model.apply({"params": params}, tokens, train=False))


def _generate(model, family, params, tokens):
    del family
    return model.apply({"params": params}, tokens, method="predict")


def _chunks(texts: Iterable[str], size: int) -> Iterator[list[str]]:
    chunk = []
    for text in texts:
        chunk.append(text)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _pad(dataset, encoded: list[np.ndarray], batch_size: int) -> np.ndarray:
    """The token batch of `encoded`, its rows padded (with weight-0 rows) to a power of two no
    larger than `batch_size`: few shapes, so few compilations, each kept in the compilation cache."""
    rows = min(batch_size, 1 << (len(encoded) - 1).bit_length())
    # pad_batch wants labels; these placeholders are never read.
    unlabelled = (
        {"labels": np.zeros((dataset.num_classes,), np.float32), "label_ids": np.zeros((0,), np.int32)}
        if dataset.multi_label
        else {"label": np.int32(0)}
    )
    examples = [{"tokens": tokens, "index": np.int32(i), **unlabelled} for i, tokens in enumerate(encoded)]
    return dataset.pad_batch(examples, rows)["tokens"]


# ---------------------------------------------------------------------------------------------
# The command.
# ---------------------------------------------------------------------------------------------


def _write(record: dict) -> None:
    sys.stdout.buffer.write(strict_json.dumps(record, ensure_ascii=False).encode("utf-8") + b"\n")


def main(argv):
    del argv
    from jcaps.train.workdir import load_trained, use_compilation_cache

    if FLAGS.text and FLAGS.input:
        raise UserError("give --text or --input, not both")
    if not FLAGS.text and not FLAGS.input:
        raise UserError("give --text or --input", hint="--input - reads one text a line from standard input")
    if FLAGS.echo_chars < 0:
        raise UserError(f"--echo_chars must be at least 0 (0: do not echo the text), not {FLAGS.echo_chars}")
    check_ranges(FLAGS.top_k, FLAGS.batch_size, FLAGS.threshold)
    if FLAGS.input:
        items = read_input(FLAGS.input, FLAGS.errors)
    else:
        items = [(None, clean_text(text)) for text in FLAGS.text]
    # Before the workdir loads: its checks compile too, and a cached program loads in milliseconds.
    use_compilation_cache(FLAGS.compilation_cache)
    trained = load_trained(FLAGS.workdir, parameters=FLAGS.parameters)
    # Standard input is answered a line at a time, as it arrives (a reader may wait for each
    # answer before writing the next line); a file, `--batch_size` lines a forward pass.
    streaming = FLAGS.input == "-"
    items, texts = itertools.tee(items)
    predictions = iter_predictions(
        trained, (text for _, text in texts), FLAGS.top_k, 1 if streaming else FLAGS.batch_size, FLAGS.threshold
    )
    start, count = time.perf_counter(), 0
    try:
        for (line, text), prediction in zip(items, predictions):
            _write({**({} if line is None else {"line": line}), **echo(text, FLAGS.echo_chars), **prediction})
            count += 1
            if streaming:
                sys.stdout.flush()
        sys.stdout.flush()
    except BrokenPipeError:  # `| head`: the reader has all it wants
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return
    if FLAGS.input:
        elapsed = max(time.perf_counter() - start, 1e-9)
        print(
            f"predicted {count} lines in {elapsed:.2f} s ({count / elapsed:.1f} texts/s)", file=sys.stderr, flush=True
        )


if __name__ == "__main__":
    # Flags are defined only when run as a program, so importing this module defines none.
    flags.DEFINE_string("workdir", None, "A workdir written by jcaps train.")
    flags.DEFINE_multi_string("text", [], "A text to classify (repeatable).")
    flags.DEFINE_string("input", None, "A UTF-8 file with one text a line, or '-' for standard input.")
    flags.DEFINE_enum(
        "errors",
        "strict",
        list(ERRORS),
        "--input lines that are not UTF-8: strict (an error naming "
        "the line) or replace (their bad bytes read as U+FFFD).",
    )
    flags.DEFINE_integer(
        "top_k", None, "Print the k most probable labels (k >= 1; default: all); for a sequence model, its first k."
    )
    flags.DEFINE_float(
        "threshold",
        None,
        "Multi-label models with per-label scores: the probability a label "
        "needs to be predicted, in (0, 1) (default: the model's threshold).",
    )
    flags.DEFINE_integer("batch_size", 64, "Texts per forward pass (>= 1).")
    flags.DEFINE_integer("echo_chars", 200, "Echo at most this many characters of each text (0: do not echo).")
    cli.define_parameters_flag()
    cli.define_compilation_cache_flag()
    flags.mark_flag_as_required("workdir")
    cli.run(main, skip_teardown=True)
