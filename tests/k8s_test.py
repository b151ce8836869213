#!/usr/bin/env python3
"""k8s_test.py ATTNFUZZ WORK - the Kubernetes manifests of deploy/k8s/render.py.

1. Schema: every rendered document (GPU and CPU variants) passes deploy/k8s/validate.py,
   the Kubernetes API object schemas of the official Python client's models (Debian's
   python3-kubernetes); and the validator refuses a misspelled field, a string where an
   integer belongs and a missing required field (so a pass means something).
2. Fields: an Indexed Job (batch/v1, completionMode Indexed, completions = parallelism =
   shards), JOB_COMPLETION_INDEX from the completion-index annotation, nvidia.com/gpu: 1
   exactly when asked, the claim mounted where --root points, restartPolicy Never, a
   deadline past --time, the fuzz options passed on; the merge Job watching, merging and
   reporting; the claim ReadWriteMany. deploy/k8s/example.yaml is what its first line's
   command renders.
3. Pods, simulated: the shard container's command run three times at once with
   JOB_COMPLETION_INDEX 0, 1, 2 (the claim a temporary directory), each exiting 0 though
   it found the mutant; then the merge container's command: one merged bundle, stats of
   3 finished shards, a report.
Skipped (77) without PyYAML (Debian: python3-yaml); the schema check needs the
kubernetes client too (python3-kubernetes: scripts/setup.sh installs both)."""
import json
import os
import shutil
import subprocess
import sys

AF, WORK = os.path.abspath(sys.argv[1]), sys.argv[2]
SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
K8S = os.path.join(SRC, "deploy", "k8s")
sys.path.insert(0, K8S)
try:
    import yaml
except ImportError:
    print("SKIP: no PyYAML for this Python (%s): install python3-yaml" % sys.executable)
    sys.exit(77)
import render  # noqa: E402
import validate  # noqa: E402


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def rendered(argv):
    a, fuzz = render.parse(argv)
    text = "".join("---\n" + render.to_yaml(d) for d in render.render(a, fuzz))
    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    if docs != render.render(a, fuzz):
        fail("the YAML does not parse back to what render.py meant: %s" % argv)
    return text, docs


GPU = ["--name", "rc1", "--shards", "8", "--time", "3600", "--image", "r.example/attnfuzz:1", "--gpu",
       "--create-pvc", "50Gi", "--storage-class", "nfs", "--", "--backend", "target:torch/sdpa_cuda", "--batch", "16"]
CPU = ["--name", "nightly-cpu", "--shards", "3", "--time", "600", "--image", "r.example/attnfuzz:1", "--cpus", "4",
       "--pvc", "scratch", "--namespace", "fuzz", "--", "--pair", "explicit,fused", "--relation", "all"]
variants = {"gpu": rendered(GPU)[1], "cpu": rendered(CPU)[1]}

# --- 1. the API schema ----------------------------------------------------------------
try:
    validate._client()
    have_client = True
except ImportError:
    have_client = False
    print("note: no kubernetes client for this Python: the schema check is skipped, the field checks run")
if have_client:
    for name, docs in variants.items():
        for d in docs:
            errors = validate.validate(d)
            if errors:
                fail("%s: %s does not fit the API schema: %s" % (name, d["metadata"]["name"], errors))
    job = json.loads(json.dumps(variants["gpu"][1]))
    job["spec"]["completionsMode"] = job["spec"].pop("completionMode")
    job["spec"]["parallelism"] = "8"
    del job["spec"]["template"]["spec"]["containers"][0]["name"]
    errors = " | ".join(validate.validate(job))
    for want in ("spec.completionsMode: no such field in V1JobSpec", "spec.parallelism: '8' is not an integer",
                 "containers[0]: Invalid value for `name`"):
        if want not in errors:
            fail("the validator let a broken Job through (no \"%s\" in %s)" % (want, errors))
    print("ok   every manifest fits the Kubernetes API schema (kubernetes client models); a misspelled field, "
          "a wrong type and a missing required field are refused")

# --- 2. the fields ------------------------------------------------------------------------
for name, docs, shards, t, gpu, pvc in (("gpu", variants["gpu"], 8, 3600, True, "attnfuzz-campaigns"),
                                         ("cpu", variants["cpu"], 3, 600, False, "scratch")):
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    jobs = {d["metadata"]["name"].rsplit("-", 1)[1]: d for d in by_kind["Job"]}
    sh, merge = jobs["shards"], jobs["merge"]
    spec, pod = sh["spec"], sh["spec"]["template"]["spec"]
    c = pod["containers"][0]
    checks = {
        "apiVersion batch/v1": sh["apiVersion"] == "batch/v1" and merge["apiVersion"] == "batch/v1",
        "completionMode Indexed": spec.get("completionMode") == "Indexed",
        "completions = parallelism = shards": spec["completions"] == spec["parallelism"] == shards,
        "JOB_COMPLETION_INDEX from the annotation": {"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
            "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}} in c["env"],
        "nvidia.com/gpu: 1 iff asked": (c["resources"]["limits"].get("nvidia.com/gpu") == "1") == gpu
                                       and ("nvidia.com/gpu" not in c["resources"].get("requests", {})),
        "the claim mounted": pod["volumes"] == [{"name": "campaign", "persistentVolumeClaim": {"claimName": pvc}}]
                             and c["volumeMounts"] == [{"name": "campaign", "mountPath": "/campaign"}],
        "restartPolicy Never": pod["restartPolicy"] == "Never",
        "a deadline past --time": spec["activeDeadlineSeconds"] > t,
        "--shard auto/N --root --time": ("--shard auto/%d --root /campaign/%s --time %d" %
                                         (shards, sh["metadata"]["labels"]["attnfuzz/campaign"], t)) in c["command"][2],
        "the fuzz options passed on": c["command"][4:] == (GPU if gpu else CPU)[(GPU if gpu else CPU).index("--") + 1:],
        "--jobs from --cpus": ("--jobs 4" in c["command"][2]) == (not gpu),
        "the merge job watches, merges, reports": all(w in merge["spec"]["template"]["spec"]["containers"][0]["command"][2]
                                                      for w in ("merge --watch", " merge /campaign/", " report -o ")),
    }
    if gpu:
        pv = by_kind["PersistentVolumeClaim"][0]
        checks["the claim ReadWriteMany"] = pv["spec"]["accessModes"] == ["ReadWriteMany"] and \
            pv["spec"]["resources"]["requests"]["storage"] == "50Gi"
    else:
        checks["no claim without --create-pvc"] = "PersistentVolumeClaim" not in by_kind
        checks["the namespace"] = all(d["metadata"].get("namespace") == "fuzz" for d in docs)
    bad = [k for k, ok in checks.items() if not ok]
    if bad:
        fail("%s manifests: %s" % (name, ", ".join(bad)))
    print("ok   %s: %s" % (name, ", ".join(checks)))

with open(os.path.join(K8S, "example.yaml")) as f:
    example = f.read()
first, rest = example.split("\n", 1)
if not first.startswith("# deploy/k8s/render.py "):
    fail("example.yaml does not start with the command that renders it")
import shlex  # noqa: E402

body = rest.split("---\n", 1)
if len(body) != 2 or "---\n" + body[1] != rendered(shlex.split(first[len("# deploy/k8s/render.py "):]))[0]:
    fail("deploy/k8s/example.yaml is not what its first line renders: run that line again")
print("ok   deploy/k8s/example.yaml is what its first line renders")

# --- 3. the pods, simulated ---------------------------------------------------------------
shutil.rmtree(WORK, ignore_errors=True)
claim = os.path.join(WORK, "claim")
os.makedirs(claim)
argv = ["--name", "sim", "--shards", "3", "--time", "20", "--image", "x", "--attnfuzz", AF, "--",
        "--backend", "mutant:causal_top_left", "--runs", "600", "--no-bind"]
docs = rendered(argv)[1]


def command(doc):
    return [x.replace("/campaign", claim) for x in doc["spec"]["template"]["spec"]["containers"][0]["command"]]


pods = [subprocess.Popen(command(docs[0]), env=dict(os.environ, JOB_COMPLETION_INDEX=str(i)), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True) for i in range(3)]
for i, p in enumerate(pods):
    out, _ = p.communicate(timeout=120)
    if p.returncode != 0 or "attnfuzz fuzz exited 1 (shard %d of 3)" % i not in out:
        fail("pod %d exited %d: %s" % (i, p.returncode, out[-600:]))
m = subprocess.run(command(docs[1]), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
if m.returncode != 0:
    fail("the merge pod exited %d: %s" % (m.returncode, m.stdout[-600:]))
root = os.path.join(claim, "sim")
bundles = [n for n in os.listdir(os.path.join(root, "merged", "crashes")) if not n.startswith(".")]
with open(os.path.join(root, "merged", "stats.json")) as f:
    st = json.load(f)
if len(bundles) != 1 or st["shards"] != 3 or st["shards_finished"] != 3 or [r["shard"] for r in st["per_shard"]] != [0, 1, 2]:
    fail("merged: %s, %s of %s shards finished" % (bundles, st["shards_finished"], st["shards"]))
if not os.path.isfile(os.path.join(root, "report", "index.html")):
    fail("the merge pod wrote no report")
print("ok   3 shard pods (JOB_COMPLETION_INDEX 0-2) and the merge pod, simulated: 1 merged bundle, "
      "%d execs over 3 finished shards, a report" % st["execs"])
