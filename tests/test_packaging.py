"""The distribution: the `jcaps` command, the configs found by name, the version, the files a wheel
ships, and the one-line error of a checkout folder that shadows the package."""

import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import jcaps
from jcaps.train import config as config_lib

ROOT = Path(__file__).resolve().parents[1]


def test_the_version_is_the_installed_metadata_and_the_changelog_has_it():
    assert jcaps.__version__ == importlib.metadata.version("jcaps")
    assert f"\n## {jcaps.__version__}\n" in (ROOT / "CHANGELOG.md").read_text()


def test_a_shipped_config_resolves_by_name_and_a_path_stays_a_path():
    assert config_lib.resolve("fasttext_ag_news:smoke") == os.path.join(
        config_lib.shipped_configs_dir(), "fasttext_ag_news.py") + ":smoke"
    assert config_lib.resolve("configs/fasttext_ag_news.py:smoke") == "configs/fasttext_ag_news.py:smoke"
    assert config_lib.resolve("no_such_config") == "no_such_config"
    assert config_lib.load("fasttext_ag_news:smoke").to_dict() == config_lib.load(
        str(ROOT / "configs" / "fasttext_ag_news.py:smoke")).to_dict()


def run_jcaps(*arguments, cwd):
    return subprocess.run([sys.executable, "-m", "jcaps.command", *arguments], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.slow
def test_the_jcaps_command_lists_its_commands_and_refuses_an_unknown_one(tmp_path):
    listing = run_jcaps("--help", cwd=tmp_path)
    assert listing.returncode == 0
    for command in ("train", "evaluate", "predict", "interpret", "params", "configs"):
        assert f"\n  {command} " in listing.stdout
    unknown = run_jcaps("fit", cwd=tmp_path)
    assert unknown.returncode == 2
    assert unknown.stderr.strip().splitlines() == [
        "jcaps: unknown command 'fit'; one of train, evaluate, predict, interpret, params, configs (see jcaps --help)"]


def test_the_shipped_configs_are_listed_with_their_docstrings_first_paragraph():
    summaries = config_lib.shipped_configs()
    assert sorted(summaries) == sorted(path.stem for path in (ROOT / "configs").glob("[!_]*.py"))
    assert summaries["fasttext_ag_news"] == "fastText baseline (Joulin et al. 2017) on AG News."
    assert all(summaries.values())
    assert config_lib.closest_config_name("fasttxt_ag_news") == "fasttext_ag_news"
    assert config_lib.closest_config_name("zzzz") is None


@pytest.mark.slow
def test_jcaps_configs_lists_every_config_and_a_misspelt_name_gets_the_closest(tmp_path):
    listed = run_jcaps("configs", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    names = [line.split()[0] for line in listed.stdout.splitlines()[1:] if line and not line[0].isspace()]
    assert names == sorted(config_lib.shipped_configs())
    assert any(line.startswith("fasttext_ag_news ") and line.endswith("fastText baseline (Joulin et al. 2017) on AG News.")
               for line in listed.stdout.splitlines())

    misspelt = run_jcaps("train", "--config", "fasttxt_ag_news:smoke", "--workdir", str(tmp_path / "w"), cwd=tmp_path)
    assert misspelt.returncode == 2
    assert misspelt.stderr.strip().splitlines() == [
        'error: --config: no shipped config or file fasttxt_ag_news; did you mean "fasttext_ag_news"?',
        "hint: jcaps configs lists the shipped configs",
    ]
    assert not (tmp_path / "w").exists()
    # Every hint names a command a wheel's user has.
    flag_typo = run_jcaps("train", "--config", "fasttext_ag_news:smoke", "--workdr", "w", cwd=tmp_path)
    assert flag_typo.stderr.strip().splitlines()[-1] == "hint: see jcaps train --help"


@pytest.mark.slow
def test_jcaps_params_takes_a_config_by_name_outside_the_checkout(tmp_path):
    counted = run_jcaps("params", "--config", "fasttext_ag_news:smoke", cwd=tmp_path)
    assert counted.returncode == 0, counted.stderr


@pytest.mark.slow
def test_a_checkout_folder_that_shadows_the_package_is_named(tmp_path):
    (tmp_path / "jcaps").symlink_to(ROOT)
    script = tmp_path / "script.py"
    script.write_text("from jcaps.train.loop import train_and_evaluate\n")
    failed = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert failed.returncode == 1
    assert failed.stderr.strip().splitlines()[-1] == (
        f"ImportError: jcaps is imported from the checkout folder {tmp_path / 'jcaps'}, not the package inside it: "
        "run the script from another folder, or rename the checkout")


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("build") is None, reason="needs the build package (the dev extra)")
def test_the_wheel_ships_the_configs_the_license_the_typing_marker_and_the_command(tmp_path):
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp_path), str(ROOT)],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = tmp_path.glob("jcaps-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    dist_info = f"jcaps-{jcaps.__version__}.dist-info"
    assert {"jcaps/py.typed", "jcaps/configs/fasttext_ag_news.py", f"{dist_info}/licenses/LICENSE"} <= names
    assert "jcaps = jcaps.command:main" in zipfile.ZipFile(wheel).read(f"{dist_info}/entry_points.txt").decode()


@pytest.mark.slow
@pytest.mark.parametrize("command, needed_flags", [
    ("train", ["--config", "--workdir"]),
    ("evaluate", ["--workdir", "--config.data.dir", "--parameters"]),
    ("predict", ["--workdir", "--text", "--parameters"]),
])
def test_help_exits_0_and_lists_the_flags_a_user_needs(tmp_path, command, needed_flags):
    listing = run_jcaps(command, "--help", cwd=tmp_path)
    assert listing.returncode == 0, listing.stderr
    listed = {line.split(":", 1)[0].strip() for line in listing.stdout.splitlines() if line.startswith("  --")}
    assert set(needed_flags) <= listed
    assert "--helpfull" in listing.stdout
