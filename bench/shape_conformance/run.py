#!/usr/bin/python3
"""run.py - shape conformance of neusight-onnx over Debian's libonnx-testdata.

For every model in the node, pytorch-converted, pytorch-operator and simple suites, runs
the real CLI (`neusight-onnx MODEL --gpu b200 --predictor roofline --json R.json --out A.onnx --quiet`, symbolic
input dims bound with --dim from the shapes of test_data_set_0/input_*.pb) and compares
every graph output's shape in R.json with the shape of the expected output
(test_data_set_0/output_*.pb). Prints the exact-match figure and the failing models by
suite. Needs python3-onnx (only to read the test data) and libonnx-testdata.

Two passes:
  shapes  the model as shipped; only the inputs' shapes are bound. Outputs whose shape
          depends on input *values* (a Reshape whose target is a graph input, NonZero, ...)
          cannot be known here.
  values  the same model with the test inputs stored as initializers, so that shape values
          fed as inputs are constants — what real exported graphs look like.
A model is exact when every graph output has the expected rank and dims (a scalar counts
only when the annotated model says the rank is known). Non-tensor outputs (sequences,
optionals) are compared as "no shape" and reported in their own category.
"""
import argparse
import concurrent.futures as cf
import json
import os
import subprocess
import sys
import tempfile
import time

import onnx
from onnx import numpy_helper

SUITES = ["node", "pytorch-converted", "pytorch-operator", "simple"]


def load_pb(path, kind):
    with open(path, "rb") as f:
        data = f.read()
    cls = {"tensor": onnx.TensorProto, "sequence": onnx.SequenceProto, "optional": onnx.OptionalProto}.get(kind)
    if cls is None:
        return None
    t = cls()
    t.ParseFromString(data)
    return t


def value_shape(v, kind):
    """Expected shape of a test value: dims for a tensor, ("sequence", [shapes]) or
    ("optional", shape or None) for the others."""
    if kind == "tensor":
        return list(v.dims)
    if kind == "sequence":
        if v.elem_type == onnx.SequenceProto.TENSOR:
            return ("sequence", [list(t.dims) for t in v.tensor_values])
        if v.elem_type == onnx.SequenceProto.SEQUENCE:
            return ("sequence", [value_shape(s, "sequence") for s in v.sequence_values])
        return ("sequence", [])
    if kind == "optional":
        if v.elem_type == onnx.OptionalProto.TENSOR:
            return ("optional", list(v.tensor_value.dims))
        if v.elem_type == onnx.OptionalProto.SEQUENCE:
            return ("optional", value_shape(v.sequence_value, "sequence"))
        return ("optional", None)
    return None


def build_value(v, kind, name, vtype, m, nodes):
    """Nodes (and initializers) that make the test value `v` a constant named `name`."""
    if kind == "tensor":
        t = onnx.TensorProto()
        t.CopyFrom(v)
        t.name = name
        m.graph.initializer.append(t)
        return
    if kind == "sequence":
        elems = []
        if v.elem_type == onnx.SequenceProto.TENSOR:
            for i, t in enumerate(v.tensor_values):
                build_value(t, "tensor", f"{name}__e{i}", None, m, nodes)
                elems.append(f"{name}__e{i}")
        if elems:
            nodes.append(onnx.helper.make_node("SequenceConstruct", elems, [name]))
        else:
            dt = vtype.sequence_type.elem_type.tensor_type.elem_type if vtype is not None else 1
            nodes.append(onnx.helper.make_node("SequenceEmpty", [], [name], dtype=dt or 1))
        return
    if kind == "optional":
        inner = vtype.optional_type.elem_type if vtype is not None else None
        if v.elem_type == onnx.OptionalProto.TENSOR:
            build_value(v.tensor_value, "tensor", name + "__v", None, m, nodes)
            nodes.append(onnx.helper.make_node("Optional", [name + "__v"], [name]))
        elif v.elem_type == onnx.OptionalProto.SEQUENCE:
            build_value(v.sequence_value, "sequence", name + "__v", inner, m, nodes)
            nodes.append(onnx.helper.make_node("Optional", [name + "__v"], [name]))
        else:
            nodes.append(onnx.helper.make_node("Optional", [], [name], type=inner))


def type_kind(tp):
    which = tp.WhichOneof("value")
    return {"tensor_type": "tensor", "sequence_type": "sequence", "optional_type": "optional"}.get(which, which or "none")


def prepare(model_dir, work, mode):
    """Returns (model path, extra CLI args, expected output shapes or kinds)."""
    model_path = os.path.join(model_dir, "model.onnx")
    m = onnx.load(model_path, load_external_data=False)
    ds = os.path.join(model_dir, "test_data_set_0")
    inits = {i.name for i in m.graph.initializer}
    inputs = [i for i in m.graph.input if i.name not in inits]
    dims, changed, conflict = {}, False, False
    feeds = []
    for k, vi in enumerate(inputs):
        p = os.path.join(ds, f"input_{k}.pb")
        kind = type_kind(vi.type)
        if not os.path.exists(p) or kind != "tensor":
            feeds.append(load_pb(p, kind) if os.path.exists(p) and kind in ("sequence", "optional") else None)
            continue
        t = load_pb(p, "tensor")
        feeds.append(t)
        tt = vi.type.tensor_type
        if not tt.HasField("shape") or len(tt.shape.dim) != len(t.dims):
            tt.shape.Clear()
            for d in t.dims:
                tt.shape.dim.add().dim_value = d
            changed = True
            continue
        for d, v in zip(tt.shape.dim, t.dims):
            if d.HasField("dim_value") and d.dim_value == v:
                continue
            if d.HasField("dim_param") and d.dim_param and dims.get(d.dim_param, v) == v:
                dims[d.dim_param] = v
                continue
            if d.HasField("dim_param") and d.dim_param:
                conflict = True
            d.Clear()
            d.dim_value = v
            changed = True
    if mode == "values":
        # Tensors become initializers; sequences and optionals, which cannot be stored,
        # become SequenceConstruct / SequenceEmpty / Optional nodes over initializers.
        keep, nodes = [], []
        for vi, t in zip(inputs, feeds):
            kind = type_kind(vi.type)
            if t is None or (kind != "tensor" and m.ir_version < 4):
                keep.append(vi)
                continue
            build_value(t, kind, vi.name, vi.type, m, nodes)
        if m.ir_version >= 4:  # IR 3 lists initializers among the inputs; later IRs need not
            del m.graph.input[:]
            m.graph.input.extend(keep)
        if nodes:
            old = list(m.graph.node)
            del m.graph.node[:]
            m.graph.node.extend(nodes + old)
        changed = True
    out_path = model_path
    if changed:
        out_path = os.path.join(work, "model.onnx")
        onnx.save(m, out_path)
    args = []
    for name, v in sorted(dims.items()):
        args += ["--dim", f"{name}={v}"]
    expected = []
    for k, vi in enumerate(m.graph.output):
        kind = type_kind(vi.type)
        p = os.path.join(ds, f"output_{k}.pb")
        if kind not in ("tensor", "sequence", "optional") or not os.path.exists(p):
            expected.append((vi.name, kind, None))
            continue
        expected.append((vi.name, kind, value_shape(load_pb(p, kind), kind)))
    return out_path, args, expected, conflict


def reported_value(g):
    """A report's sequence / optional output in value_shape()'s form (None parts: unknown)."""
    kind = g.get("kind", "tensor")
    if kind == "tensor":
        return g.get("shape")
    elems = g.get("elements", [])
    if not g.get("elements_known", False):
        return (kind, "length unknown")
    if kind == "sequence":
        return ("sequence", [reported_value(e) for e in elems])
    return ("optional", reported_value(elems[0]) if elems else None)


def check_one(binary, model_dir, mode, timeout):
    name = os.path.basename(model_dir)
    with tempfile.TemporaryDirectory() as work:
        try:
            path, args, expected, _ = prepare(model_dir, work, mode)
        except Exception as e:  # noqa: BLE001 - bench reports, never stops
            return name, "bench-error", str(e)[:200]
        rj = os.path.join(work, "r.json")
        ra = os.path.join(work, "a.onnx")
        # The roofline predictor: shapes do not depend on the predictor, and the bench then
        # needs no trained weights.
        cmd = [binary, path, "--gpu", "b200", "--predictor", "roofline", "--json", rj, "--out", ra, "--quiet", *args]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return name, "hang", f"> {timeout} s"
        except OSError as e:  # binary missing or being relinked: a bench problem, not a model's
            return name, "bench-error", str(e)[:200]
        if p.returncode < 0 or p.returncode > 2:
            return name, "crash", f"signal/exit {p.returncode}: {p.stderr.strip()[:200]}"
        if p.returncode != 0:
            return name, f"exit-{p.returncode}", p.stderr.strip().splitlines()[-1][:200] if p.stderr.strip() else ""
        with open(rj) as f:
            report = json.load(f)
        got = {o["name"]: o for o in report["graph_outputs"]}
        ann = onnx.load(ra, load_external_data=False)
        rank_known = {o.name: o.type.tensor_type.HasField("shape") for o in ann.graph.output}
        for oname, kind, dims in expected:
            if kind not in ("tensor", "sequence", "optional") or dims is None:
                return name, "non-tensor-output", f"{oname}: {kind}"
            g = got.get(oname)
            if g is None:
                return name, "mismatch", f"{oname}: missing in report"
            if kind != "tensor":
                shown = reported_value(g)
                if shown != dims:
                    return name, "mismatch", f"{oname}: got {shown}, expected {dims}"
                continue
            if g["shape"] != dims or (not dims and not rank_known.get(oname, False)):
                shown = g["shape"] if (dims or rank_known.get(oname, False)) else "rank unknown"
                return name, "mismatch", f"{oname}: got {shown}, expected {dims}"
        return name, "exact", ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True, help="path to the neusight-onnx binary")
    ap.add_argument("--data", default="/usr/share/libonnx-testdata/data")
    ap.add_argument("--mode", choices=["shapes", "values", "both"], default="both")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds per model")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--filter", default="", help="only models whose name contains this")
    ap.add_argument("-v", "--verbose", action="store_true", help="list every failure")
    a = ap.parse_args()
    if not os.path.isdir(a.data):
        sys.exit(f"{a.data}: not found; install Debian's libonnx-testdata (apt-get install libonnx-testdata)")
    models = []
    for s in SUITES:
        d = os.path.join(a.data, s)
        for n in sorted(os.listdir(d)):
            if a.filter in n and os.path.exists(os.path.join(d, n, "model.onnx")):
                models.append((s, os.path.join(d, n)))
    modes = ["shapes", "values"] if a.mode == "both" else [a.mode]
    for mode in modes:
        t0 = time.time()
        with cf.ThreadPoolExecutor(a.jobs) as ex:
            res = list(ex.map(lambda sm: (sm[0], *check_one(a.bin, sm[1], mode, a.timeout)), models))
        dt = time.time() - t0
        exact = sum(1 for r in res if r[2] == "exact")
        bad = [r for r in res if r[2] in ("crash", "hang")]
        print(f"== {mode}: {exact}/{len(res)} exact = {100.0 * exact / max(len(res), 1):.1f}% "
              f"({len(bad)} crashes/hangs, {dt:.0f} s)")
        for s in SUITES:
            rs = [r for r in res if r[0] == s]
            ex_s = sum(1 for r in rs if r[2] == "exact")
            print(f"   {s:18s} {ex_s}/{len(rs)}")
        by = {}
        for r in res:
            if r[2] != "exact":
                by.setdefault((r[0], r[2]), []).append(r)
        for (s, st), rs in sorted(by.items()):
            names = [r[1] for r in rs]
            print(f"   [{s}] {st} ({len(rs)}): " + ("" if a.verbose else ", ".join(names)))
            if a.verbose:
                for r in rs:
                    print(f"      {r[1]}: {r[3]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
