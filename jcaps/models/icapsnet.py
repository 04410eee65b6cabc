"""iCapsNets (Wang, Hu, Ji 2020): `ICapsNetShort` and `ICapsNetLong`.

Token ids in (0 = PAD), class capsules and their explanations out. Both models share one base
(`_ICapsNet`: embedding, region convolution, primary-capsule queries and the capsule head) and
one attention level (`HeadQueryAttention`); Long applies that level twice.

Where each equation of docs/icapsnets.md#equations lives:

    Short
      1. e_n = E[x_n]                          `_ICapsNet.region_embeddings` (`self.embed`); PAD
                                               embeddings are zeroed there, so the "same" zero
                                               padding of step 2 sees the same zeros at the true
                                               end of a sequence however many PADs follow.
      2. w_n = conv(e)_n, kernel K, "same"     `_ICapsNet.region_embeddings` (`self.region_conv`,
                                               then the `conv_activation` knob, "none" default).
      3. k_in = Wk_i w_n, v_in = Wv_i w_n      `jcaps.ops.attention.head_query_attention`, with
         alpha_in = softmax_n(h_i . k_in)        the kernels [I, d_w, d_q] and [I, d_w, d_p] of
         pc_i = sum_n alpha_in v_in              `HeadQueryAttention` (pads masked by
                                               `masked_softmax`; keys and values are folded
                                               into the query and the pooling); h_i is the
                                               `queries` parameter of `_ICapsNet.setup`.
         pc_i = squash(pc_i)                   `_ICapsNet.capsule_head` (`squash_primary` knob).
      4. u_hat[i, j] = W_j pc_i + b_j          `_ICapsNet.capsule_head`
         (Eq. 8, one W_j for every capsule)    (`jcaps.ops.capsules.shared_prediction_vectors`);
         or u_hat[i, j] = W_ij pc_i + b_ij     with `shared_transform=False`
         (Eq. 7, one W_ij per pair)            (`unshared_prediction_vectors`).
         dynamic routing, r = 3                `_ICapsNet.route` (`dynamic_routing`, or
                                               `kmeans_routing` with `routing="kmeans"`).
         scores = |cc_j|                       `_ICapsNet.capsule_head` (`jcaps.ops.capsules.capsule_length`).
         selection = c, or c_ij <u_hat_ij, s_j>/|s_j|  `_ICapsNet.capsule_head` (`capsule_selection`;
                                               `routing_contributions`), what interpretation ranks.
    Long
      same embedding and conv per sentence     `_ICapsNet.region_embeddings` on [B, M, N].
      alpha_imn = softmax_n(h_i . Wk_i w_mn)   `ICapsNetLong.__call__`, `self.word_attention`
      s_im = sum_n alpha_imn Wv_i w_mn           (HeadQueryAttention, Wv_i: d_s × d_w).
      rho_im = softmax_m(h_i . Wk~_i s_im)     `ICapsNetLong.__call__`, `self.sentence_attention`
      pc_i = sum_m rho_im Wv~_i s_im             (HeadQueryAttention on per-head inputs, the SAME
                                               queries h_i); then `capsule_head` as Short.

The margin loss and the interpretation procedures of §1 read this module's outputs and live in
`jcaps.ops.losses` and `jcaps.interpret`.
"""

from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from jcaps.choices import check_choice
from jcaps.models.choices import CapsuleSelection, ConvActivation, ICapsNetSimilarity, Routing
from jcaps.models.dropout import Dropout
from jcaps.models.outputs import ModelOutput
from jcaps.models.token_ids import padding_mask
from jcaps.ops.attention import HeadQueryAttentionParams, head_query_attention
from jcaps.ops.capsules import (
    capsule_length,
    dynamic_routing,
    kmeans_routing,
    routing_contributions,
    shared_prediction_vectors,
    squash,
    unshared_prediction_vectors,
)


class HeadQueryAttention(nn.Module):
    """One level of iCapsNets trainable multi-head attention (Sec. II-C).

    Owns the per-head key and value maps Wk_i, Wv_i (no biases) and applies
    `head_query_attention` with queries supplied by the caller, so several levels can share
    the same h_i (Sec. II-E).

    Attributes:
      query_dim: d_q.
      value_dim: size of the pooled vectors (d_p, or d_s for Long's word level).
      scale: logit multiplier (1, or 1/sqrt(d_q)).
      dtype: computation dtype; parameters are float32.
    """

    query_dim: int
    value_dim: int
    scale: float = 1.0
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, queries: jax.Array, x: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
        """queries [I, d_q]; x [..., N, d_in] or [..., I, N, d_in]; mask [..., N].

        Returns (pooled [..., I, value_dim], weights [..., I, N]).
        """
        num_heads, input_dim = queries.shape[0], x.shape[-1]
        # Heads are a batch axis of the kernels: each map is lecun-initialised per head.
        init = nn.initializers.lecun_normal(in_axis=-2, out_axis=-1, batch_axis=(0,))
        key_kernel = self.param("key_kernel", init, (num_heads, input_dim, self.query_dim))
        value_kernel = self.param("value_kernel", init, (num_heads, input_dim, self.value_dim))
        params = HeadQueryAttentionParams(
            queries.astype(self.dtype), key_kernel.astype(self.dtype), value_kernel.astype(self.dtype)
        )
        return head_query_attention(x.astype(self.dtype), params, mask=mask, scale=self.scale)


class _ICapsNet(nn.Module):
    """Fields and layers shared by iCapsNets_Short and iCapsNets_Long (docs/icapsnets.md#equations).

    Attributes:
      vocab_size: V, including PAD (id 0).
      num_classes: J.
      embed_dim: d_e.
      kernel_size: K, odd, of the region convolution.
      region_dim: d_w.
      num_capsules: I, the number of heads / primary capsules.
      query_dim: d_q.
      primary_dim: d_p.
      class_dim: d_c.
      routing_iterations: r.
      routing: "dynamic" (the paper) or "kmeans".
      routing_similarity: the agreement of routing, "dot" or "cosine"; "paper" is each routing's
        own (dynamic: dot, Sabour et al.; k-means: cosine, Ren & Lu).
      capsule_selection: how interpretation ranks the primary capsules for a class, the
        `capsule_selection` output: "coupling", c[i, j] (the paper, Sec. II-F), or "contribution",
        c[i, j] <u_hat[i, j], s_j / |s_j|> (`routing_contributions`: the share of class capsule
        j's routed length that capsule i supplies).
      conv_activation: "none" (spec decision) or "relu", after the region convolution.
      attention_scale: multiply attention logits by 1/sqrt(d_q) (off: the paper has no scaling).
      squash_primary: squash the primary capsules (spec decision).
      shared_transform: one W_j per class for every primary capsule (Eq. 8, the paper's choice),
        or one W_ij per (capsule, class) pair (Eq. 7, Sabour et al.): the shared form lets every
        capsule serve every class, so the capsule that routing ranks first for the predicted
        class need not depend on the class (docs/icapsnets.md, "The global interpretation, analysed").
      embedding_dropout: dropout on the word embeddings, before the region convolution.
      dtype: activation dtype; parameters are float32.
    """

    vocab_size: int
    num_classes: int
    embed_dim: int = 300
    kernel_size: int = 3
    region_dim: int = 256
    num_capsules: int = 32
    query_dim: int = 64
    primary_dim: int = 16
    class_dim: int = 16
    routing_iterations: int = 3
    routing: Routing = "dynamic"
    routing_similarity: ICapsNetSimilarity = "paper"
    capsule_selection: CapsuleSelection = "coupling"
    conv_activation: ConvActivation = "none"
    attention_scale: bool = False
    squash_primary: bool = True
    shared_transform: bool = True
    embedding_dropout: float = 0.0
    dtype: Any = jnp.float32

    def __post_init__(self):
        if self.kernel_size < 1 or self.kernel_size % 2 == 0:
            raise ValueError(
                f"kernel_size must be a positive odd integer so that region n is centred on word n "
                f"(docs/icapsnets.md#equations), got {self.kernel_size}"
            )
        check_choice("routing", self.routing, Routing)
        check_choice("routing_similarity", self.routing_similarity, ICapsNetSimilarity)
        check_choice("capsule_selection", self.capsule_selection, CapsuleSelection)
        check_choice("conv_activation", self.conv_activation, ConvActivation)
        super().__post_init__()

    def setup(self):
        self.embed = nn.Embed(self.vocab_size, self.embed_dim, dtype=self.dtype, param_dtype=jnp.float32)
        self.embed_dropout = Dropout(self.embedding_dropout)
        self.region_conv = nn.Conv(
            self.region_dim,
            kernel_size=(self.kernel_size,),
            padding="SAME",
            dtype=self.dtype,
            param_dtype=jnp.float32,
        )
        # Each query has variance 1/d_q, so without the 1/sqrt(d_q) the logits h_i . k_in start
        # with the variance of one key entry: about 1/d_e with flax's embedding init (std 0.07
        # at d_e 200, near-uniform attention at the start). Unit-variance embeddings, which make
        # the logits unit-variance, trained iCapsNets Short on AG News to 0.808 test accuracy
        # against 0.875 (measured), so the default init stays.
        self.queries = self.param(
            "queries",
            nn.initializers.lecun_normal(in_axis=-1, out_axis=-2),
            (self.num_capsules, self.query_dim),
        )
        # [J, d_c, d_p] (W_j) or [I, J, d_c, d_p] (W_ij), and the biases alike.
        pairs = (self.num_classes,) if self.shared_transform else (self.num_capsules, self.num_classes)
        self.class_kernel = self.param(
            "class_kernel",
            nn.initializers.lecun_normal(in_axis=-1, out_axis=-2, batch_axis=tuple(range(len(pairs)))),
            pairs + (self.class_dim, self.primary_dim),
        )
        self.class_bias = self.param("class_bias", nn.initializers.zeros, pairs + (self.class_dim,))

    @property
    def attention_logit_factor(self) -> float:
        """The factor on the attention logits h_i . k_in: 1 (the paper), 1/sqrt(d_q) with
        `attention_scale`. A variant of the model may override it (a property of the module,
        read when its attention layers are built)."""
        return self.query_dim**-0.5 if self.attention_scale else 1.0

    def region_embeddings(
        self,
        tokens: jax.Array,
        *,
        train: bool,
        embeddings: jax.Array | None = None,
        regions: jax.Array | None = None,
    ) -> tuple[jax.Array, jax.Array, jax.Array | None]:
        """tokens [..., N] int ids -> (w [..., N, d_w], mask [..., N], e [..., N, d_e] or None);
        conv along N only. `embeddings` [..., N, d_e], when given, replace the looked-up e;
        `regions` [..., N, d_w], when given, replace conv(e) (then e is None)."""
        mask = padding_mask(tokens)
        words = None
        if regions is None:
            words = self.embed(tokens) if embeddings is None else embeddings
            # Zeroed PAD embeddings make appended PADs indistinguishable from the conv's own zero
            # padding, so results do not depend on how far a batch is padded.
            embedded = jnp.where(mask[..., None], words, 0)
            regions = self.region_conv(self.embed_dropout(embedded, deterministic=not train))
        if self.conv_activation == "relu":
            regions = nn.relu(regions)
        return regions, mask, words

    def region_conv_of(self, tokens: jax.Array, embeddings: jax.Array) -> jax.Array:
        """conv(e) [..., N, d_w] of given word vectors e [..., N, d_e] (PADs zeroed, no dropout):
        an affine map of e, which attribution methods can integrate through (`regions=`)."""
        return self.region_conv(jnp.where(padding_mask(tokens)[..., None], embeddings, 0))

    def route(
        self,
        u_hat: jax.Array,
        mask: jax.Array | None = None,
        iterations: int | None = None,
        *,
        coupling: Callable[..., jax.Array] = jax.nn.softmax,
    ) -> tuple[jax.Array, jax.Array]:
        """u_hat [B, I, J, d_c] -> (class capsules [B, J, d_c], coupling [B, I, J]) by the model's
        routing; `mask` [B, I] leaves capsules out and `iterations` replaces r (for analyses of a
        trained model, e.g. `model.apply(variables, u_hat, method="route")`). `coupling` is
        dynamic routing's step from logits to coupling (`dynamic_routing`): a variant of the
        model that overrides `route` passes its own."""
        iterations = iterations or self.routing_iterations
        if self.routing == "dynamic":
            similarity = "dot" if self.routing_similarity == "paper" else self.routing_similarity
            return dynamic_routing(
                u_hat, num_iterations=iterations, mask=mask, similarity=similarity, coupling=coupling
            )
        if coupling is not jax.nn.softmax:
            raise ValueError(f"a coupling function is dynamic routing's, but routing is {self.routing!r}")
        similarity = "cosine" if self.routing_similarity == "paper" else self.routing_similarity
        return kmeans_routing(u_hat, num_iterations=iterations, mask=mask, similarity=similarity)

    def capsule_head(
        self,
        primary: jax.Array,
        word_attention: jax.Array,
        sentence_attention: jax.Array | None,
        embeddings: jax.Array | None,
    ) -> ModelOutput:
        """primary [B, I, d_p] unsquashed -> the output: scores, class / primary capsules,
        coupling and the capsule selection scores, with the attention and word vectors that
        led to `primary`."""
        if self.squash_primary:
            primary = squash(primary)
        predict = shared_prediction_vectors if self.shared_transform else unshared_prediction_vectors
        u_hat = predict(
            primary,
            self.class_kernel.astype(self.dtype),
            bias=self.class_bias.astype(self.dtype),
        )
        class_capsules, coupling = self.route(u_hat)
        selection = coupling if self.capsule_selection == "coupling" else routing_contributions(u_hat, coupling)
        return ModelOutput(
            scores=capsule_length(class_capsules),
            primary_capsules=primary,
            class_capsules=class_capsules,
            coupling=coupling,
            capsule_selection=selection,
            word_attention=word_attention,
            sentence_attention=sentence_attention,
            embeddings=embeddings,
        )


class ICapsNetShort(_ICapsNet):
    """iCapsNets_Short: one sequence of N words per example (Sec. II-A to II-D)."""

    def setup(self):
        super().setup()
        self.word_attention = HeadQueryAttention(
            self.query_dim, self.primary_dim, scale=self.attention_logit_factor, dtype=self.dtype
        )

    def __call__(
        self,
        tokens: jax.Array,
        *,
        train: bool = False,
        embeddings: jax.Array | None = None,
        regions: jax.Array | None = None,
    ) -> ModelOutput:
        """tokens [B, N] int32, 0 = PAD; embeddings [B, N, d_e] word vectors to read instead of
        looking `tokens` up (gradients with respect to each word; `tokens` still give the mask);
        regions [B, N, d_w]: the region conv's output to read instead (`region_conv_of`).

        Returns scores [B, J] (class-capsule lengths, in [0, 1)), class_capsules [B, J, d_c],
        primary_capsules [B, I, d_p], word_attention alpha [B, I, N] (zero at PADs), coupling
        [B, I, J] (rows sum to 1), capsule_selection [B, I, J] (`capsule_selection`),
        embeddings [B, N, d_e] (the word vectors read; None when `regions` are given).
        """
        regions, mask, words = self.region_embeddings(tokens, train=train, embeddings=embeddings, regions=regions)
        primary, alpha = self.word_attention(self.queries, regions, mask)
        return self.capsule_head(primary, alpha, None, words)


class ICapsNetLong(_ICapsNet):
    """iCapsNets_Long: M sentences of N words, word- then sentence-level attention (Sec. II-E).

    Attributes:
      sentence_dim: d_s, the size of the per-head sentence vectors s_im.
    """

    sentence_dim: int = 128

    def setup(self):
        super().setup()
        self.word_attention = HeadQueryAttention(
            self.query_dim, self.sentence_dim, scale=self.attention_logit_factor, dtype=self.dtype
        )
        self.sentence_attention = HeadQueryAttention(
            self.query_dim,
            self.primary_dim,
            scale=self.attention_logit_factor,
            dtype=self.dtype,
        )

    def __call__(
        self,
        tokens: jax.Array,
        *,
        train: bool = False,
        embeddings: jax.Array | None = None,
        regions: jax.Array | None = None,
    ) -> ModelOutput:
        """tokens [B, M, N] int32, 0 = PAD; an all-PAD sentence is masked out. embeddings
        [B, M, N, d_e]: word vectors to read instead of looking `tokens` up; regions
        [B, M, N, d_w]: the region conv's output to read instead (`region_conv_of`).

        Returns scores [B, J], class_capsules [B, J, d_c], primary_capsules [B, I, d_p],
        word_attention alpha [B, I, M, N] (zero at PAD words and in empty sentences),
        sentence_attention rho [B, I, M] (zero at empty sentences), coupling [B, I, J],
        capsule_selection [B, I, J], embeddings [B, M, N, d_e] (the word vectors read; None
        when `regions` are given).
        """
        regions, word_mask, words = self.region_embeddings(tokens, train=train, embeddings=embeddings, regions=regions)
        # Word level over every sentence at once: leading axes [B, M].
        sentences, alpha = self.word_attention(self.queries, regions, word_mask)
        sentence_mask = jnp.any(word_mask, axis=-1)
        # Sentence level with the same queries; head i reads its own s_im, so heads lead.
        primary, rho = self.sentence_attention(self.queries, jnp.swapaxes(sentences, -3, -2), sentence_mask)
        return self.capsule_head(primary, jnp.swapaxes(alpha, -3, -2), rho, words)
