"""The generated texts of the smoke configs: each class's planted keywords, and the decoys of
other classes that make every class depend on its own keywords."""

from __future__ import annotations

import re

from jcaps.data import synthetic

OWNER = {keyword: name for name, keywords in synthetic.KEYWORDS.items() for keyword in keywords}


def keywords_by_class(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for word in re.findall(r"[a-z]+", text.lower()):
        if word in OWNER:
            counts[OWNER[word]] = counts.get(OWNER[word], 0) + 1
    return counts


def test_without_decoys_a_text_holds_only_its_own_class_keywords():
    for label, text in synthetic.make_documents(200, seed=3):
        counts = keywords_by_class(text)
        assert list(counts) == [synthetic.CLASSES[label - 1]] and 2 <= counts[synthetic.CLASSES[label - 1]] <= 4


def test_each_decoy_is_one_keyword_of_another_class_and_the_own_class_outnumbers_it():
    for label, text in synthetic.make_documents(200, seed=3, decoys=1):
        counts = keywords_by_class(text)
        own = counts.pop(synthetic.CLASSES[label - 1])
        assert list(counts.values()) == [1] and own >= 2
    for record in synthetic.make_multilabel_documents(100, seed=3, decoys=2):
        counts = keywords_by_class(record["text"])
        assert sum(count for name, count in counts.items() if name not in record["labels"]) == 2


def test_decoyed_data_has_a_folder_of_its_own(tmp_path):
    plain = synthetic.write_zhang_csv(str(tmp_path), 16, 8, seed=0)
    decoyed = synthetic.write_zhang_csv(str(tmp_path), 16, 8, seed=0, decoys=1)
    assert plain != decoyed and decoyed.endswith("-d1")
    assert synthetic.write_multilabel_jsonl(str(tmp_path), 16, 8, seed=0, decoys=1).endswith("-d1")
