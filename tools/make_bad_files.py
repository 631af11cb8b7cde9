"""Write the crafted bad-input corpus: tests/data/bad/ plus the two valid seeds it breaks.

    python tools/make_bad_files.py            # rewrites tests/data/{tiny.gguf,tiny.safetensors,bad/}

Each bad file is the tiny valid GGUF or safetensors file with one thing broken.
``tests/data/bad/expected.json`` maps every file name to the volvox exception
it must raise (when opened and every tensor touched) and a substring of its
message. The output is deterministic, so tests/test_bad_files.py can check the
committed corpus is what this script writes. Nothing here imports volvox: the
files are built from the formats' specifications alone.
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import numpy as np

DATA_DIR = Path(__file__).resolve().parent.parent / "tests" / "data"

# --- GGUF ------------------------------------------------------------------------------

# KV value type ids (gguf_type) and their struct codes.
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
_SCALAR_CODES = {U8: "B", I8: "b", U16: "H", I16: "h", U32: "I", I32: "i", F32: "f",
                 BOOL: "?", U64: "Q", I64: "q", F64: "d"}
# ggml type ids used below.
GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q4_1, GGML_Q8_0, GGML_Q5_K, GGML_BF16 = 0, 1, 2, 3, 8, 13, 30


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
        "gguf_unsupported_q5_k.gguf": (
            build_gguf(tensors=_with_tensor(t1, ne=(256, 1), type_id=GGML_Q5_K,
                                            data=_rng_bytes(176, 4)))[0],
            "UnsupportedError", f"tensor '{t1}' has type q5_k"),
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


def corpus() -> dict[str, bytes]:
    """Every file this script writes, by path relative to tests/data/."""
    files = {"tiny.gguf": build_gguf()[0],
             "tiny.safetensors": build_safetensors(TINY_ST_HEADER, TINY_ST_DATA)}
    bad = bad_gguf_files() | bad_safetensors_files()
    expected = {name: {"error": err, "match": match} for name, (_, err, match) in sorted(bad.items())}
    files.update({f"bad/{name}": data for name, (data, _, _) in bad.items()})
    files["bad/expected.json"] = (json.dumps(expected, indent=1) + "\n").encode()
    return files


def main(argv: list[str]) -> int:
    """Rewrite tests/data/ (or the directory given as the only argument)."""
    root = Path(argv[0]) if argv else DATA_DIR
    (root / "bad").mkdir(parents=True, exist_ok=True)
    for old in (root / "bad").iterdir():
        old.unlink()
    files = corpus()
    for rel, data in files.items():
        (root / rel).write_bytes(data)
    print(f"wrote {len(files)} files under {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
