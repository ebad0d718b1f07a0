# SPDX-License-Identifier: Apache-2.0
"""Tests of tgs as a user installs it: `cmake --install` into a scratch prefix (InstalledTree); the
Debian packages from `cpack -G DEB`, one per part (tgs-node, tgs-sim, libtgs-dev, python3-tgs), each
unpacked alone with `dpkg -x` into a root of its own (DebianPackage); and the simulator-only build
of scripts/run.sh, which must print no warning (FirstRunBuild). In each the tools run from where
they land, the interposer, man pages and systemd unit are in their places, the headers build a
consumer with find_package(tgs), Python imports the module (or says which interpreter has it), and
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


# The Debian package of each part, the part's install component (cmake/TgsInstall.cmake).
PACKAGES = {"node": "tgs-node", "sim": "tgs-sim", "dev": "libtgs-dev", "python": "python3-tgs"}
TOOL_PART = {"tgs-node": "node", "tgs-device-plugin": "node", "tgs-dra-plugin": "node", "tgs-sim": "sim"}


def parts():
    """The parts this build installs."""
    built = {TOOL_PART[t] for t in ARGS.tools} | {"dev"}
    if ARGS.python_dir:
        built.add("python")
    if ARGS.interposer:
        built.add("node")
    return sorted(built)


class InstalledTools:
    """Checks shared by the installed tree and the unpacked packages: `root(part)` is where the
    part's files landed (a prefix), `prefix` the prefix they were installed for (what the systemd
    unit names)."""

    prefix = None

    def root(self, part):
        raise NotImplementedError

    def roots(self):
        return {self.root(p) for p in parts()}

    def tool(self, name):
        return self.root(TOOL_PART[name]) / "bin" / name

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
        if "tgs-dra-plugin" in ARGS.tools:
            self.assertIn("--registry-dir", run([self.tool("tgs-dra-plugin"), "--help"]).stdout)

    def test_interposer_is_in_its_private_folder(self):
        if not ARGS.interposer:
            self.skipTest("the CUDA backend is not built")
        lib = self.root("node") / "lib" / "tgs" / "libtgs-intercept.so"
        self.assertTrue(lib.is_file(), lib)
        with open(lib, "rb") as f:
            self.assertEqual(f.read(4), b"\x7fELF")
        # Exported: the dlsym override and the driver entry points the interposer wraps.
        if shutil.which("nm"):
            symbols = run(["nm", "-D", "--defined-only", lib]).stdout
            self.assertRegex(symbols, r"\bdlsym\b")

    def test_nothing_from_the_tests_is_installed(self):
        names = [p.name for root in self.roots() for p in root.rglob("*")]
        for bad in ("libcuda.so.1", "libcuda.so", "tgs-fake-train"):
            self.assertNotIn(bad, names)
        self.assertEqual([n for n in names if n.startswith(("tgs-test-", "tgs-bench-"))], [])

    def test_man_pages_come_from_the_help(self):
        if not ARGS.man:
            self.skipTest("man pages not built (TGS_BUILD_MAN is off: no help2man)")
        for name in ARGS.tools:
            page = self.root(TOOL_PART[name]) / "share" / "man" / "man1" / f"{name}.1"
            self.assertTrue(page.is_file(), page)
            text = page.read_text()
            self.assertRegex(text, "(?m)^" + re.escape(f'.TH {name.upper()} "1"'))
            self.assertIn(ARGS.version, text)
            self.assertIn(r"\-\-help", text)
        if "tgs-sim" in ARGS.tools:
            text = (self.root("sim") / "share" / "man" / "man1" / "tgs-sim.1").read_text()
            self.assertIn(".SH SUBCOMMANDS", text)
            for sub in ("mixed", "replay", "pairs", "fit", "profiles"):
                self.assertIn(f'.SS "tgs-sim {sub}"', text)
            self.assertIn("--timeline", text, "pairs' own flags are in the page")
        if shutil.which("man"):
            first = ARGS.tools[0]
            rendered = run(["man", "-l", self.root(TOOL_PART[first]) / "share" / "man" / "man1" / f"{first}.1"],
                           env=dict(os.environ, MANWIDTH="100")).stdout
            rendered = re.sub(".\x08", "", rendered)  # overstrike (bold) as plain text
            self.assertIn("--version", rendered, "man renders the page with its options")

    def python_dir(self):
        if not ARGS.python_dir:
            self.skipTest("the Python module is not built")
        return self.root("python") / ARGS.python_dir

    def test_python_module_imports_and_runs(self):
        where = self.python_dir()
        for name in ("__init__.py", "plot.py", "_build.py"):
            self.assertTrue((where / "tgs" / name).is_file(), where / "tgs" / name)
        code = ("import tgs, tgs.plot; r = tgs.pairs(policies=['tgs'], duration=60, warmup=10); "
                "print(tgs.__version__, r['results'][0]['policy'], tgs.__file__)")
        out = run([ARGS.python, "-c", code], env=dict(os.environ, PYTHONPATH=str(where)), cwd="/").stdout.split()
        self.assertEqual(out[:2], [ARGS.version, "tgs"])
        self.assertTrue(out[2].startswith(str(where)), out[2])

    def assert_names_the_interpreter(self, python, where):
        """`python` cannot load the extension in `where`: its import error names the one that can."""
        r = subprocess.run([python, "-c", "import tgs"], env=dict(os.environ, PYTHONPATH=str(where)), cwd="/",
                           capture_output=True, text=True, timeout=60)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertRegex(r.stderr, r"(?m)^ImportError: the module tgs in .* was built for "
                         + re.escape(f"{ARGS.python} (Python "))
        self.assertIn(f"Run {ARGS.python}", r.stderr)

    def test_python_of_another_abi_is_told_which_has_the_module(self):
        where = self.python_dir()
        # The extension as another CPython would see it: no file with one of its own suffixes.
        other = fresh(pathlib.Path(ARGS.work) / "other-abi")
        shutil.copytree(where / "tgs", other / "tgs", ignore=shutil.ignore_patterns("__pycache__"))
        (extension,) = (other / "tgs").glob("_tgs*.so")
        extension.rename(other / "tgs" / "_tgs.cpython-39-x86_64-linux-gnu.so")
        self.assert_names_the_interpreter(ARGS.python, other)
        # And a real other python3 on the PATH, where it is of another version.
        found = shutil.which("python3")
        if found and os.path.realpath(found) != os.path.realpath(ARGS.python):
            same = run([found, "-c", "import sys; print(sys.version_info[:2])"]).stdout == \
                run([ARGS.python, "-c", "import sys; print(sys.version_info[:2])"]).stdout
            if not same:
                self.assert_names_the_interpreter(found, where)

    def test_systemd_unit_runs_the_installed_node(self):
        if "tgs-node" not in ARGS.tools:
            self.skipTest("tgs-node not built")
        unit = self.root("node") / "lib" / "systemd" / "system" / "tgs-node.service"
        text = unit.read_text()
        self.assertRegex(text, rf"(?m)^ExecStart={re.escape(str(self.prefix))}/bin/tgs-node ")
        for line in ("RuntimeDirectory=tgs", "Restart=on-failure", "NoNewPrivileges=yes", "ProtectSystem=strict",
                     "WantedBy=multi-user.target"):
            self.assertRegex(text, rf"(?m)^{re.escape(line)}$")
        # The class socket folder is the package's group's (0710), and only its (docs/operator-guide.md).
        self.assertRegex(text, r"(?m)^ExecStart=\S+ .*--class-sockets /run/tgs/gpus --class-sockets-group tgs-production ")
        # It must keep the GPUs and memfds: no device or W^X lock-down.
        for line in ("PrivateDevices=yes", "MemoryDenyWriteExecute=yes", "DevicePolicy=closed"):
            self.assertNotRegex(text, rf"(?m)^{re.escape(line)}$")

    def test_find_package_consumer_builds(self):
        """The policy headers and CMake package alone build a consumer (find_package(tgs))."""
        consumer = fresh(pathlib.Path(ARGS.work) / f"consumer-{type(self).__name__}")
        run([ARGS.cmake, "-S", pathlib.Path(ARGS.source) / "tests" / "find_package", "-B", consumer,
             "-G", ARGS.generator, f"-DCMAKE_PREFIX_PATH={self.root('dev')}", f"-DCMAKE_CXX_COMPILER={ARGS.cxx}",
             "-DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF"])
        run([ARGS.cmake, "--build", consumer])
        run([consumer / "consumer"])
        cache = (consumer / "CMakeCache.txt").read_text()
        self.assertIn(f"tgs_DIR:PATH={self.root('dev')}/", cache, "the tgs found is the one installed here")
        header = (self.root("dev") / "include" / "tgs" / "version.hpp").read_text()
        self.assertIn(f'#define TGS_VERSION "{ARGS.version}"', header)


class InstalledTree(InstalledTools, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.prefix = fresh(pathlib.Path(ARGS.work) / "prefix")
        run([ARGS.cmake, "--install", ARGS.build, "--prefix", cls.prefix])

    def root(self, part):
        return self.prefix

    def test_systemd_accepts_the_unit(self):
        analyze = shutil.which("systemd-analyze")
        if not analyze or "tgs-node" not in ARGS.tools:
            self.skipTest("systemd-analyze not found" if not analyze else "tgs-node not built")
        unit = self.root("node") / "lib" / "systemd" / "system" / "tgs-node.service"
        r = subprocess.run([analyze, "verify", "--man=no", unit], capture_output=True, text=True, timeout=120)
        # Messages about other units on this machine are not this unit's.
        own = [line for line in (r.stdout + r.stderr).splitlines() if "tgs-node" in line]
        self.assertEqual(own, [], r.stdout + r.stderr)


class DebianPackage(InstalledTools, unittest.TestCase):
    """The packages of `cpack -G DEB`, each unpacked alone into an empty root: what one ships must
    work without the others."""

    @classmethod
    def setUpClass(cls):
        if not shutil.which("dpkg-deb"):
            raise unittest.SkipTest("dpkg-deb not found: not a Debian system")
        out = fresh(pathlib.Path(ARGS.work) / "packages")
        run([ARGS.cpack, "--config", pathlib.Path(ARGS.build) / "CPackConfig.cmake", "-G", "DEB", "-B", out])
        cls.debs = {}
        for deb in out.glob("*.deb"):
            name = run(["dpkg-deb", "-f", deb, "Package"]).stdout.strip()
            cls.debs[name] = deb
        cls.unpacked = {}
        for name, deb in cls.debs.items():
            cls.unpacked[name] = fresh(pathlib.Path(ARGS.work) / "unpacked" / name)
            run(["dpkg-deb", "-x", deb, cls.unpacked[name]])
        cls.prefix = pathlib.Path("/usr")

    def root(self, part):
        return self.unpacked[PACKAGES[part]] / "usr"

    def field(self, package, name):
        return run(["dpkg-deb", "-f", self.debs[package], name]).stdout.strip()

    def listing(self, package):
        out = run(["dpkg-deb", "-c", self.debs[package]]).stdout
        return {line.split()[-1] for line in out.splitlines() if not line.startswith("d")}

    def test_one_package_per_part(self):
        self.assertEqual(sorted(self.debs), sorted(PACKAGES[p] for p in parts()))

    def test_control_names_each_package_and_version(self):
        arch = run(["dpkg", "--print-architecture"]).stdout.strip()
        for package in self.debs:
            with self.subTest(package=package):
                self.assertEqual(self.field(package, "Package"), package)
                self.assertEqual(self.field(package, "Version"), ARGS.version)
                self.assertEqual(self.field(package, "Architecture"), "all" if package == "libtgs-dev" else arch)
                self.assertTrue(self.field(package, "Maintainer"))
                description = self.field(package, "Description").splitlines()
                self.assertGreater(len(description), 1, "a summary and a long description")

    def test_no_file_is_in_two_packages(self):
        seen = {}
        for package in self.debs:
            for path in self.listing(package):
                self.assertNotIn(path, seen, f"{path} is in {package} and {seen.get(path)}")
                seen[path] = package

    def test_files_are_in_their_packages(self):
        expected = {"libtgs-dev": ["./usr/include/tgs/version.hpp"]}
        for tool in ARGS.tools:
            expected.setdefault(PACKAGES[TOOL_PART[tool]], []).append(f"./usr/bin/{tool}")
            if ARGS.man:
                expected[PACKAGES[TOOL_PART[tool]]].append(f"./usr/share/man/man1/{tool}.1")
        if ARGS.interposer:
            expected.setdefault("tgs-node", []).append("./usr/lib/tgs/libtgs-intercept.so")
        if "tgs-node" in ARGS.tools:
            expected["tgs-node"].append("./usr/lib/systemd/system/tgs-node.service")
        if ARGS.python_dir:
            expected["python3-tgs"] = [f"./usr/{ARGS.python_dir}/tgs/{f}"
                                       for f in ("__init__.py", "plot.py", "_build.py")]
        for package, paths in expected.items():
            listing = self.listing(package)
            for path in paths + [f"./usr/share/doc/{package}/copyright"]:
                self.assertIn(path, listing, package)
        dev = self.listing("libtgs-dev")
        self.assertTrue(any(p.startswith("./usr/lib/") and p.endswith("/cmake/tgs/tgs-config.cmake") for p in dev))
        self.assertEqual([p for p in dev if not p.startswith(("./usr/include/tgs/", "./usr/lib/", "./usr/share/doc/"))],
                         [], "libtgs-dev holds the headers, the CMake package and its copyright only")

    def test_dependencies_are_filled_and_met_here(self):
        for package in self.debs:
            depends = self.field(package, "Depends")
            names = [alt.strip().split(" ")[0] for dep in depends.split(",") if dep for alt in dep.split("|")]
            if package != "libtgs-dev":
                with self.subTest(package=package):
                    self.assertIn("libc6", names)
                    self.assertIn("libstdc++6", names)
            # None needs another of the packages: each installs alone.
            self.assertFalse(set(names) & set(self.debs), f"{package}: {depends}")
            # This machine is the target system: every dependency is a package installed here, so a
            # `dpkg -i` would find it satisfied.
            for dep in (d for d in depends.split(",") if d.strip()):
                alternatives = [a.strip().split(" ")[0] for a in dep.split("|")]
                installed = [a for a in alternatives
                             if subprocess.run(["dpkg-query", "-W", "-f=${Status}", a], capture_output=True,
                                               text=True).stdout.endswith("installed")]
                self.assertTrue(installed, f"{package}: dependency {dep.strip()} is not installed here")
        if "tgs-device-plugin" in ARGS.tools:
            depends = self.field("tgs-node", "Depends")
            self.assertRegex(depends, r"\blibgrpc\+\+", depends)
            self.assertRegex(depends, r"\blibprotobuf", depends)
        if "tgs-dra-plugin" in ARGS.tools:
            self.assertRegex(self.field("tgs-node", "Depends"), r"\blibcurl4\b")

    def test_only_the_python_module_asks_for_python(self):
        for package in set(self.debs) - {"python3-tgs"}:
            for field in ("Depends", "Recommends", "Suggests"):
                self.assertNotIn("python", self.field(package, field), f"{package} {field}")

    def test_python_module_depends_on_its_python_and_suggests_plotting(self):
        if not ARGS.python_dir:
            self.skipTest("the Python module is not built")
        version = run([ARGS.python, "-c", "import sys; print(*sys.version_info[:2], sep='.')"]).stdout.strip()
        major, minor = version.split(".")
        depends = [d.strip() for d in self.field("python3-tgs", "Depends").split(",")]
        for dep in (f"python3 (>= {version})", f"python3 (<< {major}.{int(minor) + 1})", "python3-numpy"):
            self.assertIn(dep, depends)
        self.assertEqual(self.field("python3-tgs", "Recommends"), "")
        self.assertEqual(self.field("python3-tgs", "Suggests"), "python3-matplotlib, python3-pandas")

    def test_no_package_pulls_the_plotting_stack(self):
        """apt installs Depends and Recommends: matplotlib and pandas are named only as Suggests."""
        for package in self.debs:
            for field in ("Depends", "Pre-Depends", "Recommends"):
                with self.subTest(package=package, field=field):
                    text = self.field(package, field)
                    self.assertNotIn("matplotlib", text)
                    self.assertNotIn("pandas", text)

    def test_node_depends_on_libsystemd(self):
        if "tgs-node" not in ARGS.tools:
            self.skipTest("tgs-node not built")
        self.assertRegex(self.field("tgs-node", "Depends"), r"(^|, )libsystemd0( |,|$)")

    def test_programs_are_stripped(self):
        if not shutil.which("file"):
            self.skipTest("file not found")
        for name in ARGS.tools:
            self.assertIn("stripped", run(["file", self.tool(name)]).stdout.replace("not stripped", "NOT"))

    def test_only_the_node_has_maintainer_scripts(self):
        for package, deb in self.debs.items():
            scripts = fresh(pathlib.Path(ARGS.work) / "control" / package)
            run(["dpkg-deb", "-e", deb, scripts])
            for name in ("postinst", "prerm", "postrm"):
                path = scripts / name
                if package != "tgs-node":
                    self.assertFalse(path.exists(), f"{package} {name}")
                    continue
                self.assertTrue(os.access(path, os.X_OK), name)
                run(["sh", "-n", path])

    def maintainer_script(self, name, *args, groups=()):
        """Runs tgs-node's maintainer script `name` with `args`, `groups` the groups that exist,
        every program it may call (addgroup, getent, systemctl...) a recording fake first on PATH:
        the calls it made, one line each."""
        if "tgs-node" not in self.debs:
            self.skipTest("tgs-node not built")
        scripts = fresh(pathlib.Path(ARGS.work) / "control" / "tgs-node-run")
        run(["dpkg-deb", "-e", self.debs["tgs-node"], scripts])
        fakes = fresh(pathlib.Path(ARGS.work) / "fake-bin")
        calls = fakes / "calls"
        known = " ".join(groups)
        for program in ("addgroup", "delgroup", "groupadd", "groupdel", "adduser", "deluser", "systemctl"):
            (fakes / program).write_text(f'#!/bin/sh\necho "{program} $*" >> "{calls}"\n')
        # getent group NAME: found (status 0) for the groups given, else status 2, as getent says.
        (fakes / "getent").write_text(f'#!/bin/sh\necho "getent $*" >> "{calls}"\n'
                                      f'for g in {known}; do [ "$2" = "$g" ] && echo "$g:x:999:" && exit 0; done\n'
                                      'exit 2\n')
        for fake in fakes.iterdir():
            fake.chmod(0o755)
        run(["sh", scripts / name, *args], env={**os.environ, "PATH": f"{fakes}:{os.environ['PATH']}"})
        return calls.read_text().splitlines() if calls.exists() else []

    def test_postinst_makes_the_production_group_once(self):
        """The unit gives /run/tgs/gpus to tgs-production: the package makes it, and only where it is missing."""
        calls = self.maintainer_script("postinst", "configure", "")
        self.assertIn("addgroup --system tgs-production", calls)
        calls = self.maintainer_script("postinst", "configure", ARGS.version, groups=["tgs-production"])
        self.assertFalse([c for c in calls if c.startswith(("addgroup", "groupadd"))], calls)
        self.assertIn("getent group tgs-production", calls)

    def test_postrm_keeps_the_group(self):
        """A purge leaves the system group, as Debian does: files given to it may remain."""
        for action in ("remove", "purge"):
            calls = self.maintainer_script("postrm", action, groups=["tgs-production"])
            self.assertFalse([c for c in calls if c.startswith(("delgroup", "groupdel", "deluser"))], calls)

    def test_node_depends_on_adduser(self):
        """postinst calls addgroup, which the adduser package provides."""
        if "tgs-node" not in self.debs:
            self.skipTest("tgs-node not built")
        self.assertRegex(self.field("tgs-node", "Depends"), r"(^|, )adduser( |,|$)")


class FirstRunBuild(unittest.TestCase):
    """scripts/run.sh's build: the simulator alone (scripts/build.sh sim, into a folder of its own),
    with the flags a first run uses; it prints no warning, and tgs-sim runs its default workload."""

    @classmethod
    def setUpClass(cls):
        cls.build = pathlib.Path(ARGS.work) / "first-run-build"
        shutil.rmtree(cls.build, ignore_errors=True)
        built = run([pathlib.Path(ARGS.source) / "scripts" / "build.sh", "sim"],
                    env=dict(os.environ, TGS_BUILD_DIR=cls.build))
        cls.output = built.stdout + built.stderr

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.build, ignore_errors=True)

    def test_configures_the_simulator_alone(self):
        cache = (self.build / "CMakeCache.txt").read_text()
        # A setting given on the command line that nothing declares is cached UNINITIALIZED.
        for name, value in (("TGS_BUILD_TESTS", "OFF"), ("TGS_BUILD_CUDA", "OFF"), ("TGS_BUILD_PYTHON", "OFF"),
                            ("CMAKE_UNITY_BUILD", "ON"), ("CMAKE_BUILD_TYPE", "Release")):
            self.assertRegex(cache, rf"(?m)^{name}:[A-Z]+={value}$")
        for package in ("GTest_DIR", "gRPC_DIR", "pybind11_DIR", "benchmark_DIR"):
            self.assertNotRegex(cache, rf"(?m)^{package}:PATH=/", "the simulator alone looks for no test package")
        built = sorted(p.name for p in (self.build / "bin").iterdir())
        self.assertEqual(built, ["tgs-sim"])

    def test_prints_no_warning(self):
        # A new user reads a warning before the first table as a broken build. Warnings are not
        # errors in this build (TGS_WERROR=OFF: a newer compiler's new one must not stop a first
        # run), and its flags (Release -O2, unity sources) inline more than the developers' build,
        # where -Werror holds: this is the only check of what it prints.
        warnings = [line for line in self.output.splitlines() if "warning:" in line]
        if warnings:
            self.fail(f"scripts/build.sh sim printed {len(warnings)} warning(s):\n" + "\n".join(warnings)
                      + "\n\nIts whole output:\n" + self.output)

    def test_simulator_runs_its_default_workload(self):
        out = run([self.build / "bin" / "tgs-sim"]).stdout
        self.assertRegex(out, r"(?m)^mixed stream: ")
        self.assertRegex(out, r"(?m)^tgs +\d")


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
