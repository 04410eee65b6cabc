"""jcaps' SGM (`jcaps.models.sgm.SGM`, docs/sgm.md#equations, without the global embedding) built
from PyTorch's stock modules, for `benchmarks/vs_pytorch.py` only (torch is the optional extra
`compare`; nothing else imports this file).

Layer for layer (E = encoder size per direction, Dd = decoder size, A = attention size,
V = labels + special ids):

    nn.Embedding(vocab, D), dropout                  encoder.embedding
    pack_padded_sequence -> nn.LSTM(D, E, layers, bidirectional, dropout between layers)
                         -> pad_packed_sequence      encoder.layer_l
    tanh(nn.Linear(2E, layers Dd)) of [h_n fwd; h_n bwd] of the top layer: every decoder
    layer's initial hidden state, zero cells, zero context        init
    nn.Embedding(V, D) of the previous token         label_embedding
    layers nn.LSTMCell(D + 2E | Dd, Dd) on [e; c_{t-1}] (input feeding), dropout between
                                                     decoder_l
    e_i = v^T tanh(W_a s + U_a h_i + b_a), masked softmax, c = sum a_i h_i
                                                     attention_query (W_a, no bias),
                                                     attention_key (U_a, b_a), attention_vector (v)
    o = W_o dropout(tanh(W_d s + V_d c + b_d)) + b_o readout_state (W_d, b_d),
                                                     readout_context (V_d, no bias), output
    PAD, UNK, BOS and emitted labels set to -1e9     `label_mask_logits`

so the parameter counts are equal and `load_jcaps_params` copies a jcaps parameter tree in
(kernels transposed; PyTorch's gate order (i, f, g, o) is jcaps').
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

MASKED_LOGIT = -1e9  # jcaps.ops.decoding's mask value for float32


class TorchSGM(nn.Module):
    def __init__(self, *, vocab_size: int, num_tokens: int, embed_dim: int, encoder_dim: int,
                 decoder_dim: int, num_layers: int, embedding_dropout: float, dropout_rate: float, pad_id: int,
                 bos_id: int, eos_id: int, num_special: int):
        super().__init__()
        keys_dim, attention_dim = 2 * encoder_dim, decoder_dim
        self.num_tokens, self.num_layers, self.decoder_dim = num_tokens, num_layers, decoder_dim
        self.pad_id, self.bos_id, self.eos_id, self.num_special = pad_id, bos_id, eos_id, num_special
        self.embedding_dropout = nn.Dropout(embedding_dropout)
        self.dropout = nn.Dropout(dropout_rate)
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        self.encoder = nn.LSTM(embed_dim, encoder_dim, num_layers, batch_first=True, bidirectional=True,
                               dropout=dropout_rate)
        self.init = nn.Linear(keys_dim, num_layers * decoder_dim)
        self.label_embedding = nn.Embedding(num_tokens, embed_dim)
        self.decoder = nn.ModuleList(
            [nn.LSTMCell(embed_dim + keys_dim if i == 0 else decoder_dim, decoder_dim) for i in range(num_layers)]
        )
        self.attention_key = nn.Linear(keys_dim, attention_dim)
        self.attention_query = nn.Linear(decoder_dim, attention_dim, bias=False)
        self.attention_vector = nn.Parameter(torch.empty(attention_dim).uniform_(-attention_dim**-0.5,
                                                                                  attention_dim**-0.5))
        self.readout_state = nn.Linear(decoder_dim, decoder_dim)
        self.readout_context = nn.Linear(keys_dim, decoder_dim, bias=False)
        self.output = nn.Linear(decoder_dim, num_tokens)

    def encode(self, tokens: torch.Tensor) -> dict:
        """tokens [B, L] int64 -> the decoder's initial state (keys [B, L, 2E], mask [B, L], ...)."""
        mask = tokens != self.pad_id
        lengths = mask.sum(dim=1).cpu()
        packed = pack_padded_sequence(self.embedding_dropout(self.embedding(tokens)), lengths, batch_first=True,
                                      enforce_sorted=False)
        states, (final_hidden, _) = self.encoder(packed)
        keys, _ = pad_packed_sequence(states, batch_first=True, total_length=tokens.shape[1])
        summary = torch.cat([final_hidden[-2], final_hidden[-1]], dim=-1)
        hidden = torch.tanh(self.init(summary)).view(-1, self.num_layers, self.decoder_dim)
        return {
            "hidden": list(hidden.unbind(1)),
            "cell": [torch.zeros_like(h) for h in hidden.unbind(1)],
            "context": torch.zeros_like(summary),
            "keys": keys,
            "projected_keys": self.attention_key(keys),
            "mask": mask,
        }

    def step(self, state: dict, previous_token: torch.Tensor) -> tuple[torch.Tensor, dict]:
        """One decoder step: logits [N, V] (unmasked) and the new state."""
        x = torch.cat([self.label_embedding(previous_token), state["context"]], dim=-1)
        hidden, cell = [], []
        for layer, lstm in enumerate(self.decoder):
            if layer:
                x = self.dropout(x)
            h, c = lstm(x, (state["hidden"][layer], state["cell"][layer]))
            hidden.append(h)
            cell.append(c)
            x = h
        scores = torch.tanh(state["projected_keys"] + self.attention_query(x)[:, None]) @ self.attention_vector
        weights = torch.softmax(scores.masked_fill(~state["mask"], float("-inf")), dim=-1)
        context = torch.bmm(weights[:, None], state["keys"])[:, 0]
        readout = self.dropout(torch.tanh(self.readout_state(x) + self.readout_context(context)))
        return self.output(readout), dict(state, hidden=hidden, cell=cell, context=context)

    def mask_logits(self, logits: torch.Tensor, emitted: torch.Tensor) -> torch.Tensor:
        ids = torch.arange(self.num_tokens)
        allowed = (ids == self.eos_id) | ((ids >= self.num_special) & ~emitted)
        return logits.masked_fill(~allowed, MASKED_LOGIT)

    def mark_emitted(self, emitted: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
        marked = nn.functional.one_hot(token, self.num_tokens).bool() & (token >= self.num_special)[:, None]
        return emitted | marked

    def forward(self, tokens: torch.Tensor, label_sequence: torch.Tensor) -> torch.Tensor:
        """Teacher-forced masked logits [B, S, V]: the decoder reads BOS, l_1, .., l_{S-1} and the
        emitted set of each step is the gold prefix's labels."""
        state = self.encode(tokens)
        batch, steps = label_sequence.shape
        previous = torch.cat([torch.full((batch, 1), self.bos_id), label_sequence[:, :-1]], dim=1)
        emitted = torch.zeros(batch, self.num_tokens, dtype=torch.bool)
        logits = []
        for t in range(steps):
            emitted = self.mark_emitted(emitted, previous[:, t])
            step_logits, state = self.step(state, previous[:, t])
            logits.append(self.mask_logits(step_logits, emitted))
        return torch.stack(logits, dim=1)

    def loss(self, tokens: torch.Tensor, label_sequence: torch.Tensor) -> torch.Tensor:
        """`jcaps.ops.losses.sequence_cross_entropy` averaged over the batch: each example's mean
        token cross-entropy over its non-PAD targets (EOS included)."""
        logits = self(tokens, label_sequence)
        per_token = nn.functional.cross_entropy(logits.transpose(1, 2), label_sequence, reduction="none")
        valid = label_sequence != self.pad_id
        per_example = (per_token * valid).sum(dim=1) / valid.sum(dim=1).clamp(min=1)
        return per_example.mean()

    @torch.no_grad()
    def greedy(self, tokens: torch.Tensor, max_steps: int) -> tuple[torch.Tensor, int]:
        """`jcaps.ops.decoding.greedy_decode`: -> (emitted [B, V] bool, steps run). A row stops
        at EOS; the loop stops when every row has, or after `max_steps`."""
        state = self.encode(tokens)
        batch = tokens.shape[0]
        token = torch.full((batch,), self.bos_id)
        emitted = torch.zeros(batch, self.num_tokens, dtype=torch.bool)
        finished = torch.zeros(batch, dtype=torch.bool)
        steps = 0
        while steps < max_steps and not bool(finished.all()):
            logits, state = self.step(state, token)
            token = torch.where(finished, self.pad_id, self.mask_logits(logits, emitted).argmax(dim=-1))
            emitted = self.mark_emitted(emitted, token)
            finished = finished | (token == self.eos_id)
            steps += 1
        return emitted, steps


def load_jcaps_params(module: TorchSGM, params: dict) -> None:
    """Copies a jcaps SGM parameter tree (arrays) into `module`; every shape must agree."""
    encoder = params["encoder"]
    pairs = [(module.embedding.weight, encoder["embedding"])]
    for layer in range(module.num_layers):
        weights = encoder[f"layer_{layer}"]
        for direction, suffix in enumerate(("", "_reverse")):
            for torch_name, jcaps_name, transpose in (("weight_ih", "input_kernel", True),
                                                      ("bias_ih", "input_bias", False),
                                                      ("weight_hh", "hidden_kernel", True),
                                                      ("bias_hh", "hidden_bias", False)):
                value = np.asarray(weights[jcaps_name][direction])
                pairs.append((getattr(module.encoder, f"{torch_name}_l{layer}{suffix}"), value.T if transpose else value))
    for layer, cell in enumerate(module.decoder):
        prefix = f"decoder_{layer}_"
        pairs += [(cell.weight_ih, np.asarray(params[prefix + "input_kernel"]).T),
                  (cell.bias_ih, params[prefix + "input_bias"]),
                  (cell.weight_hh, np.asarray(params[prefix + "hidden_kernel"]).T),
                  (cell.bias_hh, params[prefix + "hidden_bias"])]
    for name in ("init", "attention_key", "readout_state", "output"):
        linear = getattr(module, name)
        pairs += [(linear.weight, np.asarray(params[f"{name}_kernel"]).T), (linear.bias, params[f"{name}_bias"])]
    pairs += [(module.attention_query.weight, np.asarray(params["attention_query_kernel"]).T),
              (module.readout_context.weight, np.asarray(params["readout_context_kernel"]).T),
              (module.attention_vector, params["attention_vector"]),
              (module.label_embedding.weight, params["label_embedding"])]
    if {id(target) for target, _ in pairs} != {id(p) for p in module.parameters()} or len(pairs) != len(
        list(module.parameters())
    ):
        raise ValueError("the jcaps tree and the PyTorch module do not have the same parameters")
    with torch.no_grad():
        for target, value in pairs:
            value = torch.tensor(np.asarray(value, dtype=np.float32))
            if target.shape != value.shape:
                raise ValueError(f"shape {tuple(value.shape)} from jcaps for a PyTorch parameter of {tuple(target.shape)}")
            target.copy_(value)
