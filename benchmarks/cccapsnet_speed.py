"""CCCapsNet training throughput: the BiGRU encoder alone and the whole model, against the
PyTorch reference's measured step times (docs/performance.md).

    python -m benchmarks.cccapsnet_speed --out DIR [--lengths 64,256] [--batch 32]
        [--vocab_size 62535] [--repeats 10] [--config configs/cccapsnet_ag_news.py] [--tiny]

For each length it times, after warm-up and synchronised, the median of `--repeats` steps of
  * the whole model: one optimiser step of the config (random token ids, the harness
    `benchmarks/throughput.py`), and
  * the encoder: forward + backward of the 2-layer BiGRU and mean pool alone on random
    [B, T, 64] embeddings (gradients for its parameters and inputs), the shape the whole model
    feeds its encoder for that batch (checked before timing: a layout the model no longer
    uses stops the run),
and writes `DIR/results.json`:

    {"<length>": {"model_train_step_s", "model_train_examples_per_s", "model_compile_s",
                  "encoder_step_s", "encoder_examples_per_s", "encoder_input_shape",
                  "reference_step_s", "target_step_s", ...},
     "_run": {commit, date, machine, load: `recording.provenance.run_metadata`}}

`--tiny` times the `:smoke` model at length 16, batch 4, vocabulary 200, one repeat: a check
that it runs (seconds; the tests run it). Needs no data.
"""

from __future__ import annotations

import argparse
import functools
import json
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.throughput import measure
from jcaps.models.cccapsnet import Encoder
from jcaps.train.config import load
from jcaps.train.families import build_model
from recording.provenance import run_metadata
from recording.timing import median_seconds

# docs/performance.md: the PyTorch reference's seconds per training step at batch 32, and jcaps' target.
REFERENCE = {64: (0.216, 0.108), 256: (0.825, 0.41)}
NUM_CLASSES = 4
TINY = {"lengths": "16", "batch": 4, "vocab_size": 200, "repeats": 1}


def model_encoder_input_shape(config, vocab_size: int, batch: int, length: int) -> tuple[int, ...]:
    """The shape of the word vectors the whole model hands its `Encoder` for [batch, length]
    token ids (traced, not run)."""
    model = build_model(config.model, vocab_size, NUM_CLASSES)
    fed = []

    def record(call, args, kwargs, context):
        if isinstance(context.module, Encoder) and context.method_name == "__call__":
            fed.append(args[0].shape)
        return call(*args, **kwargs)

    with nn.intercept_methods(record):
        jax.eval_shape(lambda tokens: model.init(jax.random.key(0), tokens), jnp.ones((batch, length), jnp.int32))
    return fed[0]


def encoder_step_seconds(config, vocab_size: int, batch: int, length: int, repeats: int) -> tuple[float, tuple]:
    """(median seconds of the encoder's forward + backward, the shape of the inputs timed)."""
    model = config.model
    encoder = Encoder(model.hidden_dim, model.num_layers, model.dropout_rate)
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(batch, length, model.embed_dim)).astype(np.float32))
    # The encoder runs on any [X, Y, D]: a layout the model no longer feeds it would be timed
    # without an error, so the shape is checked against the model's.
    expected = model_encoder_input_shape(config, vocab_size, batch, length)
    if x.shape != expected:
        raise AssertionError(f"the encoder would be timed on {x.shape}; the model feeds it {expected}")
    mask = jnp.ones(x.shape[:2], bool)
    # Jitted: one compile, where the eager initialisation compiles each of its many small ops.
    params = jax.jit(functools.partial(encoder.init, train=False))(jax.random.key(0), x[:, :2], mask[:, :2])["params"]

    @jax.jit
    def forward_backward(params, x, key):
        def total(params, x):
            return jnp.sum(encoder.apply({"params": params}, x, mask, train=True, rngs={"dropout": key}))

        return jax.grad(total, argnums=(0, 1))(params, x)

    key = jax.random.key(1)
    return median_seconds(lambda: forward_backward(params, x, key), repeats), x.shape


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--config", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                         "configs", "cccapsnet_ag_news.py"))
    parser.add_argument("--lengths", default="64,256")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--vocab_size", type=int, default=62535)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--tiny", action="store_true", help="the :smoke model at tiny shapes, one repeat (seconds)")
    args = parser.parse_args()
    if args.tiny:
        # ":smoke" joins a config argument already given after a comma.
        smoke = ("," if ":" in os.path.basename(args.config) else ":") + "smoke"
        vars(args).update(TINY, config=args.config + smoke)
    results = {"_run": run_metadata(args.tiny)}
    config = load(args.config)
    config.train.batch_size = args.batch
    os.makedirs(args.out, exist_ok=True)
    for length in (int(t) for t in args.lengths.split(",")):
        model = measure(config, args.vocab_size, NUM_CLASSES, length, args.repeats)
        encoder_s, encoder_shape = encoder_step_seconds(config, args.vocab_size, args.batch, length, args.repeats)
        reference, target = REFERENCE.get(length, (None, None))
        results[str(length)] = {
            "model_train_step_s": model["train_step_s"],
            "model_train_examples_per_s": model["train_examples_per_s"],
            "model_compile_s": model["compile_s"],
            "encoder_step_s": encoder_s,
            "encoder_examples_per_s": args.batch / encoder_s,
            "encoder_input_shape": list(encoder_shape),
            "reference_step_s": reference,
            "target_step_s": target,
            "batch_size": args.batch,
            "vocab_size": args.vocab_size,
            "device": model["device"],
        }
        print(f"length {length}: {json.dumps(results[str(length)])}", flush=True)
        with open(os.path.join(args.out, "results.json"), "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
