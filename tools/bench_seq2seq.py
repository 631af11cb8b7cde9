"""Encoder-decoder speed: volvox vs the engines a user would pick instead, in one run.

    python tools/bench_seq2seq.py [--threads 1 2] [--rounds 3] [--seconds 20] [--skip-speech] [--skip-text]

Speech: the real-time factor (seconds of compute per second of audio; lower is faster) of
``transcribe`` on Whisper tiny.en (``whisper-tiny.en``, float16 weights) against faster-whisper on
the same CTranslate2 folder at compute_type float32 and int8, greedy (beam_size=1, temperature 0,
no timestamps), on ``--seconds`` of espeak-ng speech (several sentences, synthesised here).
Text: greedy decode tokens/s of random T5-small- (6+6 layers, 512 wide) and BART-base-shaped (6+6
layers, 768 wide) models, built with transformers (no download), in volvox against transformers'
generate, after the same source text.

For each thread count the engines take turns for --rounds rounds and each figure is the median of
its rounds, so that a noisy neighbour slows both sides alike.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

import volvox
from volvox.hub import resolve_model_file
from volvox.tasks.audio import read_audio

SENTENCES = ["The history of the city begins with a small settlement on the river.",
             "Traders from the north met farmers from the valleys to exchange grain, wool, salt and tools.",
             "Please call Stella and ask her to bring these things with her from the store.",
             "Six spoons of fresh snow peas, five thick slabs of blue cheese, and maybe a snack for her brother."]


def speech_file(directory: Path, seconds: float) -> Path:
    """A 16 kHz WAV of espeak-ng speech at least ``seconds`` long (the sentences, repeated)."""
    import soundfile

    if shutil.which("espeak-ng") is None:
        raise SystemExit("espeak-ng is needed for the speech benchmark (apt install espeak-ng)")
    parts, total, i = [], 0.0, 0
    while total < seconds:
        wav = directory / f"s{i}.wav"
        subprocess.run(["espeak-ng", "-w", str(wav), SENTENCES[i % len(SENTENCES)]], check=True, capture_output=True)
        audio = read_audio(wav)
        parts += [audio, np.zeros(8000, np.float32)]
        total += (audio.size + 8000) / 16000
        i += 1
    out = directory / "speech.wav"
    soundfile.write(str(out), np.concatenate(parts), 16000)
    return out


def median_time(fn, rounds: int) -> float:
    """Median wall seconds of ``fn()`` over ``rounds`` calls, after one warm-up call."""
    fn()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_speech(threads: list[int], rounds: int, seconds: float) -> None:
    from faster_whisper import WhisperModel

    folder = resolve_model_file("whisper-tiny.en")
    with tempfile.TemporaryDirectory() as tmp:
        wav = speech_file(Path(tmp), seconds)
        duration = read_audio(wav).size / 16000
        print(f"speech: whisper-tiny.en on {duration:.1f} s of espeak-ng speech; real-time factor (lower is faster)")
        for n in threads:
            volvox.set_num_threads(n)
            model = volvox.load("whisper-tiny.en")
            row = {"volvox": median_time(lambda: model.transcribe(str(wav)), rounds)}
            for compute in ("float32", "int8"):
                fw = WhisperModel(str(folder), device="cpu", compute_type=compute, cpu_threads=n)

                def run(fw=fw):
                    segments, _ = fw.transcribe(str(wav), beam_size=1, temperature=0.0, without_timestamps=True,
                                                condition_on_previous_text=False)
                    return "".join(s.text for s in segments)
                row[f"faster-whisper {compute}"] = median_time(run, rounds)
            model.close()
            print(f"  {n} thread(s): " + "   ".join(f"{k} {v / duration:.4f}" for k, v in row.items())
                  + f"   volvox / fw-float32 speed: {row['faster-whisper float32'] / row['volvox']:.2f}x")


def bench_text(family: str, threads: list[int], rounds: int, new_tokens: int = 64) -> None:
    """Greedy decode tok/s of a random ``family`` ("t5" or "bart") model, volvox against transformers."""
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / f"{family}-random"
        model, tok, start = (_t5_folder if family == "t5" else _bart_folder)(folder)
        src = tok.encode(" ".join(SENTENCES)).ids
        print(f"text: random {TEXT_SHAPES[family]} shape, {len(src)}-token source, {new_tokens} greedy tokens; "
              "decode tok/s")
        for n in threads:
            volvox.set_num_threads(n)
            torch.set_num_threads(n)
            vm = volvox.load(folder)

            def ours():
                session = vm.new_session(vm.encode(src))
                logits = session.forward([start])[-1]
                for _ in range(new_tokens - 1):
                    logits = session.forward([int(np.argmax(logits))])[-1]

            def theirs():
                with torch.no_grad():
                    model.generate(torch.tensor([src]), max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                   do_sample=False, num_beams=1)
            a, b = median_time(ours, rounds), median_time(theirs, rounds)
            vm.close()
            print(f"  {n} thread(s): volvox {new_tokens / a:.1f} tok/s   transformers {new_tokens / b:.1f} tok/s   "
                  f"ratio {b / a:.2f}x (encode included on both sides)")


TEXT_SHAPES = {"t5": "T5-small", "bart": "BART-base"}


def _t5_folder(directory: Path):
    """A random T5-small-shaped model (and a Unigram tokenizer) saved in ``directory``; the torch model."""
    import torch
    import transformers as tf
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=400, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>",
                                      show_progress=False)
    tok.train_from_iterator(SENTENCES * 20, trainer)
    torch.manual_seed(0)
    config = tf.T5Config(vocab_size=tok.get_vocab_size(), d_model=512, d_kv=64, d_ff=2048, num_layers=6,
                         num_heads=8, decoder_start_token_id=0, eos_token_id=1, pad_token_id=0)
    model = tf.T5ForConditionalGeneration(config).float().eval()
    model.save_pretrained(directory)
    tok.save(str(directory / "tokenizer.json"))
    return model, tok, 0


def _bart_folder(directory: Path):
    """A random BART-base-shaped model (and a byte-level BPE tokenizer) saved in ``directory``; the torch
    model, the tokenizer and the decoder's start token."""
    import torch
    import transformers as tf
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<s>", "<pad>", "</s>", "<unk>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(SENTENCES * 20, trainer)
    torch.manual_seed(0)
    config = tf.BartConfig(vocab_size=tok.get_vocab_size(), d_model=768, encoder_layers=6, decoder_layers=6,
                           encoder_attention_heads=12, decoder_attention_heads=12, encoder_ffn_dim=3072,
                           decoder_ffn_dim=3072, max_position_embeddings=1024, bos_token_id=0, pad_token_id=1,
                           eos_token_id=2, decoder_start_token_id=2, forced_bos_token_id=None, forced_eos_token_id=None)
    model = tf.BartForConditionalGeneration(config).float().eval()
    model.save_pretrained(directory)
    tok.save(str(directory / "tokenizer.json"))
    return model, tok, 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds of speech to transcribe")
    parser.add_argument("--skip-speech", action="store_true")
    parser.add_argument("--skip-text", action="store_true", help="skip the T5 and BART decode runs")
    a = parser.parse_args()
    if not a.skip_speech:
        bench_speech(a.threads, a.rounds, a.seconds)
    if not a.skip_text:
        for family in TEXT_SHAPES:
            bench_text(family, a.threads, a.rounds)


if __name__ == "__main__":
    main()
