"""jcaps' recurrent layers against PyTorch's stock modules, forward + backward, in one run.

    pip install -e ".[compare]"          # torch, for this script only
    python -m benchmarks.vs_pytorch --out DIR [--repeats 5] [--shapes a,b] [--sizes reference|tiny] [--tiny]

Each shape builds the same layer stack both ways, with the same inputs, and times one forward
pass plus the gradients of sum(outputs * g) (g a fixed random cotangent) with respect to every
weight and the inputs: jcaps' ops under one `jax.jit` (compiled before timing), PyTorch's
`torch.nn.LSTM` / `torch.nn.GRU` / `torch.nn.LSTMCell` in eager mode, its default on CPU.
Both use every core: XLA:CPU does by default, PyTorch is set to `os.cpu_count()` threads. jcaps gets full-length masks, as the
models pass them; PyTorch gets unpacked full-length batches.

Shapes (batch-first):
    sgm_encoder          3-layer bidirectional LSTM, hidden 512, input 512, batch 64, length 200
    sgm_decoder          3 stacked LSTM cells of 512, input 512, 6 steps, batch 64
    cccapsnet_bigru_64   2-layer bidirectional GRU, hidden 128, input 64, batch 32, length 64
    cccapsnet_bigru_256  the same at length 256
    lstm_320             1-layer LSTM, hidden 320, input 125, batch 64, 100 steps
    sgm_train_step       SGM at `benchmarks/sgm_speed.py --sizes reference` (3 x 512 BiLSTM
                         encoder, 3 x 512 decoder, vocabulary 50k, 94 label ids), batch 64,
                         source 200: one training step (teacher-forced cross-entropy over the
                         harness's 8 label steps, gradient clipping, Adam)
    sgm_greedy           the same model's greedy decoding, at most 30 steps
    matmul_projection    one float32 matmul [12800, 1024] x [1024, 4096]: the input projection
                         of an SGM encoder layer (batch 64 x length 200 rows, both directions)
    matmul_step          one float32 matmul [64, 512] x [512, 2048]: a recurrent step's
                         matmul in that layer; both matmul shapes time the libraries' GEMMs
                         alone (XLA:CPU's own against PyTorch's MKL), 20 calls per timing

The two sides are timed call by call in turn (jcaps, PyTorch, jcaps, ...; `paired_seconds`), so
that a machine whose speed drifts during the run slows both alike, and the ratio is the median
of the paired ratios, with the lowest and highest beside it. The SGM shapes run on the jcaps
side what `benchmarks/sgm_speed.py` times (`benchmarks/throughput.py`'s train harness, its
compiled decoding); the PyTorch side is the same model built from stock modules
(`benchmarks/torch_sgm.py`), fed the same batch, with jcaps' initial weights copied in, and
eager like the authors' code. `--sizes tiny` runs every shape narrow and short (width 32, batch
4, 12 steps; SGM vocabulary 500): a check that both sides run, seconds; `--tiny` is that with one
repeat (the tests run it).

Writes DIR/results.json: {"<shape>": {"jcaps_s", "torch_s" (medians), "ratio" (jcaps / torch,
the median pair), "ratio_min", "ratio_max", "jcaps_compile_s", "max_abs_output_difference",
...}, "_run": {threads, versions, sizes, and commit, date, machine, load:
`recording.provenance.run_metadata`}}; the SGM shapes add both parameter counts, and instead of
the output difference the teacher-forced logits and losses of both sides on the same weights
(train step) or the decoded label sets and steps of both (greedy). The outputs of both sides
are computed from the same weights and compared, so a fast but wrong layer shows. Needs no
data.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.sgm_speed import NUM_LABELS, ROOT, compiled_decoding, decoding_model, sized, source_tokens
from benchmarks.throughput import synthetic_batch, train_harness
from jcaps.data.vocab import BOS, EOS, NUM_SPECIAL, PAD
from jcaps.ops.losses import sequence_cross_entropy
from jcaps.ops.recurrent import bidirectional_gru, bidirectional_lstm, lstm_cell, lstm_scan
from jcaps.train.config import load
from jcaps.train.state import parameter_count
from recording.provenance import run_metadata
from recording.results import earlier_results, write_results
from recording.timing import paired_seconds


class Shape(NamedTuple):
    cell: str  # "lstm" | "gru" | "lstm_cell"
    layers: int
    bidirectional: bool
    input_size: int
    hidden: int
    batch: int
    steps: int


SHAPES = {
    "sgm_encoder": Shape("lstm", 3, True, 512, 512, 64, 200),
    "sgm_decoder": Shape("lstm_cell", 3, False, 512, 512, 64, 6),
    "cccapsnet_bigru_64": Shape("gru", 2, True, 64, 128, 32, 64),
    "cccapsnet_bigru_256": Shape("gru", 2, True, 64, 128, 32, 256),
    "lstm_320": Shape("lstm", 1, False, 125, 320, 64, 100),
}


def tiny(shape: Shape) -> Shape:
    return shape._replace(input_size=16, hidden=32, batch=4, steps=min(shape.steps, 12))


class SGMSize(NamedTuple):
    batch: int
    length: int
    vocab_size: int
    width: int  # embedding, encoder and decoder size; 0: sgm_speed's reference sizes


SGM_SHAPES = ("sgm_train_step", "sgm_greedy")
# (rows, contracted, columns) of a plain matmul, and its `--sizes tiny` stand-in.
MATMULS = {"matmul_projection": (12800, 1024, 4096), "matmul_step": (64, 512, 2048)}
TINY_MATMUL = (64, 32, 48)
MATMUL_CALLS = 20
SGM_SIZES = {"reference": SGMSize(64, 200, 50000, 0), "tiny": SGMSize(4, 12, 500, 32)}


def torch_module(shape: Shape, torch):
    """PyTorch's module for the shape, with its default initialisation (seeded)."""
    torch.manual_seed(0)
    if shape.cell == "lstm_cell":
        return torch.nn.ModuleList(
            [torch.nn.LSTMCell(shape.input_size if i == 0 else shape.hidden, shape.hidden) for i in range(shape.layers)]
        )
    module = torch.nn.LSTM if shape.cell == "lstm" else torch.nn.GRU
    return module(shape.input_size, shape.hidden, num_layers=shape.layers, bidirectional=shape.bidirectional,
                  batch_first=True)


def jcaps_weights(shape: Shape, module) -> list[dict]:
    """The PyTorch module's weights in jcaps' layout: per layer W_i [dirs, D, G], b_i, W_h, b_h
    (without a direction axis for single-direction layers). Gate orders agree (LSTM i, f, g, o;
    GRU r, z, n), so the layout is a transpose."""

    def array(tensor):
        return jnp.asarray(tensor.detach().numpy())

    layers = []
    for layer in range(shape.layers):
        if shape.cell == "lstm_cell":
            cell = module[layer]
            layers.append({"input_kernel": array(cell.weight_ih).T, "input_bias": array(cell.bias_ih),
                           "hidden_kernel": array(cell.weight_hh).T, "hidden_bias": array(cell.bias_hh)})
            continue
        suffixes = [f"l{layer}", f"l{layer}_reverse"] if shape.bidirectional else [f"l{layer}"]
        weights = {
            "input_kernel": jnp.stack([array(getattr(module, f"weight_ih_{s}")).T for s in suffixes]),
            "input_bias": jnp.stack([array(getattr(module, f"bias_ih_{s}")) for s in suffixes]),
            "hidden_kernel": jnp.stack([array(getattr(module, f"weight_hh_{s}")).T for s in suffixes]),
            "hidden_bias": jnp.stack([array(getattr(module, f"bias_hh_{s}")) for s in suffixes]),
        }
        layers.append(weights if shape.bidirectional else jax.tree.map(lambda w: w[0], weights))
    return layers


def jcaps_outputs(shape: Shape, layers: list[dict], x: jax.Array, mask: jax.Array) -> jax.Array:
    """[B, T, D] -> [B, T, H * directions] through the layer stack."""
    if shape.cell == "lstm_cell":
        h = [jnp.zeros((shape.batch, shape.hidden), x.dtype) for _ in layers]
        c = [jnp.zeros((shape.batch, shape.hidden), x.dtype) for _ in layers]
        outputs = []
        for t in range(shape.steps):  # a decoder's few steps, unrolled as SGM's training unrolls them
            below = x[:, t]
            for i, w in enumerate(layers):
                h[i], c[i] = lstm_cell(below @ w["input_kernel"] + w["input_bias"], h[i], c[i], w["hidden_kernel"],
                                       w["hidden_bias"])
                below = h[i]
            outputs.append(below)
        return jnp.stack(outputs, axis=1)
    for w in layers:
        if shape.bidirectional:
            layer = bidirectional_lstm if shape.cell == "lstm" else bidirectional_gru
            states = layer(x, w["input_kernel"], w["input_bias"], w["hidden_kernel"], w["hidden_bias"], mask=mask)
            x = states.reshape(states.shape[:-2] + (-1,))
        else:
            x = lstm_scan(x @ w["input_kernel"] + w["input_bias"], w["hidden_kernel"], w["hidden_bias"], mask=mask)
    return x


def torch_outputs(shape: Shape, module, x):
    if shape.cell != "lstm_cell":
        return module(x)[0]
    import torch

    states = [None] * shape.layers
    outputs = []
    for t in range(shape.steps):
        below = x[:, t]
        for i, cell in enumerate(module):
            states[i] = cell(below, states[i])
            below = states[i][0]
        outputs.append(below)
    return torch.stack(outputs, dim=1)


def compare(name: str, shape: Shape, repeats: int) -> dict:
    import torch

    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((shape.batch, shape.steps, shape.input_size)).astype(np.float32)
    module = torch_module(shape, torch)
    output_size = shape.hidden * (2 if shape.bidirectional else 1)
    cotangent_np = rng.standard_normal((shape.batch, shape.steps, output_size)).astype(np.float32)

    # jcaps: forward + gradients w.r.t. the weights and the inputs, one compiled function.
    layers = jcaps_weights(shape, module)
    x, cotangent = jnp.asarray(x_np), jnp.asarray(cotangent_np)
    mask = jnp.ones((shape.batch, shape.steps), bool)

    def objective(layers, x):
        outputs = jcaps_outputs(shape, layers, x, mask)
        return jnp.sum(outputs * cotangent), outputs

    step = jax.jit(jax.value_and_grad(objective, argnums=(0, 1), has_aux=True))
    start = time.perf_counter()
    compiled = step.lower(layers, x).compile()
    compile_s = time.perf_counter() - start
    (_, jcaps_out), _ = compiled(layers, x)

    # PyTorch: eager forward + backward.
    x_torch = torch.from_numpy(x_np).requires_grad_(True)
    cotangent_torch = torch.from_numpy(cotangent_np)

    def torch_step():
        module.zero_grad(set_to_none=True)
        x_torch.grad = None
        outputs = torch_outputs(shape, module, x_torch)
        (outputs * cotangent_torch).sum().backward()
        return outputs

    torch_out = torch_step().detach().numpy()
    return {
        **shape._asdict(),
        **paired_seconds(lambda: compiled(layers, x), torch_step, repeats),
        "jcaps_compile_s": compile_s,
        "max_abs_output_difference": float(np.max(np.abs(np.asarray(jcaps_out) - torch_out))),
    }


def compare_matmul(dims: tuple[int, int, int], repeats: int) -> dict:
    """One [M, K] x [K, N] float32 product: `jnp.matmul` compiled by XLA against `torch.mm`,
    each timed over `MATMUL_CALLS` calls (a small product takes under a millisecond)."""
    import torch

    rows, contracted, columns = dims
    rng = np.random.default_rng(0)
    a_np = rng.standard_normal((rows, contracted)).astype(np.float32)
    b_np = rng.standard_normal((contracted, columns)).astype(np.float32)
    a, b = jnp.asarray(a_np), jnp.asarray(b_np)
    compiled = jax.jit(jnp.matmul).lower(a, b).compile()
    a_torch, b_torch = torch.from_numpy(a_np), torch.from_numpy(b_np)

    def jcaps_calls():
        for _ in range(MATMUL_CALLS):
            jax.block_until_ready(compiled(a, b))

    def torch_calls():
        for _ in range(MATMUL_CALLS):
            torch.mm(a_torch, b_torch)

    row = paired_seconds(jcaps_calls, torch_calls, repeats)
    row["jcaps_s"] /= MATMUL_CALLS
    row["torch_s"] /= MATMUL_CALLS
    flops = 2 * rows * contracted * columns
    difference = np.max(np.abs(np.asarray(compiled(a, b)) - torch.mm(a_torch, b_torch).numpy()))
    return {"rows": rows, "contracted": contracted, "columns": columns, **row,
            "jcaps_gflop_per_s": flops / row["jcaps_s"] / 1e9, "torch_gflop_per_s": flops / row["torch_s"] / 1e9,
            "max_abs_output_difference": float(difference)}


def sgm_config(size: SGMSize):
    """configs/sgm_reuters.py as `benchmarks/sgm_speed.py --sizes reference` runs it, at `size`."""
    config = sized(load(os.path.join(ROOT, "configs", "sgm_reuters.py")), "reference")
    if size.width:
        config.model.embed_dim = config.model.encoder_dim = config.model.decoder_dim = size.width
    config.train.batch_size = size.batch
    return config


def torch_sgm_module(config, params):
    """`benchmarks/torch_sgm.py`'s SGM for `config`, holding the jcaps parameters `params`."""
    from benchmarks.torch_sgm import TorchSGM, load_jcaps_params

    model = config.model
    if model.global_embedding or model.label_embed_dim or model.attention_dim:
        raise ValueError("the PyTorch SGM has no global embedding and label and attention sizes of their defaults")
    module = TorchSGM(vocab_size=len(params["encoder"]["embedding"]), num_tokens=NUM_LABELS + NUM_SPECIAL,
                      embed_dim=model.embed_dim, encoder_dim=model.encoder_dim, decoder_dim=model.decoder_dim,
                      num_layers=model.num_layers, embedding_dropout=model.embedding_dropout,
                      dropout_rate=model.dropout_rate, pad_id=PAD, bos_id=BOS, eos_id=EOS, num_special=NUM_SPECIAL)
    load_jcaps_params(module, jax.tree.map(np.asarray, params))
    return module


def compare_sgm(name: str, size: SGMSize, repeats: int) -> dict:
    """One SGM training step or greedy decoding, jcaps (as sgm_speed.py times it) and PyTorch."""
    import torch

    config = sgm_config(size)
    model, params = decoding_model(config, size.vocab_size, "greedy")
    module = torch_sgm_module(config, params)
    row = {"batch": size.batch, "length": size.length, "vocab_size": size.vocab_size,
           "jcaps_parameters": parameter_count(params),
           "torch_parameters": sum(p.numel() for p in module.parameters())}
    if row["jcaps_parameters"] != row["torch_parameters"]:
        raise AssertionError(f"parameter counts differ: {row}")

    if name == "sgm_train_step":
        # The batch the harness trains on: full-length sources, up to 3 labels + EOS in 8 steps.
        batch = synthetic_batch(np.random.default_rng(0), config, size.batch, size.length, size.vocab_size, NUM_LABELS)
        tokens, labels = batch["tokens"], batch["label_sequence"]
        harness = train_harness(sgm_config(size), size.vocab_size, NUM_LABELS, size.length)
        tokens_torch, labels_torch = torch.from_numpy(tokens.astype(np.int64)), torch.from_numpy(labels.astype(np.int64))
        # The same weights without dropout: teacher-forced logits and loss of both sides.
        logits = jax.jit(lambda params, tokens, labels: model.apply({"params": params}, tokens, labels).step_logits)(
            params, tokens, labels)
        module.eval()
        with torch.no_grad():
            torch_logits = module(tokens_torch, labels_torch).numpy()
            torch_loss = float(module.loss(tokens_torch, labels_torch))
        module.train()
        optimizer = torch.optim.Adam(module.parameters(), lr=config.train.learning_rate)

        def torch_step():
            optimizer.zero_grad(set_to_none=True)
            loss = module.loss(tokens_torch, labels_torch)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(module.parameters(), config.train.grad_clip_norm)
            optimizer.step()
            return loss.item()

        row.update(label_steps=labels.shape[1], jcaps_compile_s=harness.compile_s,
                   jcaps_initial_loss=float(jnp.mean(sequence_cross_entropy(logits, jnp.asarray(labels)))),
                   torch_initial_loss=torch_loss,
                   max_abs_logit_difference=float(np.max(np.abs(np.asarray(logits) - torch_logits))),
                   torch_first_train_step_loss=torch_step())
        row.update(paired_seconds(harness.one_train_step, torch_step, repeats))
    else:
        tokens = source_tokens(size.vocab_size, size.batch, size.length)
        max_steps = config.model.max_steps
        decode, compile_s = compiled_decoding(sgm_config(size), size.vocab_size, size.batch, size.length, "greedy")
        decoded = decode()  # the same model and parameters as `model`, `params` (`decoding_model`)
        module.eval()
        tokens_torch = torch.from_numpy(tokens.astype(np.int64))
        emitted, torch_steps = module.greedy(tokens_torch, max_steps)
        labels = np.asarray(decoded.labels).astype(bool)
        torch_labels = emitted[:, NUM_SPECIAL:].numpy()
        row.update(max_steps=max_steps, jcaps_compile_s=compile_s,
                   jcaps_decoded_steps=int(np.max(np.sum(np.asarray(decoded.sequence) != PAD, axis=1))),
                   torch_decoded_steps=torch_steps, labels_shape=list(labels.shape),
                   jcaps_mean_labels=float(labels.sum(1).mean()), torch_mean_labels=float(torch_labels.sum(1).mean()),
                   same_label_set_fraction=float(np.mean(np.all(labels == torch_labels, axis=1))))
        row.update(paired_seconds(decode, lambda: module.greedy(tokens_torch, max_steps), repeats))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--repeats", type=int, default=5)
    known = (*SHAPES, *SGM_SHAPES, *MATMULS)
    parser.add_argument("--shapes", default=",".join(known), help="comma-separated names among " + ", ".join(known))
    parser.add_argument("--sizes", choices=tuple(SGM_SIZES), default="reference")
    parser.add_argument("--tiny", action="store_true", help="--sizes tiny, one repeat (seconds)")
    args = parser.parse_args()
    if args.tiny:
        args.sizes, args.repeats = "tiny", 1
    names = args.shapes.split(",")
    unknown = sorted(set(names) - set(known))
    if unknown:
        parser.error(f"--shapes: unknown {', '.join(unknown)}; choose among {', '.join(known)}")
    try:
        import torch
    except ImportError:
        parser.error('needs PyTorch: pip install -e ".[compare]"')
    torch.set_num_threads(os.cpu_count())

    results = earlier_results(args.out)  # shapes measured by a call with other --shapes stay
    results["_run"] = {"threads": os.cpu_count(), "torch": torch.__version__, "jax": jax.__version__,
                       "backend": jax.default_backend(), "repeats": args.repeats, "sizes": args.sizes,
                       **run_metadata(args.tiny)}
    for name in names:
        if name in SGM_SHAPES:
            row = compare_sgm(name, SGM_SIZES[args.sizes], args.repeats)
            timings = ("jcaps_s", "torch_s", "ratio", "ratio_min", "ratio_max")
            checks = {key: value for key, value in row.items() if key not in timings}
        elif name in MATMULS:
            row = compare_matmul(TINY_MATMUL if args.sizes == "tiny" else MATMULS[name], args.repeats)
            checks = {key: round(row[key], 4) for key in ("jcaps_gflop_per_s", "torch_gflop_per_s",
                                                          "max_abs_output_difference")}
        else:
            row = compare(name, tiny(SHAPES[name]) if args.sizes == "tiny" else SHAPES[name], args.repeats)
            checks = {"max_abs_output_difference": row["max_abs_output_difference"]}
        results[name] = row
        print(f"{name}: jcaps {row['jcaps_s']:.4f} s, torch {row['torch_s']:.4f} s, ratio {row['ratio']:.2f}, "
              f"{json.dumps(checks)}", flush=True)
        write_results(args.out, results)


if __name__ == "__main__":
    main()
