"""Readers of the local file formats, one module a format: text (`zhang_csv`, `jsonl`,
`text_labels`) and numeric sequences (`ts`, `idx`).

Each text reader streams `(key, example)` pairs, where `key` is the 1-based line number (as a
string) on which the example starts, so a caller can name the line of a later problem, such as
a label unknown to the training split. Files are UTF-8 (an opening byte-order mark is ignored).
The `.ts` and `idx` readers return whole arrays: their files are small enough to hold.

Bad input raises `DataError` naming the file, the line and the problem; nothing is skipped
silently. A caller of a text reader that chooses to drop bad rows passes a list as `dropped`:
each bad row's `DataError` is appended to it instead of raised, and the reader logs how many
rows it dropped. Problems that make the rest of a file unreadable (broken encoding or CSV
quoting, parallel files of different lengths, a file without any example) always raise, and so
does every problem of a `.ts` or `idx` file.
"""
