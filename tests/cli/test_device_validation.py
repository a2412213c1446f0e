"""bench/device_validation/compare.py over the bundled H200 measurement, through the real binary:
the measured rows still read as the `kernels` command's input, in every precision and timing."""
import os
import re
import subprocess
import sys
import unittest

from cli_util import BIN, SOURCE

DATA = os.path.join(SOURCE, "bench", "device_validation", "data", "h200")
SCRIPT = os.path.join(SOURCE, "bench", "device_validation", "compare.py")
ROW = re.compile(r"^  (\S+(?: \S+)*?)\s{2,}(\d+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+([\d.]+)")


class DeviceValidation(unittest.TestCase):
    def test_every_measured_kernel_is_predicted(self):
        p = subprocess.run([sys.executable, SCRIPT, DATA, "--bin", BIN, "--configs", os.devnull],
                           capture_output=True, text=True, timeout=600)
        self.assertEqual(p.returncode, 0, p.stderr)
        tables = p.stdout.split("\n\n")
        counts = {}
        for t in tables:
            title = t.strip().splitlines()[0] if t.strip() else ""
            for line in t.splitlines()[3:]:
                m = ROW.match(line)
                if m:
                    counts[(title, m.group(1))] = int(m.group(2))
                    mape, ratio = float(m.group(3)), float(m.group(4))
                    self.assertGreater(mape, 0.0, line)
                    self.assertTrue(0.2 < ratio < 5.0, line)
        fp32 = [k for k in counts if k[0].startswith("FP32 kernels")]
        # 784 FP32 kernels in five classes, under both timings; 450 tensor-core GEMMs in six
        # groups under both timings and again by row alignment (graph replay); 264 decode GEMMs
        # in six groups under three timings.
        self.assertEqual(sum(counts[k] for k in fp32), 2 * 784)
        self.assertEqual(len(fp32), 10)
        lowp = [k for k in counts if k[0].startswith("Low-precision")]
        self.assertEqual(sum(counts[k] for k in lowp), 3 * 450)
        aligned = {k[1]: counts[k] for k in lowp if "alignment" in k[0]}
        self.assertEqual(aligned["bmm bf16 unaligned"], 13)
        decode = [k for k in counts if k[0].startswith("Decode")]
        self.assertEqual(sum(counts[k] for k in decode), 3 * 264)
        self.assertIn("end to end: skipped", p.stdout)
        self.assertRegex(p.stdout, r"run to run, fp32\.csv \(784 items")


if __name__ == "__main__":
    unittest.main()
