"""fastText (Joulin et al. 2017, "Bag of Tricks for Efficient Text Classification").

    h = mean(E[w_1..w_N] ++ B[hash(w_n, w_n+1)])     # words and (optionally) hashed bigrams
    logits = W h + b                                   # softmax cross-entropy on top

Padding never enters the mean: PAD ids (0) and bigrams that touch a PAD are masked.
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from jcaps.models.dropout import Dropout
from jcaps.models.outputs import ModelOutput
from jcaps.models.token_ids import padding_mask

# Bigram ids are hashed as (a * prime + b) mod buckets on uint32 ids: cheap, and collisions
# are spread because the prime is larger than any vocabulary jcaps builds.
_BIGRAM_PRIME = 1_000_003


class FastText(nn.Module):
    """fastText (module docstring).

    Attributes:
        vocab_size: V, including PAD (id 0).
        num_classes: J.
        embed_dim: D, the size of the word and bigram vectors.
        bigram_buckets: hashed bigram vectors (0: words only).
        dropout_rate: dropout on h, the mean vector fed to the linear classifier.
        dtype: activation dtype.
    """

    vocab_size: int
    num_classes: int
    embed_dim: int = 64
    bigram_buckets: int = 0
    dropout_rate: float = 0.0
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, tokens, *, train: bool = False, embeddings=None) -> ModelOutput:
        """tokens: [B, N] int32, 0 = PAD → scores: logits [B, J], embeddings: the word vectors
        read [B, N, D].

        embeddings: [B, N, D] word vectors to read instead of looking `tokens` up (gradients
        with respect to each word); `tokens` still give the mask and the hashed bigrams.
        """
        mask = padding_mask(tokens).astype(self.dtype)
        embed = nn.Embed(self.vocab_size, self.embed_dim, embedding_init=nn.initializers.normal(0.1), dtype=self.dtype)
        words = embed(tokens) if embeddings is None else embeddings
        total = jnp.einsum("bnd,bn->bd", words, mask)
        count = jnp.sum(mask, axis=-1)
        if self.bigram_buckets:
            first, second = tokens[:, :-1].astype(jnp.uint32), tokens[:, 1:].astype(jnp.uint32)
            bigram_ids = ((first * _BIGRAM_PRIME + second) % self.bigram_buckets).astype(jnp.int32)
            bigram_mask = mask[:, :-1] * mask[:, 1:]
            bigrams = nn.Embed(
                self.bigram_buckets, self.embed_dim, embedding_init=nn.initializers.normal(0.1), dtype=self.dtype
            )
            total = total + jnp.einsum("bnd,bn->bd", bigrams(bigram_ids), bigram_mask)
            count = count + jnp.sum(bigram_mask, axis=-1)
        hidden = total / jnp.maximum(count, 1.0)[:, None]
        hidden = Dropout(self.dropout_rate, deterministic=not train)(hidden)
        return ModelOutput(scores=nn.Dense(self.num_classes, dtype=self.dtype)(hidden), embeddings=words)
