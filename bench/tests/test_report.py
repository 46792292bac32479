"""bench/emberbench/report.py: the summary row of an engine's runs holds the median and the
range of their wall times (a failed run, with no time, counts in neither), and the table
shows the range beside the median."""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from emberbench import report  # noqa: E402


def run(engine, rnd, wall, ok=True):
    return {"job": "kvsum", "engine": engine, "round": rnd, "ok": ok,
            "check": [] if ok else ["wrong sum"], "wall_s": wall,
            "cpu_s": None if wall is None else 2 * wall, "maxrss_kib": 1024 * 100,
            "anchors": {}}


class ReportTest(unittest.TestCase):
    def rows(self):
        runs = [run("ember", 0, 3.0), run("ember", 1, 5.0), run("ember", 2, 4.0),
                run("polars", 0, 6.0), run("polars", 1, None, ok=False),
                run("duckdb", 0, 7.5)]
        order = [("kvsum", "ember"), ("kvsum", "polars"), ("kvsum", "duckdb")]
        return report.summarize(runs, order)

    def test_a_row_has_the_median_and_the_range_of_its_runs_walls(self):
        ember, polars, duckdb = self.rows()
        self.assertEqual(ember["wall_s"], 4.0)
        self.assertEqual(ember["wall_range_s"], [3.0, 5.0])
        # One timed run (the other failed without a time): a median, no range.
        self.assertEqual(polars["wall_s"], 6.0)
        self.assertIsNone(polars["wall_range_s"])
        self.assertFalse(polars["ok"])
        self.assertIsNone(duckdb["wall_range_s"])

    def test_the_table_shows_the_range_beside_the_median(self):
        meta = {"machine": {}, "references": {}, "datasets": {},
                "args": {"out": "OUT", "runs": 3, "tiny_runs": 10}}
        table = report.render(meta, self.rows(), [])
        lines = [line for line in table.splitlines() if line.startswith("| kvsum |")]
        self.assertEqual(len(lines), 3, table)
        cells = [c.strip() for c in lines[0].strip("|").split("|")]
        self.assertEqual(cells[:5], ["kvsum", "ember", "3", "4.00 s", "3.00 s – 5.00 s"])
        polars = [c.strip() for c in lines[1].strip("|").split("|")]
        self.assertEqual(polars[4], "—")
        header = next(line for line in table.splitlines() if line.startswith("| job |"))
        self.assertEqual([c.strip() for c in header.strip("|").split("|")][3:5],
                         ["wall", "wall range"])


if __name__ == "__main__":
    unittest.main()
