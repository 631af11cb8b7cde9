"""Write the crafted bad-input corpus: tests/data/bad/ plus the valid seeds it breaks.

    python tools/make_bad_files.py            # rewrites tests/data/{tiny.*,bad/}

Each bad file is one of the tiny valid seeds (GGUF, safetensors, TFLite, ONNX, a torch.save
zip) with one thing broken; each bp_* directory is a small blueprint (config.json +
model.safetensors) that lies about one thing. ``tests/data/bad/expected.json`` maps every
file or directory name to the volvox exception it must raise (when opened and every tensor
touched, or loaded as a model) and a substring of its message. The output is deterministic,
so tests/formats/test_bad_files.py can check the committed corpus is what this script writes.
Nothing here imports volvox: the files are built from the formats' specifications alone
(the seeds are checked against the reference runtimes in tests/formats/test_fuzz_formats.py).
"""

from __future__ import annotations

import io
import json
import shutil
import struct
import sys
import zipfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tflite_writer import build_flatbuffer, fb_table, fb_vec, tfl_model, tfl_op, tfl_opcode, tfl_tensor  # noqa: E402

DATA_DIR = Path(__file__).resolve().parent.parent / "tests" / "data"

# --- GGUF ------------------------------------------------------------------------------

# KV value type ids (gguf_type) and their struct codes.
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
_SCALAR_CODES = {U8: "B", I8: "b", U16: "H", I16: "h", U32: "I", I32: "i", F32: "f",
                 BOOL: "?", U64: "Q", I64: "q", F64: "d"}
# ggml type ids used below.
GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q4_1, GGML_Q8_0, GGML_Q8_K, GGML_BF16 = 0, 1, 2, 3, 8, 15, 30


def _rng_bytes(n: int, seed: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


# (key, value type, value); an array value is (element type, list of values);
# a bytes value for a STRING is written raw (lets a test write invalid UTF-8).
TINY_KVS = [
    ("general.architecture", STRING, "llama"),
    ("general.name", STRING, "tiny volvox test model"),
    ("general.alignment", U32, 32),
    ("test.u8", U8, 7),
    ("test.i8", I8, -3),
    ("test.u16", U16, 513),
    ("test.i16", I16, -300),
    ("test.u32", U32, 70000),
    ("test.i32", I32, -70000),
    ("test.f32", F32, 0.5),
    ("test.bool", BOOL, True),
    ("test.u64", U64, 2**40),
    ("test.i64", I64, -2**40),
    ("test.f64", F64, 0.25),
    ("test.bools", ARRAY, (BOOL, [True, False, True])),
    ("test.u64s", ARRAY, (U64, [1, 2**63])),
    ("test.empty", ARRAY, (STRING, [])),
    ("tokenizer.ggml.tokens", ARRAY, (STRING, ["<s>", "</s>", "a", "\u00fc\u00df", ""])),
    ("tokenizer.ggml.scores", ARRAY, (F32, [0.0, 0.0, -1.0, -2.5, -3.0])),
    ("tokenizer.ggml.token_type", ARRAY, (I32, [3, 3, 1, 1, 1])),
]
# (name, ne in ggml order: innermost first, ggml type id, data bytes)
TINY_TENSORS = [
    ("token_embd.weight", (8, 5), GGML_F32, np.arange(40, dtype="<f4").tobytes()),
    ("output_norm.weight", (8,), GGML_F16, np.linspace(-1, 1, 8).astype("<f2").tobytes()),
    ("blk.0.attn_q.weight", (32, 2), GGML_Q8_0, _rng_bytes(2 * 34, 1)),
    ("blk.0.ffn_up.weight", (64, 3), GGML_Q4_1, _rng_bytes(3 * 2 * 20, 2)),
    ("blk.0.ffn_down.weight", (32, 1, 2), GGML_Q4_0, _rng_bytes(2 * 18, 3)),
    ("blk.0.extra.weight", (4,), GGML_BF16, np.array([1, 2, 3, 4], "<f4").view("<u2")[1::2].tobytes()),
]


def build_gguf(kvs=TINY_KVS, tensors=TINY_TENSORS, *, version: int = 3, alignment: int = 32,
               offsets: dict[str, int] | None = None) -> tuple[bytes, dict[str, int]]:
    """Serialize a GGUF file; return its bytes and where each field starts.

    ``offsets`` overrides a tensor's relative data offset by name (the data is
    still written at its natural place). Field positions are keyed like
    "header.kv_count", "kv.<key>.key_len", "kv.<key>.str_len",
    "kv.<key>.array_count", "tensor.<name>.dims", "tensor.<name>.offset", "data".
    """
    out = bytearray()
    pos: dict[str, int] = {}

    def put(tag: str | None, fmt: str, *values) -> None:
        if tag is not None:
            pos[tag] = len(out)
        out.extend(struct.pack("<" + fmt, *values))

    def put_str(tag: str, s: str | bytes) -> None:
        raw = s if isinstance(s, bytes) else s.encode("utf-8")
        put(tag, "Q", len(raw))
        out.extend(raw)

    def put_value(tag: str, vtype: int, value) -> None:
        if vtype == STRING:
            put_str(f"{tag}.str_len", value)
        elif vtype == ARRAY:
            etype, items = value
            put(f"{tag}.array_type", "I", etype)
            put(f"{tag}.array_count", "Q", len(items))
            for i, item in enumerate(items):
                put_value(f"{tag}[{i}]", etype, item)
        else:
            put(f"{tag}.value", _SCALAR_CODES[vtype], value)

    out.extend(b"GGUF")
    put("header.version", "I", version)
    put("header.tensor_count", "Q", len(tensors))
    put("header.kv_count", "Q", len(kvs))
    for key, vtype, value in kvs:
        put_str(f"kv.{key}.key_len", key)
        put(f"kv.{key}.type", "I", vtype)
        put_value(f"kv.{key}", vtype, value)
    rel = 0
    for name, ne, type_id, data in tensors:
        put_str(f"tensor.{name}.name_len", name)
        put(f"tensor.{name}.n_dims", "I", len(ne))
        put(f"tensor.{name}.dims", f"{len(ne)}Q", *ne)
        put(f"tensor.{name}.type", "I", type_id)
        put(f"tensor.{name}.offset", "Q", (offsets or {}).get(name, rel))
        rel += -(-len(data) // alignment) * alignment
    out.extend(bytes(-len(out) % alignment))
    pos["data"] = len(out)
    for _, _, _, data in tensors:
        out.extend(data)
        out.extend(bytes(-len(out) % alignment))
    return bytes(out), pos


def patch(data: bytes, at: int, fmt: str, *values) -> bytes:
    """``data`` with ``values`` packed (little-endian ``fmt``) over the bytes at ``at``."""
    raw = struct.pack("<" + fmt, *values)
    return data[:at] + raw + data[at + len(raw):]


def _with_kv(key: str, vtype: int, value) -> list:
    return [kv for kv in TINY_KVS if kv[0] != key] + [(key, vtype, value)]


def _with_tensor(name: str, **change) -> list:
    out = []
    for t in TINY_TENSORS:
        if t[0] == name:
            fields = dict(zip(("name", "ne", "type_id", "data"), t)) | change
            t = (fields["name"], fields["ne"], fields["type_id"], fields["data"])
        out.append(t)
    return out


def bad_gguf_files() -> dict[str, tuple[bytes, str, str]]:
    """name -> (file bytes, exception class name, message substring)."""
    good, at = build_gguf()
    t0, t1 = TINY_TENSORS[0][0], TINY_TENSORS[2][0]
    # metadata only, so that a cut lands in the field named, not in a count check
    kv = {k[0]: k for k in TINY_KVS}
    small, sat = build_gguf([kv["tokenizer.ggml.scores"], kv["tokenizer.ggml.tokens"],
                             kv["general.name"], kv["test.f64"]], [])
    nested = (I32, [1])
    for _ in range(9):
        nested = (ARRAY, [nested])
    return {
        "gguf_empty.gguf": (b"", "GGUFError", "not a GGUF file"),
        "gguf_two_bytes.gguf": (b"GG", "GGUFError", "not a GGUF file"),
        "gguf_wrong_magic.gguf": (b"GGML" + good[4:], "GGUFError", "not a GGUF file"),
        "gguf_truncated_header.gguf": (good[:12], "GGUFError", "truncated"),
        "gguf_version_99.gguf": (patch(good, at["header.version"], "I", 99),
                                 "UnsupportedError", "version 99"),
        "gguf_version_1.gguf": (patch(good, at["header.version"], "I", 1),
                                "UnsupportedError", "version 1"),
        "gguf_big_endian.gguf": (patch(good, at["header.version"], "I", 3 << 24),
                                 "UnsupportedError", "big-endian"),
        "gguf_absurd_tensor_count.gguf": (patch(good, at["header.tensor_count"], "Q", 2**62),
                                          "GGUFError", "tensor_count"),
        "gguf_absurd_kv_count.gguf": (patch(good, at["header.kv_count"], "Q", 2**64 - 1),
                                      "GGUFError", "kv_count"),
        "gguf_absurd_key_length.gguf": (patch(good, at["kv.general.architecture.key_len"], "Q",
                                              2**63), "GGUFError", "key #0"),
        "gguf_absurd_string_length.gguf": (patch(good, at["kv.general.name.str_len"], "Q", 2**60),
                                           "GGUFError", "'general.name'"),
        "gguf_absurd_array_length.gguf": (
            patch(good, at["kv.tokenizer.ggml.tokens.array_count"], "Q", 2**61),
            "GGUFError", "array length"),
        "gguf_absurd_numeric_array_length.gguf": (
            patch(good, at["kv.tokenizer.ggml.scores.array_count"], "Q", 2**64 - 1),
            "GGUFError", "tokenizer.ggml.scores"),
        "gguf_absurd_token_length.gguf": (
            patch(good, at["kv.tokenizer.ggml.tokens[2].str_len"], "Q", 2**40),
            "GGUFError", "'tokenizer.ggml.tokens'[2]: string length"),
        "gguf_truncated_in_key.gguf": (small[:sat["kv.general.name.key_len"] + 11],
                                       "GGUFError", "key #2: string length 12"),
        "gguf_truncated_in_value.gguf": (small[:sat["kv.test.f64.value"] + 3],
                                         "GGUFError", "truncated: key 'test.f64'"),
        "gguf_truncated_in_string.gguf": (small[:sat["kv.general.name.str_len"] + 13],
                                          "GGUFError", "key 'general.name': string length 22"),
        "gguf_truncated_in_array.gguf": (small[:sat["kv.tokenizer.ggml.scores[2].value"] + 1],
                                         "GGUFError", "'tokenizer.ggml.scores': array length 5"),
        "gguf_truncated_in_string_array.gguf": (
            small[:sat["kv.tokenizer.ggml.tokens[3].str_len"] + 9],
            "GGUFError", "'tokenizer.ggml.tokens'[3]: string length 4"),
        "gguf_truncated_in_tensor_info.gguf": (good[:at[f"tensor.{t1}.dims"] + 5],
                                               "GGUFError", "truncated"),
        "gguf_truncated_tensor_data.gguf": (good[:len(good) - 40], "GGUFError",
                                            "past the end of the file"),
        "gguf_no_tensor_data.gguf": (good[:at["data"]], "GGUFError", "past the end of the file"),
        "gguf_unknown_value_type.gguf": (patch(good, at["kv.test.u8.type"], "I", 99),
                                         "GGUFError", "unknown value type 99"),
        "gguf_unknown_array_type.gguf": (
            patch(good, at["kv.tokenizer.ggml.scores.array_type"], "I", 77),
            "GGUFError", "unknown array element type 77"),
        "gguf_arrays_nested_too_deep.gguf": (build_gguf(_with_kv("test.nested", ARRAY, nested))[0],
                                             "GGUFError", "nested"),
        "gguf_key_not_utf8.gguf": (build_gguf(_with_kv(b"test.\xff\xfe", U8, 1))[0],
                                   "GGUFError", f"key #{len(TINY_KVS)} is not valid UTF-8"),
        "gguf_token_not_utf8.gguf": (
            build_gguf(_with_kv("tokenizer.ggml.tokens", ARRAY, (STRING, ["a", b"\xc3("])))[0],
            "GGUFError", "'tokenizer.ggml.tokens'[1] is not valid UTF-8"),
        "gguf_duplicate_key.gguf": (build_gguf(TINY_KVS + [("test.u8", U8, 8)])[0],
                                    "GGUFError", "duplicate key 'test.u8'"),
        "gguf_alignment_not_power_of_two.gguf": (
            build_gguf(_with_kv("general.alignment", U32, 24), alignment=24)[0],
            "GGUFError", "general.alignment"),
        "gguf_alignment_zero.gguf": (patch(good, at["kv.general.alignment.value"], "I", 0),
                                     "GGUFError", "general.alignment"),
        "gguf_alignment_wrong_type.gguf": (build_gguf(_with_kv("general.alignment", STRING, "32"))[0],
                                           "GGUFError", "general.alignment"),
        "gguf_n_dims_5.gguf": (patch(good, at[f"tensor.{t0}.n_dims"], "I", 5),
                               "GGUFError", "n_dims 5"),
        "gguf_absurd_n_dims.gguf": (patch(good, at[f"tensor.{t0}.n_dims"], "I", 2**32 - 1),
                                    "GGUFError", f"tensor '{t0}': n_dims"),
        "gguf_zero_dim.gguf": (patch(good, at[f"tensor.{t0}.dims"] + 8, "Q", 0),
                               "GGUFError", "must all be positive"),
        "gguf_negative_dim.gguf": (patch(good, at[f"tensor.{t0}.dims"], "Q", 2**64 - 8),
                                   "GGUFError", "must all be positive"),
        "gguf_dims_overflow.gguf": (patch(good, at[f"tensor.{t0}.dims"], "QQ", 2**32, 2**32),
                                    "GGUFError", "overflows"),
        "gguf_absurd_dims.gguf": (patch(good, at[f"tensor.{t0}.dims"], "QQ", 2**20, 2**20),
                                  "GGUFError", "past the end of the file"),
        "gguf_unknown_ggml_type.gguf": (patch(good, at[f"tensor.{t1}.type"], "I", 99),
                                        "GGUFError", f"tensor '{t1}': unknown ggml type id 99"),
        "gguf_row_not_multiple_of_block.gguf": (patch(good, at[f"tensor.{t1}.dims"], "Q", 33),
                                                "GGUFError", "not a multiple of the q8_0 block"),
        "gguf_offset_past_eof.gguf": (patch(good, at[f"tensor.{t1}.offset"], "Q", 2**20),
                                      "GGUFError", f"tensor '{t1}': data"),
        "gguf_offset_huge.gguf": (patch(good, at[f"tensor.{t1}.offset"], "Q", 2**64 - 32),
                                  "GGUFError", "past the end of the file"),
        "gguf_offset_misaligned.gguf": (build_gguf(offsets={t1: 196})[0],
                                        "GGUFError", "offset 196 is not a multiple of the alignment"),
        "gguf_overlapping_tensors.gguf": (build_gguf(offsets={t1: 128})[0], "GGUFError", "overlap"),
        "gguf_duplicate_tensor.gguf": (build_gguf(tensors=TINY_TENSORS + [TINY_TENSORS[1]])[0],
                                       "GGUFError", "duplicate tensor name 'output_norm.weight'"),
        "gguf_unsupported_q8_k.gguf": (
            build_gguf(tensors=_with_tensor(t1, ne=(256, 1), type_id=GGML_Q8_K,
                                            data=_rng_bytes(292, 4)))[0],
            "UnsupportedError", f"tensor '{t1}' has type q8_k"),
    }


# --- safetensors -----------------------------------------------------------------------

def build_safetensors(header, data: bytes, *, raw_header: bytes | None = None,
                      header_len: int | None = None) -> bytes:
    """Serialize a safetensors file from a header object (or raw header bytes) and data."""
    head = raw_header if raw_header is not None else json.dumps(header).encode("utf-8")
    head += b" " * (-len(head) % 8)
    return struct.pack("<Q", len(head) if header_len is None else header_len) + head + data


TINY_ST_HEADER = {
    "__metadata__": {"format": "np", "source": "volvox tools/make_bad_files.py"},
    "weight": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
    "bias": {"dtype": "F16", "shape": [4], "data_offsets": [24, 32]},
    "ids": {"dtype": "I64", "shape": [2], "data_offsets": [32, 48]},
    "mask": {"dtype": "BOOL", "shape": [3], "data_offsets": [48, 51]},
    "empty": {"dtype": "U8", "shape": [0, 5], "data_offsets": [51, 51]},
}
TINY_ST_DATA = (np.arange(6, dtype="<f4").tobytes() + np.ones(4, "<f2").tobytes()
                + np.array([7, -7], "<i8").tobytes() + bytes([1, 0, 1]))


def _st_with(name: str, **change) -> dict:
    header = json.loads(json.dumps(TINY_ST_HEADER))
    header[name] = change.pop("entry", None) or header[name] | change
    return header


def bad_safetensors_files() -> dict[str, tuple[bytes, str, str]]:
    """name -> (file bytes, exception class name, message substring)."""
    good = build_safetensors(TINY_ST_HEADER, TINY_ST_DATA)
    ok = TINY_ST_DATA
    return {
        "st_empty.safetensors": (b"", "WeightsError", "truncated"),
        "st_five_bytes.safetensors": (good[:5], "WeightsError", "truncated"),
        "st_header_length_past_eof.safetensors": (
            build_safetensors(TINY_ST_HEADER, ok, header_len=2**63), "WeightsError", "header length"),
        "st_truncated_header.safetensors": (good[:8] + good[8:64], "WeightsError",
                                                  "header length"),
        "st_bad_json.safetensors": (build_safetensors(None, b"", raw_header=b'{"a": {'),
                                    "WeightsError", "not valid JSON"),
        "st_header_not_utf8.safetensors": (build_safetensors(None, b"", raw_header=b'{"\xff": 1}'),
                                           "WeightsError", "not valid JSON"),
        "st_json_nested_deep.safetensors": (build_safetensors(None, b"", raw_header=b"[" * 20000),
                                            "WeightsError", "not valid JSON"),
        "st_json_huge_int.safetensors": (
            build_safetensors(None, b"", raw_header=b'{"a": {"dtype": "U8", "shape": [' + b"9" * 5000
                              + b'], "data_offsets": [0, 0]}}'),
            "WeightsError", "not valid JSON"),
        "st_duplicate_key.safetensors": (
            build_safetensors(None, ok, raw_header=json.dumps(TINY_ST_HEADER).encode()[:-1]
                              + b', "bias": ' + json.dumps(TINY_ST_HEADER["bias"]).encode() + b"}"),
            "WeightsError", "duplicate key 'bias'"),
        "st_header_not_dict.safetensors": (build_safetensors([1, 2], b""), "WeightsError",
                                           "must be a JSON object"),
        "st_entry_not_dict.safetensors": (build_safetensors(_st_with("bias", entry=5), ok),
                                          "WeightsError", "tensor 'bias': entry"),
        "st_unknown_dtype.safetensors": (build_safetensors(_st_with("bias", dtype="F128"), ok),
                                         "WeightsError", "tensor 'bias': unknown dtype 'F128'"),
        "st_dtype_not_string.safetensors": (build_safetensors(_st_with("bias", dtype=[2]), ok),
                                            "WeightsError", "tensor 'bias': unknown dtype"),
        "st_missing_dtype.safetensors": (
            build_safetensors(_st_with("bias", entry={"shape": [4], "data_offsets": [24, 32]}), ok),
            "WeightsError", "tensor 'bias': unknown dtype None"),
        "st_negative_shape.safetensors": (build_safetensors(_st_with("weight", shape=[-2, -3]), ok),
                                          "WeightsError", "tensor 'weight': shape"),
        "st_shape_not_list.safetensors": (build_safetensors(_st_with("weight", shape="6"), ok),
                                          "WeightsError", "tensor 'weight': shape"),
        "st_shape_float.safetensors": (build_safetensors(_st_with("weight", shape=[2.0, 3]), ok),
                                       "WeightsError", "tensor 'weight': shape"),
        "st_shape_absurd.safetensors": (
            build_safetensors(_st_with("empty", shape=[0, 2**61, 2**61]), ok),
            "WeightsError", "tensor 'empty'"),
        "st_offsets_past_eof.safetensors": (
            build_safetensors(_st_with("mask", shape=[1000], data_offsets=[48, 1048]), ok),
            "WeightsError", "tensor 'mask': data_offsets [48, 1048] fall outside"),
        "st_offsets_reversed.safetensors": (
            build_safetensors(_st_with("ids", data_offsets=[48, 32]), ok),
            "WeightsError", "tensor 'ids': data_offsets"),
        "st_offsets_negative.safetensors": (
            build_safetensors(_st_with("ids", data_offsets=[-16, 0]), ok),
            "WeightsError", "tensor 'ids': data_offsets"),
        "st_offsets_missing.safetensors": (
            build_safetensors(_st_with("ids", entry={"dtype": "I64", "shape": [2]}), ok),
            "WeightsError", "tensor 'ids': data_offsets must be"),
        "st_truncated_data.safetensors": (good[:-10], "WeightsError", "fall outside"),
        "st_size_mismatch.safetensors": (build_safetensors(_st_with("weight", shape=[2, 2]), ok),
                                         "WeightsError", "needs 16"),
        "st_overlapping_tensors.safetensors": (
            build_safetensors(_st_with("bias", dtype="F32", shape=[2], data_offsets=[16, 24]), ok),
            "WeightsError", "overlap"),
        "st_metadata_not_str.safetensors": (
            build_safetensors(TINY_ST_HEADER | {"__metadata__": {"epoch": 3}}, ok),
            "WeightsError", "__metadata__"),
        "st_metadata_not_dict.safetensors": (
            build_safetensors(TINY_ST_HEADER | {"__metadata__": ["a"]}, ok),
            "WeightsError", "__metadata__"),
    }


# --- TFLite (the FlatBuffers writer is tools/tflite_writer.py) ---------------------------

# The tiny float32 TFLite model: x (1,4,4,2) -> CONV_2D 3x3 SAME relu (3 filters) -> RESHAPE
# (1,48) -> FULLY_CONNECTED (5) -> SOFTMAX.
TFL_CONV_W = ((np.arange(54, dtype=np.float32) % 7 - 3) / 8).reshape(3, 3, 3, 2)  # (out, kh, kw, in)
TFL_CONV_B = np.array([0.1, -0.2, 0.3], np.float32)                                  # (3,)
TFL_FC_W = ((np.arange(240, dtype=np.float32) % 11 - 5) / 16).reshape(5, 48)        # (out, in)
TFL_FC_B = np.linspace(-0.5, 0.5, 5).astype(np.float32)                              # (5,)
TFL_OPS = {"CONV_2D": 3, "RESHAPE": 22, "FULLY_CONNECTED": 9, "SOFTMAX": 25}


def build_tflite(ops: dict[str, int] = TFL_OPS) -> tuple[bytes, dict[str, list[int]]]:
    """The tiny float32 TFLite model (bytes, field positions), from tensorflow/lite/schema/schema.fbs."""
    consts = [TFL_CONV_W, TFL_CONV_B, np.array([1, 48], np.int32), TFL_FC_W, TFL_FC_B]
    buffers = [fb_table()] + [fb_table(fb_vec("B", c.astype(c.dtype.newbyteorder("<")).tobytes()))
                              for c in consts] + [fb_table()]
    f32, i32 = 0, 2
    tensors = [tfl_tensor("x", [1, 4, 4, 2], f32, 0),
               tfl_tensor("conv/w", [3, 3, 3, 2], f32, 1), tfl_tensor("conv/b", [3], f32, 2),
               tfl_tensor("conv", [1, 4, 4, 3], f32, 0),
               tfl_tensor("shape", [2], i32, 3), tfl_tensor("flat", [1, 48], f32, 0),
               tfl_tensor("fc/w", [5, 48], f32, 4), tfl_tensor("fc/b", [5], f32, 5),
               tfl_tensor("logits", [1, 5], f32, 0), tfl_tensor("probs", [1, 5], f32, 0)]
    conv_opts = fb_table(("b", 0), ("i", 1), ("i", 1), ("b", 1))  # SAME, stride 1x1, RELU
    operators = [tfl_op(0, [0, 1, 2], [3], 1, conv_opts),
                 tfl_op(1, [3, 4], [5], 17, fb_table(fb_vec("i", [1, 48]))),
                 tfl_op(2, [5, 6, 7], [8], 8, fb_table(("b", 0))),
                 tfl_op(3, [8], [9], 9, fb_table(("f", 1.0)))]
    model = tfl_model([tfl_opcode(code) for code in ops.values()], tensors, [0], [9], operators, buffers,
                      "volvox tiny")
    return build_flatbuffer(model, b"TFL3")


def bad_tflite_files() -> dict[str, tuple[bytes, str, str]]:
    """name -> (file bytes, exception class name, message substring)."""
    good, at = build_tflite()
    root_len = at["length"][0]  # the operator_codes vector comes first after the model table
    return {
        "tfl_truncated.tflite": (good[:len(good) // 2], "TFLiteError", "outside"),
        "tfl_garbage.tflite": (good[:8] + _rng_bytes(256, 5), "TFLiteError", "outside"),
        "tfl_no_identifier.tflite": (good[:4] + b"XXXX" + good[8:], "UnsupportedError", "not a model file"),
        "tfl_root_offset_huge.tflite": (patch(good, 0, "I", 2**32 - 8), "TFLiteError", "outside"),
        "tfl_vector_length_huge.tflite": (patch(good, root_len, "I", 2**31), "TFLiteError", "outside"),
        "tfl_unknown_op.tflite": (build_tflite(TFL_OPS | {"SOFTMAX": 125})[0],
                                  "UnsupportedError", "op builtin op 125 is not supported"),
    }


# --- protobuf / ONNX ---------------------------------------------------------------------

def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append(n & 0x7F | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def pb(*fields) -> bytes:
    """A protobuf message from (field number, value): int -> varint, bytes/str -> length-delimited."""
    out = bytearray()
    for number, value in fields:
        if isinstance(value, int):
            out += _varint(number << 3) + _varint(value % 2**64)
        else:
            raw = value.encode() if isinstance(value, str) else value
            out += _varint(number << 3 | 2) + _varint(len(raw)) + raw
    return bytes(out)


def _onnx_tensor(name: str, arr: np.ndarray) -> bytes:
    # TensorProto: dims 1, data_type 2 (1 float, 7 int64), name 8, raw_data 9
    code = {np.dtype(np.float32): 1, np.dtype(np.int64): 7}[arr.dtype]
    return pb(*[(1, d) for d in arr.shape], (2, code), (8, name), (9, arr.astype(arr.dtype.newbyteorder("<")).tobytes()))


def _onnx_value(name: str, dims) -> bytes:
    # ValueInfoProto{name 1, type 2: TypeProto{tensor_type 1: {elem_type 1, shape 2: {dim 1: {dim_value 1}}}}}
    shape = pb(*[(1, pb((1, d))) for d in dims])
    return pb((1, name), (2, pb((1, pb((1, 1), (2, shape))))))


def _onnx_node(op: str, ins, outs, name: str, *attrs) -> bytes:
    # NodeProto: input 1, output 2, name 3, op_type 4, attribute 5
    return pb(*[(1, i) for i in ins], *[(2, o) for o in outs], (3, name), (4, op), *[(5, a) for a in attrs])


def _onnx_ints(name: str, values) -> bytes:
    # AttributeProto: name 1, ints 8, type 20 (7 = INTS)
    return pb((1, name), *[(8, v) for v in values], (20, 7))


# The tiny float32 ONNX model: x (1,2,4,4) -> Conv 3x3 pad 1 (3 filters) -> BatchNormalization ->
# Relu -> MaxPool 2x2 -> Reshape (1,12) -> MatMul (12,5) -> Add -> Softmax.
ONNX_CONV_W = ((np.arange(54, dtype=np.float32) % 5 - 2) / 6).reshape(3, 2, 3, 3)  # (out, in, kh, kw)
ONNX_CONV_B = np.array([0.05, -0.1, 0.2], np.float32)                               # (3,)
ONNX_BN = [np.array(v, np.float32) for v in ([1.5, 0.5, 1.0], [0.1, 0.0, -0.1], [0.2, -0.1, 0.0],
                                             [1.0, 2.0, 0.5])]                       # gamma, beta, mean, var
ONNX_FC_W = ((np.arange(60, dtype=np.float32) % 7 - 3) / 5).reshape(12, 5)          # (in, out)
ONNX_FC_B = np.linspace(-0.3, 0.3, 5).astype(np.float32)                            # (5,)


def build_onnx(opset: int = 13, extra_nodes: tuple = ()) -> bytes:
    """The tiny float32 ONNX model, from onnx/onnx.proto."""
    inits = [("conv.w", ONNX_CONV_W), ("conv.b", ONNX_CONV_B), ("bn.g", ONNX_BN[0]), ("bn.b", ONNX_BN[1]),
             ("bn.m", ONNX_BN[2]), ("bn.v", ONNX_BN[3]), ("shape", np.array([1, 12], np.int64)),
             ("fc.w", ONNX_FC_W), ("fc.b", ONNX_FC_B)]
    nodes = [_onnx_node("Conv", ["x", "conv.w", "conv.b"], ["c"], "conv", _onnx_ints("pads", [1, 1, 1, 1])),
             _onnx_node("BatchNormalization", ["c", "bn.g", "bn.b", "bn.m", "bn.v"], ["n"], "bn"),
             _onnx_node("Relu", ["n"], ["r"], "relu"),
             _onnx_node("MaxPool", ["r"], ["p"], "pool", _onnx_ints("kernel_shape", [2, 2]),
                        _onnx_ints("strides", [2, 2])),
             _onnx_node("Reshape", ["p", "shape"], ["f"], "flatten"),
             _onnx_node("MatMul", ["f", "fc.w"], ["m"], "fc"),
             _onnx_node("Add", ["m", "fc.b"], ["logits"], "fc_bias"),
             _onnx_node("Softmax", ["logits"], ["probs"], "softmax"), *extra_nodes]
    # GraphProto: node 1, name 2, initializer 5, input 11, output 12
    graph = pb(*[(1, n) for n in nodes], (2, "tiny"), *[(5, _onnx_tensor(n, a)) for n, a in inits],
               (11, _onnx_value("x", [1, 2, 4, 4])), (12, _onnx_value("probs", [1, 5])))
    # ModelProto: ir_version 1, producer_name 2, graph 7, opset_import 8 {domain 1, version 2}
    return pb((1, 7), (2, "volvox tools/make_bad_files.py"), (7, graph), (8, pb((1, ""), (2, opset))))


def bad_onnx_files() -> dict[str, tuple[bytes, str, str]]:
    """name -> (file bytes, exception class name, message substring)."""
    good = build_onnx()
    return {
        "onnx_truncated.onnx": (good[:len(good) // 2], "ONNXError", "truncated"),
        "onnx_garbage.onnx": (_rng_bytes(300, 6), "ONNXError", "not an ONNX file"),
        "onnx_empty.onnx": (b"", "ONNXError", "no graph"),
        "onnx_opset_0.onnx": (build_onnx(opset=0), "UnsupportedError", "opset 0"),
        "onnx_unknown_op.onnx": (build_onnx(extra_nodes=(_onnx_node("Frobnicate", ["probs"], ["z"], "frob"),)),
                                 "UnsupportedError", "node 'frob' (Frobnicate): op Frobnicate is not supported"),
        # producer_name (field 2 at byte 2, its 1-byte length at byte 3) announces 2**40 bytes
        "onnx_length_huge.onnx": (good[:3] + _varint(2**40) + good[4:], "ONNXError", "announced"),
    }


# --- PyTorch state dict (zip format) -----------------------------------------------------

def _pkl_str(s: str) -> bytes:
    raw = s.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw  # BINUNICODE


def _pkl_int(n: int) -> bytes:
    return b"J" + struct.pack("<i", n)  # BININT


def _pkl_tuple(*items: bytes) -> bytes:
    return b"(" + b"".join(items) + b"t"  # MARK ... TUPLE


def pkl_global(module: str, name: str) -> bytes:
    """The GLOBAL opcode: push ``module.name`` (resolved by the unpickler's find_class)."""
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def _pkl_tensor(key: str, storage: str, arr: np.ndarray) -> bytes:
    """torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks), as
    torch.save writes it; the storage is a persistent id ('storage', type, key, 'cpu', numel)."""
    stride = [s // arr.itemsize for s in arr.strides]
    pid = _pkl_tuple(_pkl_str("storage"), pkl_global("torch", storage), _pkl_str(key), _pkl_str("cpu"),
                     _pkl_int(arr.size)) + b"Q"  # BINPERSID
    args = _pkl_tuple(pid, _pkl_int(0), _pkl_tuple(*map(_pkl_int, arr.shape)), _pkl_tuple(*map(_pkl_int, stride)),
                      b"\x89", pkl_global("collections", "OrderedDict") + b")R")  # NEWFALSE, OrderedDict()
    return pkl_global("torch._utils", "_rebuild_tensor_v2") + args + b"R"  # REDUCE


SD_TENSORS = {"conv.weight": ("FloatStorage", np.linspace(-1, 1, 24, dtype=np.float32).reshape(2, 3, 2, 2)),
              "conv.bias": ("FloatStorage", np.array([0.5, -0.5], np.float32)),
              "bn.num_batches_tracked": ("LongStorage", np.array(7, np.int64))}


def state_dict_pickle(entries: bytes | None = None) -> bytes:
    """data.pkl of an OrderedDict state dict (protocol 2); ``entries`` replaces the key/value opcodes."""
    if entries is None:
        entries = b"".join(_pkl_str(name) + _pkl_tensor(str(k), storage, arr)
                           for k, (name, (storage, arr)) in enumerate(SD_TENSORS.items()))
    return b"\x80\x02" + pkl_global("collections", "OrderedDict") + b")R(" + entries + b"u."


def build_state_dict(pickle_bytes: bytes | None = None, storages: dict[str, bytes] | None = None) -> bytes:
    """A torch.save zip: archive/data.pkl, archive/data/<key> (stored, as torch writes them)."""
    if storages is None:
        storages = {str(k): arr.astype(arr.dtype.newbyteorder("<")).tobytes()
                    for k, (storage, arr) in enumerate(SD_TENSORS.values())}
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zf:
        for name, data in [("archive/data.pkl", pickle_bytes or state_dict_pickle()), ("archive/version", b"3\n"),
                           *((f"archive/data/{k}", v) for k, v in storages.items())]:
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))  # fixed: deterministic bytes
            zf.writestr(info, data)
    return out.getvalue()


def bad_state_dict_files() -> dict[str, tuple[bytes, str, str]]:
    """name -> (file bytes, exception class name, message substring)."""
    good = build_state_dict()
    # os.system('...') as a value: must be refused by find_class before anything runs
    evil = _pkl_str("x") + pkl_global("os", "system") + _pkl_tuple(_pkl_str("touch /tmp/volvox-pwned")) + b"R"
    builtin = _pkl_str("x") + pkl_global("builtins", "eval") + _pkl_tuple(_pkl_str("1+1")) + b"R"
    return {
        "sd_os_system.pth": (build_state_dict(state_dict_pickle(evil)), "WeightsError",
                             "refuses to unpickle os.system"),
        "sd_builtins_eval.pth": (build_state_dict(state_dict_pickle(builtin)), "WeightsError",
                                 "refuses to unpickle builtins.eval"),
        "sd_truncated.pth": (good[:len(good) // 2], "WeightsError", "not a readable PyTorch state dict"),
        "sd_missing_storage.pth": (build_state_dict(storages={"0": b"\0" * 96}), "WeightsError",
                                   "not a readable PyTorch state dict"),
        "sd_short_storage.pth": (build_state_dict(storages={"0": b"\0" * 8, "1": b"\0" * 8, "2": b"\0" * 8}),
                                 "WeightsError", "reaches past its storage"),
        "sd_not_a_dict.pth": (build_state_dict(b"\x80\x02K\x07."), "WeightsError", "expected a dict of tensors"),
    }


# --- blueprint directories ---------------------------------------------------------------

BP_CONFIG = {
    "format": "volvox-blueprint", "version": 1,
    "inputs": [{"name": "x", "shape": ["n", 4], "dtype": "float32"}],
    "nodes": [
        {"id": "fc", "op": "linear", "inputs": {"x": "x", "weight": "w", "bias": "b"}, "outputs": {"y": "h"}},
        {"id": "norm", "op": "rms_norm", "inputs": {"x": "h", "weight": "g"}, "outputs": {"y": "out"},
         "params": {"eps": 1e-5}},
    ],
    "outputs": ["out"],
    "metadata": {"task": "run"},
}
BP_WEIGHTS = {"w": ("F32", [3, 4], np.ones((3, 4), "<f4")), "b": ("F32", [3], np.zeros(3, "<f4")),
              "g": ("F32", [3], np.ones(3, "<f4"))}


def _bp(edit=None, **weights) -> dict[str, bytes]:
    """A blueprint directory (config.json + model.safetensors): BP_CONFIG after ``edit(config)``,
    BP_WEIGHTS with the named entries replaced by (dtype, shape, array)."""
    config = json.loads(json.dumps(BP_CONFIG))
    if edit is not None:
        edit(config)
    header, data = {}, b""
    for name, (dtype, shape, arr) in (BP_WEIGHTS | weights).items():
        raw = arr.tobytes()
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    return {"config.json": (json.dumps(config, indent=1) + "\n").encode(),
            "model.safetensors": build_safetensors(header, data)}


def _set(path: str, value):
    """An edit that sets config[path...] (dot-separated keys / list indices) to ``value``."""
    def edit(config):
        *parents, last = [int(k) if k.isdigit() else k for k in path.split(".")]
        for key in parents:
            config = config[key]
        config[last] = value
    return edit


def bad_blueprints() -> dict[str, tuple[dict[str, bytes], str, str]]:
    """directory name -> ({file name: bytes}, exception class name, message substring)."""
    nan_g = np.array([1.0, np.nan, 1.0], "<f4")
    return {
        "bp_cycle": (_bp(_set("nodes.0.inputs.x", "out")), "BlueprintError",
                     "node 'fc' (linear): input 'x' reads tensor 'out'"),
        "bp_reads_later_output": (_bp(lambda c: c["nodes"].reverse()), "BlueprintError",
                                  "node 'norm' (rms_norm): input 'x' reads tensor 'h'"),
        "bp_unknown_op": (_bp(_set("nodes.1.op", "frobnicate")), "UnsupportedError",
                          "node 'norm': unknown op 'frobnicate'"),
        "bp_shape_lie": (_bp(w=("F32", [3, 5], np.ones((3, 5), "<f4"))), "ShapeError",
                         "node 'fc' (linear): x's last dim must equal weight's in_features"),
        "bp_dtype_lie": (_bp(w=("I8", [3, 4], np.ones((3, 4), "i1"))), "ShapeError",
                         "node 'fc' (linear): weight must be a 2-D float"),
        "bp_norm_weight_f16": (_bp(g=("F16", [3], np.ones(3, "<f2"))), "ShapeError",
                               "node 'norm' (rms_norm): weight must be float32"),
        "bp_huge_dims": (_bp(_set("inputs.0.shape", [2**40, 2**40])), "ShapeError",
                         "x: float32[1099511627776, 1099511627776]"),
        "bp_nan_norm_weight": (_bp(g=("F32", [3], nan_g)), "WeightsError",
                               "tensor 'g' (weight of node 'norm', rms_norm) holds NaN or inf"),
        "bp_inf_norm_weight": (_bp(g=("F32", [3], np.array([1.0, 1.0, np.inf], "<f4"))), "WeightsError",
                               "tensor 'g' (weight of node 'norm', rms_norm) holds NaN or inf"),
        "bp_weights_dtype_lie": (
            {"config.json": _bp()["config.json"],
             "model.safetensors": build_safetensors(
                 {"w": {"dtype": "F64", "shape": [3, 4], "data_offsets": [0, 48]},
                  "b": {"dtype": "F32", "shape": [3], "data_offsets": [48, 60]},
                  "g": {"dtype": "F32", "shape": [3], "data_offsets": [60, 72]}}, bytes(72))},
            "WeightsError", "tensor 'w': data_offsets [0, 48] hold 48 bytes, but F64 [3, 4] needs 96"),
    }


def corpus() -> dict[str, bytes]:
    """Every file this script writes, by path relative to tests/data/."""
    files = {"tiny.gguf": build_gguf()[0],
             "tiny.safetensors": build_safetensors(TINY_ST_HEADER, TINY_ST_DATA),
             "tiny.tflite": build_tflite()[0],
             "tiny.onnx": build_onnx(),
             "tiny.pth": build_state_dict()}
    bad = bad_gguf_files() | bad_safetensors_files() | bad_tflite_files() | bad_onnx_files() | bad_state_dict_files()
    dirs = bad_blueprints()
    expected = {name: {"error": err, "match": match}
                for name, (_, err, match) in sorted((bad | dirs).items())}
    files.update({f"bad/{name}": data for name, (data, _, _) in bad.items()})
    files.update({f"bad/{name}/{f}": data for name, (content, _, _) in dirs.items() for f, data in content.items()})
    files["bad/expected.json"] = (json.dumps(expected, indent=1) + "\n").encode()
    return files


def main(argv: list[str]) -> int:
    """Rewrite tests/data/ (or the directory given as the only argument)."""
    root = Path(argv[0]) if argv else DATA_DIR
    shutil.rmtree(root / "bad", ignore_errors=True)
    files = corpus()
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    print(f"wrote {len(files)} files under {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
