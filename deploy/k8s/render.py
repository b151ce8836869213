#!/usr/bin/env python3
"""render.py - the Kubernetes manifests of a sharded attnfuzz campaign, on stdout
(docs/campaigns-on-clusters.md). Standard library only.

    deploy/k8s/render.py --name rc1 --shards 8 --time 3600 --image REGISTRY/attnfuzz:TAG \\
        --pvc attnfuzz-out [--gpu] [options] -- FUZZ_OPTIONS... > rc1.yaml
    kubectl apply -f rc1.yaml

Writes, as one multi-document YAML:
  - with --create-pvc SIZE: a PersistentVolumeClaim named --pvc (ReadWriteMany: every
    shard's pod writes to it, wherever it runs);
  - NAME-shards, an Indexed Job (completionMode: Indexed, completions = parallelism =
    --shards): pod I runs `attnfuzz fuzz --shard auto/N --root /campaign/NAME --time T
    FUZZ_OPTIONS` with JOB_COMPLETION_INDEX = I, the claim mounted at /campaign, one
    nvidia.com/gpu with --gpu, a deadline of --time plus a margin;
  - NAME-merge, the follow-up Job: `attnfuzz merge --watch 60` beside the shards until
    every shard's stats say finished (or the shards' deadline passed), then a last merge
    and `attnfuzz report -o /campaign/NAME/report /campaign/NAME/merged`.
Results on the claim: /campaign/NAME/merged (bundles, stats.json), /campaign/NAME/report.

The image must hold attnfuzz on PATH (or --attnfuzz PATH), /bin/sh and timeout
(coreutils), and for real targets the project's Python environment.
"""
import argparse
import json
import shlex
import sys

MOUNT = "/campaign"


def yaml_scalar(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    return json.dumps(v)  # a double-quoted YAML string: JSON's escapes are YAML's


def to_yaml(v, indent=0):
    """Block-style YAML of dicts, lists, strings, ints and booleans; every string quoted."""
    pad = "  " * indent
    if isinstance(v, dict):
        if not v:
            return pad + "{}\n"
        out = []
        for k, x in v.items():
            if isinstance(x, (dict, list)) and x:
                out.append("%s%s:\n%s" % (pad, yaml_scalar(k) if ":" in k or "/" in k else k,
                                          to_yaml(x, indent + (1 if isinstance(x, dict) else 0))))
            else:
                out.append("%s%s: %s\n" % (pad, yaml_scalar(k) if ":" in k or "/" in k else k,
                                           "{}" if x == {} else "[]" if x == [] else yaml_scalar(x)))
        return "".join(out)
    if isinstance(v, list):
        out = []
        for x in v:
            if isinstance(x, dict) and x:
                body = to_yaml(x, indent + 1)
                out.append(pad + "- " + body[len(pad) + 2:])
            else:
                out.append("%s- %s\n" % (pad, yaml_scalar(x)))
        return "".join(out)
    return pad + yaml_scalar(v) + "\n"


def render(a, fuzz_args):
    root = "%s/%s" % (MOUNT, a.name)
    margin = a.margin if a.margin is not None else 600 + a.time // 20
    deadline = a.time + margin
    labels = {"app.kubernetes.io/name": "attnfuzz", "attnfuzz/campaign": a.name}
    jobs = []
    if a.cpus > 1 and not any(x == "--jobs" or x.startswith("--jobs=") for x in fuzz_args):
        jobs = ["--jobs", str(a.cpus)]
    q = shlex.quote
    # the shard: findings (exit 1) are results, not a failed pod to retry; 2 is an error
    shard_sh = ("%s fuzz --shard auto/%d --root %s --time %d --quiet %s\"$@\"; rc=$?; "
                "echo \"attnfuzz fuzz exited $rc (shard $JOB_COMPLETION_INDEX of %d)\"; [ $rc -le 1 ] || exit $rc"
                % (q(a.attnfuzz), a.shards, q(root), a.time, "".join(q(j) + " " for j in jobs), a.shards))
    resources = {"requests": {"cpu": str(a.cpus), "memory": a.memory}, "limits": {"memory": a.memory}}
    if a.gpu:
        resources["limits"]["nvidia.com/gpu"] = "1"
    volume = [{"name": "campaign", "persistentVolumeClaim": {"claimName": a.pvc}}]
    mount = [{"name": "campaign", "mountPath": MOUNT}]
    shard_pod = {
        "restartPolicy": "Never",
        "containers": [{
            "name": "shard",
            "image": a.image,
            "command": ["/bin/sh", "-c", shard_sh, "attnfuzz-shard"] + fuzz_args,
            "env": [{"name": "JOB_COMPLETION_INDEX",  # set by Kubernetes too; explicit for older clusters
                     "valueFrom": {"fieldRef": {"fieldPath":
                                                "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}}],
            "resources": resources,
            "volumeMounts": mount,
        }],
        "volumes": volume,
    }
    if a.gpu:
        shard_pod["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    meta = lambda name: {"name": name, **({"namespace": a.namespace} if a.namespace else {}), "labels": labels}
    docs = []
    if a.create_pvc:
        spec = {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": a.create_pvc}}}
        if a.storage_class:
            spec["storageClassName"] = a.storage_class
        docs.append({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta(a.pvc), "spec": spec})
    docs.append({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta(a.name + "-shards"),
        "spec": {
            "completionMode": "Indexed",
            "completions": a.shards,
            "parallelism": a.shards,
            "backoffLimit": a.shards * a.retries,
            "activeDeadlineSeconds": deadline,
            "template": {"metadata": {"labels": labels}, "spec": shard_pod},
        },
    })
    merged, report = root + "/merged", root + "/report"
    merge_sh = ("mkdir -p %s && timeout %d %s merge --watch 60 %s %s; %s merge %s %s; rc=$?; [ $rc -le 1 ] || exit $rc; "
                "%s report -o %s %s" % (q(root), deadline, q(a.attnfuzz), q(merged), q(root), q(a.attnfuzz), q(merged),
                                         q(root), q(a.attnfuzz), q(report), q(merged)))
    docs.append({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta(a.name + "-merge"),
        "spec": {
            "backoffLimit": 2,
            "activeDeadlineSeconds": deadline + 1800,
            "template": {"metadata": {"labels": labels}, "spec": {
                "restartPolicy": "Never",
                "containers": [{
                    "name": "merge",
                    "image": a.image,
                    "command": ["/bin/sh", "-c", merge_sh],
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
                    "volumeMounts": mount,
                }],
                "volumes": volume,
            }},
        },
    })
    return docs


def parse(argv):
    p = argparse.ArgumentParser(prog="render.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--name", required=True, help="the campaign: Jobs NAME-shards, NAME-merge; results in /campaign/NAME")
    p.add_argument("--shards", type=int, required=True, help="shards: completions = parallelism")
    p.add_argument("--time", type=int, required=True, help="seconds each shard fuzzes (attnfuzz fuzz --time)")
    p.add_argument("--image", required=True, help="a container image with attnfuzz")
    p.add_argument("--pvc", default="attnfuzz-campaigns", help="the claim the shards share (default attnfuzz-campaigns)")
    p.add_argument("--create-pvc", metavar="SIZE", help="also create the claim, ReadWriteMany, e.g. 50Gi")
    p.add_argument("--storage-class", help="its storage class (one that offers ReadWriteMany)")
    p.add_argument("--gpu", action="store_true", help="one nvidia.com/gpu per shard")
    p.add_argument("--cpus", type=int, default=1, help="CPUs per shard (fuzz --jobs when above 1)")
    p.add_argument("--memory", default="4Gi", help="memory per shard (default 4Gi)")
    p.add_argument("--margin", type=int, help="seconds past --time before the deadline (default 600 + 5%% of --time)")
    p.add_argument("--retries", type=int, default=1, help="pod retries per shard on average (backoffLimit = shards x this)")
    p.add_argument("--namespace", help="the namespace (default: kubectl's)")
    p.add_argument("--attnfuzz", default="attnfuzz", help="the executable in the image (default: attnfuzz on PATH)")
    if "--" in argv:
        i = argv.index("--")
        a, fuzz = p.parse_args(argv[:i]), argv[i + 1:]
    else:
        a, fuzz = p.parse_args(argv), []
    for what, v, lo in (("--shards", a.shards, 1), ("--time", a.time, 1), ("--cpus", a.cpus, 1), ("--retries", a.retries, 0)):
        if v < lo:
            p.error("%s must be at least %d" % (what, lo))
    if not all(c.isalnum() or c == "-" for c in a.name) or not a.name[:1].isalpha() or a.name != a.name.lower():
        p.error("--name %s: lower-case letters, digits and '-', starting with a letter (a Kubernetes name)" % a.name)
    return a, fuzz


def main(argv=None):
    a, fuzz = parse(sys.argv[1:] if argv is None else argv)
    docs = render(a, fuzz)
    sys.stdout.write("".join("---\n" + to_yaml(d) for d in docs))


if __name__ == "__main__":
    main()
