"""Training data: plain text and JSONL files -> token windows with next-token labels -> batches.

Formats, by file:
- ``*.txt`` (any non-JSONL file): the whole file is one document;
- ``*.jsonl``: one JSON object per line, ``{"text": ...}`` (a document) or ``{"messages": [{"role",
  "content"}, ...]}`` (a conversation, rendered through the model's chat template).

Documents are packed: their tokens (with a BOS first where the tokenizer adds one to a prompt), each
followed by the end-of-sequence token, are concatenated
and cut into windows of ``context + 1`` tokens, every token learnt. A conversation is one example
of its own (truncated to the context), and only its assistant turns are learnt: the rest of its
labels are IGNORE. An assistant turn's tokens are found by rendering the conversation up to the
turn with the generation prompt and up to its end without it: the difference is the reply.

An example is ``tokens`` (T,) and ``labels`` (T,), labels[t] the token to predict after tokens[t]
(IGNORE: no loss). Batches pad shorter examples with token 0 and IGNORE labels at the end, which a
causal model never attends to from the real positions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from volvox.errors import DataError, VolvoxError

IGNORE = -100  # the label of a position that contributes no loss (cross_entropy's ignore_index)


@dataclass(frozen=True)
class Example:
    """One training sequence: tokens (T,) int32 and labels (T,) int32 (IGNORE where nothing is learnt)."""

    tokens: np.ndarray
    labels: np.ndarray

    @property
    def learnt(self) -> int:
        """How many positions carry a label."""
        return int((self.labels != IGNORE).sum())


def read_records(path: str | Path) -> list[dict]:
    """The records of a data file: ``{"text": ...}`` or ``{"messages": [...]}`` each; DataError names
    the file and line of anything malformed."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such data file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: cannot read as UTF-8 text: {e}") from None
    if path.suffix != ".jsonl":
        return [{"text": text}] if text.strip() else []
    records = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as e:
            raise DataError(f"{path}:{number}: not valid JSON: {e}") from None
        if isinstance(record, dict) and isinstance(record.get("text"), str):
            records.append({"text": record["text"]})
        elif isinstance(record, dict) and "messages" in record:
            records.append({"messages": _check_messages(record["messages"], f"{path}:{number}")})
        else:
            raise DataError(f"{path}:{number}: expected an object with \"text\" (a string) or \"messages\" (a list)")
    return records


def _check_messages(messages, where: str) -> list[dict]:
    if not isinstance(messages, list) or not messages:
        raise DataError(f"{where}: \"messages\" must be a non-empty list")
    for m in messages:
        if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
            raise DataError(f"{where}: every message needs a string \"role\" and \"content\", got {m!r:.80}")
    if not any(m["role"] == "assistant" for m in messages):
        raise DataError(f"{where}: the conversation has no assistant turn (nothing to learn)")
    return messages


def chat_example(tokenizer, messages: list[dict], where: str = "conversation") -> tuple[list[int], list[bool]]:
    """The conversation's token ids and, per id, whether it belongs to an assistant turn (learnt)."""
    ids, learn, done = [], [], ""
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        prompt = tokenizer.apply_chat_template(messages[:i], add_generation_prompt=True)
        upto = tokenizer.apply_chat_template(messages[:i + 1], add_generation_prompt=False)
        if not (prompt.startswith(done) and upto.startswith(prompt)):
            raise DataError(f"{where}: the chat template does not render this conversation turn by turn "
                            "(each prefix must extend the previous), so its assistant turns cannot be found")
        for text, learnt in ((prompt[len(done):], False), (upto[len(prompt):], True)):
            piece = tokenizer.encode(text, add_bos=False) if text else []
            ids += piece
            learn += [learnt] * len(piece)
        done = upto
    return ids, learn


def build_examples(records: list[dict], tokenizer, context: int, where: str = "data") -> list[Example]:
    """Token examples of ``records``: documents packed into ``context``-long windows, conversations one
    example each; DataError for an empty corpus."""
    if context < 2:
        raise VolvoxError(f"context length must be >= 2, got {context}")
    eos = tokenizer.eos_id
    stream: list[int] = []  # (total document tokens,) every document followed by eos
    examples = []
    for n, record in enumerate(records):
        if "text" in record:
            # the tokenizer's own BOS policy, as generate() encodes a prompt
            stream += tokenizer.encode(record["text"]) + ([eos] if eos is not None else [])
            continue
        ids, learn = chat_example(tokenizer, record["messages"], f"{where}: record {n + 1}")
        ids, learn = ids[:context + 1], learn[:context + 1]
        labels = [t if ok else IGNORE for t, ok in zip(ids[1:], learn[1:])]
        if any(label != IGNORE for label in labels):
            examples.append(Example(np.array(ids[:-1], np.int32), np.array(labels, np.int32)))
    for start in range(0, max(len(stream) - 1, 0), context):
        window = stream[start:start + context + 1]  # (<= context + 1,)
        if len(window) >= 2:
            examples.append(Example(np.array(window[:-1], np.int32), np.array(window[1:], np.int32)))
    if not examples:
        raise DataError(f"{where}: no training tokens (empty corpus, or every assistant turn cut off by the context)")
    return examples


def split(examples: list[Example], val_fraction: float, seed: int) -> tuple[list[Example], list[Example]]:
    """A seeded shuffle into (train, validation); validation gets round(n * fraction) examples, at
    least one when the fraction is > 0 and there are two examples or more."""
    if not 0.0 <= val_fraction < 1.0:
        raise VolvoxError(f"validation split must be in [0, 1), got {val_fraction}")
    order = np.random.default_rng(seed).permutation(len(examples))
    n_val = int(round(len(examples) * val_fraction))
    if val_fraction > 0 and len(examples) >= 2:
        n_val = min(max(n_val, 1), len(examples) - 1)
    return [examples[i] for i in order[n_val:]], [examples[i] for i in order[:n_val]]


def collate(examples: list[Example]) -> tuple[np.ndarray, np.ndarray]:
    """tokens (batch, T) and labels (batch, T), T the longest example, the rest padded (0 / IGNORE)."""
    t = max(len(e.tokens) for e in examples)
    tokens = np.zeros((len(examples), t), np.int32)        # (batch, T)
    labels = np.full((len(examples), t), IGNORE, np.int32)  # (batch, T)
    for row, e in enumerate(examples):
        tokens[row, :len(e.tokens)] = e.tokens
        labels[row, :len(e.labels)] = e.labels
    return tokens, labels


def batches(examples: list[Example], batch_size: int, rng: np.random.Generator) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """One epoch of collated batches in an order drawn from ``rng`` (the last batch may be smaller)."""
    if batch_size < 1:
        raise VolvoxError(f"batch size must be >= 1, got {batch_size}")
    order = rng.permutation(len(examples))
    for start in range(0, len(order), batch_size):
        yield collate([examples[i] for i in order[start:start + batch_size]])


def load_dataset(dataset, tokenizer, context: int) -> list[Example]:
    """Examples from a path (file, or folder of .txt / .jsonl files), a list of records, or a list of Examples."""
    if isinstance(dataset, (str, Path)):
        path = Path(dataset)
        files = sorted(p for p in path.iterdir() if p.suffix in (".txt", ".jsonl")) if path.is_dir() else [path]
        if path.is_dir() and not files:
            raise DataError(f"{path}: no .txt or .jsonl files")
        return [e for f in files for e in build_examples(read_records(f), tokenizer, context, str(f))]
    items = list(dataset)
    if items and all(isinstance(e, Example) for e in items):
        return items
    checked = []
    for n, r in enumerate(items):
        if isinstance(r, str):
            r = {"text": r}
        if not isinstance(r, dict) or not ("text" in r or "messages" in r):
            raise DataError(f"record {n + 1}: expected a string, {{\"text\": ...}} or {{\"messages\": [...]}}")
        checked.append(r if "text" in r else {"messages": _check_messages(r["messages"], f"record {n + 1}")})
    return build_examples(checked, tokenizer, context)
