"""`jcaps.predict` and `jcaps.evaluate` on one trained fastText `:smoke` workdir.

The workdir is trained once, in-process, on generated local files that are then moved away, so
evaluation has to be told where they went (`--config.data.dir`). Pure functions are tested
in-process; a few subprocess runs check the commands' output, errors and exit status.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from jcaps.data import synthetic
from jcaps.errors import UserError
from jcaps.predict import (
    TRUNCATION_MARK,
    check_ranges,
    clean_text,
    decode_lines,
    echo,
    iter_predictions,
    predict,
    read_input,
)
from jcaps.train import config as config_lib
from jcaps.train import loop
from jcaps.train.workdir import load_trained
from tests.command_env import command_env, library_log_lines

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMOKE = os.path.join(ROOT, "configs", "fasttext_ag_news.py:smoke")

# Blank, whitespace-only, not UTF-8, CRLF, a long line, and a last line without a line break.
LINES = [
    b"shares and profit rose as investors bought stock",
    b"",
    b"  \t ",
    b"the striker scored a goal \xff\xfe in the final",
    b"the coach watched the champion\r",
    b"goal " * 100,
    b"genome telescope physics",
]
FILE_BYTES = b"\n".join(LINES)


@pytest.fixture(scope="session")
def trained_run(built_once):
    """(workdir, the data folder it was trained on, moved after training; cache_dir), once a
    session (`built_once`)."""

    def train(root):
        data = synthetic.write_zhang_csv(str(root / "data"), train_size=256, test_size=64, seed=0)
        config = config_lib.load(SMOKE)
        config.data.source, config.data.dir = "local", data
        config.data.cache_dir = str(root / "cache")
        config.train.progress = "none"
        loop.train_and_evaluate(config, str(root / "workdir"))
        shutil.move(data, str(root / "moved"))

    root = built_once("predict_command", train)[0]
    return str(root / "workdir"), str(root / "moved"), str(root / "cache")


@pytest.fixture(scope="module")
def trained(trained_run):
    return load_trained(trained_run[0])


def run(*args, stdin: bytes | None = None, tmp_path=None):
    """A command's (returncode, stdout bytes, stderr text), on one CPU device."""
    env = command_env()
    if tmp_path is not None:
        env["XDG_CACHE_HOME"] = str(tmp_path / "xdg_cache")  # the compilation cache
    result = subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, env=env, input=stdin, capture_output=True, timeout=300
    )
    return result.returncode, result.stdout, result.stderr.decode("utf-8", "replace")


def assert_one_line_error(returncode, stdout, stderr, *fragments):
    assert returncode == 2, stderr
    assert not stdout and "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert lines[0].startswith("error: ") and all(line.startswith(("error: ", "hint: ")) for line in lines), stderr
    for fragment in fragments:
        assert fragment in lines[0], stderr


# ---------------------------------------------------------------------------------------------
# Reading and echoing texts (in-process).
# ---------------------------------------------------------------------------------------------


def test_decode_lines_numbers_every_line_and_replaces_bad_bytes():
    lines = decode_lines(io.BytesIO(FILE_BYTES + b"\n"), "f.txt", "replace")
    assert [n for n, _ in lines] == list(range(1, len(LINES) + 1))  # the final line break adds no line
    texts = dict(lines)
    assert texts[2] == "" and texts[3] == "  \t "
    assert texts[4] == "the striker scored a goal \ufffd\ufffd in the final"
    assert texts[5] == "the coach watched the champion"  # CRLF
    assert decode_lines(io.BytesIO(b"\xef\xbb\xbfhello\r\n"), "f", "strict") == [(1, "hello")]  # BOM


def test_decode_lines_strict_names_the_line():
    with pytest.raises(UserError, match=r"^f\.txt:4: not UTF-8 \(byte 0xff at byte 27 of the line\)$") as caught:
        decode_lines(io.BytesIO(FILE_BYTES), "f.txt")
    assert "--errors replace" in caught.value.hint


def test_read_input_missing_file(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        read_input(str(tmp_path / "missing.txt"))
    with pytest.raises(UserError, match="cannot read it"):
        read_input(str(tmp_path))  # a directory


def test_clean_text_makes_argv_bytes_valid_unicode():
    argv_text = b"caf\xe9 \xc3\xa9t\xc3\xa9".decode("utf-8", "surrogateescape")  # how Python reads argv
    assert clean_text(argv_text) == "caf\ufffd été"
    assert clean_text("a\ud800b") == "a\ufffdb"
    assert clean_text("plain ✓") == "plain ✓"
    json.dumps(clean_text(argv_text), ensure_ascii=False).encode("utf-8")


def test_echo_truncates_long_texts():
    assert echo("short", 200) == {"text": "short"}
    assert echo("x" * 500, 10) == {"text": "x" * 10 + TRUNCATION_MARK, "text_truncated": True, "text_chars": 500}
    assert echo("anything", 0) == {}


@pytest.mark.parametrize(
    "kwargs, message",
    [({"top_k": 0}, "--top_k"), ({"top_k": -1}, "--top_k"), ({"batch_size": 0}, "--batch_size"),
     ({"threshold": 1.5}, "--threshold"), ({"threshold": 0.0}, "--threshold")],
)
def test_option_ranges(kwargs, message):
    with pytest.raises(UserError, match=message):
        check_ranges(**kwargs)


# ---------------------------------------------------------------------------------------------
# The workdir (in-process).
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_load_reports_which_parameters(trained_run, trained):
    metrics = [json.loads(line) for line in Path(trained_run[0], "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    last_step = max(m["step"] for m in metrics)
    best = max((m for m in metrics if m["split"] == "validation" and not m.get("final")), key=lambda m: m["accuracy"])
    assert trained.parameters == "best" and trained.last_step == last_step
    assert trained.selected_step == best["step"]


@pytest.mark.slow
def test_predict_answers_every_text_in_order(trained):
    texts = ["shares and profit rose", "", "   ", "\\\\", "the striker scored a goal"] * 3
    results = predict(trained, texts, top_k=2, batch_size=4)  # chunks of 4 texts, 1 to 3 of them not empty
    assert len(results) == len(texts)
    for text, result in zip(texts, results):
        if text.strip("\\ "):
            assert set(result) == {"label", "probabilities"} and len(result["probabilities"]) == 2
        else:
            assert result == {"empty": True}  # no label for text without a token
    assert results[0]["label"] == "business" and results[4]["label"] == "sports"
    # The rows padding a batch (3 texts padded to 4) do not change a text's answer.
    alone = predict(trained, ["the striker scored a goal"], top_k=2)[0]
    assert alone["probabilities"] == pytest.approx(results[4]["probabilities"], abs=1e-5)
    assert len(predict(trained, ["shares"])[0]["probabilities"]) == len(trained.dataset.labels.names)


@pytest.mark.slow
def test_predict_checks_options_before_reading(trained):
    def texts():
        raise AssertionError("read")
        yield

    with pytest.raises(UserError, match="--top_k must be at least 1"):
        iter_predictions(trained, texts(), top_k=0)
    with pytest.raises(UserError, match="--threshold applies to multi-label models"):
        iter_predictions(trained, texts(), threshold=0.3)


@pytest.mark.slow
def test_probabilities_that_are_not_finite_are_refused(trained):
    import dataclasses

    import jax
    import numpy as np

    broken = dataclasses.replace(trained, params=jax.tree.map(lambda x: np.full_like(x, np.inf), trained.params))
    with pytest.raises(UserError, match=f"parameters of step {trained.selected_step} give probabilities that are "
                                        r"not finite \(NaN or infinity\)"):
        predict(broken, ["shares and profit rose"])


@pytest.mark.slow
def test_last_parameters_when_the_run_selected_none(trained_run, tmp_path):
    copy = tmp_path / "last"
    shutil.copytree(trained_run[0], copy)
    config = json.loads((copy / "config.json").read_text())
    config["train"]["select_best"] = False
    (copy / "config.json").write_text(json.dumps(config))
    last = load_trained(str(copy))
    assert last.selection == {"selected_step": last.last_step, "parameters": "last", "last_step": last.last_step}
    assert predict(last, ["the striker scored a goal"])[0]["label"] == "sports"


@pytest.mark.slow
def test_evaluate_in_process_reports_the_selected_step(trained_run, trained):
    from jcaps.evaluate import evaluate

    workdir, moved, _ = trained_run
    result = evaluate(workdir, "test", {"dir": moved})
    assert result["split"] == "test" and "step" not in result
    assert {k: result[k] for k in ("selected_step", "parameters", "last_step")} == trained.selection
    final_test = json.loads(Path(workdir, "metrics.jsonl").read_text(encoding="utf-8").splitlines()[-1])
    assert final_test["final"] and final_test["split"] == "test"
    assert result["accuracy"] == pytest.approx(final_test["accuracy"], abs=1e-6)
    with pytest.raises(UserError, match="evaluate changes only dir, cache_dir"):
        evaluate(workdir, "test", {"max_len": 3})


# ---------------------------------------------------------------------------------------------
# The commands (subprocesses).
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_cli_predict_stdin_answers_every_line(trained_run, tmp_path):
    returncode, stdout, stderr = run(
        "jcaps.predict", "--workdir", trained_run[0], "--input", "-", "--errors", "replace", "--batch_size", "2",
        "--echo_chars", "50", "--top_k", "1", stdin=FILE_BYTES + b"\n", tmp_path=tmp_path,
    )
    assert returncode == 0, stderr
    records = [json.loads(line) for line in stdout.decode("utf-8").splitlines()]
    assert [r["line"] for r in records] == list(range(1, len(LINES) + 1))
    assert [bool(r.get("empty")) for r in records] == [False, True, True, False, False, False, False]
    assert records[3]["text"] == "the striker scored a goal \ufffd\ufffd in the final"
    assert records[3]["label"] == "sports" and list(records[3]["probabilities"]) == ["sports"]
    long = records[5]
    assert long["text_truncated"] and long["text_chars"] == 500 and len(long["text"]) == 51
    assert "texts/s" in stderr
    assert not library_log_lines(stderr), stderr


@pytest.mark.slow
def test_cli_predict_stdin_answers_each_line_as_it_arrives(trained_run, tmp_path):
    """A reader that waits for each answer before writing the next line gets it."""
    import select

    env = command_env(XDG_CACHE_HOME=str(tmp_path / "xdg_cache"))
    with subprocess.Popen([sys.executable, "-m", "jcaps.predict", "--workdir", trained_run[0], "--input", "-"],
                          cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL) as process:
        for number, text in enumerate(["the striker scored a goal", "shares and profit rose"], 1):
            process.stdin.write(text.encode() + b"\n")
            process.stdin.flush()
            ready, _, _ = select.select([process.stdout], [], [], 120)
            assert ready, f"no answer to line {number} while standard input stays open"
            assert json.loads(process.stdout.readline())["line"] == number
        process.stdin.close()
        assert process.wait(timeout=60) == 0


@pytest.mark.slow
def test_cli_predict_text_with_invalid_bytes_prints_utf8_json(trained_run, tmp_path):
    returncode, stdout, stderr = run(
        "jcaps.predict", "--workdir", trained_run[0], "--text", os.fsdecode(b"caf\xe9 shares profit \xff"),
        "--text", "goal " * 100, "--echo_chars", "20", tmp_path=tmp_path,
    )
    assert returncode == 0, stderr
    first, second = [json.loads(line) for line in stdout.decode("utf-8").splitlines()]
    assert first["text"] == "caf\ufffd shares profit \ufffd" and first["label"] == "business"
    assert "line" not in first and len(first["probabilities"]) == 4
    assert second["text_truncated"] and second["text"] == "goal " * 4 + TRUNCATION_MARK


@pytest.mark.slow
def test_cli_predict_imports_no_optimiser_no_orbax_and_no_other_model(trained_run, tmp_path):
    """The parameters come from final_params.msgpack: orbax, a sixth of the start, is not imported."""
    env = command_env(XDG_CACHE_HOME=str(tmp_path / "xdg_cache"))
    # `python -m jcaps.predict ...`, then the modules it imported, as the last line of stderr,
    # printed as it ends the process (`cli.run(..., skip_teardown=True)`: no atexit handler runs).
    script = ("import json, os, runpy, sys\n"
              "exit_now = os._exit\n"
              "os._exit = lambda code: (print(json.dumps(sorted(sys.modules)), file=sys.stderr, flush=True),"
              " exit_now(code))\n"
              "runpy.run_module('jcaps.predict', run_name='__main__', alter_sys=True)")
    result = subprocess.run([sys.executable, "-c", script, "--workdir", trained_run[0], "--text", "the striker scored"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["label"] == "sports"
    imported = set(json.loads(result.stderr.splitlines()[-1]))
    assert "jcaps.models.fasttext" in imported
    assert not {module for module in imported if module.split(".")[0] in ("optax", "orbax")}
    other_models = ("cccapsnet", "icapsnet", "sgm", "dilated_fcn", "input_cell_lstm")
    assert not imported & {f"jcaps.models.{name}" for name in other_models}


@pytest.mark.slow
def test_cli_predict_user_errors(trained_run, tmp_path):
    workdir = trained_run[0]
    path = tmp_path / "texts.txt"
    path.write_bytes(FILE_BYTES)
    assert_one_line_error(*run("jcaps.predict", "--workdir", workdir, "--input", str(path)), f"{path}:4: not UTF-8")
    assert_one_line_error(*run("jcaps.predict", "--workdir", workdir, "--input", str(tmp_path / "no.txt")), "no such file")
    for top_k in ("0", "-1"):
        assert_one_line_error(*run("jcaps.predict", "--workdir", workdir, "--text", "x", "--top_k", top_k), "--top_k")
    assert_one_line_error(*run("jcaps.predict", "--workdir", workdir, "--text", "x", "--threshold", "1.5"), "--threshold")
    assert_one_line_error(*run("jcaps.predict", "--workdir", workdir), "give --text or --input")


@pytest.mark.slow
def test_cli_evaluate_reads_moved_data_from_config_data_dir(trained_run, tmp_path):
    workdir, moved, cache_dir = trained_run
    returncode, stdout, stderr = run("jcaps.evaluate", "--workdir", workdir, tmp_path=tmp_path)
    assert_one_line_error(returncode, stdout, stderr, "no such data directory (--config.data.dir)")
    returncode, stdout, stderr = run(
        "jcaps.evaluate", "--workdir", workdir, "--split", "validation", f"--config.data.dir={moved}",
        f"--config.data.cache_dir={cache_dir}", tmp_path=tmp_path,
    )
    assert returncode == 0, stderr
    assert not library_log_lines(stderr), stderr
    result = json.loads(stdout.decode("utf-8").strip().splitlines()[-1])
    assert result["split"] == "validation" and result["parameters"] == "best"
    assert isinstance(result["selected_step"], int) and result["selected_step"] <= result["last_step"]
    assert 0.0 <= result["accuracy"] <= 1.0
