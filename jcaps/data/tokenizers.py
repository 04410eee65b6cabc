"""Tokenisers: text → tokens (`zhang`, `chars`, `lowercase_chars`) or sentences of tokens (`sentences`).

`zhang` follows the preprocessing described for CCCapsNet (Ren & Lu, PRL 2022) on the Zhang et
al. (2015) datasets; `sentences` feeds iCapsNets-Long, which attends within and across
sentences. Pure Python, deterministic; every function takes one text.
"""

import html
import re
from collections.abc import Callable

# Every character except ASCII letters and whitespace becomes its own token: punctuation and
# symbols, non-ASCII characters, and each digit (which splits "2008year" into "2 0 0 8 year").
_OWN_TOKEN = re.compile(r"[^A-Za-z\s]")

# The Zhang et al. files carry HTML entities, most with their "&" turned into a space: "Web #39;s",
# "AT amp;T", "quot;opt-out quot;" (AG News: 3,275 `#39;` in train.csv alone); that space is
# put back as the "&" it was.
_SPACED_ENTITY = re.compile(r" (#[0-9]{1,7};|#[xX][0-9A-Fa-f]{1,6};|(?:quot|amp|lt|gt|apos|nbsp);)")

# A sentence ends at a newline, or after a run of `.`, `!`, `?` unless the `.` is a decimal
# point between digits ("40.5" stays in one sentence).
_SENTENCE_BREAK = re.compile(r"[\r\n]|(?<=[.!?])(?![.!?])(?!(?<=[0-9]\.)[0-9])")


def _check_limit(name: str, value: int | None) -> None:
    if value is not None and value < 1:
        raise ValueError(f"{name} must be a positive number or None, not {value}")


def unescape_entities(text: str) -> str:
    """`text` with its HTML entities decoded, those of the Zhang et al. files included, whose
    "&" became a space: `"the Web #39;s AT amp;T"` → `"the Web's AT&T"`."""
    return html.unescape(_SPACED_ENTITY.sub(r"&\1", text))


def zhang(text: str, max_len: int | None = None) -> list[str]:
    """Word tokens: lowercased ASCII words, with every other character a token of its own.

    Steps: HTML entities decoded (`unescape_entities`); the two characters `\\n` (an escaped
    newline, as in the Zhang et al. CSV files) and any other backslash become spaces; every
    character that is not an ASCII letter or whitespace gets spaces around it (so numbers split
    into digits); lowercase; split on whitespace; keep the first `max_len` tokens.

    Example: `zhang("Oil hits $40.5 in 2008year!")` →
    `["oil", "hits", "$", "4", "0", ".", "5", "in", "2", "0", "0", "8", "year", "!"]`.
    """
    _check_limit("max_len", max_len)
    return _words(unescape_entities(text), max_len)


def _words(text: str, max_len: int | None) -> list[str]:
    """`zhang` on a text whose entities are decoded already (decoding twice would turn a literal
    "&amp;lt;" into "<")."""
    text = text.replace("\\n", " ").replace("\\", " ")
    return _OWN_TOKEN.sub(r" \g<0> ", text).lower().split()[:max_len]


def chars(text: str, max_len: int | None = None) -> list[str]:
    """Character tokens: each Unicode code point of `text`, the first `max_len` of them."""
    _check_limit("max_len", max_len)
    return list(text[:max_len])


def lowercase_chars(text: str, max_len: int | None = None) -> list[str]:
    """`chars` of the lowercased text: "Love" and "love" share their tokens, which spares a
    character model learning each spelling apart on small data."""
    return chars(text.lower(), max_len)


def sentences(text: str, max_sentences: int | None = None, max_words: int | None = None) -> list[list[str]]:
    """Sentences of `zhang` tokens: at most `max_sentences` of at most `max_words` tokens each.

    Sentences end at newlines (real or the escaped `\\n`) and after `.`, `!`, `?` (which stay
    with their sentence); a sentence without tokens is dropped before counting.

    Example: `sentences("Hi there! Price: 4.5 now.\\nBye")` →
    `[["hi", "there", "!"], ["price", ":", "4", ".", "5", "now", "."], ["bye"]]`.
    """
    _check_limit("max_sentences", max_sentences)
    _check_limit("max_words", max_words)
    result = []
    for piece in _SENTENCE_BREAK.split(unescape_entities(text).replace("\\n", "\n")):
        tokens = _words(piece, max_words)
        if tokens:
            result.append(tokens)
            if len(result) == max_sentences:
                break
    return result


TOKENIZERS: dict[str, Callable[..., list]] = {
    "zhang": zhang,
    "chars": chars,
    "lowercase_chars": lowercase_chars,
    "sentences": sentences,
}


def get_tokenizer(name: str) -> Callable[..., list]:
    """The tokeniser called `name` in `TOKENIZERS`."""
    try:
        return TOKENIZERS[name]
    except KeyError:
        raise ValueError(f"unknown tokenizer {name!r}; valid names: {', '.join(sorted(TOKENIZERS))}") from None
