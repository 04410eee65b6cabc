"""The input-cell LSTM paper's saliency boxes (its Table 1): saliency against the box that holds the signal."""
