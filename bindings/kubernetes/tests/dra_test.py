# SPDX-License-Identifier: Apache-2.0
"""tgs-dra-plugin against a stand-in kubelet and a stand-in API server that speak the real
protocols: kubelet's plugin registration and DRA v1 services over gRPC on Unix sockets, and the
API server's REST over HTTP with a bearer token. The ResourceSlices it publishes are checked
against Kubernetes' published schema (schema/resource.k8s.io-v1), and so are the DeviceClasses
and claim templates of deploy/dra."""
import argparse
import copy
import http.server
import importlib
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import yaml

from stand_in_api import JsonHandler

ARGS = None
NODE = "node-a"
NODE_UID = "6a1c4b1e-0000-4000-8000-00000000000a"
TOKEN = "stand-in-token"
REPLICAS = 2


def schema(kind):
    with open(pathlib.Path(ARGS.schema) / f"{kind}.json", encoding="utf-8") as f:
        return json.load(f)


def validate(kind, obj):
    import jsonschema  # Debian: python3-jsonschema
    jsonschema.Draft4Validator(schema(kind)).validate(obj)


def wait_for(what, predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class ApiState:
    """What the stand-in API server holds, and every request it answered."""

    def __init__(self):
        self.lock = threading.Lock()
        self.claims = {}  # (namespace, name) -> ResourceClaim
        self.slices = {}  # name -> ResourceSlice
        self.version = 0
        self.requests = []
        self.fail_claims = False


class StandInApiServer(JsonHandler):
    """The resources the plugin uses (nodes, claims, slices), with a bearer token, from `state`."""

    state = None

    def body(self):
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))

    def handle_any(self, method):
        s = self.state
        path = self.path.split("?", 1)[0]
        with s.lock:
            s.requests.append((method, path))
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            return self.status(401, "Unauthorized", "no or wrong bearer token")
        if self.headers.get("Accept") != "application/json":
            return self.status(406, "NotAcceptable", "ask for JSON")
        m = re.fullmatch(r"/api/v1/nodes/([^/]+)", path)
        if m and method == "GET":
            if m.group(1) != NODE:
                return self.status(404, "NotFound", f"nodes {m.group(1)} not found")
            return self.reply(200, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "uid": NODE_UID}})
        m = re.fullmatch(r"/apis/resource.k8s.io/v1/namespaces/([^/]+)/resourceclaims/([^/]+)", path)
        if m and method == "GET":
            with s.lock:
                if s.fail_claims:
                    return self.status(500, "InternalError", "etcd is having a bad day")
                claim = s.claims.get((m.group(1), m.group(2)))
            if claim is None:
                return self.status(404, "NotFound", f"resourceclaims {m.group(2)} not found")
            return self.reply(200, claim)
        if path == "/apis/resource.k8s.io/v1/resourceslices" and method == "POST":
            obj = self.body()
            with s.lock:
                name = obj["metadata"]["name"]
                if name in s.slices:
                    return self.status(409, "AlreadyExists", f"resourceslices {name} already exists")
                s.version += 1
                obj["metadata"]["resourceVersion"] = str(s.version)
                s.slices[name] = obj
            return self.reply(201, obj)
        m = re.fullmatch(r"/apis/resource.k8s.io/v1/resourceslices/([^/]+)", path)
        if m:
            name = m.group(1)
            with s.lock:
                current = s.slices.get(name)
                if method == "GET":
                    if current is None:
                        return self.status(404, "NotFound", f"resourceslices {name} not found")
                    return self.reply(200, current)
                if method == "PUT":
                    obj = self.body()
                    if current is None:
                        return self.status(404, "NotFound", f"resourceslices {name} not found")
                    if obj["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                        return self.status(409, "Conflict", "the object has been modified")
                    s.version += 1
                    obj["metadata"]["resourceVersion"] = str(s.version)
                    s.slices[name] = obj
                    return self.reply(200, obj)
        return self.status(404, "NotFound", f"{method} {path} not found")

    def do_GET(self):
        self.handle_any("GET")

    def do_POST(self):
        self.handle_any("POST")

    def do_PUT(self):
        self.handle_any("PUT")


def generated_stubs(out):
    """kubelet's two APIs as Python modules, from the same .proto files as the plugin's."""
    protos = ["dra/v1/api.proto", "pluginregistration/v1/api.proto"]
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run([ARGS.protoc, f"--plugin=protoc-gen-grpc_python={ARGS.grpc_python_plugin}",
                    f"--python_out={out}", f"--grpc_python_out={out}", "-I", ARGS.proto] + protos, check=True)
    sys.path.insert(0, str(out))
    return {name: importlib.import_module(name) for name in
            ("dra.v1.api_pb2", "dra.v1.api_pb2_grpc", "pluginregistration.v1.api_pb2",
             "pluginregistration.v1.api_pb2_grpc")}


def claim(namespace, name, uid, results, allocated=True):
    """A ResourceClaim as the API server holds it after the scheduler allocated `results`."""
    obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
           "metadata": {"namespace": namespace, "name": name, "uid": uid},
           "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "x"}}]}}}
    if allocated:
        obj["status"] = {"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": driver, "pool": pool, "device": device}
            for driver, pool, device in results]}}}
    return obj


class DraPlugin(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import grpc  # Debian: python3-grpcio
        cls.grpc = grpc
        cls.tmp = tempfile.TemporaryDirectory(prefix="tgs-dra-")
        cls.stubs = generated_stubs(pathlib.Path(cls.tmp.name) / "stubs")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def setUp(self):
        root = pathlib.Path(tempfile.mkdtemp(prefix="t-", dir=self.tmp.name))
        self.root = root
        for d in ("registry", "plugin", "sockets"):
            (root / d).mkdir()
        self.token = root / "token"
        self.token.write_text(TOKEN + "\n")
        self.interposer = root / "libtgs-intercept.so"
        self.interposer.write_text("")
        self.features = root / "tgs.features"
        self.features.write_text("# tgs-node\ntgs.version=0.1.0\ntgs.mps=true\ntgs.memory-policy=tgs\n"
                                 "tgs.policy=priority-share\ntgs.opportunistic-mechanism=auto\n")
        # tgs-node's class sockets, for GPUs 0 and 1.
        self.node_sockets = {}
        for gpu in (0, 1):
            for cls in ("production", "opportunistic"):
                self.serve_node_socket(gpu, cls)
        self.state = ApiState()
        handler = type("Handler", (StandInApiServer,), {"state": self.state})
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.addCleanup(self.server.server_close)
        self.addCleanup(self.server.shutdown)
        self.plugin = None
        self.addCleanup(self.stop_plugin)
        self.start_plugin()

    def serve_node_socket(self, gpu, cls):
        s = socket.socket(socket.AF_UNIX)
        path = self.root / "sockets" / f"gpu{gpu}-{cls}.sock"
        s.bind(str(path))
        self.node_sockets[(gpu, cls)] = (s, path)
        self.addCleanup(s.close)

    def start_plugin(self, *extra):
        env = dict(os.environ, LD_LIBRARY_PATH=ARGS.fake_driver_dir, TGS_FAKE_DEVICE_COUNT="2")
        env.pop("KUBERNETES_SERVICE_HOST", None)
        self.plugin = subprocess.Popen(
            [ARGS.plugin, "--node-name", NODE, "--api-server", f"http://127.0.0.1:{self.server.server_port}",
             "--token-file", str(self.token), "--ca-file", "", "--registry-dir", str(self.root / "registry"),
             "--plugin-dir", str(self.root / "plugin"), "--gpus", "2", "--opportunistic-replicas", str(REPLICAS),
             "--socket-dir", str(self.root / "sockets"), "--interposer", str(self.interposer),
             "--node-features", str(self.features), "--check-period-ms", "100", *extra],
            env=env, stderr=subprocess.PIPE, text=True)
        wait_for("the registration socket", lambda: self.registration_socket().exists() or self.plugin.poll() is not None)
        self.assertIsNone(self.plugin.poll(), self.plugin.stderr.read() if self.plugin.poll() is not None else "")

    def stop_plugin(self):
        if self.plugin is None:
            return None
        self.plugin.send_signal(signal.SIGTERM)
        try:
            code = self.plugin.wait(timeout=10)
        finally:
            self.plugin.kill()
            log = self.plugin.stderr.read()
            self.plugin.stderr.close()
            self.plugin = None
        # Under the sanitizer builds, a report is a failure even where the plugin went on.
        self.assertNotRegex(log, r"runtime error:|Sanitizer", log)
        return code, log

    def registration_socket(self):
        return self.root / "registry" / "gpu.tgs.io-reg.sock"

    def channel(self, path):
        # A channel of its own: gRPC otherwise shares connections by address, and one to the socket
        # of a plugin that was restarted is broken.
        channel = self.grpc.insecure_channel(f"unix://{path}", options=[("grpc.use_local_subchannel_pool", 1)])
        self.addCleanup(channel.close)
        return channel

    def service(self):
        channel = self.channel(self.root / 'plugin' / 'dra.sock')
        return self.stubs["dra.v1.api_pb2_grpc"].DRAPluginStub(channel)

    def prepare(self, *claims):
        pb = self.stubs["dra.v1.api_pb2"]
        req = pb.NodePrepareResourcesRequest(claims=[pb.Claim(namespace=ns, name=n, uid=u) for ns, n, u in claims])
        return self.service().NodePrepareResources(req, timeout=10).claims

    def unprepare(self, *claims):
        pb = self.stubs["dra.v1.api_pb2"]
        req = pb.NodeUnprepareResourcesRequest(claims=[pb.Claim(namespace=ns, name=n, uid=u) for ns, n, u in claims])
        return self.service().NodeUnprepareResources(req, timeout=10).claims

    def add_claim(self, obj):
        with self.state.lock:
            self.state.claims[(obj["metadata"]["namespace"], obj["metadata"]["name"])] = obj

    def the_slice(self):
        with self.state.lock:
            return copy.deepcopy(self.state.slices.get(f"{NODE}-gpu.tgs.io"))

    # --- registration ----------------------------------------------------------------------------

    def test_kubelet_learns_a_dra_plugin_and_where_its_service_is(self):
        channel = self.channel(self.registration_socket())
        reg = self.stubs["pluginregistration.v1.api_pb2_grpc"].RegistrationStub(channel)
        pb = self.stubs["pluginregistration.v1.api_pb2"]
        info = reg.GetInfo(pb.InfoRequest(), timeout=5)
        self.assertEqual(info.type, "DRAPlugin")
        self.assertEqual(info.name, "gpu.tgs.io")
        self.assertEqual(info.endpoint, str(self.root / "plugin" / "dra.sock"))
        self.assertEqual(list(info.supported_versions), ["v1.DRAPlugin"])
        reg.NotifyRegistrationStatus(pb.RegistrationStatus(plugin_registered=False, error="version skew"), timeout=5)
        # A registration socket someone removed is served again, so kubelet's watcher sees it.
        self.registration_socket().unlink()
        wait_for("the registration socket again", self.registration_socket().exists)
        code, log = self.stop_plugin()
        self.assertEqual(code, 0, log)
        self.assertIn("kubelet refused the registration: version skew", log)
        self.assertFalse(self.registration_socket().exists(), "the plugin removes its sockets when it stops")
        self.assertFalse((self.root / "plugin" / "dra.sock").exists())

    # --- the ResourceSlice -----------------------------------------------------------------------

    def test_the_slice_offers_both_classes_per_gpu_and_follows_tgs_node(self):
        first = wait_for("the ResourceSlice", self.the_slice)
        validate("resourceslice", first)
        spec = first["spec"]
        self.assertEqual((spec["driver"], spec["nodeName"], spec["pool"]["name"]), ("gpu.tgs.io", NODE, NODE))
        self.assertEqual(spec["pool"]["resourceSliceCount"], 1)
        self.assertEqual(first["metadata"]["ownerReferences"][0]["uid"], NODE_UID)
        names = [d["name"] for d in spec["devices"]]
        self.assertEqual(names, ["gpu0-production", "gpu0-opportunistic-0", "gpu0-opportunistic-1",
                                 "gpu1-production", "gpu1-opportunistic-0", "gpu1-opportunistic-1"])
        a = spec["devices"][3]["attributes"]
        self.assertEqual(a["class"], {"string": "production"})
        self.assertEqual(a["index"], {"int": 1})
        self.assertEqual(a["mps"], {"bool": True})
        self.assertEqual(a["memoryPolicy"], {"string": "tgs"})
        self.assertEqual(a["model"], {"string": "tgs fake GPU 1"})  # the fake driver's name for it
        self.assertRegex(spec["devices"][3]["capacity"]["memory"]["value"], r"^[1-9][0-9]*$")

        # GPU 1's tgs-node socket goes: its devices leave the slice, in a new generation.
        s, path = self.node_sockets[(1, "opportunistic")]
        s.close()
        path.unlink()
        second = wait_for("a slice without GPU 1", lambda: (x := self.the_slice()) and
                          len(x["spec"]["devices"]) == 1 + REPLICAS and x)
        validate("resourceslice", second)
        self.assertTrue(all(d["name"].startswith("gpu0-") for d in second["spec"]["devices"]))
        self.assertEqual(second["spec"]["pool"]["generation"], first["spec"]["pool"]["generation"] + 1)

        # MPS goes down on the node: tgs-node rewrites its feature file, the slice follows.
        self.features.write_text("tgs.mps=false\ntgs.memory-policy=tgs\n")
        third = wait_for("mps false", lambda: (x := self.the_slice()) and
                         x["spec"]["devices"][0]["attributes"].get("mps") == {"bool": False} and x)
        self.assertNotIn("policy", third["spec"]["devices"][0]["attributes"])

        # Nothing changes: the API server is not written to again.
        with self.state.lock:
            writes = sum(1 for m, _ in self.state.requests if m in ("POST", "PUT"))
        time.sleep(0.6)
        with self.state.lock:
            self.assertEqual(writes, sum(1 for m, _ in self.state.requests if m in ("POST", "PUT")))

    def test_a_restarted_plugin_takes_up_its_slice_where_it_was(self):
        first = wait_for("the ResourceSlice", self.the_slice)
        self.stop_plugin()
        self.start_plugin()
        time.sleep(0.5)
        again = self.the_slice()
        self.assertEqual(again["metadata"]["resourceVersion"], first["metadata"]["resourceVersion"],
                         "the same offer is not written again")

    # --- prepare and unprepare -------------------------------------------------------------------

    def test_prepare_gives_the_class_socket_of_the_allocated_gpu_and_survives_a_restart(self):
        self.add_claim(claim("team-a", "train", "uid-1", [("gpu.tgs.io", NODE, "gpu1-opportunistic-1")]))
        self.add_claim(claim("team-b", "serve", "uid-2", [("gpu.tgs.io", NODE, "gpu0-production")]))
        got = self.prepare(("team-a", "train", "uid-1"), ("team-b", "serve", "uid-2"))
        self.assertEqual(got["uid-1"].error, "")
        (d,) = got["uid-1"].devices
        self.assertEqual((list(d.request_names), d.pool_name, d.device_name), (["gpu"], NODE, "gpu1-opportunistic-1"))
        self.assertEqual(list(d.cdi_device_ids), ["tgs.io/gpu=1-opportunistic", "nvidia.com/gpu=1"])
        self.assertEqual(list(got["uid-2"].devices[0].cdi_device_ids), ["tgs.io/gpu=0-production", "nvidia.com/gpu=0"])
        checkpoint = json.loads((self.root / "plugin" / "claims.json").read_text())
        self.assertEqual(sorted(c["uid"] for c in checkpoint["claims"]), ["uid-1", "uid-2"])
        self.assertEqual(oct((self.root / "plugin" / "claims.json").stat().st_mode & 0o777), "0o600")

        # Restarted, and the API server has forgotten the claims: kubelet's repeat gets the same.
        code, _ = self.stop_plugin()
        self.assertEqual(code, 0)
        with self.state.lock:
            self.state.claims.clear()
        self.start_plugin()
        again = self.prepare(("team-a", "train", "uid-1"))
        self.assertEqual(again["uid-1"].error, "")
        self.assertEqual(list(again["uid-1"].devices[0].cdi_device_ids), list(d.cdi_device_ids))

        # Unprepare, twice (kubelet repeats itself), and for a claim never prepared: no error.
        for _ in range(2):
            done = self.unprepare(("team-a", "train", "uid-1"), ("x", "y", "never"))
            self.assertEqual({k: v.error for k, v in done.items()}, {"uid-1": "", "never": ""})
        checkpoint = json.loads((self.root / "plugin" / "claims.json").read_text())
        self.assertEqual([c["uid"] for c in checkpoint["claims"]], ["uid-2"])

    def test_bad_claims_are_refused_with_a_reason(self):
        self.add_claim(claim("ns", "two", "u-two", [("gpu.tgs.io", NODE, "gpu0-opportunistic-0"),
                                                    ("gpu.tgs.io", NODE, "gpu1-opportunistic-0")]))
        self.add_claim(claim("ns", "elsewhere", "u-else", [("gpu.tgs.io", "node-b", "gpu0-opportunistic-0")]))
        self.add_claim(claim("ns", "pending", "u-pending", [], allocated=False))
        self.add_claim(claim("ns", "alien", "u-alien", [("gpu.tgs.io", NODE, "gpu7-production")]))
        self.add_claim(claim("ns", "other-driver", "u-other", [("nvidia.com", NODE, "gpu-0")]))
        self.add_claim(claim("ns", "replaced", "u-new", [("gpu.tgs.io", NODE, "gpu0-opportunistic-0")]))
        self.add_claim(claim("ns", "prod-a", "u-pa", [("gpu.tgs.io", NODE, "gpu0-production")]))
        self.add_claim(claim("ns", "prod-b", "u-pb", [("gpu.tgs.io", NODE, "gpu0-production")]))
        got = self.prepare(("ns", "two", "u-two"), ("ns", "elsewhere", "u-else"), ("ns", "pending", "u-pending"),
                           ("ns", "alien", "u-alien"), ("ns", "other-driver", "u-other"),
                           ("ns", "replaced", "u-old"), ("ns", "missing", "u-missing"), ("ns", "prod-a", "u-pa"))
        errors = {k: v.error for k, v in got.items()}
        self.assertIn("2 devices of gpu.tgs.io; a claim takes one", errors["u-two"])
        self.assertIn("allocated from pool node-b, not this node's (node-a)", errors["u-else"])
        self.assertIn("claim ns/pending: not allocated", errors["u-pending"])
        self.assertIn("gpu7-production is not one of this node's devices", errors["u-alien"])
        self.assertIn("no device of gpu.tgs.io in its allocation", errors["u-other"])
        self.assertIn("another claim of that name (UID u-new, kubelet asked for u-old)", errors["u-old"])
        self.assertIn("cannot read it from the API server: HTTP 404: resourceclaims missing not found",
                      errors["u-missing"])
        self.assertEqual(errors["u-pa"], "")
        for uid in errors:
            if uid != "u-pa":
                self.assertEqual(len(got[uid].devices), 0, uid)

        # A second production claim on GPU 0 while the first is prepared: refused, naming it.
        second = self.prepare(("ns", "prod-b", "u-pb"))["u-pb"]
        self.assertIn("GPU 0's production device is prepared for claim ns/prod-a (u-pa); a GPU runs one production",
                      second.error)
        self.unprepare(("ns", "prod-a", "u-pa"))
        self.assertEqual(self.prepare(("ns", "prod-b", "u-pb"))["u-pb"].error, "")

        # The API server failing is an error for that claim, and the plugin goes on.
        with self.state.lock:
            self.state.fail_claims = True
        failed = self.prepare(("ns", "two", "u-two"))["u-two"]
        self.assertIn("HTTP 500: etcd is having a bad day", failed.error)
        self.assertIsNone(self.plugin.poll())

    def test_a_corrupt_checkpoint_stops_the_plugin_and_names_the_file(self):
        self.stop_plugin()
        (self.root / "plugin" / "claims.json").write_text('{"driver": "gpu.tgs.io", "version": 1, "claims": [{"uid"')
        proc = subprocess.run(
            [ARGS.plugin, "--node-name", NODE, "--api-server", f"http://127.0.0.1:{self.server.server_port}",
             "--token-file", str(self.token), "--registry-dir", str(self.root / "registry"),
             "--plugin-dir", str(self.root / "plugin"), "--gpus", "1", "--socket-dir", str(self.root / "sockets"),
             "--interposer", str(self.interposer)],
            capture_output=True, text=True, timeout=20, env=dict(os.environ, LD_LIBRARY_PATH=ARGS.fake_driver_dir))
        self.assertEqual(proc.returncode, 1, proc.stderr)
        self.assertIn(f"cannot read the checkpoint {self.root / 'plugin' / 'claims.json'}: ", proc.stderr)
        self.assertIn("move it away to start without the claims it holds", proc.stderr)

    def test_a_wrong_token_is_refused_and_said(self):
        self.stop_plugin()
        with self.state.lock:
            self.state.slices.clear()
        self.token.write_text("wrong\n")
        self.start_plugin()
        time.sleep(0.5)
        code, log = self.stop_plugin()
        self.assertEqual(code, 0)
        self.assertIn("cannot read the ResourceSlice: HTTP 401: no or wrong bearer token", log)
        self.assertEqual(log.count("cannot read the ResourceSlice"), 1, "said once, not at every check\n" + log)
        self.assertIsNone(self.the_slice())


class Manifests(unittest.TestCase):
    """deploy/dra: the DeviceClasses, claim templates, pods and DaemonSet of the DRA driver."""

    def load(self, name):
        with open(pathlib.Path(ARGS.deploy) / name, encoding="utf-8") as f:
            return [d for d in yaml.safe_load_all(f) if d is not None]

    def test_device_classes_and_claim_templates_fit_the_published_schema(self):
        classes = self.load("deviceclasses.yaml")
        self.assertEqual(sorted(c["metadata"]["name"] for c in classes),
                         ["opportunistic.gpu.tgs.io", "production.gpu.tgs.io"])
        for c in classes:
            validate("deviceclass", c)
            (sel,) = c["spec"]["selectors"]
            cls = c["metadata"]["name"].split(".")[0]
            self.assertIn("device.driver == 'gpu.tgs.io'", sel["cel"]["expression"])
            self.assertIn(f"device.attributes['gpu.tgs.io'].class == '{cls}'", sel["cel"]["expression"])
        templates = self.load("claim-templates.yaml")
        for t in templates:
            validate("resourceclaimtemplate", t)
            (req,) = t["spec"]["spec"]["devices"]["requests"]
            self.assertIn(req["exactly"]["deviceClassName"], [c["metadata"]["name"] for c in classes])
            self.assertEqual(req["exactly"].get("count", 1), 1, "the plugin prepares one device per claim")

    def test_the_schema_check_can_fail(self):
        import jsonschema
        (c, _) = self.load("deviceclasses.yaml")
        bad = copy.deepcopy(c)
        bad["spec"]["selector"] = bad["spec"].pop("selectors")  # a typo kubectl would refuse
        with self.assertRaises(jsonschema.ValidationError):
            validate("deviceclass", bad)
        (t, *_) = self.load("claim-templates.yaml")
        bad = copy.deepcopy(t)
        bad["spec"]["spec"]["devices"]["requests"][0]["deviceClassName"] = "production.gpu.tgs.io"  # v1beta1's place
        with self.assertRaises(jsonschema.ValidationError):
            validate("resourceclaimtemplate", bad)

    def test_pods_claim_through_templates_that_exist(self):
        templates = {t["metadata"]["name"] for t in self.load("claim-templates.yaml")}
        for pod in self.load("pods.yaml"):
            self.assertEqual(pod["kind"], "Pod")
            claims = {c["name"]: c for c in pod["spec"]["resourceClaims"]}
            for c in claims.values():
                self.assertIn(c["resourceClaimTemplateName"], templates)
            (container,) = pod["spec"]["containers"]
            self.assertEqual({c["name"] for c in container["resources"]["claims"]}, set(claims))
            compile(container["args"][0], pod["metadata"]["name"], "exec")

    def test_the_daemonset_mounts_what_its_flags_name(self):
        docs = self.load("daemonset.yaml")
        kinds = {d["kind"]: d for d in docs}
        self.assertEqual(set(kinds), {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DaemonSet"})
        ds = kinds["DaemonSet"]
        spec = ds["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        flags = dict(re.fullmatch(r"--([a-z-]+)=(.*)", a).groups() for a in container["args"])
        mounted = {m["mountPath"]: m for m in container["volumeMounts"]}
        volumes = {v["name"]: v for v in spec["volumes"]}
        for flag in ("registry-dir", "plugin-dir", "socket-dir"):
            self.assertIn(flags[flag], mounted, flag)
            self.assertEqual(volumes[mounted[flags[flag]]["name"]]["hostPath"]["path"], flags[flag], flag)
        self.assertIn(os.path.dirname(flags["interposer"]), mounted)
        self.assertIn(os.path.dirname(flags["node-features"]), mounted)
        env = {e["name"]: e for e in container["env"]}
        self.assertEqual(env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"], "spec.nodeName")
        rules = kinds["ClusterRole"]["rules"]
        granted = {(r, v) for rule in rules for r in rule["resources"] for v in rule["verbs"]}
        for need in (("resourceslices", "create"), ("resourceslices", "update"), ("resourceslices", "get"),
                     ("resourceclaims", "get"), ("nodes", "get")):
            self.assertIn(need, granted)
        self.assertEqual(spec["serviceAccountName"], kinds["ServiceAccount"]["metadata"]["name"])
        if ARGS.plugin:
            help_text = subprocess.run([ARGS.plugin, "--help"], capture_output=True, text=True, check=True).stdout
            for flag in flags:
                self.assertIn(f"--{flag}", help_text, f"the plugin has no --{flag}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--plugin", required=True, help="tgs-dra-plugin")
    parser.add_argument("--protoc", required=True)
    parser.add_argument("--grpc-python-plugin", required=True)
    parser.add_argument("--proto", required=True, help="the proto/ folder")
    parser.add_argument("--schema", required=True, help="schema/resource.k8s.io-v1")
    parser.add_argument("--deploy", required=True, help="deploy/dra")
    parser.add_argument("--fake-driver-dir", required=True, help="the folder of the fake libcuda.so.1")
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
