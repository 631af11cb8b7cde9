"""Offline batch inference over JSONL files: one row in, the same row plus its result out, in order.

``Predictor`` turns a list of input rows into result rows with one loaded model; it is the one
implementation behind ``volvox batch --no-ray`` (``run_local``, this process) and the Ray actors of
``volvox.ray`` (one Predictor per actor), so both give the same outputs.

Input rows (JSON objects) by task:
  generate   {"prompt": "..."} or {"messages": [{"role", "content"}, ...]}  -> adds "text"
  embed      {"text": "..."}                                              -> adds "embedding"
  classify   {"image": "path/to/file"}                                    -> adds "labels"
  transcribe {"audio": "path/to/file.wav"}                                -> adds "text"
Other fields (an "id", say) pass through unchanged.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from volvox.errors import UnsupportedError, VolvoxError

TASKS = ("generate", "embed", "classify", "transcribe")


@dataclass
class BatchOptions:
    """What to run on each row and how; ``task`` None: the model's own task."""

    task: str | None = None
    max_new_tokens: int = 128
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] | None = None
    normalize: bool | None = None  # embed: unit-length rows (None: as the model says)
    top_k_labels: int = 5       # classify: labels per image


def read_rows(path: str | Path) -> list[dict]:
    """The JSON objects of a JSONL file (blank lines skipped); VolvoxError naming a bad line."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as e:
                raise VolvoxError(f"{path}:{number}: not a JSON object: {e}") from None
            if not isinstance(row, dict):
                raise VolvoxError(f"{path}:{number}: each line must be a JSON object, got {type(row).__name__}")
            rows.append(row)
    return rows


def write_rows(path: str | Path, rows: list[dict]) -> None:
    """Write ``rows`` as JSONL, atomically (a temporary file renamed into place)."""
    path = Path(path)
    part = path.with_name(path.name + ".part")
    with open(part, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    part.replace(path)


class Predictor:
    """One loaded model answering batches of rows for ``options.task``."""

    def __init__(self, model_name: str, options: BatchOptions, threads: int | None = None):
        from volvox.loader import load

        self.options = options
        self.model = load(model_name, threads=threads)
        self.task = options.task or self.model.metadata.get("task")
        if self.task not in TASKS or not hasattr(self.model, self.task):
            raise UnsupportedError(f"{model_name}: task {self.task!r} cannot run on this model "
                                   f"(its task is {self.model.metadata.get('task')!r}; batch runs {', '.join(TASKS)})")

    def predict(self, rows: list[dict]) -> list[dict]:
        """Each row with its result added, in the same order."""
        return getattr(self, f"_{self.task}")(rows)

    def _generate(self, rows: list[dict]) -> list[dict]:
        o, lm = self.options, self.model
        prompts = []
        for row in rows:
            if "messages" in row:
                prompts.append(lm.tokenizer.encode(lm.tokenizer.apply_chat_template(row["messages"]), add_bos=False))
            elif isinstance(row.get("prompt"), str):
                prompts.append(row["prompt"])
            else:
                raise VolvoxError(f"a generate row needs a 'prompt' string or 'messages', got keys {sorted(row)}")
        texts = lm.generate(prompts, max_new_tokens=o.max_new_tokens, temperature=o.temperature, top_p=o.top_p,
                            seed=o.seed, stop=o.stop)  # one batched decode for the whole batch
        return [{**row, "text": text} for row, text in zip(rows, texts)]

    def _embed(self, rows: list[dict]) -> list[dict]:
        if not all(isinstance(row.get("text"), str) for row in rows):
            raise VolvoxError("an embed row needs a 'text' string")
        vectors = self.model.embed([row["text"] for row in rows], normalize=self.options.normalize)  # (n, dim)
        return [{**row, "embedding": [float(v) for v in vector]} for row, vector in zip(rows, vectors)]

    def _classify(self, rows: list[dict]) -> list[dict]:
        out = []
        for row in rows:
            if not isinstance(row.get("image"), str):
                raise VolvoxError("a classify row needs an 'image' path")
            labels = self.model.classify(row["image"], top_k=self.options.top_k_labels)
            out.append({**row, "labels": [asdict(label) for label in labels]})
        return out


    def _transcribe(self, rows: list[dict]) -> list[dict]:
        if not all(isinstance(row.get("audio"), str) for row in rows):
            raise VolvoxError("a transcribe row needs an 'audio' file path")
        texts = self.model.transcribe([row["audio"] for row in rows], temperature=self.options.temperature,
                                      seed=self.options.seed)  # every row's windows in one batched decode
        return [{**row, "text": text} for row, text in zip(rows, texts)]


def run_local(model_name: str, input_path: str | Path, output_path: str | Path, options: BatchOptions,
              threads: int | None = None, batch_size: int = 16, progress: bool = True) -> int:
    """``volvox batch --no-ray``: every row through one model in this process; the number of rows."""
    from tqdm import tqdm

    rows = read_rows(input_path)
    predictor = Predictor(model_name, options, threads)
    out: list[dict] = []
    with tqdm(total=len(rows), desc="batch", unit="row", disable=not (progress and sys.stderr.isatty())) as bar:
        for start in range(0, len(rows), batch_size):
            out += predictor.predict(rows[start:start + batch_size])
            bar.update(len(rows[start:start + batch_size]))
    write_rows(output_path, out)
    return len(out)
