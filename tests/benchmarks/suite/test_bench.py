"""benchmarks/suite/bench.py --smoke against a build (argv[1]): every area has its section in
results.json and report.md, with figures or the reason there are none; results.json holds to
the schema kept in the repository; every plot it lists is a PNG that decodes; the plots that
the measured sections call for are there; a second run into another folder names its figures
alike (a baseline compares by name), and a comparison of one-repeat runs compares nothing; the
peers run the OpenBLAS kernels of this CPU (OpenBLAS's own report). gemm_bench records the caches
and the GEMM blocking, LOOM_CPU_CACHES gives another CPU's, and a bad spec is a named error."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SUITE = os.path.join(ROOT, "benchmarks", "suite")
sys.path.insert(0, SUITE)
import jobs  # noqa: E402

BUILD = None
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def is_png(path):
    """Signature, IHDR first, IEND last, and matplotlib decodes it to a picture of some size."""
    with open(path, "rb") as f:
        data = f.read()
    if not (data.startswith(PNG_SIGNATURE) and data[12:16] == b"IHDR" and data[-8:-4] == b"IEND"):
        return False
    import matplotlib.image
    picture = matplotlib.image.imread(path)
    return picture.shape[0] >= 100 and picture.shape[1] >= 100


class SmokeRunTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.out = tempfile.mkdtemp(prefix="loom-bench-smoke-")
        run = subprocess.run([sys.executable, os.path.join(SUITE, "bench.py"), "--smoke", "--build", BUILD, "--out",
                              cls.out], capture_output=True, text=True, timeout=600)
        cls.log = run.stdout + run.stderr
        cls.status = run.returncode
        with open(os.path.join(cls.out, "results.json")) as f:
            cls.results = json.load(f)
        with open(os.path.join(cls.out, "report.md")) as f:
            cls.report = f.read()
        # Again, into another folder, the jobs whose files go there (their ids must not depend on it).
        cls.again = tempfile.mkdtemp(prefix="loom-bench-smoke-again-")
        run = subprocess.run([sys.executable, os.path.join(SUITE, "bench.py"), "--smoke", "--build", BUILD, "--out",
                              cls.again, "--jobs", "gemm,ckpt,data,crypt"], capture_output=True, text=True, timeout=600)
        cls.log += run.stdout + run.stderr
        with open(os.path.join(cls.again, "results.json")) as f:
            cls.results_again = json.load(f)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.out, ignore_errors=True)
        shutil.rmtree(cls.again, ignore_errors=True)

    def test_the_run_succeeds(self):
        self.assertEqual(self.status, 0, self.log)
        failed = {name: job for name, job in self.results["jobs"].items() if job["status"] == "failed"}
        self.assertEqual(failed, {}, self.log)

    def test_results_hold_to_the_schema(self):
        import jsonschema
        with open(os.path.join(SUITE, "results.schema.json")) as f:
            jsonschema.validate(self.results, json.load(f))
        self.assertEqual(self.results["mode"], "smoke")
        self.assertRegex(self.results["commit"], r"^[0-9a-f]{40}")

    def test_every_area_has_a_section_with_figures_or_a_reason(self):
        sections = {s["area"]: s for s in self.results["sections"]}
        self.assertEqual(list(sections), [area for area, _ in jobs.AREAS])
        for area, title in jobs.AREAS:
            section = sections[area]
            self.assertTrue(section["figures"] or section.get("not_measured"), area)
            self.assertIn(f"\n## {title}\n", self.report)
            for figure in section["figures"]:
                self.assertTrue("median" in figure or figure.get("not_measured"), figure["id"])
        # Kernels run on every build; the GPU section, not asked for, says how to ask.
        self.assertTrue(any("median" in f for f in sections["kernels"]["figures"]))
        self.assertEqual(sections["gpu"]["figures"], [])
        self.assertIn("--gpu", " ".join(sections["gpu"]["not_measured"]))

    def test_every_plot_is_a_png_and_the_measured_sections_have_theirs(self):
        plots = {p for s in self.results["sections"] for p in s["plots"]}
        expected = {"plots/gemm.png"}
        if self.results["jobs"]["allreduce"]["status"] == "ran":  # MPI builds
            expected |= {"plots/allreduce.png", "plots/scaling.png", "plots/memory.png"}
        self.assertLessEqual(expected, plots)
        for plot in plots:
            self.assertTrue(is_png(os.path.join(self.out, plot)), plot)
            self.assertIn(f"]({plot})", self.report)

    def test_a_second_run_names_its_figures_alike_and_one_repeat_compares_nothing(self):
        import compare
        ids = lambda results: {f["id"] for s in results["sections"] for f in s["figures"]}
        wanted = {"gemm", "ckpt", "data", "crypt"}
        ran = {name for name, job in self.results_again["jobs"].items() if job["status"] == "ran"}
        self.assertEqual(ran, {name for name in wanted if self.results["jobs"][name]["status"] == "ran"})
        again = ids(self.results_again)
        self.assertTrue(again)
        self.assertLessEqual(again, ids(self.results))  # the same names, though the files went elsewhere
        rows = compare.compare(self.results, self.results_again)
        self.assertTrue(all(r["status"] == "not compared" for r in rows))
        self.assertTrue(all("fewer than 2 repeats" in r["why"] for r in rows if r["id"] in again))

    def test_the_peers_run_the_openblas_kernels_of_this_cpu(self):
        # OpenBLAS itself reports the core it runs (gemm_bench records openblas_get_corename()).
        chosen = self.results["machine"]["cpu"]["openblas_coretype"]
        if self.results["machine"]["cpu"]["isa"] != "portable":
            self.assertIsNotNone(chosen["value"])
        with open(os.path.join(self.out, "raw", "gemm-0.json")) as f:
            gemm = json.load(f)
        if chosen["value"] and "openblas_core" in gemm["config"]:
            self.assertEqual(gemm["config"]["openblas_core"].lower(), chosen["value"].lower())
            self.assertIn(f"OPENBLAS_CORETYPE={chosen['value']}", self.report)


class GemmBlockingTest(unittest.TestCase):
    """gemm_bench records the caches and the blocking each variant gets on them; LOOM_CPU_CACHES
    replaces the caches (the blocking another CPU would get), and a bad one is a named error."""

    @staticmethod
    def env(caches):
        env = dict(os.environ)
        env.pop("LOOM_CPU_CACHES", None)
        if caches is not None:
            env["LOOM_CPU_CACHES"] = caches
        return env

    def run_gemm(self, caches, *extra):
        out = tempfile.mkdtemp(prefix="loom-gemm-blocking-")
        self.addCleanup(shutil.rmtree, out, ignore_errors=True)
        path = os.path.join(out, "gemm.json")
        run = subprocess.run([os.path.join(BUILD, "benchmarks", "gemm_bench"), "--device", "cpu", "--shapes", "64",
                              "--precisions", "fp32", "--repeats", "1", "--json", path, *extra],
                             env=self.env(caches), capture_output=True, text=True, timeout=120)
        doc = None
        if run.returncode == 0:
            with open(path) as f:
                doc = json.load(f)
        return run, doc

    def test_zen3_caches_give_the_zen3_blocking(self):
        run, doc = self.run_gemm("l1d=32K/8,l2=512K/8,l3=32M")
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        cpu = doc["machine"]["cpu"]
        self.assertEqual(cpu["caches"]["l2"]["bytes"], 512 << 10)
        self.assertTrue(cpu["caches"]["source"].endswith("+ LOOM_CPU_CACHES"))
        self.assertIn("L1d 32 KiB 8-way, L2 512 KiB 8-way, L3 32 MiB", run.stdout)
        if "avx2" in cpu["gemm_blocking"]:  # 168 rows of 6, as test_cpu_sgemm_blocking.cpp works out
            self.assertEqual({k: cpu["gemm_blocking"]["avx2"][k] for k in ("mr", "nr", "mc", "nc", "kc")},
                             {"mr": 6, "nr": 16, "mc": 168, "nc": 4096, "kc": 384})
            self.assertEqual(cpu["gemm_blocking"]["avx2"]["l1"], "b_sliver")
            self.assertFalse(cpu["gemm_blocking"]["avx2"]["a_in_place"])  # the B-sliver order packs A
            self.assertEqual(cpu["gemm_blocking"]["avx2"]["wide_nc"], 0)  # no wide form on a 512 KiB L2
            self.assertIn("avx2 mc 168, nc 4096, kc 384, B sliver in L1, A packed (tile 6 x 16)", run.stdout)

    def test_a_private_2_mib_l2_gives_avx2_its_wide_form(self):
        # The 2-core Xeon's caches: past 672 columns the A-sliver order, panels of 848 (five eighths
        # of 2 MiB: 53 slivers of 16), 84 rows, A still packed.
        run, doc = self.run_gemm("l1d=48K/12,l2=2M/16/1,l3=32M")
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        blocking = doc["machine"]["cpu"]["gemm_blocking"]
        if "avx2" in blocking:
            self.assertEqual({k: blocking["avx2"][k] for k in ("mc", "nc", "wide_n", "wide_nc", "wide_mc", "a_in_place")},
                             {"mc": 168, "nc": 4096, "wide_n": 672, "wide_nc": 848, "wide_mc": 84, "a_in_place": False})
            self.assertIn("avx2 mc 168, nc 4096, kc 384, B sliver in L1, A packed (tile 6 x 16); past 672 columns: "
                          "mc 84, nc 848, A sliver in L1", run.stdout)

    def test_other_blockings_and_orders_are_timed_beside_the_chosen_one(self):
        # 84 x 96 is whole slivers of every tile (6 x 16 and 14 x 32); /a and /b pick the order.
        run, doc = self.run_gemm(None, "--blockings", "84x96/a,84x96/b,84x96")
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        variants = {row["isa"] for row in doc["rows"] if row["backend"] == "loom" and "blocking" not in row}
        timed = {(row["isa"], row["blocking"]) for row in doc["rows"] if "blocking" in row}
        self.assertEqual(timed, {(isa, spec) for isa in variants for spec in ("84x96/a", "84x96/b", "84x96")})
        for spec in ("84x96/c", "84x96/", "84x96/ab", "84"):
            bad, _ = self.run_gemm(None, "--blockings", spec)
            self.assertEqual(bad.returncode, 1, spec)
            self.assertIn(f"cannot parse blocking '{spec}'", bad.stderr)
        ragged, _ = self.run_gemm(None, "--blockings", "85x96/a")
        self.assertEqual(ragged.returncode, 1)
        self.assertIn("is not whole slivers of the tile", ragged.stderr)

    def test_a_bad_cache_spec_is_a_named_error(self):
        run, _ = self.run_gemm("l4=1M")
        self.assertEqual(run.returncode, 1)
        self.assertIn("LOOM_CPU_CACHES=l4=1M", run.stderr)
        self.assertIn("unknown level 'l4'", run.stderr)


if __name__ == "__main__":
    BUILD = os.path.abspath(sys.argv.pop(1))
    unittest.main()
