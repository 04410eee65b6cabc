"""SGM and binary relevance throughput: training steps and label-set decoding (greedy vs beam 5).

    python -m benchmarks.sgm_speed --out DIR [--batch 64] [--length 200] [--vocab_size 50000]
        [--sizes reference|config] [--repeats 5] [--models sgm,sgm_ge,br] [--tiny]

For SGM without and with the global embedding, and for BR, it times through the harness
(`benchmarks/throughput.py`: compile separately, warm-up, `block_until_ready`, median of
`--repeats`) one optimiser step on random batches of `--batch` examples of `--length` tokens
(SGM: label sequences of up to 3 labels + EOS, padded to 8 steps), and, for SGM, `predict` with
greedy decoding and with beam search (beam 5, at most 30 label steps). `--sizes reference`
uses the reference shape of docs/performance.md (3-layer 512 BiLSTM encoder, 3-layer 512 decoder,
vocabulary 50k, 90 labels + 4 specials); `config` uses `configs/sgm_reuters.py`'s sizes. Writes

    DIR/results.json  {"<model>": {"train_step_s", "train_examples_per_s", "compile_s",
                       "greedy_s", "greedy_examples_per_s", "beam_s", "beam_examples_per_s",
                       "batch_size", "length", "vocab_size", "sizes", ...},
                       "_run": {commit, date, machine, load: `recording.provenance.run_metadata`}}

with the PyTorch reference's step times (docs/performance.md) beside. `--tiny` times the configs'
`:smoke` models (`sizes` "smoke") at batch 4, length 12, vocabulary 200, one repeat: a check
that they run (seconds; the tests run it). Needs no data.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import jax
import numpy as np

from benchmarks.throughput import measure
from jcaps.data.vocab import EOS
from jcaps.train.config import load
from jcaps.train.families import build_model
from recording.provenance import run_metadata
from recording.results import earlier_results, write_results
from recording.timing import median_seconds

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# docs/performance.md, reference shape, batch 64, source 200: seconds per training step (6 label
# steps) and per greedy decoding of 30 steps.
REFERENCE = {"train_step_s": 10.2, "greedy_s": 3.72}
NUM_LABELS = 90
TINY = {"batch": 4, "length": 12, "vocab_size": 200, "repeats": 1, "sizes": "smoke"}


def sized(config, sizes: str):
    if sizes == "reference":
        model = config.model
        if model.name == "sgm":
            model.embed_dim, model.encoder_dim, model.decoder_dim, model.num_layers = 512, 512, 512, 3
        else:
            model.embed_dim, model.encoder_dim, model.num_layers = 512, 512, 3
    return config


def decoding_model(config, vocab_size: int, decoding: str):
    """The SGM that `decode_seconds` times and its parameters (from key 0: the same every call)."""
    config.model.decoding = decoding
    model = build_model(config.model, vocab_size, NUM_LABELS)
    params = model.init({"params": jax.random.key(0), "dropout": jax.random.key(0)}, np.full((1, 4), 2, np.int32),
                        np.full((1, 4), EOS, np.int32))["params"]
    return model, params


def source_tokens(vocab_size: int, batch: int, length: int) -> np.ndarray:
    """[batch, length] random word ids, no padding: the sources `decode_seconds` decodes."""
    return np.random.default_rng(0).integers(2, vocab_size, size=(batch, length), dtype=np.int32)


def compiled_decoding(config, vocab_size: int, batch: int, length: int, decoding: str):
    """The SGM's `predict` with `decoding`, compiled for `source_tokens` of the shape ->
    (a call decoding them, its compile seconds)."""
    model, params = decoding_model(config, vocab_size, decoding)
    tokens = source_tokens(vocab_size, batch, length)
    predict = jax.jit(lambda params, tokens: model.apply({"params": params}, tokens, method="predict"))
    start = time.perf_counter()
    compiled = predict.lower(params, tokens).compile()
    return (lambda: compiled(params, tokens)), time.perf_counter() - start


def decode_seconds(config, vocab_size: int, batch: int, length: int, decoding: str, repeats: int) -> dict:
    decode, compile_s = compiled_decoding(config, vocab_size, batch, length, decoding)
    seconds = median_seconds(decode, repeats)
    lengths = np.asarray(decode().length)
    return {f"{decoding}_s": seconds, f"{decoding}_examples_per_s": batch / seconds,
            f"{decoding}_compile_s": compile_s, f"{decoding}_mean_labels": float(lengths.mean())}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--length", type=int, default=200)
    parser.add_argument("--vocab_size", type=int, default=50000)
    parser.add_argument("--sizes", choices=("reference", "config"), default="config")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--models", default="sgm,sgm_ge,br")
    parser.add_argument("--tiny", action="store_true", help="the :smoke models at tiny shapes, one repeat (seconds)")
    args = parser.parse_args()
    if args.tiny:
        vars(args).update(TINY)
    files = {"sgm": "sgm_reuters.py", "sgm_ge": "sgm_ge_reuters.py", "br": "br_reuters.py"}
    results = earlier_results(args.out)  # models measured by a call with other --models stay
    results["_run"] = run_metadata(args.tiny)
    for name in args.models.split(","):
        config_file = os.path.join(ROOT, "configs", files[name]) + (":smoke" if args.tiny else "")
        config = sized(load(config_file), args.sizes)
        config.train.batch_size = args.batch
        train = measure(config, args.vocab_size, NUM_LABELS, args.length, args.repeats)
        row = {key: train[key] for key in ("train_step_s", "train_examples_per_s", "compile_s", "device")}
        if config.model.name == "sgm":
            for decoding in ("greedy", "beam"):
                row.update(decode_seconds(config, args.vocab_size, args.batch, args.length, decoding, args.repeats))
        row.update(batch_size=args.batch, length=args.length, vocab_size=args.vocab_size, sizes=args.sizes)
        if config.model.name == "sgm":
            row.update(beam_size=config.model.beam_size, max_steps=config.model.max_steps)
        if args.sizes == "reference" and name == "sgm":
            row["reference"] = REFERENCE
        results[name] = row
        print(f"{name}: {json.dumps(row)}", flush=True)
        write_results(args.out, results)


if __name__ == "__main__":
    main()
