"""Training data: files -> records -> examples (packing, chat masks) -> split -> batches; the token
ids are checked against the `tokenizers` library on the same tokenizer.json."""

import json

import numpy as np
import pytest

from volvox.errors import DataError
from volvox.tokenizers.bpe import ByteLevelBPETokenizer
from volvox.train.data import IGNORE, Example, batches, build_examples, chat_example, collate, load_dataset, read_records, split

from hf_models import train_bpe_tokenizer

CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Once upon a time?"},
        {"role": "assistant", "content": "a little robot"}, {"role": "user", "content": "and the sea?"},
        {"role": "assistant", "content": "the quick brown fox"}]


@pytest.fixture(scope="module")
def tokenizers_pair(tmp_path_factory):
    """(volvox's tokenizer, the `tokenizers` library's) of one trained tokenizer.json, eos = <|endoftext|>."""
    from tokenizers import Tokenizer

    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    train_bpe_tokenizer(path)
    ours = ByteLevelBPETokenizer.from_tokenizer_json(path)
    ours.eos_id = ours.encode("<|endoftext|>")[0]
    return ours, Tokenizer.from_file(str(path))


def test_chat_example_learns_exactly_the_assistant_turns(tokenizers_pair):
    ours, theirs = tokenizers_pair
    ids, learn = chat_example(ours, CHAT)
    full = ours.apply_chat_template(CHAT, add_generation_prompt=False)
    assert ids == theirs.encode(full).ids  # turn-by-turn pieces tokenize as the whole conversation does
    learnt = "".join(ours.decode([i]) for i, ok in zip(ids, learn) if ok)
    assert learnt == "a little robot<|im_end|>\nthe quick brown fox<|im_end|>\n"


def test_chat_records_become_masked_examples(tokenizers_pair):
    ours, _ = tokenizers_pair
    ex, = build_examples([{"messages": CHAT}], ours, context=512)
    ids, learn = chat_example(ours, CHAT)
    np.testing.assert_array_equal(ex.tokens, ids[:-1])
    np.testing.assert_array_equal(ex.labels, np.where(learn[1:], ids[1:], IGNORE))
    short, = build_examples([{"messages": CHAT}], ours, context=len(ids) - 4)  # the second reply cut short
    assert len(short.tokens) == len(ids) - 4 and short.learnt < ex.learnt


def test_documents_are_packed_with_eos_into_windows(tokenizers_pair):
    ours, theirs = tokenizers_pair
    docs = ["Once upon a time there was a little robot.", "The quick brown fox jumps over the lazy dog."]
    examples = build_examples([{"text": d} for d in docs], ours, context=8)
    stream = [t for d in docs for t in theirs.encode(d).ids + [ours.eos_id]]
    assert [len(e.tokens) for e in examples[:-1]] == [8] * (len(examples) - 1)
    for n, e in enumerate(examples):
        np.testing.assert_array_equal(e.tokens, stream[8 * n: 8 * n + len(e.tokens)])
        np.testing.assert_array_equal(e.labels, stream[8 * n + 1: 8 * n + 1 + len(e.tokens)])
    assert sum(len(e.tokens) for e in examples) == len(stream) - 1


def test_files_split_and_batches(tokenizers_pair, tmp_path):
    ours, _ = tokenizers_pair
    rows = [{"text": f"story {i}: a cat, a hat and a bat sat on the mat."} for i in range(9)] + [{"messages": CHAT}]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    (tmp_path / "t.txt").write_text("Tiny models tell tiny stories.")
    records = read_records(tmp_path / "d.jsonl")
    assert records[-1] == {"messages": CHAT} and len(records) == 10
    examples = load_dataset(tmp_path, ours, context=256)
    assert sum((e.labels == IGNORE).any() for e in examples) == 1  # the conversation; documents learn every token
    train, val = split(examples, 0.25, seed=3)
    assert len(val) == round(len(examples) * 0.25) and len(train) + len(val) == len(examples)
    assert [e.tokens.tobytes() for e in split(examples, 0.25, seed=3)[1]] == [e.tokens.tobytes() for e in val]
    got = list(batches(train, 3, np.random.default_rng(0)))
    assert sum(t.shape[0] for t, _ in got) == len(train)
    tokens, labels = collate([Example(np.array([1, 2, 3], np.int32), np.array([2, 3, 4], np.int32)),
                              Example(np.array([5], np.int32), np.array([IGNORE], np.int32))])
    np.testing.assert_array_equal(tokens, [[1, 2, 3], [5, 0, 0]])
    np.testing.assert_array_equal(labels, [[2, 3, 4], [IGNORE] * 3])


@pytest.mark.parametrize("content,match", [
    (None, "no such data file"),
    ('{"text": "ok"}\n{"text": oops}\n', r"d\.jsonl:2: not valid JSON"),
    ('{"messages": [{"role": "user", "content": "hi"}]}\n', "no assistant turn"),
    ('{"messages": [{"role": "user"}]}\n', "role"),
    ('[1, 2]\n', "expected an object"),
    ('\n\n', "no training tokens"),
])
def test_bad_data_raises_data_error(tokenizers_pair, tmp_path, content, match):
    path = tmp_path / "d.jsonl"
    if content is not None:
        path.write_text(content)
    with pytest.raises(DataError, match=match):
        load_dataset(path, tokenizers_pair[0], context=16)


def test_empty_text_file_is_an_empty_corpus(tokenizers_pair, tmp_path):
    (tmp_path / "empty.txt").write_text("  \n")
    with pytest.raises(DataError, match="no training tokens"):
        load_dataset(tmp_path / "empty.txt", tokenizers_pair[0], context=16)
    (tmp_path / "folder").mkdir()
    with pytest.raises(DataError, match="no .txt or .jsonl"):
        load_dataset(tmp_path / "folder", tokenizers_pair[0], context=16)
