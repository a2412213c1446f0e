"""Every entry point of the Python module called with arguments drawn at random (fixed seed)
from valid values, wrong values and wrong types: each call returns a result or raises
ValueError, RuntimeError or TypeError with a one-line message; none crashes the interpreter
(the test process would die) or leaves a partial file behind."""
import math
import os
import random
import tempfile
import unittest

from py_util import DEVICE_JSON, EXAMPLE, fixture, neusight_onnx as n

SEED = 20261205
CALLS = 120  # per entry point

LLAMA = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 8,
         "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 1000, "hidden_act": "silu"}
T5 = {"model_type": "t5", "d_model": 128, "d_kv": 32, "d_ff": 256, "num_heads": 4, "num_layers": 2,
      "vocab_size": 1000, "feed_forward_proj": "gated-gelu"}
GOOD_DEVICE = {"Device": "Test GPU", "Dev_Mem": 16, "Mem_Bw": 320, "Num_Sm": 40, "Core_Per_SM": 64,
               "Freq": 1590, "SingleFLOPs": 8141, "L2Cache": 4}
NAN, INF = float("nan"), float("inf")

# Values a caller might pass: the valid ones the function takes, and others.
SIZES = [None, 1, 2, 8, 64, 0, -1, -2**40, 2**31, 2**62, 2**70, 1.5, NAN, "8", "x", True, [], {}]
GPUS = ["h100", "b200", "l4", "mi250", "h1000", "", None, 3, [], ["h100", "l4"], ["h100", 7], GOOD_DEVICE,
        dict(GOOD_DEVICE, Num_Sm=0), dict(GOOD_DEVICE, Mem_Bw=-1), dict(GOOD_DEVICE, SingleFLOPs=NAN),
        {"Device": 5}, DEVICE_JSON, "/no/such/device.json"]
DIMS = [None, {}, {"batch": 2}, {"batch": -1}, {"": 3}, {"sequence": 2**62}, {"batch": "x"}, [1], "batch=2"]
MODES = ["inference", "training", "bogus", None, 1]
DTYPES = [None, "fp32", "tf32", "fp16", "bf16", "fp8", "fp4", "int8", "int4", "xx", 16]
FUSIONS = [None, "none", "eager", "full", "x", 0]
TIMINGS = [None, "device", "kernel", "eager", "x"]
PARALLEL = [None, "tp=2", "dp=2,tp=2,pp=2", "pp=2,microbatches=4,schedule=1f1b", "tp=0", "tp=-1",
            "tp=99999999999", "tp=2,ep=2", {"tp": 2}, {"tp": "x"}, {"zz": 1}, "garbage", 3, "tp=2,pp=2", "pp=3"]
LINK_BW = [None, 100, 900.5, 0, -5, NAN, INF, "x"]
PREDICTORS = ["neusight", "roofline", "neusight-paper", "x", None]
WEIGHTS = [None, "/no/such/weights", 3]
ATTENTION = [None, "fused", "unfused", "x"]
DISPATCH = [None, 0, 5, 12.5, -1, NAN, 1e300, "x"]
TOPS = [None, 0, 3, 10, -1, 2**40, "x"]
SPECULATIVE = [None, "2,accept=0.8", "4,accept=0.6,draft=self", "0,accept=2", "x", 3]
KV_DTYPES = [None, "fp16", "fp8", "int4", "x"]
TPOT = [None, 20, 0.001, -1, NAN, "x"]


class RandomArguments(unittest.TestCase):
    def setUp(self):
        self.rng = random.Random(SEED)
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = self._tmp.name
        self.good_report = n.analyze(EXAMPLE, "h100", batch=1, seq=8)

    def tearDown(self):
        self._tmp.cleanup()

    def pick(self, pool):
        return pool[self.rng.randrange(len(pool))]

    def models(self):
        with open(EXAMPLE, "rb") as f:
            data = f.read()
        return [EXAMPLE, data, data[:3000], b"", b"\x08\x07junk", "/no/such.onnx", self.dir, 5, None, LLAMA, T5,
                {}, {"model_type": "llama"}, dict(LLAMA, num_hidden_layers=-1), dict(LLAMA, hidden_size=2**40)]

    def call(self, fn, **kwargs):
        """Calls fn(**kwargs): (True, its result), or (False, None) after a one-line
        ValueError / RuntimeError / TypeError."""
        try:
            return True, fn(**kwargs)
        except (ValueError, RuntimeError, TypeError) as e:
            message = str(e)
            self.assertTrue(message, kwargs)
            self.assertNotIn("\n", message.strip(), kwargs)
            return False, None

    def mutated(self, valid, pools):
        """`valid` with none, one or two of its arguments replaced by a value from its pool:
        each odd value meets an otherwise valid call, so it reaches the code past the checks."""
        kw = dict(valid)
        for key in self.rng.sample(sorted(pools), self.rng.choice([0, 1, 1, 2])):
            kw[key] = self.pick(pools[key])
        return kw

    def analysis_pools(self):
        return {"gpu": GPUS, "batch": SIZES, "seq": SIZES, "dims": DIMS, "mode": MODES, "dtype": DTYPES,
                "fusion": FUSIONS, "timing": TIMINGS, "predictor": PREDICTORS, "weights": WEIGHTS,
                "attention": ATTENTION, "host_dispatch_us": DISPATCH, "parallel": PARALLEL, "link_bw": LINK_BW,
                "lora": [None, 8, "4,targets=attn", "0", -3, "x", "8,targets=(", True, 2.5],
                "sparsity": [None, "2:4", "auto", "2:4,targets=attn", "2:8", 3, "2:4,targets=(", True]}

    def run_calls(self, fn, valid, pools, check=None):
        """CALLS calls of fn on mutations of `valid`; some must succeed (the unmutated ones)."""
        succeeded = 0
        for _ in range(CALLS):
            kw = self.mutated(valid, pools)
            ok, r = self.call(fn, **kw)
            if ok and check:
                check(r, kw)
            succeeded += ok
        self.assertGreater(succeeded, 0)

    def check_report(self, r, kw):
        for one in r if isinstance(r, list) else [r]:
            self.assertTrue(math.isfinite(one["e2e_latency_ms"]) and one["e2e_latency_ms"] >= 0, kw)

    def test_analyze(self):
        pools = dict(self.analysis_pools(), model=self.models())
        self.run_calls(n.analyze, {"model": EXAMPLE, "gpu": "h100", "batch": 1, "seq": 8}, pools, self.check_report)

    def test_from_config(self):
        pools = dict(self.analysis_pools(), config=[LLAMA, T5, {}, "/no/such.json", 3, None,
                                                    dict(LLAMA, model_type="falcon"), dict(T5, d_ff=0)])
        self.run_calls(n.from_config, {"config": LLAMA, "gpu": "h100", "batch": 1, "seq": 16}, pools,
                       self.check_report)

    def test_compare(self):
        models = self.models()
        pools = self.analysis_pools()
        for key in ("parallel", "link_bw", "lora"):
            pools.pop(key)
        pools.update(models=[[self.pick(models) for _ in range(k)] for k in (0, 1, 2, 2, 3)] + [EXAMPLE, None, 3],
                     top=TOPS, labels=[None, [], ["a", "b"], ["a", "b", "c", "d"], "ab", [1, 2]])
        self.run_calls(n.compare, {"models": [EXAMPLE, LLAMA], "gpu": ["h100", "l4"], "batch": 1, "seq": 8}, pools)

    def test_generate(self):
        pools = {"model": self.models(), "gpu": GPUS, "prompt": SIZES, "new_tokens": SIZES, "batch": SIZES,
                 "dtype": DTYPES, "fusion": FUSIONS, "timing": TIMINGS, "parallel": PARALLEL,
                 "speculative": SPECULATIVE, "kv_dtype": KV_DTYPES, "link_bw": LINK_BW, "predictor": PREDICTORS,
                 "tpot_slo": TPOT, "attention": ATTENTION, "host_dispatch_us": DISPATCH}
        self.run_calls(n.generate, {"model": LLAMA, "gpu": "h100", "prompt": 64, "new_tokens": 8}, pools)

    def test_kernels(self):
        csv = fixture("kernels", "test", sorted(os.listdir(fixture("kernels", "test")))[0])
        columns = ["OPName", "Device", "B", "M", "N", "K", "H", "Latency", "Kernel Name", "dtype"]
        values = ["bmm", "linear", "add", "softmax", "ln", "NVIDIA H100 80GB HBM3", "Tesla T4", "", "x", 0, -1, 1,
                  64, 4096, 2**40, 2**63 - 1, 1.5, NAN, None, "fp16", "fp8"]
        valid_row = {"OPName": "bmm", "Device": "NVIDIA H100 80GB HBM3", "B": 8, "M": 512, "N": 64, "K": 512}
        rows = []
        for _ in range(CALLS // 4):
            row = dict(valid_row)
            for c in self.rng.sample(columns, self.rng.randrange(0, 3)):
                if self.rng.random() < 0.2:
                    row.pop(c, None)
                else:
                    row[c] = self.pick(values)
            rows.append([row])
        pools = {"rows": rows + [csv, "/no/such.csv", 3, None, [5], [{}], []], "gpu": GPUS + ["from-row"],
                 "devices": [None, self.dir, "/no/such", 3], "predictor": PREDICTORS, "weights": WEIGHTS,
                 "timing": TIMINGS}
        self.run_calls(n.kernels, {"rows": [valid_row], "gpu": "h100"}, pools)

    def test_writers(self):
        with open(EXAMPLE, "rb") as f:
            data = f.read()
        reports = [self.good_report, [self.good_report], {}, {"nodes": 5}, {"nodes": [{}]}, [], None, 3, "report",
                   dict(self.good_report, nodes=[{"name": 1}]), dict(self.good_report, gpu=None)]
        written = 0
        for i in range(CALLS):
            for fn, extra, suffix in ((n.write_html, {}, ".html"),
                                      (n.write_annotated, {"model": self.pick([EXAMPLE, data, b"", 3])}, ".onnx")):
                fresh = os.path.join(self.dir, "out%d%s" % (i, suffix))
                target = self.pick([fresh, fresh, self.dir, "/no/such/dir/out" + suffix, 3])
                ok, _ = self.call(fn, report=self.pick(reports), path=target, **extra)
                if target == fresh:  # written whole, or not at all
                    self.assertEqual(ok, os.path.isfile(target), target)
                written += ok
        self.assertGreater(written, 0)


if __name__ == "__main__":
    unittest.main()
