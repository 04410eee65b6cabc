"""SGM (Yang et al., COLING 2018): multi-label classification as label-sequence generation, and
the binary-relevance baseline on the same encoder.

Label ids: the label vocabulary's special ids (`num_special` of them, BOS and EOS among them;
`jcaps.data.vocab`, whose ids the training layer hands to the model), then the J labels
(V = J + num_special). An example's labels, sorted by training-set frequency and closed by
EOS, are the target.

Encoder (`BiLSTMEncoder`, shared by both models; E = encoder_dim per direction):

    tokens [B, L] -> embedding, dropout                           mask = tokens != PAD_ID
      -> num_layers BiLSTM layers, dropout between them           `RecurrentLayer("lstm")`
      -> h_i = [fwd_i; bwd_i]  [B, L, 2E]

Decoder step t (`SGM._step`; N rows = B examples, or B K beams):

    e      = E_lab[token_{t-1}]                                   label embedding, previous token
    g      = e,  or with the global embedding (Sec. 2.3):
             ebar = sum_l y_{t-1}[l] E_lab[l],  H = sigmoid(W1 e + b1 + W2 ebar),
             g = (1 - H) * e + H * ebar
    s_t    = LSTM_stack(s_{t-1}, [g; c_{t-1}])                    input feeding, `lstm_cell`
    c_t    = sum_i a_ti h_i,  a_t = softmax_i(v^T tanh(W_a s_t + U_a h_i + b_a))
                                                                  `additive_attention`
    o_t    = W_o tanh(W_d s_t + V_d c_t + b_d) + b_o              [N, V]
    y_t    = softmax(label_mask_logits(o_t, emitted_t))           PAD/UNK/BOS and emitted labels
                                                                  masked (`label_mask_logits`)

s_t is the top layer's hidden state. Initial state: every decoder layer starts from the hidden
state tanh(W_init [fwd_last; bwd_first] + b_init) (the top encoder layer's forward state at the
last token and backward state at the first token; one Linear to num_layers x decoder_dim) and
a zero cell state; the context c_0 = 0 (nothing attended yet); token_0 = BOS and
y_0 = one_hot(BOS). The reference implementation hands the encoder LSTM's final (h, c) of each
layer to the decoder instead, which needs decoder_dim = 2 encoder_dim and as many decoder as
encoder layers; the learned map lifts both constraints (Bahdanau et al. 2015 likewise start
from s_0 = tanh(W_s h_1 backward)).

Training is teacher-forced: one `lax.scan` of the same `_step` over the decoder inputs BOS,
l_1, ..., l_{S-1} (the targets shifted right), with the emitted set of each step = the labels
of the gold prefix, and, for the global embedding, e = the gold previous label's embedding and
ebar from the model's own masked y_{t-1} (what the reference does). Inference runs `_step` in
`greedy_decode` or `beam_search`, whose carry holds each row's own emitted set and y_{t-1};
so a teacher-forced pass over a decoded sequence reproduces the decoder's distributions.

Dropout (0.5 each, as in the reference, which sets both with one rate): `embedding_dropout` on the
word embeddings; `dropout_rate` between encoder layers, between decoder layers and on
tanh(W_d s_t + V_d c_t) before W_o (BinaryRelevance: between encoder layers and on the pooled
vector); never in `predict`.

`BinaryRelevance`: the same encoder, a masked max (or mean) over time of h, dropout, and one
logit per label (independent sigmoids, in the loss).

Initialisation follows PyTorch: embeddings N(0, 1), LSTMs U(-1/sqrt(H), 1/sqrt(H)), linear maps
U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for kernels and biases; except binary relevance's readout
bias, -log J, so that each label starts at probability 1/(J + 1) (measured on Reuters: validation
micro-F1 0.53 after one epoch instead of 0.31).

References:
    Yang, Sun, Li, Ma, Wu, Wang. SGM: Sequence Generation Model for Multi-label Classification.
        COLING 2018 (Sec. 2.2 encoder, attention, decoder and mask; Sec. 2.3 global embedding).
    Bahdanau, Cho, Bengio. Neural Machine Translation by Jointly Learning to Align and
        Translate. ICLR 2015 (additive attention, decoder initial state).
    Luong, Pham, Manning. Effective Approaches to Attention-based Neural Machine Translation.
        EMNLP 2015 (Sec. 3.3, input feeding).
"""

import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from jcaps.choices import check_choice
from jcaps.models.choices import BinaryRelevancePool, RNNImpl, SGMDecoding
from jcaps.models.dropout import Dropout
from jcaps.models.initializers import torch_linear_kernel, uniform
from jcaps.models.outputs import DecodedLabels, ModelOutput
from jcaps.models.recurrent_layers import RecurrentLayer
from jcaps.models.token_ids import PAD_ID, padding_mask
from jcaps.ops._arrays import add_bias
from jcaps.ops.attention import AdditiveAttentionParams, additive_attention
from jcaps.ops.decoding import beam_search, emitted_to_multi_hot, greedy_decode, label_mask_logits, mark_emitted
from jcaps.ops.pooling import masked_max_over_time, masked_mean_over_time
from jcaps.ops.recurrent import bidirectional_final_state, lstm_cell
from jcaps.ops.regularisation import dropout

POOLS = {"max": masked_max_over_time, "mean": masked_mean_over_time}

_embedding_init = nn.initializers.normal(1.0)


class BiLSTMEncoder(nn.Module):
    """Word embedding -> dropout -> stacked BiLSTM layers (dropout between them).

    Attributes:
        vocab_size: word vocabulary size; id 0 is padding.
        embed_dim: word vector size.
        hidden_dim: E, LSTM size per direction.
        num_layers: BiLSTM layers.
        embedding_dropout: dropout on the word embeddings.
        dropout_rate: dropout between layers.
        dtype: activation dtype; parameters are float32.
        rnn_impl: how the LSTM layers run, "scan" or "cudnn" (`RecurrentLayer`).
    """

    vocab_size: int
    embed_dim: int = 512
    hidden_dim: int = 256
    num_layers: int = 2
    embedding_dropout: float = 0.5
    dropout_rate: float = 0.5
    dtype: Any = jnp.float32
    rnn_impl: RNNImpl = "scan"

    @nn.compact
    def __call__(
        self, tokens: jax.Array, *, train: bool = False, embeddings: jax.Array | None = None
    ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
        """tokens [B, L] int (0 = padding) -> (h [B, L, 2E] (zero at pads), mask [B, L] bool,
        summary [B, 2E] = [forward state at the last token; backward state at the first],
        the word vectors read [B, L, D]). `embeddings` [B, L, D], when given, are read instead
        of the looked-up vectors (`tokens` still give the mask)."""
        mask = padding_mask(tokens)
        table = self.param("embedding", _embedding_init, (self.vocab_size, self.embed_dim))
        words = jnp.take(table, tokens, axis=0) if embeddings is None else embeddings
        x = words.astype(self.dtype)
        for layer in range(self.num_layers):
            # Dropout on the embeddings, then (PyTorch's nn.LSTM dropout) on every layer's
            # output but the last; a layer reads both directions of the one below concatenated.
            x = Dropout(self.dropout_rate if layer else self.embedding_dropout, deterministic=not train)(x)
            states = RecurrentLayer(
                "lstm", self.hidden_dim, dtype=self.dtype, rnn_impl=self.rnn_impl, name=f"layer_{layer}"
            )(x, mask)
            x = states.reshape(states.shape[:-2] + (-1,))
        return x, mask, bidirectional_final_state(states, mask=mask), words


def _encoder(model) -> BiLSTMEncoder:
    """The encoder of an SGM or BR model, from the fields they share."""
    return BiLSTMEncoder(
        model.vocab_size,
        model.embed_dim,
        model.encoder_dim,
        model.num_layers,
        model.embedding_dropout,
        model.dropout_rate,
        model.dtype,
        model.rnn_impl,
        name="encoder",
    )


class SGM(nn.Module):
    """Sequence generation model with optional global embedding (module docstring).

    Attributes:
        vocab_size: word vocabulary size (id 0 = padding).
        num_classes: J real labels; the decoder's vocabulary is V = J + num_special.
        bos_id: the label vocabulary's BOS, the decoder's first input.
        eos_id: its EOS, which closes a label sequence.
        num_special: its number of special ids; id num_special + j is label j.
        embed_dim: word vector size.
        encoder_dim: E, encoder LSTM size per direction.
        decoder_dim: decoder LSTM size (also the size of tanh(W_d s + V_d c)).
        label_embed_dim: label vector size; 0 = embed_dim.
        attention_dim: A, size of the attention's hidden layer; 0 = decoder_dim.
        num_layers: LSTM layers of the encoder and of the decoder.
        embedding_dropout: dropout on the word embeddings.
        dropout_rate: dropout between the encoder's layers, between the decoder's and on
            tanh(W_d s + V_d c) (module docstring).
        global_embedding: feed g = (1 - H) e + H ebar instead of e (adds W1, b1, W2).
        decoding: "beam" or "greedy" (`predict`).
        beam_size: K.
        max_steps: most decoded tokens per example, EOS included.
        length_penalty: exponent of the length normalisation of the final beam choice.
        eos_threshold: greedy decoding only: 0 takes the argmax token; in (0, 1], the
            probability of EOS at which a sequence stops (`greedy_decode`).
        dtype: activation dtype; parameters are float32, masked logits float32.
        rnn_impl: how the encoder's LSTM layers run, "scan" or "cudnn" (`RecurrentLayer`).
    """

    vocab_size: int
    num_classes: int
    bos_id: int
    eos_id: int
    num_special: int
    embed_dim: int = 512
    encoder_dim: int = 256
    decoder_dim: int = 512
    label_embed_dim: int = 0
    attention_dim: int = 0
    num_layers: int = 2
    embedding_dropout: float = 0.5
    dropout_rate: float = 0.5
    global_embedding: bool = False
    decoding: SGMDecoding = "beam"
    beam_size: int = 5
    max_steps: int = 30
    length_penalty: float = 0.0
    eos_threshold: float = 0.0
    dtype: Any = jnp.float32
    rnn_impl: RNNImpl = "scan"

    def __post_init__(self):
        check_choice("decoding", self.decoding, SGMDecoding)
        super().__post_init__()

    @property
    def num_tokens(self) -> int:
        """V, the decoder's vocabulary: the special ids, then the J labels."""
        return self.num_classes + self.num_special

    def setup(self):
        self.encoder = _encoder(self)
        label_dim = self.label_embed_dim or self.embed_dim
        attention_dim = self.attention_dim or self.decoder_dim
        keys_dim, decoder_dim = 2 * self.encoder_dim, self.decoder_dim

        def linear(name, fan_in, fan_out, bias=True):
            kernel = self.param(f"{name}_kernel", torch_linear_kernel, (fan_in, fan_out))
            if not bias:
                return kernel
            return kernel, self.param(f"{name}_bias", uniform(fan_in**-0.5), (fan_out,))

        params = {"label_embedding": self.param("label_embedding", _embedding_init, (self.num_tokens, label_dim))}
        if self.global_embedding:
            # One bias: b1 and a bias on W2 ebar would only add up.
            params["ge_w1"], params["ge_b1"] = linear("ge_w1", label_dim, label_dim)
            params["ge_w2"] = linear("ge_w2", label_dim, label_dim, bias=False)
        params["init_kernel"], params["init_bias"] = linear("init", keys_dim, self.num_layers * decoder_dim)
        lstm_init = uniform(decoder_dim**-0.5)
        layers = []
        for layer in range(self.num_layers):
            num_inputs = label_dim + keys_dim if layer == 0 else decoder_dim
            layers.append(
                {
                    "input_kernel": self.param(
                        f"decoder_{layer}_input_kernel", lstm_init, (num_inputs, 4 * decoder_dim)
                    ),
                    "input_bias": self.param(f"decoder_{layer}_input_bias", lstm_init, (4 * decoder_dim,)),
                    "hidden_kernel": self.param(
                        f"decoder_{layer}_hidden_kernel", lstm_init, (decoder_dim, 4 * decoder_dim)
                    ),
                    "hidden_bias": self.param(f"decoder_{layer}_hidden_bias", lstm_init, (4 * decoder_dim,)),
                }
            )
        params["decoder"] = layers
        # U_a h_i + b_a (the only attention bias that matters, see `additive_attention`).
        params["attention_key_kernel"], params["attention_key_bias"] = linear("attention_key", keys_dim, attention_dim)
        params["attention_query_kernel"] = linear("attention_query", decoder_dim, attention_dim, bias=False)
        params["attention_vector"] = self.param("attention_vector", uniform(attention_dim**-0.5), (attention_dim,))
        params["readout_state_kernel"], params["readout_bias"] = linear("readout_state", decoder_dim, decoder_dim)
        params["readout_context_kernel"] = linear("readout_context", keys_dim, decoder_dim, bias=False)
        params["output_kernel"], params["output_bias"] = linear("output", decoder_dim, self.num_tokens)
        self.decoder_params = params

    def _params(self) -> dict:
        """The decoder parameters, cast to the activation dtype (plain arrays, usable inside the
        decoding loops)."""
        return jax.tree.map(lambda p: p.astype(self.dtype), self.decoder_params)

    def _initial_state(self, params: dict, keys: jax.Array, mask: jax.Array, summary: jax.Array) -> dict:
        """The decoder state after the encoder; every leaf has the batch as leading dim.

        keys [B, L, 2E], mask [B, L], summary [B, 2E] -> {hidden, cell [B, layers, Dd],
        context [B, 2E], keys, projected_keys [B, L, A], mask}.
        """
        hidden = jnp.tanh(add_bias(summary @ params["init_kernel"], params["init_bias"]))
        hidden = hidden.reshape(hidden.shape[0], self.num_layers, self.decoder_dim)
        projected_keys = jnp.einsum("bld,da->bla", keys, params["attention_key_kernel"])
        return {
            "hidden": hidden,
            "cell": jnp.zeros_like(hidden),
            "context": jnp.zeros_like(summary),
            "keys": keys,
            "projected_keys": add_bias(projected_keys, params["attention_key_bias"]),
            "mask": mask,
        }

    def _step(
        self,
        params: dict,
        state: dict,
        previous_token: jax.Array,
        previous_probs: jax.Array,
        dropout_key: jax.Array | None = None,
    ) -> tuple[jax.Array, dict, jax.Array]:
        """One decoder step (module docstring), the same for teacher forcing and decoding.

        Args:
            params: `_params()`.
            state: `_initial_state` layout, leading dim N.
            previous_token: [N] int32 y_{t-1} (BOS at the first step).
            previous_probs: [N, V] float32 masked softmax y_{t-1} (one_hot(BOS) at the first step).
            dropout_key: a PRNG key in training, None otherwise.

        Returns:
            logits [N, V] float32 o_t (unmasked), the new state, attention weights [N, L].
        """
        table = params["label_embedding"]
        embedded = jnp.take(table, previous_token, axis=0)
        if self.global_embedding:
            average = previous_probs.astype(table.dtype) @ table
            gate = jax.nn.sigmoid(add_bias(embedded @ params["ge_w1"], params["ge_b1"]) + average @ params["ge_w2"])
            embedded = (1 - gate) * embedded + gate * average
        # The step runs inside `lax.scan` / `lax.while_loop`, where a module drawing from the
        # module's RNG (`Dropout`) cannot be called, so the op gets keys passed in.
        keys = [None] * self.num_layers if dropout_key is None else list(jax.random.split(dropout_key, self.num_layers))
        x = jnp.concatenate([embedded, state["context"]], axis=-1)
        hidden, cell = [], []
        for layer, weights in enumerate(params["decoder"]):
            if layer:
                x = dropout(x, rate=self.dropout_rate, key=keys[layer - 1])
            h, c = lstm_cell(
                add_bias(x @ weights["input_kernel"], weights["input_bias"]),
                state["hidden"][:, layer],
                state["cell"][:, layer],
                weights["hidden_kernel"],
                weights["hidden_bias"],
            )
            hidden.append(h)
            cell.append(c)
            x = h
        context, attention = additive_attention(
            x,
            state["keys"],
            state["projected_keys"],
            AdditiveAttentionParams(params["attention_query_kernel"], params["attention_vector"]),
            mask=state["mask"],
        )
        readout = x @ params["readout_state_kernel"] + context @ params["readout_context_kernel"]
        readout = dropout(jnp.tanh(add_bias(readout, params["readout_bias"])), rate=self.dropout_rate, key=keys[-1])
        logits = add_bias(readout @ params["output_kernel"], params["output_bias"]).astype(jnp.float32)
        new_state = dict(state, hidden=jnp.stack(hidden, axis=1), cell=jnp.stack(cell, axis=1), context=context)
        return logits, new_state, attention

    def __call__(
        self, tokens: jax.Array, label_sequence: jax.Array, *, train: bool = False, embeddings: jax.Array | None = None
    ) -> ModelOutput:
        """Teacher-forced pass.

        Args:
            tokens: [B, L] int word ids, 0 = padding.
            label_sequence: [B, S] int targets l_1..l_n, EOS, PAD...; the decoder reads BOS and
                the targets shifted right.
            train: dropout on.
            embeddings: [B, L, D] word vectors to read instead of looking `tokens` up
                (gradients with respect to each word; `tokens` still give the mask).

        Returns:
            step_logits [B, S, V] float32, masked (`label_mask_logits`, finite) logits of each
            target step (`jcaps.ops.losses.sequence_cross_entropy` scores them); source_attention
            [B, S, L]; scores [B, J] float32, each label's log-probability at the step up to EOS
            that gives it the most (the float32 minimum for a sequence of padding only);
            embeddings [B, L, D], the word vectors read.
        """
        keys, mask, summary, words = self.encoder(tokens, train=train, embeddings=embeddings)
        params = self._params()
        state = self._initial_state(params, keys, mask, summary)
        batch, steps = label_sequence.shape
        label_sequence = label_sequence.astype(jnp.int32)
        previous = jnp.concatenate([jnp.full((batch, 1), self.bos_id, jnp.int32), label_sequence[:, :-1]], axis=1)
        dropout_keys = None
        if train and self.dropout_rate > 0:
            dropout_keys = jax.random.split(self.make_rng("dropout"), steps)

        def body(carry, inputs):
            state, emitted, previous_probs = carry
            previous_token, dropout_key = inputs
            # The labels of the gold prefix; special ids (BOS, EOS, PAD) are never "emitted".
            emitted = mark_emitted(emitted, previous_token, num_special=self.num_special)
            logits, state, attention = self._step(params, state, previous_token, previous_probs, dropout_key)
            masked = label_mask_logits(logits, emitted, eos_id=self.eos_id, num_special=self.num_special)
            # y_t as the decoders compute it (exp of the masked log-softmax).
            probs = jnp.exp(jax.nn.log_softmax(masked, axis=-1))
            return (state, emitted, probs), (masked, attention)

        initial = (
            state,
            jnp.zeros((batch, self.num_tokens), bool),
            jax.nn.one_hot(jnp.full((batch,), self.bos_id), self.num_tokens, dtype=jnp.float32),
        )
        _, (logits, attention) = jax.lax.scan(body, initial, (previous.T, dropout_keys))
        logits = jnp.swapaxes(logits, 0, 1)
        # A label is masked at the steps after it is emitted, so its best step is the one that
        # proposes it; the steps after EOS read no real prefix and are left out.
        label_log_probs = jax.nn.log_softmax(logits, axis=-1)[..., self.num_special :]
        real_steps = (label_sequence != PAD_ID)[..., None]
        scores = jnp.max(label_log_probs, axis=1, where=real_steps, initial=jnp.finfo(jnp.float32).min)
        return ModelOutput(
            scores=scores, embeddings=words, step_logits=logits, source_attention=jnp.swapaxes(attention, 0, 1)
        )

    def predict(self, tokens: jax.Array) -> DecodedLabels:
        """Decodes the label set of each example (`self.decoding`; no dropout).

        Args:
            tokens: [B, L] int word ids, 0 = padding.

        Returns:
            the labels, the decoded sequences, their lengths and log-probabilities.
        """
        keys, mask, summary, _ = self.encoder(tokens, train=False)
        params = self._params()
        state = self._initial_state(params, keys, mask, summary)

        def step_fn(state, previous_token, previous_probs):
            logits, state, _ = self._step(params, state, previous_token, previous_probs)
            return logits, state

        if self.decoding == "greedy":
            result = greedy_decode(
                step_fn,
                state,
                num_tokens=self.num_tokens,
                max_steps=self.max_steps,
                pad_id=PAD_ID,
                bos_id=self.bos_id,
                eos_id=self.eos_id,
                num_special=self.num_special,
                eos_threshold=self.eos_threshold,
            )
        else:
            result = beam_search(
                step_fn,
                state,
                num_tokens=self.num_tokens,
                max_steps=self.max_steps,
                pad_id=PAD_ID,
                bos_id=self.bos_id,
                eos_id=self.eos_id,
                num_special=self.num_special,
                beam_size=self.beam_size,
                length_penalty=self.length_penalty,
            )
        return DecodedLabels(
            labels=emitted_to_multi_hot(result.emitted, num_special=self.num_special),
            sequence=result.tokens,
            length=result.length,
            log_prob=result.log_prob,
        )


class BinaryRelevance(nn.Module):
    """Binary relevance baseline: the SGM encoder, pooled over time, one logit per label.

    Attributes:
        vocab_size: word vocabulary size (id 0 = padding).
        num_classes: J.
        embed_dim: word vector size.
        encoder_dim: E, LSTM size per direction.
        num_layers: BiLSTM layers.
        embedding_dropout: dropout on the word embeddings.
        dropout_rate: dropout between the encoder's layers and on the pooled vector.
        pool: "max" or "mean" over the valid steps.
        dtype: activation dtype; parameters are float32.
        rnn_impl: how the encoder's LSTM layers run, "scan" or "cudnn" (`RecurrentLayer`).
    """

    vocab_size: int
    num_classes: int
    embed_dim: int = 512
    encoder_dim: int = 256
    num_layers: int = 2
    embedding_dropout: float = 0.5
    dropout_rate: float = 0.5
    pool: BinaryRelevancePool = "max"
    dtype: Any = jnp.float32
    rnn_impl: RNNImpl = "scan"

    def __post_init__(self):
        check_choice("pool", self.pool, BinaryRelevancePool)
        super().__post_init__()

    @nn.compact
    def __call__(self, tokens: jax.Array, *, train: bool = False, embeddings: jax.Array | None = None) -> ModelOutput:
        """tokens [B, L] int (0 = padding) -> scores [B, J] logits, embeddings: the word vectors
        read [B, L, D]. `embeddings` [B, L, D], when given, are read instead of the
        looked-up vectors (`tokens` still give the mask)."""
        states, mask, _, words = _encoder(self)(tokens, train=train, embeddings=embeddings)
        features = POOLS[self.pool](states, mask=mask)
        features = Dropout(self.dropout_rate, deterministic=not train)(features)
        readout = nn.Dense(
            self.num_classes,
            kernel_init=torch_linear_kernel,
            # Every label starts at probability 1/(J + 1), near its mean frequency when examples have
            # about one label each, not at 1/2: otherwise the first epochs go to pushing all J
            # sigmoids down before any label is learnt.
            bias_init=nn.initializers.constant(-math.log(self.num_classes)),
            dtype=self.dtype,
            name="readout",
        )
        return ModelOutput(scores=readout(features), embeddings=words)
