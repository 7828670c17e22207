"""A small, strict safetensors reader and writer (no dependency on the `safetensors` package).

Format: an 8-byte little-endian unsigned header length N, N bytes of UTF-8 JSON
({name: {"dtype", "shape", "data_offsets": [begin, end]}, optional "__metadata__": {str: str}}),
then the raw little-endian data; offsets are relative to the first byte after the header. The data
buffer must be covered exactly (no holes, no overlaps), as the format requires.

Floating tensors load as float64 or float32 torch tensors (BF16/F16 are upcast to float32 first);
integer tensors load as int64 unless `keep_int_dtype`.
"""

import json
import os
import struct

import numpy as np
import torch

# safetensors dtype -> (numpy little-endian dtype, bytes per element)
_NUMPY_DTYPES = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),  # decoded by hand below
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
_FLOAT_DTYPES = {"F64", "F32", "F16", "BF16"}
_MAX_HEADER = 100 * 1024 * 1024


class SafetensorsError(ValueError):
    """A malformed or unsupported safetensors file."""


def _bf16_to_f32(raw_u16):
    return (raw_u16.astype(np.uint32) << np.uint32(16)).view(np.float32)


def parse_header(blob, where="<bytes>"):
    """Returns (header dict without __metadata__, metadata dict, data start offset)."""
    if len(blob) < 8:
        raise SafetensorsError(f"{where}: {len(blob)} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > _MAX_HEADER or 8 + n > len(blob):
        raise SafetensorsError(
            f"{where}: header length {n} does not fit in the {len(blob)}-byte file")
    try:
        header = json.loads(bytes(blob[8:8 + n]).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"{where}: header is not valid UTF-8 JSON: {e}") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{where}: header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    return header, metadata, 8 + n


def _check_entry(name, entry, data_len, where):
    for key in ("dtype", "shape", "data_offsets"):
        if key not in entry:
            raise SafetensorsError(f"{where}: tensor '{name}' has no '{key}'")
    dtype = entry["dtype"]
    if dtype not in _NUMPY_DTYPES:
        raise SafetensorsError(f"{where}: tensor '{name}' has unsupported dtype '{dtype}'")
    shape = entry["shape"]
    if not isinstance(shape, list) or any(not isinstance(d, int) or d < 0 for d in shape):
        raise SafetensorsError(f"{where}: tensor '{name}' has a bad shape {shape!r}")
    begin, end = entry["data_offsets"]
    numel = int(np.prod(shape, dtype=np.int64)) if shape else 1
    want = numel * _NUMPY_DTYPES[dtype].itemsize
    if not (0 <= begin <= end <= data_len):
        raise SafetensorsError(
            f"{where}: tensor '{name}' offsets [{begin}, {end}] outside the {data_len}-byte data")
    if end - begin != want:
        raise SafetensorsError(
            f"{where}: tensor '{name}' ({dtype} {shape}) needs {want} bytes, "
            f"offsets give {end - begin}")
    return dtype, shape, begin, end


def _check_coverage(spans, data_len, where):
    pos = 0
    for begin, end, name in sorted(spans):
        if begin != pos:
            kind = "overlaps the previous tensor" if begin < pos else f"leaves a hole at byte {pos}"
            raise SafetensorsError(f"{where}: tensor '{name}' at offset {begin} {kind}")
        pos = end
    if pos != data_len:
        raise SafetensorsError(f"{where}: data is {data_len} bytes but tensors cover {pos}")


def _to_torch(dtype, shape, raw, float_dtype, keep_int_dtype):
    arr = np.frombuffer(raw, dtype=_NUMPY_DTYPES[dtype])
    if dtype == "BF16":
        arr = _bf16_to_f32(arr)
    if dtype in _FLOAT_DTYPES:
        if float_dtype is None:
            arr = arr.astype(np.float64 if dtype == "F64" else np.float32)
        else:
            arr = arr.astype(np.float64 if float_dtype == torch.float64 else np.float32)
    elif not keep_int_dtype and dtype != "BOOL":
        arr = arr.astype(np.int64)
    return torch.from_numpy(np.array(arr, copy=True).reshape(shape))


def loads(blob, float_dtype=None, keep_int_dtype=False, where="<bytes>"):
    """Decodes safetensors bytes into ({name: torch.Tensor}, {name: stored dtype}, metadata).

    float_dtype: torch.float64 / torch.float32 to convert every floating tensor to, or None to keep
    F64 as float64 and everything else as float32.
    """
    header, metadata, start = parse_header(blob, where)
    data = memoryview(blob)[start:]
    tensors, dtypes, spans = {}, {}, []
    for name, entry in header.items():
        if not isinstance(entry, dict):
            raise SafetensorsError(f"{where}: entry '{name}' is not an object")
        dtype, shape, begin, end = _check_entry(name, entry, len(data), where)
        spans.append((begin, end, name))
        tensors[name] = _to_torch(dtype, shape, data[begin:end], float_dtype, keep_int_dtype)
        dtypes[name] = dtype
    _check_coverage(spans, len(data), where)
    return tensors, dtypes, metadata


def load_file(path, float_dtype=None, keep_int_dtype=False):
    with open(path, "rb") as f:
        blob = f.read()
    return loads(blob, float_dtype, keep_int_dtype, where=path)


def load_model_dir(directory, float_dtype=None):
    """Loads model.safetensors, or the files listed in model.safetensors.index.json.

    Returns ({name: tensor}, {name: stored dtype}).
    """
    index_path = os.path.join(directory, "model.safetensors.index.json")
    single = os.path.join(directory, "model.safetensors")
    if not os.path.exists(index_path):
        if not os.path.exists(single):
            raise FileNotFoundError(
                f"{directory}: neither model.safetensors nor model.safetensors.index.json")
        tensors, dtypes, _ = load_file(single, float_dtype)
        return tensors, dtypes
    with open(index_path) as f:
        index = json.load(f)
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise SafetensorsError(f"{index_path}: no 'weight_map' object")
    tensors, dtypes = {}, {}
    for fname in sorted(set(weight_map.values())):
        part, part_dtypes, _ = load_file(os.path.join(directory, fname), float_dtype)
        for name, t in part.items():
            if name in tensors:
                raise SafetensorsError(f"{index_path}: tensor '{name}' appears in two files")
            if weight_map.get(name) != fname:
                raise SafetensorsError(
                    f"{index_path}: tensor '{name}' is in {fname} but the weight_map says "
                    f"{weight_map.get(name)!r}")
            tensors[name], dtypes[name] = t, part_dtypes[name]
    missing = sorted(set(weight_map) - set(tensors))
    if missing:
        raise SafetensorsError(
            f"{index_path}: weight_map names tensors no file holds: {missing[:8]}")
    return tensors, dtypes


def _torch_to_st(t):
    table = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16",
             torch.bfloat16: "BF16", torch.int64: "I64", torch.int32: "I32", torch.int16: "I16",
             torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL"}
    if t.dtype not in table:
        raise SafetensorsError(f"cannot write torch dtype {t.dtype}")
    return table[t.dtype]


def _raw_bytes(t, dtype):
    t = t.detach().contiguous().cpu()
    if dtype == "BF16":  # numpy has no bfloat16: take the int16 bit pattern
        return t.view(torch.int16).numpy().astype("<i2").tobytes()
    return t.numpy().astype(_NUMPY_DTYPES[dtype]).tobytes()


def dumps(tensors, metadata=None):
    """Encodes {name: torch.Tensor} as safetensors bytes (names sorted, header padded to 8)."""
    header, chunks, pos = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name]
        dtype = _torch_to_st(t)
        raw = _raw_bytes(t, dtype)
        header[name] = {"dtype": dtype, "shape": list(t.shape),
                        "data_offsets": [pos, pos + len(raw)]}
        chunks.append(raw)
        pos += len(raw)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def save_file(tensors, path, metadata=None):
    with open(path, "wb") as f:
        f.write(dumps(tensors, metadata))


def save_sharded(tensors, directory, names_per_file):
    """Writes tensors over several files plus model.safetensors.index.json (for tests)."""
    names = sorted(tensors)
    weight_map = {}
    shards = [names[i:i + names_per_file] for i in range(0, len(names), names_per_file)]
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file({n: tensors[n] for n in shard}, os.path.join(directory, fname))
        weight_map.update({n: fname for n in shard})
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f, indent=1)
