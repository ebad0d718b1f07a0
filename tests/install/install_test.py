# SPDX-License-Identifier: Apache-2.0
"""Tests of tgs as a user installs it: `cmake --install` into a scratch prefix (InstalledTree), and
the Debian package from `cpack -G DEB`, unpacked with `dpkg -x` (DebianPackage). In both the tools
run from where they land, the interposer, man pages and systemd unit are in their places, and
nothing from the tests (fake driver, test programs) is there."""
import argparse
import os
import pathlib
import re
import shutil
import subprocess
import sys
import unittest

ARGS = None


def run(cmd, **kw):
    """Runs `cmd`; fails with its output when it exits non-zero."""
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=600, **kw)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} exited {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r


def fresh(path):
    path = pathlib.Path(path)
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


class InstalledTools:
    """Checks shared by the installed tree and the unpacked package: `root` is where files landed,
    `prefix` the prefix they were installed for (what the systemd unit names)."""

    root = None
    prefix = None

    def tool(self, name):
        return self.root / "bin" / name

    def test_tools_print_the_project_version(self):
        for name in ARGS.tools:
            self.assertEqual(run([self.tool(name), "--version"]).stdout, f"{name} {ARGS.version}\n")

    def test_simulator_runs(self):
        if "tgs-sim" not in ARGS.tools:
            self.skipTest("tgs-sim not built")
        out = run([self.tool("tgs-sim"), "pairs", "--policies", "tgs", "--format", "csv"]).stdout
        self.assertRegex(out, r"(?m)^scenario,gpu,production_model,opportunistic_model,policy")
        self.assertRegex(out, r"(?m)^high-contention,a100-40gb,resnet50,shufflenet,tgs,")

    def test_node_and_plugin_explain_their_flags(self):
        if "tgs-node" in ARGS.tools:
            self.assertIn("--socket", run([self.tool("tgs-node"), "--help"]).stdout)
        if "tgs-device-plugin" in ARGS.tools:
            self.assertIn("--kubelet-dir", run([self.tool("tgs-device-plugin"), "--help"]).stdout)

    def test_interposer_is_in_its_private_folder(self):
        if not ARGS.interposer:
            self.skipTest("the CUDA backend is not built")
        lib = self.root / "lib" / "tgs" / "libtgs-intercept.so"
        self.assertTrue(lib.is_file(), lib)
        with open(lib, "rb") as f:
            self.assertEqual(f.read(4), b"\x7fELF")
        # Exported: the dlsym override and the driver entry points the interposer wraps.
        if shutil.which("nm"):
            symbols = run(["nm", "-D", "--defined-only", lib]).stdout
            self.assertRegex(symbols, r"\bdlsym\b")

    def test_nothing_from_the_tests_is_installed(self):
        names = [p.name for p in self.root.rglob("*")]
        for bad in ("libcuda.so.1", "libcuda.so", "tgs-fake-train"):
            self.assertNotIn(bad, names)
        self.assertEqual([n for n in names if n.startswith(("tgs-test-", "tgs-bench-"))], [])

    def test_man_pages_come_from_the_help(self):
        if not ARGS.man:
            self.skipTest("man pages not built (TGS_BUILD_MAN is off: no help2man)")
        for name in ARGS.tools:
            page = self.root / "share" / "man" / "man1" / f"{name}.1"
            self.assertTrue(page.is_file(), page)
            text = page.read_text()
            self.assertRegex(text, "(?m)^" + re.escape(f'.TH {name.upper()} "1"'))
            self.assertIn(ARGS.version, text)
            self.assertIn(r"\-\-help", text)
        if "tgs-sim" in ARGS.tools:
            text = (self.root / "share" / "man" / "man1" / "tgs-sim.1").read_text()
            self.assertIn(".SH SUBCOMMANDS", text)
            for sub in ("mixed", "replay", "pairs", "fit", "profiles"):
                self.assertIn(f'.SS "tgs-sim {sub}"', text)
            self.assertIn("--timeline", text, "pairs' own flags are in the page")
        if shutil.which("man"):
            rendered = run(["man", "-l", self.root / "share" / "man" / "man1" / f"{ARGS.tools[0]}.1"],
                           env=dict(os.environ, MANWIDTH="100")).stdout
            rendered = re.sub(".\x08", "", rendered)  # overstrike (bold) as plain text
            self.assertIn("--version", rendered, "man renders the page with its options")

    def test_python_module_imports_and_runs(self):
        if not ARGS.python_dir:
            self.skipTest("the Python module is not built")
        where = self.root / ARGS.python_dir
        for name in ("__init__.py", "plot.py"):
            self.assertTrue((where / "tgs" / name).is_file(), where / "tgs" / name)
        code = ("import tgs, tgs.plot; r = tgs.pairs(policies=['tgs'], duration=60, warmup=10); "
                "print(tgs.__version__, r['results'][0]['policy'], tgs.__file__)")
        out = run([ARGS.python, "-c", code], env=dict(os.environ, PYTHONPATH=str(where)), cwd="/").stdout.split()
        self.assertEqual(out[:2], [ARGS.version, "tgs"])
        self.assertTrue(out[2].startswith(str(where)), out[2])

    def test_systemd_unit_runs_the_installed_node(self):
        if "tgs-node" not in ARGS.tools:
            self.skipTest("tgs-node not built")
        unit = self.root / "lib" / "systemd" / "system" / "tgs-node.service"
        text = unit.read_text()
        self.assertRegex(text, rf"(?m)^ExecStart={re.escape(str(self.prefix))}/bin/tgs-node ")
        for line in ("RuntimeDirectory=tgs", "Restart=on-failure", "NoNewPrivileges=yes", "ProtectSystem=strict",
                     "WantedBy=multi-user.target"):
            self.assertRegex(text, rf"(?m)^{re.escape(line)}$")
        # It must keep the GPUs and memfds: no device or W^X lock-down.
        for line in ("PrivateDevices=yes", "MemoryDenyWriteExecute=yes", "DevicePolicy=closed"):
            self.assertNotRegex(text, rf"(?m)^{re.escape(line)}$")


class InstalledTree(InstalledTools, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.prefix = fresh(pathlib.Path(ARGS.work) / "prefix")
        cls.root = cls.prefix
        run([ARGS.cmake, "--install", ARGS.build, "--prefix", cls.prefix])

    def test_systemd_accepts_the_unit(self):
        analyze = shutil.which("systemd-analyze")
        if not analyze or "tgs-node" not in ARGS.tools:
            self.skipTest("systemd-analyze not found" if not analyze else "tgs-node not built")
        unit = self.root / "lib" / "systemd" / "system" / "tgs-node.service"
        r = subprocess.run([analyze, "verify", "--man=no", unit], capture_output=True, text=True, timeout=120)
        # Messages about other units on this machine are not this unit's.
        own = [line for line in (r.stdout + r.stderr).splitlines() if "tgs-node" in line]
        self.assertEqual(own, [], r.stdout + r.stderr)

    def test_find_package_consumer_builds(self):
        consumer = fresh(pathlib.Path(ARGS.work) / "consumer")
        run([ARGS.cmake, "-S", pathlib.Path(ARGS.source) / "tests" / "find_package", "-B", consumer,
             "-G", ARGS.generator, f"-DCMAKE_PREFIX_PATH={self.prefix}", f"-DCMAKE_CXX_COMPILER={ARGS.cxx}"])
        run([ARGS.cmake, "--build", consumer])
        run([consumer / "consumer"])
        header = (self.prefix / "include" / "tgs" / "version.hpp").read_text()
        self.assertIn(f'#define TGS_VERSION "{ARGS.version}"', header)


class DebianPackage(InstalledTools, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not shutil.which("dpkg-deb"):
            raise unittest.SkipTest("dpkg-deb not found: not a Debian system")
        out = fresh(pathlib.Path(ARGS.work) / "package")
        run([ARGS.cpack, "--config", pathlib.Path(ARGS.build) / "CPackConfig.cmake", "-G", "DEB", "-B", out])
        (cls.deb,) = out.glob("tgs_*.deb")
        cls.unpacked = fresh(pathlib.Path(ARGS.work) / "unpacked")
        run(["dpkg-deb", "-x", cls.deb, cls.unpacked])
        cls.root = cls.unpacked / "usr"
        cls.prefix = pathlib.Path("/usr")

    def field(self, name):
        return run(["dpkg-deb", "-f", self.deb, name]).stdout.strip()

    def test_control_names_the_package_and_version(self):
        self.assertEqual(self.field("Package"), "tgs")
        self.assertEqual(self.field("Version"), ARGS.version)
        self.assertEqual(self.field("Architecture"), run(["dpkg", "--print-architecture"]).stdout.strip())
        self.assertTrue(self.field("Maintainer"))
        self.assertTrue(self.field("Description"))

    def test_dependencies_are_filled_and_met_here(self):
        depends = self.field("Depends")
        names = [alt.strip().split(" ")[0] for dep in depends.split(",") for alt in dep.split("|")]
        self.assertIn("libc6", names)
        self.assertIn("libstdc++6", names)
        if "tgs-device-plugin" in ARGS.tools:
            self.assertTrue(any(n.startswith("libgrpc++") for n in names), depends)
            self.assertTrue(any(n.startswith("libprotobuf") for n in names), depends)
        # This machine is the target system: every dependency is a package installed here, so a
        # `dpkg -i` would find it satisfied.
        for dep in depends.split(","):
            alternatives = [a.strip().split(" ")[0] for a in dep.split("|")]
            installed = [a for a in alternatives
                         if subprocess.run(["dpkg-query", "-W", "-f=${Status}", a], capture_output=True,
                                           text=True).stdout.endswith("installed")]
            self.assertTrue(installed, f"dependency {dep.strip()} is not installed here")

    def test_python_module_recommends_what_it_imports(self):
        if not ARGS.python_dir:
            self.skipTest("the Python module is not built")
        version = run([ARGS.python, "-c", "import sys; print(*sys.version_info[:2], sep='.')"]).stdout.strip()
        major, minor = version.split(".")
        recommends = [r.strip() for r in self.field("Recommends").split(",")]
        self.assertEqual(recommends, [f"python3 (>= {version})", f"python3 (<< {major}.{int(minor) + 1})",
                                      "python3-numpy", "python3-matplotlib"])
        self.assertEqual(self.field("Suggests"), "python3-pandas")

    def test_files_are_in_their_fhs_places(self):
        listing = run(["dpkg-deb", "-c", self.deb]).stdout
        paths = {line.split()[-1] for line in listing.splitlines()}
        expected = [f"./usr/bin/{t}" for t in ARGS.tools] + ["./usr/include/tgs/version.hpp",
                                                             "./usr/share/doc/tgs/copyright"]
        if ARGS.python_dir:
            expected.append(f"./usr/{ARGS.python_dir}/tgs/__init__.py")
        if ARGS.interposer:
            expected.append("./usr/lib/tgs/libtgs-intercept.so")
        if "tgs-node" in ARGS.tools:
            expected.append("./usr/lib/systemd/system/tgs-node.service")
        if ARGS.man:
            expected += [f"./usr/share/man/man1/{t}.1" for t in ARGS.tools]
        for path in expected:
            self.assertIn(path, paths)
        self.assertTrue(any(p.startswith("./usr/lib/") and p.endswith("/cmake/tgs/tgs-config.cmake") for p in paths))

    def test_programs_are_stripped(self):
        if not shutil.which("file"):
            self.skipTest("file not found")
        for name in ARGS.tools:
            self.assertIn("stripped", run(["file", self.tool(name)]).stdout.replace("not stripped", "NOT"))

    def test_maintainer_scripts_are_shell(self):
        scripts = fresh(pathlib.Path(ARGS.work) / "control")
        run(["dpkg-deb", "-e", self.deb, scripts])
        for name in ("postinst", "prerm", "postrm"):
            path = scripts / name
            self.assertTrue(os.access(path, os.X_OK), name)
            run(["sh", "-n", path])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--build", required=True, help="the build folder")
    parser.add_argument("--source", required=True, help="the source folder")
    parser.add_argument("--work", required=True, help="a scratch folder")
    parser.add_argument("--version", required=True, help="the project version")
    parser.add_argument("--tools", required=True, help="comma-separated tools that were built")
    parser.add_argument("--man", default="0", help="1 when man pages were built")
    parser.add_argument("--interposer", default="0", help="1 when libtgs-intercept.so was built")
    parser.add_argument("--python", help="the interpreter the Python module is built for")
    parser.add_argument("--python-dir", help="where the Python package is installed, under the prefix")
    parser.add_argument("--cmake", default="cmake")
    parser.add_argument("--cpack", default="cpack")
    parser.add_argument("--generator", required=True)
    parser.add_argument("--cxx", required=True)
    ARGS, rest = parser.parse_known_args()
    ARGS.tools = [t for t in ARGS.tools.split(",") if t]
    ARGS.man = ARGS.man in ("1", "ON", "TRUE")
    ARGS.interposer = ARGS.interposer in ("1", "ON", "TRUE")
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
