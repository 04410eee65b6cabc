"""The values each enumerated `model.*` key takes, in one place: the models that act on them and
the config files, which parse them from their `:ARG`, share them.

This module imports nothing, so a config loads without Flax or any model.
"""

# model.attention of dilated_fcn: the attention block after the convolutions ('none': none).
DILATED_FCN_ATTENTIONS = ("none", "dot", "dot8", "simplified", "local", "simplified8", "local8")
# model.attention_gain of dilated_fcn: what multiplies the output of simplified / local attention
# ('one': nothing, as in the paper; 'uniform': the inverse of a uniform weight, so that a uniform
# attention passes the features on unchanged).
DILATED_FCN_ATTENTION_GAINS = ("one", "uniform")
# model.variant of input_cell_lstm: the input-cell attention LSTM or one of its baselines.
INPUT_CELL_LSTM_VARIANTS = ("input_cell", "lstm", "lstm_maxpool", "lstm_meanpool", "lstm_self_attention", "bilstm")
# model.rnn_impl of sgm, br and input_cell_lstm: how their LSTM layers run, `lax.scan` or cuDNN's
# fused LSTM (`jcaps.models.cudnn_lstm`; on a GPU only, the scan elsewhere).
RNN_IMPLS = ("scan", "cudnn")
# model.decoding of sgm: how a label sequence is generated.
SGM_DECODINGS = ("beam", "greedy")
