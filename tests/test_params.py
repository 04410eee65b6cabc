"""`jcaps.params`: parameter counts of any config, without training."""

import os
import subprocess
import sys

import pytest

from jcaps.ops.embeddings import num_codewords
from jcaps.params import format_counts, parameter_counts
from jcaps.train.config import load

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_config(name, arg, cache_dir):
    path = os.path.join(ROOT, "configs", name)
    config = load(f"{path}:{arg}")
    config.data.cache_dir = str(cache_dir)
    return config


def test_cccapsnet_counts_by_group(cache_dir):
    counts = parameter_counts(load_config("cccapsnet_ag_news.py", "smoke", cache_dir))
    v, j = counts["input_size"], counts["num_classes"]
    # Smoke sizes: M = 4 codebooks of 16-dimensional codewords, one BiGRU layer of hidden 16 on
    # 16-dimensional embeddings, 4 feature capsules of size 4 into J class capsules of size 8.
    k = num_codewords(v, 4)
    gru = 2 * (3 * 16 * 16 + 3 * 16 * 16 + 2 * 3 * 16)
    assert counts["groups"] == {"embedding": v * 4 * k + 4 * k * 16, "encoder": gru, "classifier": 4 * j * 8 * 4}
    assert counts["total"] == sum(counts["groups"].values())
    text = format_counts(counts)
    assert text.splitlines()[-1].split() == ["total", f"{counts['total']:,}"]


def test_any_config(cache_dir):
    counts = parameter_counts(load_config("fasttext_ag_news.py", "smoke", cache_dir))
    v, j = counts["input_size"], counts["num_classes"]
    # 16-dimensional word and 1,024 hashed-bigram embeddings, a dense layer with bias.
    assert counts["total"] == v * 16 + 1024 * 16 + 16 * j + j


@pytest.mark.slow
def test_command_line(cache_dir):
    command = [
        sys.executable,
        "-m",
        "jcaps.params",
        "--config",
        os.path.join(ROOT, "configs", "cccapsnet_ag_news.py") + ":smoke",
        f"--config.data.cache_dir={cache_dir}",
        "--config.model.classifier=linear",
    ]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    result = subprocess.run(command, check=False, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    lines = lines[next(i for i, line in enumerate(lines) if line.startswith("vocabulary")) :]
    names = [line.split()[0] for line in lines[1:]]
    assert names == ["classifier", "embedding", "encoder", "total"]
    # The linear head: 16 features x 4 classes, no bias.
    assert lines[1].split() == ["classifier", "64"]
