"""NumPy references of the recurrent ops (PyTorch's `nn.GRU` and `nn.LSTM` equations, float64
loops over one sequence) and a padded batch to test them on, shared by the ops and model tests."""

import numpy as np


def sigmoid(a):
    return 1 / (1 + np.exp(-a))


def np_gru_from_gates(gates, w_h, b_h):
    """One GRU direction from input gates [n, 3H] (x W_i + b_i), gate order (r, z, n) -> [n, H]."""
    hidden = w_h.shape[0]
    h = np.zeros(hidden)
    outputs = []
    for gi in np.asarray(gates, np.float64):
        gh = h @ w_h + b_h
        r = sigmoid(gi[:hidden] + gh[:hidden])
        z = sigmoid(gi[hidden : 2 * hidden] + gh[hidden : 2 * hidden])
        n = np.tanh(gi[2 * hidden :] + r * gh[2 * hidden :])
        h = (1 - z) * n + z * h
        outputs.append(h)
    return np.stack(outputs)


def np_lstm_from_gates(gates, w_h, b_h):
    """One LSTM direction from input gates [n, 4H] (x W_i + b_i), gate order (i, f, g, o) ->
    [n, H]."""
    hidden = w_h.shape[0]
    h, c = np.zeros(hidden), np.zeros(hidden)
    outputs = []
    for g_t in np.asarray(gates, np.float64):
        a = g_t + h @ w_h + b_h
        i, f, g, o = (a[k * hidden : (k + 1) * hidden] for k in range(4))
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(c)
        outputs.append(h)
    return np.stack(outputs)


def np_gru(x, w_i, b_i, w_h, b_h):
    """PyTorch nn.GRU, one direction, one sequence: x [n, D] -> [n, H]."""
    return np_gru_from_gates(np.asarray(x, np.float64) @ w_i + b_i, w_h, b_h)


def np_lstm(x, w_i, b_i, w_h, b_h):
    """PyTorch nn.LSTM, one direction, one sequence: x [n, D] -> [n, H]."""
    return np_lstm_from_gates(np.asarray(x, np.float64) @ w_i + b_i, w_h, b_h)


def np_bidirectional(x, mask, params, cell=np_gru):
    """Each sequence of x [B, T, D] run on its own valid steps (mask [B, T]) only, by `cell`
    (`np_gru` or `np_lstm`) forward and backward -> [B, T, 2, H], zero at the pads."""
    w_i, b_i, w_h, b_h = (np.asarray(p, np.float64) for p in params)
    out = np.zeros(x.shape[:2] + (2, w_h.shape[1]))
    for b in range(x.shape[0]):
        n = int(mask[b].sum())
        seq = np.asarray(x[b, :n], np.float64)
        out[b, :n, 0] = cell(seq, w_i[0], b_i[0], w_h[0], b_h[0])
        out[b, :n, 1] = cell(seq[::-1], w_i[1], b_i[1], w_h[1], b_h[1])[::-1]
    return out


def bidirectional_params(rng, num_inputs, hidden, num_gates=3):
    """(input_kernel [2, D, GH], input_bias [2, GH], hidden_kernel [2, H, GH], hidden_bias
    [2, GH]) float32, G = 3 gates for a GRU, 4 for an LSTM."""
    size = num_gates * hidden
    shapes = [(2, num_inputs, size), (2, size), (2, hidden, size), (2, size)]
    return tuple(rng.normal(scale=0.5, size=s).astype(np.float32) for s in shapes)


def padded_batch(lengths, steps, num_inputs, hidden, num_gates=3, seed=0):
    """x [B, T, D] float32 with garbage (1e3) at the pads, mask [B, T] (sequence b valid at its
    first lengths[b] steps) and the `bidirectional_params`."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(len(lengths), steps, num_inputs)).astype(np.float32)
    mask = np.arange(steps)[None, :] < np.asarray(lengths)[:, None]
    x[~mask] = 1e3
    return x, mask, bidirectional_params(rng, num_inputs, hidden, num_gates)
