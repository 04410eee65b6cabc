"""User errors of every command: `error: <what> (<where>)` and a hint on stderr, exit status 2,
no traceback (`JCAPS_DEBUG=1` shows it); a bug keeps its traceback."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import textwrap

import pytest

from tests.command_env import command_env
from tests.workdir_flags import own_data_cache

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMOKE = "configs/fasttext_ag_news.py:smoke"


def run(*args, devices: int = 1, **env):
    environment = {key: value for key, value in command_env(devices).items() if key != "JCAPS_DEBUG"}
    environment.update(env)
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=environment, capture_output=True, text=True,
                          timeout=300)


def assert_user_error(result, *fragments: str) -> str:
    """Exit 2, no traceback, one `error:` line holding every fragment; returns that line."""
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    return errors[0]


@pytest.fixture(scope="session")
def trained(trained_smoke_workdir):
    """The session's fastText `:smoke` workdir: the tests that change it change a copy."""
    return trained_smoke_workdir("fasttext_ag_news.py")[0]


def test_misspelt_config_key_suggests_the_right_one_without_escapes(tmp_path):
    line = assert_user_error(run("train.py", "--config", SMOKE, "--workdir", str(tmp_path / "w"),
                                 "--config.train.batch_sise=3"),
                             '--config.train.batch_sise: no such config key; did you mean "batch_size"?')
    assert "\\" not in line
    assert not (tmp_path / "w").exists()


def test_config_file_not_found_and_unknown_config_argument(tmp_path):
    assert_user_error(run("train.py", "--config", "configs/no_such_config.py", "--workdir", str(tmp_path)),
                      "configs/no_such_config.py not found")
    assert_user_error(run("train.py", "--config", "configs/fasttext_ag_news.py:nosuch", "--workdir", str(tmp_path)),
                      "unknown config argument 'nosuch'")


def test_a_config_file_that_does_not_run_is_named_with_its_line(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import ml_collections\n\ndef get_config(:\n    return None\n")
    assert_user_error(run("train.py", "--config", str(bad), "--workdir", str(tmp_path / "w")),
                      f"{bad}:3: invalid syntax")
    bad.write_text("def get_config():\n    return undefined_name\n")
    assert_user_error(run("train.py", "--config", str(bad), "--workdir", str(tmp_path / "w")),
                      f"{bad}:2: NameError: name 'undefined_name' is not defined")


@pytest.mark.parametrize("config,flag,message", [
    (SMOKE, "--config.model.embed_dim=0", "model.embed_dim must be an integer >= 1, not 0"),
    (SMOKE, "--config.model.dropout_rate=1.5", "model.dropout_rate must be a number in [0, 1), not 1.5"),
    # A choice is checked by the model itself, built with stand-in sizes before the data is read.
    (SMOKE.replace("fasttext_ag_news", "icapsnet_short_ag_news"), "--config.model.routing=bogus",
     "config.model: routing must be one of dynamic, kmeans, not 'bogus'"),
    # A renamed key, in the configs of the models whose key it was.
    ("configs/dilated_fcn_emoji.py:smoke", "--config.model.embedding_dim=8",
     "config.model.embedding_dim was renamed model.embed_dim"),
    (SMOKE.replace("fasttext_ag_news", "icapsnet_short_ag_news"), "--config.model.dropout_rate=0.5",
     "config.model.dropout_rate was renamed model.embedding_dropout"),
])
def test_model_keys_out_of_range_stop_before_data_preparation(tmp_path, config, flag, message):
    result = run("train.py", "--config", config, "--workdir", str(tmp_path / "w"),
                 f"--config.data.cache_dir={tmp_path / 'cache'}", flag)
    assert_user_error(result, message)
    assert len(result.stderr.splitlines()) <= 2 and not (tmp_path / "cache").exists()


def test_missing_required_flag_and_bad_flag_value(tmp_path):
    assert_user_error(run("train.py", "--config", SMOKE), "--workdir")
    assert_user_error(run("train.py", "--config", SMOKE, "--workdir", str(tmp_path), "--config.train.batch_size=abc"),
                      "--config.train.batch_size=abc")


@pytest.mark.parametrize("command", [["-m", "jcaps.evaluate"], ["-m", "jcaps.predict", "--text", "x"],
                                     ["-m", "jcaps.interpret"]])
def test_unknown_workdir(tmp_path, command):
    assert_user_error(run(*command, "--workdir", str(tmp_path / "nowhere")), str(tmp_path / "nowhere"),
                      "not a jcaps workdir")


@pytest.mark.parametrize("command", [["-m", "jcaps.evaluate"], ["-m", "jcaps.interpret"]])
def test_workdir_without_checkpoint(tmp_path, trained, command):
    (tmp_path / "config.json").write_text((trained / "config.json").read_text())
    assert_user_error(run(*command, "--workdir", str(tmp_path)), "no checkpoint yet")


def test_unknown_split(trained):
    assert_user_error(run("-m", "jcaps.evaluate", "--workdir", str(trained), own_data_cache(trained), "--split", "dev"),
                      "no split 'dev'", "train, test, validation")
    assert_user_error(run("-m", "jcaps.interpret", "--workdir", str(trained), own_data_cache(trained),
                          "--split", "dev"), "no split 'dev'")


def test_interpret_refuses_an_empty_split_as_evaluate_does(tmp_path, trained):
    import json
    import shutil

    workdir = tmp_path / "copied"
    shutil.copytree(trained, workdir)
    config = json.loads((workdir / "config.json").read_text())
    config["data"]["validation_fraction"] = 0.0  # nothing held out of train: no validation example
    (workdir / "config.json").write_text(json.dumps(config))
    for checksums in workdir.glob("*/*/checksums.json"):  # steps that bind no config (saved before bindings)
        record = json.loads(checksums.read_text())
        del record["binding"]
        checksums.write_text(json.dumps(record))
    assert_user_error(run("-m", "jcaps.interpret", "--workdir", str(workdir), own_data_cache(workdir), "--split",
                          "validation", "--out", str(tmp_path / "out")),
                      f"--split: the validation split of {workdir}'s data is empty")
    assert not (tmp_path / "out").exists()


def test_batch_size_not_a_multiple_of_the_devices(tmp_path):
    assert_user_error(run("train.py", "--config", SMOKE, "--workdir", str(tmp_path / "w"),
                          f"--config.data.cache_dir={tmp_path / 'cache'}", "--config.train.batch_size=12",
                          devices=8), "train.batch_size=12", "multiple of the number of devices (8)")


def test_workdir_in_use(tmp_path):
    workdir = tmp_path / "w"
    workdir.mkdir()
    with open(workdir / ".lock", "a+", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        lock.write("pid 1 on testhost\n")
        lock.flush()
        assert_user_error(run("train.py", "--config", SMOKE, "--workdir", str(workdir)), "in use", "pid 1 on testhost")


def test_debug_shows_the_traceback_and_a_bug_keeps_it(tmp_path):
    debug = run("-m", "jcaps.evaluate", "--workdir", str(tmp_path / "nowhere"), JCAPS_DEBUG="1")
    assert debug.returncode != 0 and "Traceback" in debug.stderr and "UserError" in debug.stderr
    bug = run("-c", textwrap.dedent("""
        from jcaps import cli
        def main(argv):
            raise RuntimeError("an internal bug")
        cli.run(main)
    """))
    assert bug.returncode == 1 and "Traceback" in bug.stderr and "RuntimeError: an internal bug" in bug.stderr
    assert not any(line.startswith("error: ") for line in bug.stderr.splitlines())



def test_a_command_that_skips_teardown_ends_at_once_with_its_output_written_and_its_errors_kept():
    script = textwrap.dedent("""
        import atexit, sys
        from jcaps import cli
        from jcaps.errors import UserError
        atexit.register(lambda: print("torn down", flush=True))
        def main(argv):
            if argv[1:] == ["fail"]:
                raise UserError("a bad flag")
            sys.stdout.write("answer without a newline")
            print("a warning", file=sys.stderr, end="")
        cli.run(main, skip_teardown=True)
    """)
    done = run("-c", script)
    assert (done.returncode, done.stdout, done.stderr) == (0, "answer without a newline", "a warning")
    assert_user_error(run("-c", script, "fail"), "a bad flag")


def test_a_batch_larger_than_the_training_data(tmp_path):
    assert_user_error(run("train.py", "--config", SMOKE, "--workdir", str(tmp_path / "w"),
                          f"--config.data.cache_dir={tmp_path / 'cache'}", "--config.train.batch_size=1024"),
                      "train.batch_size=1024 is more than the", "examples of the train split")


def test_a_workdir_never_chooses_where_commands_write_or_load_compiled_code(tmp_path, trained):
    """A copied workdir is data: the caches its config.json names are neither read nor written;
    the commands use those of the command line or the user's environment."""
    import json
    import shutil

    workdir = tmp_path / "copied"
    shutil.copytree(trained, workdir)
    config = json.loads((workdir / "config.json").read_text())
    config["train"]["compilation_cache"] = str(tmp_path / "planted_compilation_cache")
    config["data"]["cache_dir"] = str(tmp_path / "planted_data_cache")
    (workdir / "config.json").write_text(json.dumps(config))
    home = tmp_path / "home"  # the default locations: ~/tensorflow_datasets, $XDG_CACHE_HOME/jcaps/jax
    environment = {"HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache")}
    predicted = run("-m", "jcaps.predict", "--workdir", str(workdir), "--text", "shares rose", **environment)
    assert predicted.returncode == 0, predicted.stderr
    evaluated = run("-m", "jcaps.evaluate", "--workdir", str(workdir), **environment)
    assert evaluated.returncode == 0, evaluated.stderr
    assert not (tmp_path / "planted_compilation_cache").exists() and not (tmp_path / "planted_data_cache").exists()
    assert (home / ".cache" / "jcaps" / "jax").is_dir() and (home / "tensorflow_datasets").is_dir()
