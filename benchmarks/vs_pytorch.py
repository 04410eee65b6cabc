"""jcaps' recurrent layers against PyTorch's stock modules, forward + backward, in one run.

    pip install -e ".[compare]"          # torch, for this script only
    python benchmarks/vs_pytorch.py --out DIR [--repeats 5] [--shapes a,b]

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

Writes DIR/results.json: {"<shape>": {"jcaps_s", "torch_s", "ratio" (jcaps / torch),
"jcaps_compile_s", "max_abs_output_difference", ...}, "_run": {threads, versions}}. The
outputs of both sides are computed from the same weights and compared, so a fast but wrong
layer shows. Needs no data.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jcaps.ops.recurrent import bidirectional_gru, bidirectional_lstm, lstm_cell, lstm_scan


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


def median_seconds(fn, repeats: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


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
            states = layer(x, w["input_kernel"], w["input_bias"], w["hidden_kernel"], w["hidden_bias"], mask)
            x = states.reshape(states.shape[:-2] + (-1,))
        else:
            x = lstm_scan(x @ w["input_kernel"] + w["input_bias"], w["hidden_kernel"], w["hidden_bias"], mask)
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
    jcaps_s = median_seconds(lambda: jax.block_until_ready(compiled(layers, x)), repeats)

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
    torch_s = median_seconds(torch_step, repeats)
    return {
        **shape._asdict(),
        "jcaps_s": jcaps_s,
        "torch_s": torch_s,
        "ratio": jcaps_s / torch_s,
        "jcaps_compile_s": compile_s,
        "max_abs_output_difference": float(np.max(np.abs(np.asarray(jcaps_out) - torch_out))),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated names among " + ", ".join(SHAPES))
    args = parser.parse_args()
    names = args.shapes.split(",")
    unknown = sorted(set(names) - set(SHAPES))
    if unknown:
        parser.error(f"--shapes: unknown {', '.join(unknown)}; choose among {', '.join(SHAPES)}")
    try:
        import torch
    except ImportError:
        parser.error('needs PyTorch: pip install -e ".[compare]"')
    torch.set_num_threads(os.cpu_count())

    results = {"_run": {"threads": os.cpu_count(), "torch": torch.__version__,
                        "jax": jax.__version__, "backend": jax.default_backend(), "repeats": args.repeats}}
    for name in names:
        results[name] = compare(name, SHAPES[name], args.repeats)
        print(f"{name}: jcaps {results[name]['jcaps_s']:.4f} s, torch {results[name]['torch_s']:.4f} s, "
              f"ratio {results[name]['ratio']:.2f}, max |output difference| "
              f"{results[name]['max_abs_output_difference']:.1e}", flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
