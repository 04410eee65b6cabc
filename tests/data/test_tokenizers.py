"""Tokenisers, checked against token lists written out by hand."""
import pytest

from jcaps.data import tokenizers
from jcaps.data.tokenizers import chars, get_tokenizer, lowercase_chars, sentences, zhang


@pytest.mark.parametrize("text, expected", [
    ("Oil hits $40.5 in 2008year!",
     ["oil", "hits", "$", "4", "0", ".", "5", "in", "2", "0", "0", "8", "year", "!"]),
    # The Zhang et al. CSV files escape newlines as `\n` and break lines with a bare `\`.
    ("dwindling\\band of\\nultra-cynics", ["dwindling", "band", "of", "ultra", "-", "cynics"]),
    ("EBay: \\$415 million", ["ebay", ":", "$", "4", "1", "5", "million"]),
    ("  tabs\tand\nnew\u00a0lines  ", ["tabs", "and", "new", "lines"]),
    ("Café Müller", ["caf", "é", "m", "ü", "ller"]),
    ("R2D2's", ["r", "2", "d", "2", "'", "s"]),
    ("", []),
    (" ... ", [".", ".", "."]),
])
def test_zhang(text, expected):
    assert zhang(text) == expected


@pytest.mark.parametrize("text, expected", [
    # AG News as released: each entity's "&" became a space.
    ("the Web #39;s No. 1", "the Web's No. 1"),
    ("AT amp;T and Texas A amp;M", "AT&T and Texas A&M"),
    ("legalized as  quot;opt-out quot; plans", 'legalized as "opt-out" plans'),
    ("fell by  #36;1.17", "fell by $1.17"),
    # Entities with their "&" decode as usual, once: a literal "&amp;lt;" stays "&lt;".
    ("&lt;strong&gt;Opinion&lt;/strong&gt; &amp;lt;", "<strong>Opinion</strong> &lt;"),
    # Without the space, or not an entity: left as written.
    ("room#39; and Foo ltd; bar", "room#39; and Foo ltd; bar"),
])
def test_unescape_entities(text, expected):
    assert tokenizers.unescape_entities(text) == expected


def test_zhang_and_sentences_read_the_apostrophe_not_its_entity():
    assert zhang("Web #39;s") == ["web", "'", "s"]
    assert sentences("Web #39;s. A amp;M &amp;lt;") == [["web", "'", "s", "."], ["a", "&", "m", "&", "lt", ";"]]


def test_zhang_truncates_to_max_len():
    assert zhang("a b 12 c", max_len=3) == ["a", "b", "1"]
    assert zhang("a b", max_len=5) == ["a", "b"]


def test_chars_are_code_points():
    assert chars("Hé 🔥!") == ["H", "é", " ", "🔥", "!"]
    assert chars("abcdef", max_len=4) == ["a", "b", "c", "d"]


def test_lowercase_chars_lowercase_before_truncating():
    assert lowercase_chars("Hé LOVE 🔥") == ["h", "é", " ", "l", "o", "v", "e", " ", "🔥"]
    # "İ" lowercases to two code points; the limit counts the lowercased text's.
    assert lowercase_chars("İA", max_len=2) == ["i", "\u0307"]
    assert lowercase_chars("ABC", max_len=2) == ["a", "b"]


def test_sentences_split_on_terminators_and_newlines():
    text = "Hi there! Price: 4.5 now.\\nBye...\n\n  ?? What?!Ok"
    assert sentences(text) == [
        ["hi", "there", "!"],
        ["price", ":", "4", ".", "5", "now", "."],
        ["bye", ".", ".", "."],
        ["?", "?"],
        ["what", "?", "!"],
        ["ok"],
    ]


def test_sentences_limits_count_after_dropping_empty_sentences():
    text = "\n\nOne two three. \n Four five six seven! Eight."
    assert sentences(text, max_sentences=2, max_words=3) == [
        ["one", "two", "three"], ["four", "five", "six"]]


@pytest.mark.parametrize("call", [
    lambda: zhang("a", max_len=0),
    lambda: chars("a", max_len=-1),
    lambda: sentences("a", max_sentences=0),
    lambda: sentences("a", max_words=0),
])
def test_non_positive_limits_are_rejected(call):
    with pytest.raises(ValueError, match="must be a positive number"):
        call()


def test_get_tokenizer():
    assert {name: get_tokenizer(name) for name in tokenizers.TOKENIZERS} == {
        "zhang": zhang, "chars": chars, "lowercase_chars": lowercase_chars, "sentences": sentences}
    with pytest.raises(ValueError, match=r"unknown tokenizer 'words'; valid names: "
                                         r"chars, lowercase_chars, sentences, zhang"):
        get_tokenizer("words")
