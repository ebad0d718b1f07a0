# SPDX-License-Identifier: Apache-2.0
"""Tests of the device plugin's manifests (deploy/): they parse, fit together (selectors, volumes,
flags, resources, the image), and pass kubectl's client-side dry run where kubectl is installed,
against a stand-in API server that answers discovery and has no objects."""
import argparse
import http.server
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest

import yaml

from stand_in_api import JsonHandler

ARGS = None

# What the stand-in API server knows: the group versions and kinds the manifests use.
RESOURCES = {
    "v1": [("pods", "Pod", True), ("serviceaccounts", "ServiceAccount", True), ("namespaces", "Namespace", False)],
    "apps/v1": [("daemonsets", "DaemonSet", True)],
}


def load(name):
    with open(pathlib.Path(ARGS.deploy) / name, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def manifests():
    return sorted(p.name for p in pathlib.Path(ARGS.deploy).glob("*.yaml"))


def the_daemonset():
    return load("daemonset.yaml")[0]


def flag_values(args):
    """--name=value arguments as a dict."""
    out = {}
    for a in args:
        m = re.fullmatch(r"--([a-z-]+)=(.*)", a)
        if not m:
            raise AssertionError(f"argument {a!r} is not --flag=value")
        out[m.group(1)] = m.group(2)
    return out


class Manifests(unittest.TestCase):
    def test_every_document_parses_and_names_itself(self):
        names = manifests()
        self.assertEqual(names, ["daemonset.yaml", "opportunistic-pod.yaml", "production-pod.yaml",
                                 "serviceaccount.yaml"])
        for name in names:
            docs = load(name)
            self.assertEqual(len(docs), 1, name)
            for d in docs:
                for key in ("apiVersion", "kind", "metadata"):
                    self.assertIn(key, d, f"{name}: no {key}")
                self.assertTrue(d["metadata"].get("name"), f"{name}: no metadata.name")

    def test_daemonset_selects_its_pods_and_mounts_every_volume(self):
        ds = the_daemonset()
        self.assertEqual(ds["kind"], "DaemonSet")
        template = ds["spec"]["template"]
        for k, v in ds["spec"]["selector"]["matchLabels"].items():
            self.assertEqual(template["metadata"]["labels"].get(k), v, "the selector must match the pod labels")
        volumes = {v["name"]: v for v in template["spec"]["volumes"]}
        (container,) = template["spec"]["containers"]
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        self.assertEqual(set(mounts), set(volumes), "every volume mounted, every mount a volume")
        # kubelet's folder comes from the host, writable; tgs's folders read-only.
        self.assertEqual(volumes["device-plugins"]["hostPath"]["path"], "/var/lib/kubelet/device-plugins")
        self.assertFalse(mounts["device-plugins"].get("readOnly", False))
        self.assertTrue(mounts["tgs-sockets"]["readOnly"])
        self.assertTrue(mounts["tgs-lib"]["readOnly"])

    def test_daemonset_flags_name_mounted_paths(self):
        (container,) = the_daemonset()["spec"]["template"]["spec"]["containers"]
        flags = flag_values(container["args"])
        mounted = {m["mountPath"]: m for m in container["volumeMounts"]}
        self.assertIn(flags["kubelet-dir"], mounted)
        self.assertIn(flags["socket-dir"], mounted)
        self.assertIn(os.path.dirname(flags["interposer"]), mounted)
        # The same paths on the host, so what the plugin hands kubelet for mounts exists there.
        volumes = {v["name"]: v for v in the_daemonset()["spec"]["template"]["spec"]["volumes"]}
        for path in (flags["kubelet-dir"], flags["socket-dir"], os.path.dirname(flags["interposer"])):
            self.assertEqual(volumes[mounted[path]["name"]]["hostPath"]["path"], path)
        if ARGS.plugin:
            help_text = subprocess.run([ARGS.plugin, "--help"], capture_output=True, text=True, check=True).stdout
            for flag in flags:
                self.assertIn(f"--{flag}", help_text, f"the plugin has no --{flag}")

    def test_daemonset_runs_this_version_without_privileges(self):
        spec = the_daemonset()["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        self.assertEqual(container["image"], f"tgs-device-plugin:{ARGS.version}")
        sc = container["securityContext"]
        self.assertFalse(sc.get("privileged", False))
        self.assertFalse(sc["allowPrivilegeEscalation"])
        self.assertEqual(sc["capabilities"]["drop"], ["ALL"])
        self.assertFalse(spec["automountServiceAccountToken"])
        with open(pathlib.Path(ARGS.deploy) / "Dockerfile", encoding="utf-8") as f:
            dockerfile = f.read()
        self.assertIn(f"docker build -t {container['image']} ", dockerfile)
        self.assertIn('ENTRYPOINT ["/usr/bin/tgs-device-plugin"]', dockerfile)

    def test_service_account_exists_and_holds_no_token(self):
        (sa,) = load("serviceaccount.yaml")
        ds = the_daemonset()
        self.assertEqual(sa["kind"], "ServiceAccount")
        self.assertEqual(sa["metadata"]["name"], ds["spec"]["template"]["spec"]["serviceAccountName"])
        self.assertEqual(sa["metadata"]["namespace"], ds["metadata"]["namespace"])
        self.assertFalse(sa["automountServiceAccountToken"])

    def test_pods_request_one_device_of_their_class(self):
        for name, resource in (("production-pod.yaml", "tgs.io/gpu-production"),
                               ("opportunistic-pod.yaml", "tgs.io/gpu-opportunistic")):
            (pod,) = load(name)
            self.assertEqual(pod["kind"], "Pod")
            (container,) = pod["spec"]["containers"]
            self.assertEqual(container["resources"]["limits"], {resource: 1}, name)
            script = container["args"][0]
            compile(script, name, "exec")  # the training script is valid Python
            self.assertIn(".cuda()", script)


class StandInApiServer(JsonHandler):
    """Discovery for RESOURCES, and 404 for every object (so an apply is a create)."""

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        if path == "/api":
            return self.reply(200, {"kind": "APIVersions", "versions": ["v1"]})
        if path == "/apis":
            groups = [{"name": gv.split("/")[0], "versions": [{"groupVersion": gv, "version": gv.split("/")[1]}],
                       "preferredVersion": {"groupVersion": gv, "version": gv.split("/")[1]}}
                      for gv in RESOURCES if "/" in gv]
            return self.reply(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
        for gv, resources in RESOURCES.items():
            if path == ("/api/" if gv == "v1" else "/apis/") + gv:
                return self.reply(200, {
                    "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
                    "resources": [{"name": n, "singularName": k.lower(), "namespaced": ns, "kind": k,
                                   "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]}
                                  for n, k, ns in resources]})
        return self.status(404, "NotFound", f"{path} not found")


class KubectlDryRun(unittest.TestCase):
    def test_kubectl_accepts_the_manifests(self):
        kubectl = shutil.which("kubectl")
        if not kubectl:
            self.skipTest("kubectl not found (Debian: apt-get install kubernetes-client); the manifests were "
                          "checked without it")
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StandInApiServer)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        with tempfile.TemporaryDirectory() as home:
            config = pathlib.Path(home) / "config"
            config.write_text(yaml.safe_dump({
                "apiVersion": "v1", "kind": "Config", "current-context": "stand-in",
                "clusters": [{"name": "stand-in", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}],
                "contexts": [{"name": "stand-in", "context": {"cluster": "stand-in", "user": "nobody"}}],
                "users": [{"name": "nobody", "user": {}}]}))
            env = dict(os.environ, KUBECONFIG=str(config), HOME=home)
            # Schema validation needs the server's OpenAPI documents, which the stand-in does not have.
            run = subprocess.run([kubectl, "apply", "--dry-run=client", "--validate=false", "-o", "name",
                                  "-f", ARGS.deploy], capture_output=True, text=True, env=env, timeout=120)
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertEqual(sorted(run.stdout.split()),
                         ["daemonset.apps/tgs-device-plugin", "pod/resnet18-opportunistic",
                          "pod/resnet50-production", "serviceaccount/tgs-device-plugin"], run.stderr)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--deploy", required=True, help="the deploy/ folder")
    parser.add_argument("--version", required=True, help="the project version the image tag must carry")
    parser.add_argument("--plugin", help="tgs-device-plugin, to check the DaemonSet's flags against its --help")
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
