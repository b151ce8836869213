#!/usr/bin/env python3
"""validate.py MANIFEST.yaml... - checks Kubernetes manifests against the API's object
schemas as the official Python client carries them (its models are generated from the
Kubernetes OpenAPI specification: each model's attribute_map gives the JSON field names,
openapi_types their types, and its constructor refuses a missing required field).

Every field of every object must be one the schema names, of its type (string, integer,
boolean, list, map, nested object); required fields must be there. Exit 0 when every
document passes, 1 with one line per problem ("rc1-shards: spec.completionsMode: no
such field in V1JobSpec"), 2 when PyYAML or the kubernetes client is missing (Debian:
python3-yaml, python3-kubernetes; PyPI: pyyaml, kubernetes).

The client's version fixes the API version checked against (Debian 12's 22.6 is
Kubernetes 1.22: Indexed Jobs are there; fields added later are reported as unknown).
"""
import sys


def _client():
    import kubernetes.client  # noqa: deferred: main() reports it missing

    return kubernetes.client


def model_of(api_version, kind):
    """The client model class of apiVersion/kind: batch/v1 Job -> V1Job."""
    version = api_version.split("/")[-1]
    return getattr(_client(), version[:1].upper() + version[1:] + kind, None)


def check(value, typ, path, errors):
    """Appends to errors every way value does not fit the client type string typ."""
    client = _client()
    if typ in ("object",):
        return
    if typ == "str" or typ in ("datetime", "date"):
        if not isinstance(value, str):
            errors.append("%s: %r is not a string" % (path, value))
        return
    if typ == "int":
        if not isinstance(value, int) or isinstance(value, bool):
            errors.append("%s: %r is not an integer" % (path, value))
        return
    if typ == "float":
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            errors.append("%s: %r is not a number" % (path, value))
        return
    if typ == "bool":
        if not isinstance(value, bool):
            errors.append("%s: %r is not a boolean" % (path, value))
        return
    if typ.startswith("list["):
        if not isinstance(value, list):
            errors.append("%s: not a list" % path)
            return
        for i, x in enumerate(value):
            check(x, typ[5:-1], "%s[%d]" % (path, i), errors)
        return
    if typ.startswith("dict("):
        if not isinstance(value, dict):
            errors.append("%s: not a map" % path)
            return
        inner = typ[typ.index(",") + 1:-1].strip()
        for k, x in value.items():
            if not isinstance(k, str):
                errors.append("%s: key %r is not a string" % (path, k))
            check(x, inner, "%s[%s]" % (path, k), errors)
        return
    klass = getattr(client, typ, None)
    if klass is None:
        errors.append("%s: the client has no type %s" % (path, typ))
        return
    if not isinstance(value, dict):
        errors.append("%s: not an object (%s)" % (path, typ))
        return
    attr_of = {json_name: attr for attr, json_name in klass.attribute_map.items()}
    kwargs = {}
    for k, x in value.items():
        if k not in attr_of:
            errors.append("%s.%s: no such field in %s" % (path, k, typ))
            continue
        check(x, klass.openapi_types[attr_of[k]], "%s.%s" % (path, k), errors)
        kwargs[attr_of[k]] = x
    try:
        klass(**kwargs)  # the generated constructor refuses a missing required field
    except ValueError as e:
        errors.append("%s: %s (%s)" % (path, e, typ))


def validate(doc):
    """Problems of one manifest document, [] when it fits the schema."""
    if not isinstance(doc, dict):
        return ["not an object"]
    api, kind = doc.get("apiVersion"), doc.get("kind")
    name = (doc.get("metadata") or {}).get("name", "?")
    klass = model_of(api, kind) if isinstance(api, str) and isinstance(kind, str) else None
    if klass is None:
        return ["%s: unknown apiVersion/kind %s/%s" % (name, api, kind)]
    errors = []
    check(doc, klass.__name__, name, errors)
    return errors


def main(argv):
    try:
        import yaml
        _client()
    except ImportError as e:
        print("validate.py: %s (Debian: python3-yaml python3-kubernetes; PyPI: pyyaml kubernetes)" % e, file=sys.stderr)
        return 2
    bad = 0
    for path in argv:
        with open(path) as f:
            for doc in yaml.safe_load_all(f):
                if doc is None:
                    continue
                for e in validate(doc):
                    print("%s: %s" % (path, e))
                    bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
