"""bench/emberbench/parquet_check.py on a tiny file: the right answer passes, a wrong sum, a
missing key and a duplicated key fail with what is wrong. Needs pyarrow and numpy (the
reference venv's); skipped without them."""
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "emberbench"))

try:
    import numpy  # noqa: F401
    import pyarrow as pa
    import pyarrow.parquet as pq
    import parquet_check
except ImportError:  # pragma: no cover - depends on the interpreter
    parquet_check = None


@unittest.skipIf(parquet_check is None, "needs pyarrow and numpy")
class ParquetCheckTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        d = self.tmp.name
        self.inp = os.path.join(d, "in.parquet")
        keys = [1, 2, 2, 3, 3, 4, 5]
        values = [1.5, -2.0, 2.25, 0.0, -0.0, -7.0, float("nan")]
        pq.write_table(pa.table({"key": pa.array(keys, pa.int64()), "value": values}), self.inp)
        self.cache = os.path.join(d, "expected.npz")

    def output(self, rows):
        out = os.path.join(self.tmp.name, "out")
        os.makedirs(out, exist_ok=True)
        for f in os.listdir(out):
            os.remove(os.path.join(out, f))
        keys, sums = zip(*rows)
        pq.write_table(pa.table({"key": pa.array(keys, pa.int64()), "sum": list(sums)}),
                       os.path.join(out, "part-00000.parquet"))
        return out

    def test_the_right_answer_passes_and_wrong_ones_fail(self):
        # value >= 0: key 1 (1.5), key 2 (2.25), key 3 (0.0 and -0.0); key 4 negative, 5 NaN.
        good = [(3, 0.0), (1, 1.5), (2, 2.25)]
        self.assertEqual(parquet_check.check(self.inp, self.output(good), self.cache), "ok 3 3.750")
        self.assertTrue(os.path.exists(self.cache))
        wrong = parquet_check.check(self.inp, self.output([(1, 1.5), (2, 2.5), (3, 0.0)]), self.cache)
        self.assertIn("sums differ, e.g. key 2", wrong)
        missing = parquet_check.check(self.inp, self.output([(1, 1.5), (2, 2.25)]), self.cache)
        self.assertIn("missing e.g. [3]", missing)
        twice = parquet_check.check(self.inp, self.output(good + [(1, 1.5)]), self.cache)
        self.assertIn("more than once", twice)


if __name__ == "__main__":
    unittest.main()
