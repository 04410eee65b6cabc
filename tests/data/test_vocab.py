"""Vocabulary and LabelMap: deterministic ids, reserved ids, UNK, exact JSON round trips."""
import numpy as np
import pytest

from jcaps.data.errors import DataError
from jcaps.data.vocab import (BOS_TOKEN, EOS_TOKEN, PAD, PAD_TOKEN, UNK, UNK_TOKEN, LabelMap,
                              Vocabulary)

# Counts: a 4, b 2, c 2, d 1.
TEXTS = [["b", "a", "c"], ["a", "a", "d"], ["c", "b", "a"]]


def test_build_orders_by_count_then_token():
    vocab = Vocabulary.build(TEXTS)
    assert vocab.tokens == (PAD_TOKEN, UNK_TOKEN, "a", "b", "c", "d")
    assert (PAD, UNK, len(vocab), vocab.num_reserved) == (0, 1, 6, 2)


def test_build_from_a_generator_is_the_same():
    assert Vocabulary.build(iter(TEXTS)) == Vocabulary.build(TEXTS)


def test_min_count_and_max_size_which_counts_reserved_ids():
    assert Vocabulary.build(TEXTS, min_count=2).tokens == (PAD_TOKEN, UNK_TOKEN, "a", "b", "c")
    assert Vocabulary.build(TEXTS, max_size=3).tokens == (PAD_TOKEN, UNK_TOKEN, "a")
    assert Vocabulary.build(TEXTS, max_size=2).tokens == (PAD_TOKEN, UNK_TOKEN)
    with pytest.raises(ValueError, match="max_size 1 leaves no room"):
        Vocabulary.build(TEXTS, max_size=1)
    with pytest.raises(ValueError, match="min_count"):
        Vocabulary.build(TEXTS, min_count=0)


def test_encode_maps_unknown_and_rare_tokens_to_unk():
    vocab = Vocabulary.build(TEXTS, min_count=2)
    ids = vocab.encode(["a", "d", "zebra", "c"])
    assert ids.dtype == np.int32
    np.testing.assert_array_equal(ids, [2, UNK, UNK, 4])
    assert vocab.encode([]).shape == (0,)
    assert vocab.decode(np.array([2, 1, 0])) == ["a", UNK_TOKEN, PAD_TOKEN]
    with pytest.raises(ValueError, match="outside the vocabulary"):
        vocab.decode([5])


def test_extra_reserved_tokens_follow_pad_and_unk():
    label_lists = [["earn"], ["acq", "earn"], [BOS_TOKEN]]
    vocab = Vocabulary.build(label_lists, extra_reserved=(BOS_TOKEN, EOS_TOKEN))
    assert vocab.tokens == (PAD_TOKEN, UNK_TOKEN, BOS_TOKEN, EOS_TOKEN, "earn", "acq")
    assert vocab.num_reserved == 4
    np.testing.assert_array_equal(vocab.encode([BOS_TOKEN, "acq", EOS_TOKEN]), [2, 5, 3])


def test_vocabulary_rejects_bad_token_lists():
    with pytest.raises(ValueError, match="starts with"):
        Vocabulary(("a", "b"))
    with pytest.raises(ValueError, match="'a' appears twice"):
        Vocabulary((PAD_TOKEN, UNK_TOKEN, "a", "a"))
    with pytest.raises(ValueError, match="num_reserved"):
        Vocabulary((PAD_TOKEN, UNK_TOKEN), num_reserved=3)


def test_vocabulary_round_trips_exactly(tmp_path):
    vocab = Vocabulary.build([["naïve", "🔥", "a"]], extra_reserved=(BOS_TOKEN,))
    assert Vocabulary.from_json(vocab.to_json()) == vocab
    vocab.save(tmp_path / "vocab.json")
    loaded = Vocabulary.load(tmp_path / "vocab.json")
    assert loaded == vocab and loaded.num_reserved == 3
    np.testing.assert_array_equal(loaded.encode(["🔥", "b"]), vocab.encode(["🔥", "b"]))


def test_loading_a_malformed_file_names_it(tmp_path):
    (tmp_path / "vocab.json").write_text('{"names": ["a"]}')
    with pytest.raises(DataError, match=r"vocab\.json: not a saved Vocabulary: expected a JSON "
                                        r"object with keys \['num_reserved', 'tokens'\]"):
        Vocabulary.load(tmp_path / "vocab.json")
    (tmp_path / "labels.json").write_text('{"names": ')
    with pytest.raises(DataError, match=r"labels\.json: not a saved LabelMap"):
        LabelMap.load(tmp_path / "labels.json")


def test_label_map_encodes_known_names_and_names_file_and_line_of_unknown_ones():
    labels = LabelMap.from_labels(["wheat", "corn", "wheat", "acq"])
    assert labels.names == ("acq", "corn", "wheat") and len(labels) == 3
    assert labels.encode("corn", path="test.jsonl", line=1) == 1
    assert labels.decode(2) == "wheat"
    with pytest.raises(DataError, match=r"test\.jsonl:7: unknown label 'gold'"):
        labels.encode("gold", path="test.jsonl", line=7)
    with pytest.raises(ValueError, match="outside 0..2"):
        labels.decode(3)


def test_label_map_keeps_the_given_order_and_round_trips(tmp_path):
    labels = LabelMap(["World", "Sports", "Business", "Sci/Tech"])
    assert labels.encode("Business", path="x", line=None) == 2
    labels.save(tmp_path / "labels.json")
    assert LabelMap.load(tmp_path / "labels.json") == labels
    with pytest.raises(ValueError, match="'World' appears twice"):
        LabelMap(["World", "World"])
    with pytest.raises(ValueError, match="at least one"):
        LabelMap([])
