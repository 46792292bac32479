"""The join jobs' data and answer check on tiny sets: `gen_data.py dim` and `kvskew`, the
data sets' manifest matching, `checks.join_expected` against a plain computation, and
`checks.check_join_output` on right and wrong outputs; the DuckDB and Polars queries of
`single_node.py joinsum` too when this interpreter has them (else those tests are skipped).

    python3 -m unittest discover -s bench/tests -v
"""
import glob
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest
from decimal import Decimal

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, BENCH)

from emberbench.checks import check_join_output, join_expected, join_gen_key, thousandths_text  # noqa: E402
from emberbench.data import manifest_matches  # noqa: E402

GEN = os.path.join(BENCH, "reference", "gen_data.py")
SINGLE_NODE = os.path.join(BENCH, "reference", "single_node.py")
KV = ["--records", "20003", "--keys", "3000", "--files", "3", "--seed", "3"]
KVSKEW = ["kvskew"] + KV + ["--skew-percent", "20"]
DIM = ["dim", "--keys", "3000", "--groups", "1000", "--files", "2", "--seed", "5"]
# Fewer keys than the kv set has: about a sixth of the fact records find no dimension key.
DIM_PART = ["dim", "--keys", "2500", "--groups", "100", "--files", "2", "--seed", "6"]


def gen(args, out, jobs=2):
    subprocess.run([sys.executable, GEN] + args + ["--out", out, "--jobs", str(jobs)], check=True,
                   stdout=subprocess.DEVNULL)
    with open(os.path.join(out, "_manifest.json")) as f:
        man = json.load(f)
    man["_dir"] = out
    return man


def lines(d):
    out = []
    for f in sorted(glob.glob(os.path.join(d, "part-*"))):
        with open(f) as fh:
            out.extend(fh.read().splitlines())
    return out


def tree_bytes(d):
    """The data files and the manifest of a generated set (not the checks' caches)."""
    files = glob.glob(os.path.join(d, "part-*")) + [os.path.join(d, "_manifest.json")]
    out = {}
    for f in sorted(files):
        with open(f, "rb") as fh:
            out[os.path.basename(f)] = fh.read()
    return out


def plain_join(fact_dir, dim_dir):
    """The per-attr sums in thousandths, with dicts and Decimal."""
    attr = dict(map(int, line.split(",")) for line in lines(dim_dir))
    sums = {}
    for line in lines(fact_dir):
        k, v = line.split(",")
        if int(k) in attr:
            a = attr[int(k)]
            sums[a] = sums.get(a, Decimal(0)) + Decimal(v)
    return {a: int(s * 1000) for a, s in sums.items()}


def write_output(path, sums, is_dir=True):
    body = "".join(f"{a}\t{thousandths_text(t)}\n" for a, t in sums.items())
    if not is_dir:
        with open(path, "w") as f:
            f.write(body)
        return
    os.makedirs(path)
    half = len(body.splitlines()) // 2
    rows = body.splitlines(keepends=True)
    for i, part in enumerate((rows[:half], rows[half:])):
        with open(os.path.join(path, f"part-{i:05d}"), "w") as f:
            f.write("".join(part))
    open(os.path.join(path, "_SUCCESS"), "w").close()


class JoinData(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="ember-bench-joins-")
        t = cls.tmp.name
        cls.kv_dir, cls.skew_dir = os.path.join(t, "kv"), os.path.join(t, "kvskew")
        cls.dim_dir, cls.part_dir = os.path.join(t, "dim"), os.path.join(t, "dimpart")
        cls.kv = gen(["kv"] + KV, cls.kv_dir)
        cls.skew = gen(KVSKEW, cls.skew_dir)
        cls.dim = gen(DIM, cls.dim_dir)
        cls.part = gen(DIM_PART, cls.part_dir)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_generation_is_deterministic_whatever_the_worker_count(self):
        for args, d in ((KVSKEW, self.skew_dir), (DIM, self.dim_dir)):
            other = os.path.join(self.tmp.name, "again-" + args[0])
            gen(args, other, jobs=1)
            self.assertEqual(tree_bytes(other), tree_bytes(d), args[0])

    def test_dim_has_every_key_once_and_attrs_in_range(self):
        pairs = [tuple(map(int, line.split(","))) for line in lines(self.dim_dir)]
        self.assertEqual([k for k, _ in pairs], list(range(3000)))
        self.assertTrue(all(0 <= a < 1000 for _, a in pairs))
        self.assertEqual(self.dim["attr_sum"], sum(a for _, a in pairs))
        self.assertEqual(self.dim["distinct_attrs"], len({a for _, a in pairs}))
        self.assertEqual((self.dim["keys"], self.dim["groups"], self.dim["records"]), (3000, 1000, 3000))

    def test_kvskew_is_kv_with_a_fifth_of_the_keys_rewritten_to_the_hot_key(self):
        hot = self.skew["hot_key"]
        self.assertTrue(0 <= hot < 3000)
        kv, skew = lines(self.kv_dir), lines(self.skew_dir)
        self.assertEqual(len(kv), len(skew))
        changed = 0
        for a, b in zip(kv, skew):
            ka, va = a.split(",")
            kb, vb = b.split(",")
            self.assertEqual(va, vb)
            if ka != kb:
                self.assertEqual(int(kb), hot)
                changed += 1
        # 20003 records in 3 files of 6668, 6668, 6667: 20 % of each, rounded down
        self.assertEqual(self.skew["rewritten"], 3 * 1333)
        # a rewritten record whose key was the hot key already does not show as a change
        already_hot = sum(int(a.split(",")[0]) == hot for a in kv)
        self.assertTrue(self.skew["rewritten"] - already_hot <= changed <= self.skew["rewritten"])
        self.assertEqual(self.skew["hot_records"], sum(int(b.split(",")[0]) == hot for b in skew))
        self.assertEqual(self.skew["value_sum_thousandths"], self.kv["value_sum_thousandths"])
        self.assertEqual((self.skew["kind"], self.skew["skew_percent"]), ("kvskew", 20))

    def test_manifests_match_their_generator_arguments_only(self):
        self.assertEqual(manifest_matches(self.skew_dir, KVSKEW)[1], "ok")
        self.assertEqual(manifest_matches(self.dim_dir, DIM)[1], "ok")
        self.assertEqual(manifest_matches(self.kv_dir, ["kv"] + KV)[1], "ok")
        other_skew = KVSKEW[:-1] + ["10"]
        self.assertIsNone(manifest_matches(self.skew_dir, other_skew)[0])
        other_groups = DIM[:4] + ["999"] + DIM[5:]
        self.assertIsNone(manifest_matches(self.dim_dir, other_groups)[0])
        self.assertIsNone(manifest_matches(self.skew_dir, ["kv"] + KV)[0])  # another kind

    def test_expected_answer_is_the_plain_join(self):
        for fact, fman in ((self.kv_dir, self.kv), (self.skew_dir, self.skew)):
            for dim, dman in ((self.dim_dir, self.dim), (self.part_dir, self.part)):
                exp = join_expected(fact, fman, dim, dman)
                self.assertEqual(exp["sums"], plain_join(fact, dim))
                self.assertEqual(exp["joined"] + exp["unmatched"], fman["records"])
                # cached next to the fact set's manifest, and read back the same
                self.assertTrue(os.path.exists(os.path.join(fact, f"_bench_join_{os.path.basename(dim)}.json")))
                self.assertEqual(join_expected(fact, fman, dim, dman), exp)
        full = join_expected(self.kv_dir, self.kv, self.dim_dir, self.dim)
        self.assertEqual(full["unmatched"], 0)
        self.assertEqual(full["total"], self.kv["value_sum_thousandths"])
        self.assertGreater(join_expected(self.kv_dir, self.kv, self.part_dir, self.part)["unmatched"], 0)
        self.assertEqual(join_gen_key(self.skew, self.dim),
                         ("kvskew", 20003, 3000, 3, 3, 20, self.skew["hot_key"], 3000, 1000, 2, 5))

    def test_a_bad_dimension_set_is_refused(self):
        d = os.path.join(self.tmp.name, "baddim")
        os.makedirs(d)
        with open(os.path.join(d, "part-00000.txt"), "w") as f:
            f.write("0,1\n1,2\n1,3\n")
        with self.assertRaisesRegex(ValueError, "part-00000.txt:3"):
            join_expected(self.kv_dir, self.kv, d, {"keys": 3000, "dir": "baddim"})

    def test_output_check_passes_the_answer_and_catches_wrong_ones(self):
        exp = join_expected(self.skew_dir, self.skew, self.dim_dir, self.dim)
        sums = dict(exp["sums"])
        known = (len(sums), exp["total"], exp["digest"])
        n = [0]

        def check(s, is_dir=True, known=known, edit=None):
            n[0] += 1
            path = os.path.join(self.tmp.name, f"out{n[0]}" + ("" if is_dir else ".tsv"))
            write_output(path, s, is_dir)
            if edit:
                edit(path)
            return check_join_output(path, exp, known, is_dir)

        ok, msgs = check(sums)
        self.assertTrue(ok, msgs)
        self.assertTrue(check(sums, is_dir=False)[0])
        a, b = sorted(sums)[:2]
        moved = {**sums, a: sums[a] - 1, b: sums[b] + 1}  # same total, 0.001 moved
        ok, msgs = check(moved, known=None)
        self.assertFalse(ok)
        self.assertIn(f"attr {a}", msgs[0])
        missing = {k: v for k, v in sums.items() if k != a}
        self.assertFalse(check(missing)[0])
        self.assertFalse(check({**sums, 5000: 1})[0])
        ok, msgs = check(sums, known=(len(sums), exp["total"], "0" * 16))
        self.assertFalse(ok)
        self.assertIn("pinned", msgs[0])

        def dup(path):
            with open(os.path.join(path, "part-00000"), "a") as f:
                f.write(f"{a}\t{thousandths_text(sums[a])}\n")
        self.assertFalse(check(sums, edit=dup)[0])

        def two_decimals(path):
            with open(os.path.join(path, "part-00001"), "a") as f:
                f.write("7\t1.50\n")
        self.assertFalse(check(sums, edit=two_decimals)[0])

        def no_success(path):
            os.remove(os.path.join(path, "_SUCCESS"))
        self.assertFalse(check(sums, edit=no_success)[0])


def has(module):
    return importlib.util.find_spec(module) is not None


class ReferenceQueries(unittest.TestCase):
    """single_node.py joinsum's output through the same check (needs duckdb / polars)."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="ember-bench-joins-ref-")
        t = cls.tmp.name
        cls.sets = {"kvskew": (os.path.join(t, "kvskew"), gen(KVSKEW, os.path.join(t, "kvskew"))),
                    "dimpart": (os.path.join(t, "dimpart"), gen(DIM_PART, os.path.join(t, "dimpart")))}

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def run_engine(self, engine):
        (fact, fman), (dim, dman) = self.sets["kvskew"], self.sets["dimpart"]
        out = os.path.join(self.tmp.name, engine + ".tsv")
        r = subprocess.run([sys.executable, SINGLE_NODE, engine, "joinsum", dim, fact, out],
                           capture_output=True, text=True, check=True)
        exp = join_expected(fact, fman, dim, dman)
        ok, msgs = check_join_output(out, exp, is_dir=False)
        self.assertTrue(ok, msgs)
        self.assertIn(f"ANCHOR attrs={len(exp['sums'])}", r.stdout)
        self.assertIn(f"ANCHOR sum_of_sums_exact={thousandths_text(exp['total'])}", r.stdout)

    @unittest.skipUnless(has("duckdb"), "duckdb is not installed in this interpreter")
    def test_duckdb(self):
        self.run_engine("duckdb")

    @unittest.skipUnless(has("polars"), "polars is not installed in this interpreter")
    def test_polars(self):
        self.run_engine("polars")


if __name__ == "__main__":
    unittest.main()
