"""Plain PyTorch twins of jcaps' fastText, iCapsNets Short and CCCapsNet, holding jcaps' weights.

`benchmarks/vs_captum.py` explains the same inputs with these modules and Captum. Each twin is
built from a jcaps model config and its parameter tree (`twin(model_config, params)`), owns
exactly the same parameters (the counts are compared), and splits the forward pass where
attributions start: `embed(tokens)` gives the input vectors e [B, T, D] (fastText's and
iCapsNets' word vectors, CCCapsNet's composed CWC vectors), `forward(e, tokens)` the raw class
scores [B, J] from them (fastText's logits, the capsule lengths). The equations are those of
`jcaps/models/` (docs/icapsnets.md#equations, docs/cccapsnet.md#equations) in the form jcaps
computes them (iCapsNets' attention with its query folded into the key map, routing without
stopped gradients), so the two sides differ in framework only. Inputs are full-length (no
padding): the twins take no mask.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

BIGRAM_PRIME = 1_000_003  # jcaps.models.fasttext's hash: (a * prime + b) mod 2^32 mod buckets
EPS = 1e-7  # jcaps.ops.capsules' epsilon under every norm


def _tensor(array) -> nn.Parameter:
    return nn.Parameter(torch.from_numpy(np.array(array, dtype=np.float32)))


def squash(s: torch.Tensor) -> torch.Tensor:
    squared = torch.sum(s * s, dim=-1, keepdim=True)
    return squared / (1.0 + squared) * s / torch.sqrt(squared + EPS)


def prediction_vectors(u: torch.Tensor, kernel: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """u [B, I, d_in], kernel [J, d, d_in] (shared) or [I, J, d, d_in] -> u_hat [B, I, J, d]."""
    u_hat = torch.einsum("bid,jed->bije", u, kernel) if kernel.dim() == 3 else torch.einsum("bid,ijed->bije", u, kernel)
    return u_hat if bias is None else u_hat + bias


def dynamic_routing(u_hat: torch.Tensor, iterations: int) -> torch.Tensor:
    """Routing by agreement (Sabour et al. 2017) -> class capsules [B, J, d]."""
    logits = torch.zeros(u_hat.shape[:3], dtype=u_hat.dtype)
    for iteration in range(iterations):
        coupling = torch.softmax(logits, dim=2)
        v = squash(torch.einsum("bij,bije->bje", coupling, u_hat))
        if iteration < iterations - 1:
            logits = logits + torch.einsum("bije,bje->bij", u_hat, v)
    return v


def kmeans_routing(u_hat: torch.Tensor, iterations: int, similarity: str) -> torch.Tensor:
    """K-means routing (Ren & Lu 2022) -> squashed class capsules [B, J, d]."""
    key_norm = torch.sqrt(torch.sum(u_hat * u_hat, dim=-1) + EPS) if similarity == "cosine" else None

    def route(v):
        unit = v / torch.sqrt(torch.sum(v * v, dim=-1, keepdim=True) + EPS)
        logits = torch.einsum("bije,bje->bij", u_hat, unit)
        if key_norm is not None:
            logits = logits / key_norm
        return torch.einsum("bij,bije->bje", torch.softmax(logits, dim=2), u_hat)

    v = torch.sum(u_hat, dim=1) / u_hat.shape[2]
    for _ in range(iterations):
        v = route(v)
    return squash(v)


def capsule_scores(u_hat: torch.Tensor, model_config) -> torch.Tensor:
    if model_config.routing == "dynamic":
        v = dynamic_routing(u_hat, model_config.routing_iterations)
    else:
        v = kmeans_routing(u_hat, model_config.routing_iterations, model_config.get("similarity", "cosine"))
    return torch.sqrt(torch.sum(v * v, dim=-1))


class FastText(nn.Module):
    def __init__(self, model_config, params):
        super().__init__()
        self.words = _tensor(params["Embed_0"]["embedding"])
        self.buckets = model_config.bigram_buckets
        self.bigrams = _tensor(params["Embed_1"]["embedding"]) if self.buckets else None
        self.linear = nn.Linear(*params["Dense_0"]["kernel"].shape)
        self.linear.weight = _tensor(np.asarray(params["Dense_0"]["kernel"]).T)
        self.linear.bias = _tensor(params["Dense_0"]["bias"])

    def embed(self, tokens):
        return self.words[tokens]

    def forward(self, e, tokens):
        total, count = e.sum(dim=1), tokens.shape[1]
        if self.bigrams is not None:
            ids = ((tokens[:, :-1] * BIGRAM_PRIME + tokens[:, 1:]) & 0xFFFFFFFF) % self.buckets
            total = total + self.bigrams[ids].sum(dim=1)
            count = count + tokens.shape[1] - 1
        return self.linear(total / count)


class ICapsNetShort(nn.Module):
    def __init__(self, model_config, params):
        super().__init__()
        self.config = model_config
        self.words = _tensor(params["embed"]["embedding"])
        kernel = np.asarray(params["region_conv"]["kernel"])  # [K, d_e, d_w]
        self.conv = nn.Conv1d(kernel.shape[1], kernel.shape[2], kernel.shape[0], padding=kernel.shape[0] // 2)
        self.conv.weight = _tensor(kernel.transpose(2, 1, 0))
        self.conv.bias = _tensor(params["region_conv"]["bias"])
        self.queries = _tensor(params["queries"])
        self.key_kernel = _tensor(params["word_attention"]["key_kernel"])
        self.value_kernel = _tensor(params["word_attention"]["value_kernel"])
        self.class_kernel = _tensor(params["class_kernel"])
        self.class_bias = _tensor(params["class_bias"])
        self.scale = model_config.query_dim**-0.5 if model_config.attention_scale else 1.0

    def embed(self, tokens):
        return self.words[tokens]

    def forward(self, e, tokens):
        regions = self.conv(e.transpose(1, 2)).transpose(1, 2)  # [B, N, d_w]
        if self.config.conv_activation == "relu":
            regions = torch.relu(regions)
        folded = self.scale * torch.einsum("iq,idq->id", self.queries, self.key_kernel)
        alpha = torch.softmax(torch.einsum("bnd,id->bin", regions, folded), dim=-1)
        primary = torch.einsum("bid,ide->bie", torch.einsum("bin,bnd->bid", alpha, regions), self.value_kernel)
        if self.config.squash_primary:
            primary = squash(primary)
        return capsule_scores(prediction_vectors(primary, self.class_kernel, self.class_bias), self.config)


class CCCapsNet(nn.Module):
    def __init__(self, model_config, params):
        super().__init__()
        if model_config.embedding != "cwc" or model_config.classifier != "capsule":
            raise ValueError("the twin is CCCapsNet's CWC-Capsule form")
        self.config = model_config
        self.code_logits = _tensor(params["embedding"]["code_logits"])
        self.codebooks = _tensor(params["embedding"]["codebooks"])
        encoder = params["encoder"]
        first = np.asarray(encoder["layer_0"]["input_kernel"])
        self.gru = nn.GRU(first.shape[1], model_config.hidden_dim, num_layers=model_config.num_layers,
                          bidirectional=True, batch_first=True)
        for layer in range(model_config.num_layers):
            weights = encoder[f"layer_{layer}"]
            for direction, suffix in enumerate((f"l{layer}", f"l{layer}_reverse")):
                for torch_name, name, transpose in (("weight_ih", "input_kernel", True), ("bias_ih", "input_bias", False),
                                                    ("weight_hh", "hidden_kernel", True), ("bias_hh", "hidden_bias", False)):
                    value = np.asarray(weights[name][direction])
                    setattr(self.gru, f"{torch_name}_{suffix}", _tensor(value.T if transpose else value))
        self.gru.flatten_parameters()
        self.kernel = _tensor(params["classifier"]["kernel"])

    def embed(self, tokens):
        weights = torch.softmax(self.code_logits[tokens], dim=-1)  # [B, T, M, K]
        return torch.einsum("btmk,mkd->btd", weights, self.codebooks)

    def forward(self, e, tokens):
        states = self.gru(e)[0]
        features = states.reshape(states.shape[0], states.shape[1], 2, -1).sum(dim=2).mean(dim=1)
        capsules = features.reshape(features.shape[0], -1, self.config.capsule_dim)
        return capsule_scores(prediction_vectors(capsules, self.kernel, None), self.config)


TWINS = {"fasttext": FastText, "icapsnet_short": ICapsNetShort, "cccapsnet": CCCapsNet}


def twin(model_config, params) -> nn.Module:
    """The PyTorch twin of the jcaps model `model_config` with the jcaps parameters `params`."""
    module = TWINS[model_config.name](model_config, params)
    return module.eval()
