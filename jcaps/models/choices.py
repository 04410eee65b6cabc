"""The values each enumerated `model.*` key takes, in one place: the models that act on them,
`jcaps.train.config` and the config files, which parse them from their `:ARG`, share them. Each
is a `Literal` type that annotates the module field it sets; `jcaps.choices.check_choice`
refuses any other value, and `typing.get_args` lists them.

This module imports nothing of Flax or the models, so a config loads without them.
"""

from typing import Literal

# model.attention of dilated_fcn: the attention block after the convolutions ('none': none).
DilatedFCNAttention = Literal["none", "dot", "dot8", "simplified", "local", "simplified8", "local8"]
# model.attention_gain of dilated_fcn: what multiplies the output of simplified / local attention
# ('one': nothing, as in the paper; 'uniform': the inverse of a uniform weight, so that a uniform
# attention passes the features on unchanged).
DilatedFCNAttentionGain = Literal["one", "uniform"]
# model.variant of input_cell_lstm: the input-cell attention LSTM or one of its baselines.
InputCellLSTMVariant = Literal["input_cell", "lstm", "lstm_maxpool", "lstm_meanpool", "lstm_self_attention", "bilstm"]
# model.rnn_impl of sgm, br and input_cell_lstm: how their LSTM layers run, `lax.scan` or cuDNN's
# fused LSTM (`jcaps.models.cudnn_lstm`; on a GPU only, the scan elsewhere).
RNNImpl = Literal["scan", "cudnn"]
# model.decoding of sgm: how a label sequence is generated.
SGMDecoding = Literal["beam", "greedy"]
# model.pool of br: how the encoder's states become one vector, over the valid steps.
BinaryRelevancePool = Literal["max", "mean"]
# model.routing of the iCapsNets and CCCapsNet: dynamic routing (Sabour et al.) or k-means
# routing (`jcaps.ops.capsules`).
Routing = Literal["dynamic", "kmeans"]
# model.routing_similarity of the iCapsNets: the agreement routing adds to its logits ('paper':
# the iCapsNets paper's own; 'dot' and 'cosine' as `jcaps.ops.capsules.Similarity`, which
# CCCapsNet's model.similarity takes).
ICapsNetSimilarity = Literal["paper", "dot", "cosine"]
# model.capsule_selection of the iCapsNets: which primary capsules an explanation picks.
CapsuleSelection = Literal["coupling", "contribution"]
# model.conv_activation of the iCapsNets: after the region convolution.
ConvActivation = Literal["none", "relu"]
# model.embedding of CCCapsNet: a table of word vectors ('normal'), or vectors composed from
# codebooks ('cwc', 'cc').
CCCapsNetEmbedding = Literal["normal", "cwc", "cc"]
# model.cc_sampling of CCCapsNet ('cc', in training): how the code of a word is drawn.
CCSampling = Literal["straight_through", "repeated_argmax"]
# model.classifier of CCCapsNet: class capsules or a linear layer on the encoding.
CCCapsNetClassifier = Literal["capsule", "linear"]
