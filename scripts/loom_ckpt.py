#!/usr/bin/env python3
"""Reassembles the whole tensors of a loom checkpoint without loom: plain Python, no packages.

    python3 scripts/loom_ckpt.py CHECKPOINT_DIR OUT.safetensors [--optimizer]

CHECKPOINT_DIR is a step directory (run/step_00000400) of either layout: loom-checkpoint-2
(sharded: one rank_<r>.safetensors per rank, each with a piece table) or loom-checkpoint-1
(consolidated: model.safetensors). OUT gets the model's weights, whole, in their stored dtype,
byte for byte what `loom-ckpt export` writes; with --optimizer, the optimizer state too. Any
safetensors reader then opens it (safetensors.torch.load_file for PyTorch). Every piece is checked
against its CRC-32 and the pieces must cover every tensor exactly once.
"""
import json
import os
import struct
import sys
import zlib

SIZES = {"F32": 4, "F16": 2, "BF16": 2, "I32": 4, "I64": 8, "U8": 1, "U16": 2}


def fail(message):
    sys.exit(f"loom_ckpt.py: {message}")


def read_header(path):
    """The header of a safetensors file and the offset of its data."""
    with open(path, "rb") as f:
        prefix = f.read(8)
        if len(prefix) < 8:
            fail(f"'{path}' is shorter than 8 bytes (truncated)")
        (length,) = struct.unpack("<Q", prefix)
        text = f.read(length)
        if len(text) < length:
            fail(f"'{path}': its header does not fit in the file (truncated)")
    return json.loads(text), 8 + length


def read_entry(path, data_start, entry):
    begin, end = entry["data_offsets"]
    with open(path, "rb") as f:
        f.seek(data_start + begin)
        data = f.read(end - begin)
    if len(data) != end - begin:
        fail(f"'{path}' ends inside a tensor (truncated)")
    return data


def numel(shape):
    n = 1
    for extent in shape:
        n *= extent
    return n


def global_runs(piece):
    """The piece's elements as (global start, count) runs, in the piece's order (as io/pieces.hpp)."""
    shape, offset, box = piece["global"], piece["offset"], piece["box"]
    begin, end = piece["begin"], piece["end"]
    if not shape:
        return [(0, 1)] if end > begin else []
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    width = box[-1]
    runs = []
    row = begin // width if width else 0
    while width and row * width < end:
        start, r = offset[-1], row
        for d in range(len(shape) - 2, -1, -1):
            start += (offset[d] + r % box[d]) * strides[d]
            r //= box[d]
        first, last = max(begin, row * width), min(end, (row + 1) * width)
        runs.append((start + first - row * width, last - first))
        row += 1
    return runs


def check_piece(path, piece):
    """The checks of io::Piece::validate: the box inside the global shape, the range inside the box."""
    shape, offset, box = piece.get("global"), piece.get("offset"), piece.get("box")
    begin, end = piece.get("begin"), piece.get("end")
    ints = lambda xs: isinstance(xs, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in xs)
    if not (ints(shape) and ints(offset) and ints(box) and ints([begin, end]) and len(shape) == len(offset) == len(box)):
        fail(f"'{path}': a malformed piece table row: {piece}")
    for d in range(len(shape)):
        if not (0 <= box[d] <= shape[d] and 0 <= offset[d] <= shape[d] - box[d]):
            fail(f"'{path}': the piece of '{piece.get('tensor')}' has a box {box} at {offset} outside {shape}")
    if not 0 <= begin <= end <= numel(box):
        fail(f"'{path}': the piece of '{piece.get('tensor')}' has the range [{begin}, {end}) outside its box {box}")


def sharded_tensors(directory, manifest, names):
    """Each named tensor, whole, from the rank files' pieces: {name: (dtype, shape, bytes)}."""
    wanted = set(names)
    out = {}
    runs = {}
    for rank in range(manifest["world"]):
        name = f"rank_{rank:05d}.safetensors"
        path = os.path.join(directory, name)
        if not os.path.exists(path):
            fail(f"'{path}' is missing")
        if os.path.getsize(path) != manifest["files"][name]["bytes"]:
            fail(f"'{path}' has {os.path.getsize(path)} bytes, not the {manifest['files'][name]['bytes']} its "
                 f"state.json records")
        header, data_start = read_header(path)
        table = json.loads(header.get("__metadata__", {}).get("loom.pieces", "null") or "null")
        if not isinstance(table, list):
            fail(f"'{path}' has no piece table")
        for piece in table:
            check_piece(path, piece)
            tensor = piece["tensor"]
            if tensor not in wanted:
                continue
            entry = header.get(piece["entry"])
            if entry is None or entry.get("dtype") not in SIZES:
                fail(f"'{path}': the piece table's entry '{piece['entry']}' is missing or of an unknown dtype")
            size = SIZES[entry["dtype"]]
            data = read_entry(path, data_start, entry)
            if len(data) != (piece["end"] - piece["begin"]) * size:
                fail(f"'{path}': entry '{piece['entry']}' holds {len(data)} bytes, not {piece['end'] - piece['begin']} "
                     f"elements of {entry['dtype']}")
            if zlib.crc32(data) != piece["crc32"]:
                fail(f"'{path}': entry '{piece['entry']}' (the piece [{piece['begin']}, {piece['end']}) of "
                     f"'{tensor}') fails its CRC-32: the file is damaged")
            if tensor not in out:
                out[tensor] = (entry["dtype"], piece["global"], bytearray(numel(piece["global"]) * size))
                runs[tensor] = []
            dtype, shape, whole = out[tensor]
            if entry["dtype"] != dtype or piece["global"] != shape:
                fail(f"'{path}': a piece of '{tensor}' is {entry['dtype']} {piece['global']}, others {dtype} {shape}")
            at = 0
            for start, count in global_runs(piece):
                whole[start * size:(start + count) * size] = data[at * size:(at + count) * size]
                runs[tensor].append((start, count))
                at += count
    for tensor in names:
        if tensor not in out:
            fail(f"no rank file holds '{tensor}'")
        covered = 0  # the runs must tile [0, numel): no gap, no element twice
        for start, count in sorted(r for r in runs[tensor] if r[1] > 0):
            if start != covered:
                fail(f"the pieces of '{tensor}' {'cover element ' + str(start) + ' twice' if start < covered else 'leave element ' + str(covered) + ' uncovered'}")
            covered = start + count
        if covered != numel(out[tensor][1]):
            fail(f"the pieces of '{tensor}' leave element {covered} uncovered")
    return out


def consolidated_tensors(directory, names):
    path = os.path.join(directory, "model.safetensors")
    header, data_start = read_header(path)
    return {name: (header[name]["dtype"], header[name]["shape"], read_entry(path, data_start, header[name]))
            for name in names}


def write_safetensors(path, names, tensors, metadata):
    """The same bytes loom's writer produces: compact JSON with sorted keys, padded to 8 bytes."""
    header, offset = {"__metadata__": metadata}, 0
    for name in names:
        dtype, shape, data = tensors[name]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name in names:
            f.write(tensors[name][2])


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    if len(args) != 2 or any(a not in ("--optimizer",) for a in argv if a.startswith("--")):
        sys.exit(__doc__)
    directory, out = args
    with open(os.path.join(directory, "state.json")) as f:
        manifest = json.load(f)
    config = json.dumps(manifest["config"], separators=(",", ":"), sort_keys=True)
    metadata = {"format": "pt", "loom_architecture": manifest.get("architecture", "gpt"), "loom_config": config,
                "loom_precision": manifest["precision"]}
    if manifest["format"] == "loom-checkpoint-2":
        names = list(manifest["tensors"]["model"])
        if "--optimizer" in argv:
            names += manifest["tensors"]["optimizer"]
        tensors = sharded_tensors(directory, manifest, names)
    elif manifest["format"] == "loom-checkpoint-1":
        if "--optimizer" in argv:
            fail("--optimizer reads sharded checkpoints; a consolidated one has optimizer.safetensors already")
        header, _ = read_header(os.path.join(directory, "model.safetensors"))
        names = sorted((n for n in header if n != "__metadata__"), key=lambda n: header[n]["data_offsets"][0])
        tensors = consolidated_tensors(directory, names)
    else:
        fail(f"'{directory}' is not a loom checkpoint ({manifest.get('format')})")
    write_safetensors(out, names, tensors, metadata)
    print(f"wrote {len(names)} tensors of {directory} to {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
