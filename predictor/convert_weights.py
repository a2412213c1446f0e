#!/usr/bin/env python3
"""convert_weights.py - rewrite NeuSight weights files of schema 8 in schema 9.

    python3 predictor/convert_weights.py DIR [DIR...]

Each DIR/weights.json of schema 8 ("format": "neusight-weights-8", one value a line, the
networks' arrays as JSON numbers) is rewritten as `neusight-onnx train` writes schema 9: the
same keys with "schema": 9 in place of "format", each network's number arrays (lo, hi, mean,
scale, and every layer's w and b) packed as base64 of their little-endian IEEE doubles,
minified, keys sorted. Every number keeps its bits (checked before the file is replaced). A
file already in schema 9 is left alone. Exits 1 with one line per file it cannot convert.
"""
import base64
import json
import os
import struct
import sys

SCHEMA = 9
NET_ARRAYS = ("lo", "hi", "mean", "scale")
LAYER_ARRAYS = ("w", "b")


def pack(values):
    return base64.b64encode(struct.pack(f"<{len(values)}d", *values)).decode("ascii")


def unpack(text):
    raw = base64.b64decode(text, validate=True)
    return list(struct.unpack(f"<{len(raw) // 8}d", raw))


# Applies `f` to every packed array of the file's networks, in place.
def each_array(j, f):
    for cls in j["classes"].values():
        for net in cls["nets"]:
            for k in NET_ARRAYS:
                net[k] = f(net[k])
            for layer in net["layers"]:
                for k in LAYER_ARRAYS:
                    layer[k] = f(layer[k])


def convert(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    j = json.loads(text)
    if j.get("schema") == SCHEMA:
        return False
    if j.get("format") != "neusight-weights-8":
        raise ValueError(f"not a schema-8 weights file (format {j.get('format')!r}, schema {j.get('schema')!r})")
    del j["format"]
    j["schema"] = SCHEMA
    each_array(j, lambda v: pack([float(x) for x in v]))
    out = json.dumps(j, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    # The same numbers, bit for bit, before the file is replaced.
    old = json.loads(text)
    del old["format"]
    back = json.loads(out)
    del back["schema"]
    each_array(back, unpack)
    bits = lambda v: struct.pack(f"<{len(v)}d", *v)
    same = []
    each_array(old, lambda v: same.append(bits([float(x) for x in v])) or v)
    each_array(back, lambda v: same.append(bits(v)) or v)
    half = len(same) // 2
    if same[:half] != same[half:] or back != old:
        raise ValueError("the converted file does not read back to the same values")
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(out)
    os.replace(tmp, path)
    return True


def main(argv):
    if not argv:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    failed = False
    for d in argv:
        path = os.path.join(d, "weights.json")
        try:
            if convert(path):
                print(f"converted {path}")
        except (OSError, ValueError) as e:
            print(f"convert_weights: {path}: {e}", file=sys.stderr)
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
