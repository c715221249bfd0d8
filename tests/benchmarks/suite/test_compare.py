"""benchmarks/suite/compare.py on crafted runs (tests/fixtures/bench_suite): a figure inside its
measured noise is unchanged, one beyond it is flagged better or worse by the figure's direction,
one without measured noise or measured on one side only is not compared, and the command exits 1
on a regression only when asked. The fixtures also hold to the results schema."""
import io
import json
import os
import sys
import unittest
from contextlib import redirect_stdout

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks", "suite"))
import compare  # noqa: E402

FIXTURES = os.path.join(ROOT, "tests", "fixtures", "bench_suite")
BASELINE, CURRENT = os.path.join(FIXTURES, "baseline.json"), os.path.join(FIXTURES, "current.json")


def load(path):
    with open(path) as f:
        return json.load(f)


class CompareTest(unittest.TestCase):
    def setUp(self):
        self.rows = {r["id"]: r for r in compare.compare(load(BASELINE), load(CURRENT))}

    def test_inside_the_noise_is_unchanged(self):
        self.assertEqual(self.rows["steady"]["status"], "unchanged")
        # +40% against a 60% spread: a noisy figure needs a larger move
        self.assertEqual(self.rows["noisy"]["status"], "unchanged")
        self.assertAlmostEqual(self.rows["noisy"]["noise"], 0.6)
        self.assertAlmostEqual(self.rows["noisy"]["change"], 0.4)

    def test_beyond_the_noise_is_flagged_in_the_figures_direction(self):
        self.assertEqual(self.rows["faster"]["status"], "better")  # higher is better, up 20%
        self.assertAlmostEqual(self.rows["faster"]["change"], 0.2)
        self.assertEqual(self.rows["slower_time"]["status"], "worse")  # lower is better, up 20%
        self.assertEqual(self.rows["quicker_time"]["status"], "better")  # lower is better, down 20%
        self.assertEqual(self.rows["dropped_throughput"]["status"], "worse")  # higher is better, down 20%
        self.assertAlmostEqual(self.rows["dropped_throughput"]["change"], -0.2)
        self.assertEqual(self.rows["exact_memory"]["status"], "worse")  # no noise: any move counts

    def test_the_threshold_is_twice_the_larger_spread(self):
        self.assertAlmostEqual(self.rows["at_the_edge"]["noise"], 0.02)
        self.assertEqual(self.rows["at_the_edge"]["status"], "unchanged")  # +3.8% <= 2 x 2%
        self.assertEqual(self.rows["past_the_edge"]["status"], "better")  # +4.2% > 2 x 2%

    def test_figures_without_measured_noise_or_on_one_side_are_not_compared(self):
        self.assertEqual(self.rows["single"]["status"], "not compared")
        self.assertIn("fewer than 2 repeats", self.rows["single"]["why"])
        self.assertEqual(self.rows["not_measured_now"]["status"], "not compared")
        self.assertIn("no GPU here", self.rows["not_measured_now"]["why"])
        self.assertIn("gone", self.rows["only_in_baseline"]["why"])
        self.assertIn("new", self.rows["only_in_this_run"]["why"])

    def test_runs_of_different_modes_are_refused(self):
        full = load(CURRENT)
        full["mode"] = "full"
        with self.assertRaises(compare.Incomparable):
            compare.compare(load(BASELINE), full)
        other_machine = load(CURRENT)
        other_machine["machine"]["class"] = "amd-avx2-2c"
        self.assertIn("machines differ", compare.machine_note(load(BASELINE), other_machine))
        self.assertEqual(compare.machine_note(load(BASELINE), load(CURRENT)), "")

    def test_spread(self):
        self.assertIsNone(compare.spread([1.0]))
        self.assertAlmostEqual(compare.spread([9.0, 10.0, 11.0]), 0.2)
        self.assertAlmostEqual(compare.spread([9.0, 10.0, 11.0, 12.0]), 3.0 / 10.5)
        self.assertEqual(compare.spread([0.0, 0.0]), 0.0)

    def test_the_command_fails_on_a_regression_only_when_asked(self):
        with redirect_stdout(io.StringIO()) as out:
            self.assertEqual(compare.main([BASELINE, CURRENT]), 0)
        self.assertIn("**worse**", out.getvalue())
        self.assertIn("3 worse, 3 better", out.getvalue())
        with redirect_stdout(io.StringIO()):
            self.assertEqual(compare.main([BASELINE, CURRENT, "--fail-on-regression"]), 1)
            self.assertEqual(compare.main([BASELINE, BASELINE, "--fail-on-regression"]), 0)

    def test_the_fixtures_hold_to_the_results_schema(self):
        import jsonschema
        with open(os.path.join(ROOT, "benchmarks", "suite", "results.schema.json")) as f:
            schema = json.load(f)
        for path in (BASELINE, CURRENT):
            jsonschema.validate(load(path), schema)
        broken = load(CURRENT)
        del broken["sections"][0]["figures"][0]["median"]  # a measured figure must carry its summary
        with self.assertRaises(jsonschema.ValidationError):
            jsonschema.validate(broken, schema)


if __name__ == "__main__":
    unittest.main()
