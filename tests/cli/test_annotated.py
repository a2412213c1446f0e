"""The annotated model (--out): unchanged but for annotations, passes onnx.checker, loads and runs
in onnxruntime (npm onnxruntime-node, installed by scripts/install_test_deps.sh), keeps external
weights external and resolvable from the new folder, and shows latency and shapes in Netron
(doc_string and value_info on >= 90% of tensors)."""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

from cli_util import EXAMPLE, needs_shared, run, run_json, shared

PY = "/usr/bin/python3"
NODE = shutil.which("node")
NODE_DIR = os.environ.get("NEUSIGHT_NODE_DIR") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "neusight-test-deps")
ORT = os.path.join(NODE_DIR, "node_modules", "onnxruntime-node")

# Runs a model on deterministic inputs and prints {output: [values]}.
ORT_SCRIPT = r"""
const ort = require(process.argv[2]);
const fs = require('fs');
(async () => {
  const inputs = JSON.parse(fs.readFileSync(process.argv[4], 'utf8'));
  const session = await ort.InferenceSession.create(process.argv[3]);
  const feeds = {};
  for (const [name, dims] of Object.entries(inputs)) {
    const n = dims.reduce((a, b) => a * b, 1);
    const data = new Float32Array(n);
    for (let i = 0; i < n; ++i) data[i] = ((i * 7919) % 1000) / 1000;
    feeds[name] = new ort.Tensor('float32', data, dims);
  }
  const out = await session.run(feeds);
  const res = {};
  for (const [k, v] of Object.entries(out)) res[k] = Array.from(v.data);
  console.log(JSON.stringify(res));
})().catch(e => { console.error(String(e)); process.exit(1); });
"""

# Compares the original and the annotated model; prints a JSON summary.
CHECK_SCRIPT = r"""
import json, sys, onnx
orig_path, ann_path = sys.argv[1], sys.argv[2]
onnx.checker.check_model(ann_path)  # by path: external data must resolve from the new folder
a = onnx.load(orig_path, load_external_data=False)
b = onnx.load(ann_path, load_external_data=False)
def sig(n): return (n.op_type, n.domain, list(n.input), list(n.output), [x.SerializeToString() for x in n.attribute])
assert [sig(n) for n in a.graph.node] == [sig(n) for n in b.graph.node], "nodes changed"
# Named nodes keep their names; unnamed ones may carry the generated name the report uses.
assert all(x.name == y.name for x, y in zip(a.graph.node, b.graph.node) if x.name), "names changed"
def init(t):
    t = onnx.TensorProto.FromString(t.SerializeToString())
    ext = {e.key: e.value for e in t.external_data}
    del t.external_data[:]
    ext.pop("location", None)
    return t.SerializeToString(), sorted(ext.items())
assert [init(t) for t in a.graph.initializer] == [init(t) for t in b.graph.initializer], "initializers changed"
assert [i.SerializeToString() for i in a.graph.input] == [i.SerializeToString() for i in b.graph.input]
assert a.opset_import == b.opset_import and a.ir_version == b.ir_version
shaped = {v.name for v in list(b.graph.value_info) + list(b.graph.output) + list(b.graph.input)
          if v.type.tensor_type.HasField("shape")}
tensors = [o for n in b.graph.node for o in n.output if o]
docs = [n for n in b.graph.node if "neusight: latency_ms=" in n.doc_string]
kernel_docs = [n for n in b.graph.node if " tile=" in n.doc_string and " waves=" in n.doc_string and " bound=" in n.doc_string]
meta = {p.key: p.value for p in b.metadata_props}
stages = sorted({line.split(" of ")[0].strip() for n in b.graph.node for line in n.doc_string.splitlines()
                 if line.strip().startswith("pipeline stage ")})
locations = sorted({e.value for t in b.graph.initializer for e in t.external_data if e.key == "location"})
print(json.dumps({"tensors": len(tensors), "shaped": sum(1 for t in tensors if t in shaped),
                  "nodes": len(b.graph.node), "docs": len(docs), "kernel_docs": len(kernel_docs),
                  "meta": meta, "locations": locations, "stages": stages}))
"""


class Annotated(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def annotate(self, model, *args, out_dir="out"):
        d = os.path.join(self.tmp.name, out_dir)
        os.makedirs(d, exist_ok=True)
        out = os.path.join(d, "annotated.onnx")
        code, _, err = run(model, "--gpu", "b200", *args, "--out", out, "--quiet")
        self.assertEqual(code, 0, err)
        p = subprocess.run([PY, "-c", CHECK_SCRIPT, model, out], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        return out, json.loads(p.stdout)

    def ort_run(self, model, inputs):
        self.assertIsNotNone(NODE, "node is not installed: run scripts/install_test_deps.sh")
        self.assertTrue(os.path.exists(ORT), f"{ORT} missing: run scripts/install_test_deps.sh")
        script, spec = os.path.join(self.tmp.name, "run.js"), os.path.join(self.tmp.name, "inputs.json")
        with open(script, "w") as f:
            f.write(ORT_SCRIPT)
        with open(spec, "w") as f:
            json.dump(inputs, f)
        p = subprocess.run([NODE, script, ORT, model, spec], capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout)

    def assert_netron_ready(self, s):
        self.assertGreaterEqual(s["shaped"], 0.9 * s["tensors"], s)
        self.assertGreaterEqual(s["docs"], 0.9 * s["nodes"], s)
        for key in ("neusight.gpu", "neusight.mode", "neusight.e2e_latency_ms", "neusight.version"):
            self.assertIn(key, s["meta"])
        self.assertEqual(s["meta"]["neusight.gpu"], "NVIDIA B200")
        self.assertGreater(float(s["meta"]["neusight.e2e_latency_ms"]), 0)
        # The 80% interval travels with the model.
        self.assertLessEqual(float(s["meta"]["neusight.e2e_latency_low_ms"]), float(s["meta"]["neusight.e2e_latency_ms"]))
        self.assertGreaterEqual(float(s["meta"]["neusight.e2e_latency_high_ms"]), float(s["meta"]["neusight.e2e_latency_ms"]))
        # And the memory one B200 needs for the run.
        self.assertGreater(float(s["meta"]["neusight.memory_gib"]), 0)
        self.assertEqual(s["meta"]["neusight.memory_fits"], "true")

    @needs_shared("onnx-models")
    def test_squeezenet_with_weights_loads_and_runs_unchanged(self):
        model = shared("onnx-models", "onnx_light_squeezenet.onnx")
        out, s = self.annotate(model)
        self.assert_netron_ready(s)
        self.assertGreaterEqual(s["kernel_docs"], 0.5 * s["nodes"], s)  # Conv, Relu, pools ... carry kernels
        inputs = {"data_0": [1, 3, 224, 224]}
        a, b = self.ort_run(model, inputs), self.ort_run(out, inputs)
        self.assertEqual(a.keys(), b.keys())
        for k in a:
            self.assertEqual(a[k], b[k])
            self.assertEqual(len(a[k]), 1000)

    @needs_shared("onnx-models")
    def test_external_weights_stay_external_and_resolve_from_elsewhere(self):
        model = shared("onnx-models", "ext_weights", "ext_weights.onnx")
        out, s = self.annotate(model, out_dir=os.path.join("deep", "er"))
        self.assert_netron_ready(s)
        # No weight bytes were copied in or next to the new model; the location points back.
        self.assertEqual(os.listdir(os.path.dirname(out)), ["annotated.onnx"])
        self.assertEqual(len(s["locations"]), 1)
        self.assertTrue(s["locations"][0].endswith("ext_weights.data"))
        resolved = os.path.normpath(os.path.join(os.path.dirname(out), s["locations"][0]))
        self.assertTrue(os.path.samefile(resolved, shared("onnx-models", "ext_weights", "ext_weights.data")))
        self.assertLess(os.path.getsize(out), os.path.getsize(model) + 4096)
        inputs = {"input": [1, 3]}
        self.assertEqual(self.ort_run(model, inputs), self.ort_run(out, inputs))

    @needs_shared("onnx-models")
    def test_same_folder_keeps_the_plain_location(self):
        d = os.path.join(self.tmp.name, "copy")
        os.makedirs(d)
        for f in ("ext_weights.onnx", "ext_weights.data"):
            shutil.copy(shared("onnx-models", "ext_weights", f), d)
        model = os.path.join(d, "ext_weights.onnx")
        out = os.path.join(d, "annotated.onnx")
        code, _, err = run(model, "--gpu", "b200", "--out", out, "--quiet")
        self.assertEqual(code, 0, err)
        p = subprocess.run([PY, "-c", CHECK_SCRIPT, model, out], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json.loads(p.stdout)["locations"], ["ext_weights.data"])

    def test_transformer_example_is_netron_ready(self):
        _, s = self.annotate(EXAMPLE, "--batch", "1", "--seq", "128", "--mode", "training")
        self.assert_netron_ready(s)
        self.assertEqual(s["meta"]["neusight.mode"], "training")
        self.assertGreater(s["kernel_docs"], 0.5 * s["nodes"])
        # The throughput travels too: the JSON report's, to the figures the metadata keeps.
        t = run_json(EXAMPLE, "--gpu", "b200", "--batch", "1", "--seq", "128", "--mode", "training")["throughput"]
        for key, value in (("tflops", t["tflops"]), ("peak_utilization", t["utilization"]),
                           ("samples_per_s", t["samples_per_s"]), ("tokens_per_s", t["tokens_per_s"])):
            self.assertAlmostEqual(float(s["meta"]["neusight." + key]), value, delta=1e-3 * value)

    def test_pipeline_stages_are_on_their_nodes(self):
        # Each node says the pipeline stage that runs it; the metadata the split.
        _, s = self.annotate(EXAMPLE, "--batch", "4", "--seq", "128", "--parallel", "tp=2,pp=2")
        self.assert_netron_ready(s)
        self.assertEqual(s["stages"], ["pipeline stage 0", "pipeline stage 1"])
        self.assertEqual((s["meta"]["neusight.parallel"], s["meta"]["neusight.gpus"]), ("dp=1,tp=2,pp=2,microbatches=2", "4"))
        _, s = self.annotate(EXAMPLE, "--batch", "4", "--seq", "128", out_dir="one")
        self.assertEqual(s["stages"], [])
        self.assertNotIn("neusight.parallel", s["meta"])

    def test_timing_metadata_only_for_the_neusight_predictor(self):
        _, s = self.annotate(EXAMPLE, "--batch", "1", "--seq", "16")
        self.assertEqual(s["meta"]["neusight.timing"], "device")
        self.assertEqual(s["meta"]["neusight.predictor"], "neusight")
        _, s = self.annotate(EXAMPLE, "--batch", "1", "--seq", "16", "--predictor", "roofline", out_dir="roof")
        self.assertEqual(s["meta"]["neusight.predictor"], "roofline")
        self.assertNotIn("neusight.timing", s["meta"])  # no timing convention, no empty value

    @needs_shared("onnx-models")
    def test_unwritable_out_leaves_nothing(self):
        out = os.path.join(self.tmp.name, "missing", "a.onnx")
        code, _, err = run(shared("onnx-models", "onnx_light_squeezenet.onnx"), "--gpu", "b200", "--out", out, "--quiet")
        self.assertEqual(code, 1)
        self.assertEqual(len(err.strip().splitlines()), 1)
        self.assertEqual(os.listdir(self.tmp.name), [])


if __name__ == "__main__":
    unittest.main()
