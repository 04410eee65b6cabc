"""Data: from local files or a TFDS catalogue dataset to padded, bucketed batches.

One stage a module, text and series as two branches of the same flow:

    readers/       one module a file format: zhang_csv, jsonl, text_labels (text), ts, idx (series)
    builders       TFDS array_record builders of the local formats (and the generated box data)
    preparation    each source prepared once into data.cache_dir under a lock: splits and class names
    text, series   validation carved from train; vocabulary, labels, standardisation; encoding
    batching       buckets, length grouping, each process's rows (`Shard`) of a global batch
    datasets       the entry: `load_dataset(config.data, seed, saved_dir)`, `inference_dataset`

`jcaps.data` imports neither JAX nor the models: the training layer passes the process's shard.
"""
