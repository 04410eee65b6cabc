"""CCCapsNet (Ren & Lu, PRL 2022): compositional coding embeddings, BiGRU, k-means capsules.

    ids [B, T] -> embedding [B, T, 64]                     `Embedding` (normal | cwc | cc)
      -> 2-layer BiGRU, hidden 128, dropout 0.5 between     `RecurrentLayer("gru")` per layer
         layers, forward + backward summed [B, T, 128]
      -> mean over the valid steps [B, 128]                 `masked_mean_over_time`
      -> 16 feature capsules of size 8 (not squashed)
      -> J class capsules of size 16: unshared W[i, j],     `CapsuleClassifier`
         no bias, k-means routing, 3 iterations
      -> scores = capsule lengths [B, J]

or, with `classifier="linear"`, scores = Linear(128 -> J, no bias) logits. The equations are in
docs/cccapsnet.md#equations, the published parameter counts this module reproduces
(`count_parameters`) in docs/cccapsnet.md#parameter-counts.
Padding is masked in the GRU and the mean; `reference_padding=True` processes pads as words
and averages over all T steps, as the authors' code does.
"""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from jcaps.choices import check_choice
from jcaps.models.choices import CCCapsNetClassifier, CCCapsNetEmbedding, CCSampling, Routing
from jcaps.models.dropout import Dropout
from jcaps.models.initializers import torch_linear_kernel
from jcaps.models.outputs import ModelOutput
from jcaps.models.recurrent_layers import RecurrentLayer
from jcaps.models.token_ids import padding_mask
from jcaps.ops.capsules import (
    Similarity,
    capsule_length,
    dynamic_routing,
    kmeans_routing,
    shared_prediction_vectors,
    unshared_prediction_vectors,
)
from jcaps.ops.embeddings import cc_embedding, cwc_embedding, num_codewords
from jcaps.ops.pooling import masked_mean_over_time


class Embedding(nn.Module):
    """Word vectors from a table (`normal`) or from codebooks (`cwc`, `cc`); N(0, 1) init [ref].

    Attributes:
        vocab_size: V.
        kind: "normal", "cwc" or "cc".
        features: D.
        num_codebooks: M (cwc, cc).
        extra_codewords: added to K, the smallest integer with K^M >= V (the K+1, K+2
            ablations).
        cc_sampling: "straight_through" or "repeated_argmax" (cc, training).
        cc_samples: draws summed by "repeated_argmax".
    """

    vocab_size: int
    kind: CCCapsNetEmbedding = "cwc"
    features: int = 64
    num_codebooks: int = 8
    extra_codewords: int = 0
    cc_sampling: CCSampling = "straight_through"
    cc_samples: int = 10

    @nn.compact
    def __call__(self, ids: jax.Array, *, train: bool) -> jax.Array:
        """ids [...] int -> [..., D] float32."""
        init = nn.initializers.normal(1.0)
        if self.kind == "normal":
            return jnp.take(self.param("embedding", init, (self.vocab_size, self.features)), ids, axis=0)
        k = num_codewords(self.vocab_size, self.num_codebooks) + self.extra_codewords
        code_logits = self.param("code_logits", init, (self.vocab_size, self.num_codebooks, k))
        codebooks = self.param("codebooks", init, (self.num_codebooks, k, self.features))
        if self.kind == "cwc":
            return cwc_embedding(ids, code_logits, codebooks)
        # The training step supplies one RNG stream ('dropout'); the Gumbel noise draws from it.
        rng = self.make_rng("dropout") if train else None
        return cc_embedding(
            ids, code_logits, codebooks, rng=rng, sampling=self.cc_sampling, num_samples=self.cc_samples
        )


class Encoder(nn.Module):
    """Stacked BiGRU layers (dropout between them), directions summed, mean over time."""

    hidden_dim: int = 128
    num_layers: int = 2
    dropout_rate: float = 0.5
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array, mask: jax.Array | None, *, train: bool) -> jax.Array:
        """x [B, T, D], mask [B, T] or None -> [B, H]."""
        outputs = RecurrentLayer("gru", self.hidden_dim, dtype=self.dtype, name="layer_0")(x, mask)
        for layer in range(1, self.num_layers):
            # PyTorch's nn.GRU dropout: on every layer's output but the last; the next layer
            # reads both directions concatenated.
            x = Dropout(self.dropout_rate, deterministic=not train)(outputs.reshape(outputs.shape[:-2] + (-1,)))
            outputs = RecurrentLayer("gru", self.hidden_dim, dtype=self.dtype, name=f"layer_{layer}")(x, mask)
        return masked_mean_over_time(jnp.sum(outputs, axis=-2), mask=mask)


class CapsuleClassifier(nn.Module):
    """Feature capsules -> class capsules by k-means (or dynamic) routing; no bias [ref].

    Kernels are Xavier-uniform with PyTorch's fans for the reference layout
    (J, I, d_out, d_in) [ref].
    """

    num_classes: int
    class_dim: int = 16
    routing: Routing = "kmeans"
    similarity: Similarity = "cosine"
    routing_iterations: int = 3
    shared_transform: bool = False
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, capsules: jax.Array) -> tuple[jax.Array, jax.Array]:
        """capsules [B, I, d_in] -> (class capsules [B, J, d_out], coupling [B, I, J])."""
        num_in, in_dim = capsules.shape[-2:]
        shape: tuple[int, ...]
        if self.shared_transform:
            shape, fans = (self.num_classes, self.class_dim, in_dim), {"in_axis": 1, "out_axis": 0}
            predict = shared_prediction_vectors
        else:
            shape, fans = (num_in, self.num_classes, self.class_dim, in_dim), {"in_axis": 0, "out_axis": 1}
            predict = unshared_prediction_vectors
        kernel = self.param("kernel", nn.initializers.glorot_uniform(**fans), shape)
        u_hat = predict(capsules.astype(self.dtype), kernel.astype(self.dtype))
        if self.routing == "kmeans":
            class_capsules, coupling = kmeans_routing(
                u_hat, num_iterations=self.routing_iterations, similarity=self.similarity
            )
        else:
            class_capsules, coupling = dynamic_routing(u_hat, num_iterations=self.routing_iterations)
        return class_capsules, coupling


class CCCapsNet(nn.Module):
    """CCCapsNet (docs/cccapsnet.md#equations); every default is the published configuration.

    Attributes:
        vocab_size: V, including PAD (id 0).
        num_classes: J.
        embedding: "normal", "cwc" or "cc".
        embed_dim: embedding size.
        num_codebooks: M of the cwc / cc embeddings.
        extra_codewords: K = (smallest K with K^M >= V) + this.
        cc_sampling: "straight_through" (Shu & Nakayama) or "repeated_argmax" (the authors'
            code: codes from the argmax of summed Gumbel-softmax draws, logits untrained).
        cc_samples: draws summed by "repeated_argmax".
        hidden_dim: GRU hidden size H (a multiple of capsule_dim).
        num_layers: BiGRU layers.
        dropout_rate: dropout between GRU layers.
        embedding_dropout: dropout on the word vectors before the first GRU layer (0 in the
            paper; on a few thousand training texts it is the regulariser that matters most).
        reference_padding: process PADs as words and average over all steps (authors' code).
        classifier: "capsule" or "linear".
        capsule_dim: size of the H / capsule_dim feature capsules.
        class_dim: size of the class capsules.
        routing: "kmeans" or "dynamic".
        similarity: "cosine" or "dot" (k-means routing).
        routing_iterations: r.
        shared_transform: one W[j] for all feature capsules instead of W[i, j].
        dtype: activation dtype; parameters are float32.
    """

    vocab_size: int
    num_classes: int
    embedding: CCCapsNetEmbedding = "cwc"
    embed_dim: int = 64
    num_codebooks: int = 8
    extra_codewords: int = 0
    cc_sampling: CCSampling = "straight_through"
    cc_samples: int = 10
    hidden_dim: int = 128
    num_layers: int = 2
    dropout_rate: float = 0.5
    embedding_dropout: float = 0.0
    reference_padding: bool = False
    classifier: CCCapsNetClassifier = "capsule"
    capsule_dim: int = 8
    class_dim: int = 16
    routing: Routing = "kmeans"
    similarity: Similarity = "cosine"
    routing_iterations: int = 3
    shared_transform: bool = False
    dtype: Any = jnp.float32

    def __post_init__(self):
        for name, choice_type in (
            ("embedding", CCCapsNetEmbedding),
            ("cc_sampling", CCSampling),
            ("classifier", CCCapsNetClassifier),
            ("routing", Routing),
            ("similarity", Similarity),
        ):
            check_choice(name, getattr(self, name), choice_type)
        if self.num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {self.num_layers}")
        if self.hidden_dim % self.capsule_dim:
            raise ValueError(f"hidden_dim {self.hidden_dim} must be a multiple of capsule_dim {self.capsule_dim}")
        super().__post_init__()

    @nn.compact
    def __call__(self, tokens: jax.Array, *, train: bool = False, embeddings: jax.Array | None = None) -> ModelOutput:
        """tokens [B, T] int32, 0 = PAD; embeddings [B, T, D]: word vectors (the composed CWC /
        CC vectors) to read instead of composing them from `tokens` (gradients with respect to
        each word; `tokens` still give the mask).

        Returns scores [B, J] (class-capsule lengths in [0, 1), or linear logits), features
        [B, H] (the pooled encoder output); with the capsule classifier also primary_capsules
        [B, H / capsule_dim, capsule_dim] (the feature capsules), class_capsules
        [B, J, class_dim] and coupling [B, H / capsule_dim, J] (rows sum to 1); embeddings
        [B, T, D], the word vectors read.
        """
        mask = None if self.reference_padding else padding_mask(tokens)
        words = Embedding(
            self.vocab_size,
            kind=self.embedding,
            features=self.embed_dim,
            num_codebooks=self.num_codebooks,
            extra_codewords=self.extra_codewords,
            cc_sampling=self.cc_sampling,
            cc_samples=self.cc_samples,
            name="embedding",
        )(tokens, train=train)
        if embeddings is not None:
            words = embeddings
        embedded = Dropout(self.embedding_dropout, deterministic=not train)(words)
        encoder = Encoder(self.hidden_dim, self.num_layers, self.dropout_rate, dtype=self.dtype, name="encoder")
        features = encoder(embedded.astype(self.dtype), mask, train=train)
        if self.classifier == "linear":
            linear = nn.Dense(
                self.num_classes,
                use_bias=False,
                kernel_init=torch_linear_kernel,  # PyTorch's nn.Linear default [ref]
                dtype=self.dtype,
                name="classifier",
            )
            return ModelOutput(scores=linear(features), embeddings=words, features=features)
        capsules = features.reshape(features.shape[:-1] + (-1, self.capsule_dim))
        classifier = CapsuleClassifier(
            self.num_classes,
            class_dim=self.class_dim,
            routing=self.routing,
            similarity=self.similarity,
            routing_iterations=self.routing_iterations,
            shared_transform=self.shared_transform,
            dtype=self.dtype,
            name="classifier",
        )
        class_capsules, coupling = classifier(capsules)
        return ModelOutput(
            scores=capsule_length(class_capsules),
            embeddings=words,
            features=features,
            primary_capsules=capsules,
            class_capsules=class_capsules,
            coupling=coupling,
        )


def count_parameters(
    vocab_size: int,
    num_classes: int,
    embedding: CCCapsNetEmbedding = "cwc",
    classifier: CCCapsNetClassifier = "capsule",
    **overrides,
) -> int:
    """Leaves of the real parameter tree of `CCCapsNet(...)`, from `jax.eval_shape` of its init
    (nothing is allocated or computed)."""
    model = CCCapsNet(vocab_size, num_classes, embedding=embedding, classifier=classifier, **overrides)
    shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.ones((1, 2), jnp.int32)))
    return sum(leaf.size for leaf in jax.tree.leaves(shapes["params"]))
