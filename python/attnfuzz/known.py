"""The known entries' scopes, read from Python: corpus/findings/*/known.json (docs/known.md)
and their optional `needs` (CPU flags, GPU architectures, versions), judged against this
host as the C side judges them (src/core/host.c): the CPU flags of /proc/cpuinfo, or
$ATTNFUZZ_CPU_FLAGS (names separated by blanks or commas) in their place; the versions and
the GPU from a target's `libs` (its hello's "libs" object). A fact not reported is unknown:
a need on it counts as met (an entry still matches), and `unmet` names it "unknown" only
where asked (`unknown=True`).

    entry = known.find("torch-flex-cpu-avx2-batch-rows")
    why = known.unmet(entry.get("needs"), libs={"torch": "2.15.0"})   # [] where met
    known.describe(entry["needs"])          # "cpu_not avx512f, torch >=2.11"
"""

from __future__ import annotations

import glob
import json
import os
import re

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

_FLAGS = None


def load(root=None):
    """Every entry of root's corpus/findings/*/known.json (files sorted by path, entries as
    written), each a dict with "file" added. Raises ValueError naming a file that does not
    read."""
    root = root or ROOT
    out = []
    for path in sorted(glob.glob(os.path.join(root, "corpus", "findings", "*", "known.json"))):
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            raise ValueError("%s: %s" % (path, e)) from e
        for e in doc.get("entries", ()):
            out.append(dict(e, file=os.path.relpath(path, root)))
    return out


def find(entry_id, root=None):
    """The entry with that id, or None."""
    for e in load(root):
        if e.get("id") == entry_id:
            return e
    return None


def cpu_flags():
    """The host's CPU flags (a set of /proc/cpuinfo names), read once; $ATTNFUZZ_CPU_FLAGS
    replaces them. None where neither says (not x86 Linux, no cpuinfo): unknown."""
    global _FLAGS
    env = os.environ.get("ATTNFUZZ_CPU_FLAGS")
    if env is not None:
        return set(re.split(r"[\s,]+", env.strip())) - {""}
    if _FLAGS is None:
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith(("flags", "Features")) and ":" in line:
                        _FLAGS = set(line.split(":", 1)[1].split())
                        break
        except OSError:
            pass
    return _FLAGS


def _release(v):
    """The release numbers of a version string ("2.15.0+cu132" -> (2, 15, 0); "v9.1" too)."""
    m = re.match(r"[vV]?(\d+(?:\.\d+)*)", str(v).strip())
    return tuple(int(x) for x in m.group(1).split(".")) if m else ()


def _cmp(a, b):
    n = max(len(a), len(b))
    a, b = a + (0,) * (n - len(a)), b + (0,) * (n - len(b))
    return (a > b) - (a < b)


def spec_holds(spec, version):
    """Does version meet a PEP 440-style specifier (clauses joined by commas, all must hold:
    ==, !=, <, <=, >, >=, ~=; == and != may end in .*)? Local labels and suffixes are
    ignored; a version without release numbers meets nothing. ValueError on a malformed
    specifier."""
    have = _release(version)
    if not have:
        return False
    for clause in spec.split(","):
        m = re.fullmatch(r"\s*(==|!=|<=|>=|<|>|~=)\s*(\d+(?:\.\d+)*)(\.\*)?\s*", clause)
        if not m or (m.group(3) and m.group(1) not in ("==", "!=")) or (m.group(1) == "~=" and "." not in m.group(2)):
            raise ValueError("version specifier %r: %r does not read" % (spec, clause))
        op, want, prefix = m.group(1), tuple(int(x) for x in m.group(2).split(".")), bool(m.group(3))
        c = _cmp(have, want)
        if prefix or op == "~=":
            k = len(want) - 1 if op == "~=" else len(want)
            same = _cmp(have[:k], want[:k]) == 0
            ok = (not same) if op == "!=" else (same and c >= 0) if op == "~=" else same
        else:
            ok = {"==": c == 0, "!=": c != 0, "<": c < 0, "<=": c <= 0, ">": c > 0, ">=": c >= 0}[op]
        if not ok:
            return False
    return True


def describe(needs):
    """needs as one line: "avx512f, cpu_not avx2, sm 90|100, torch >=2.11"."""
    needs = needs or {}
    parts = list(needs.get("cpu", ()))
    parts += ["cpu_not " + f for f in needs.get("cpu_not", ())]
    if needs.get("sm"):
        parts.append("sm " + "|".join(str(s) for s in needs["sm"]))
    parts += ["%s %s" % (n, s) for n, s in sorted(needs.get("versions", {}).items())]
    return ", ".join(parts)


def unmet(needs, libs=None, flags=None, unknown=False):
    """What of needs this host lacks, one string each ("avx512f", "cpu_not avx2", "torch
    <2.12, have 2.15.0"); [] where it meets them all. flags defaults to cpu_flags(), libs
    (name -> version, "sm" -> "90") to none. A fact the host does not report is met, or
    listed as "NAME SPEC, unknown" when unknown is true."""
    needs = needs or {}
    libs = libs or {}
    flags = cpu_flags() if flags is None else set(flags)
    out = []
    for f in needs.get("cpu", ()):
        if flags is None:
            out += ["%s, unknown" % f] if unknown else []
        elif f not in flags:
            out.append(f)
    for f in needs.get("cpu_not", ()):
        if flags is None:
            out += ["cpu_not %s, unknown" % f] if unknown else []
        elif f in flags:
            out.append("cpu_not " + f)
    if needs.get("sm"):
        sm = libs.get("sm")
        if sm is None:
            out += ["sm %s, unknown" % "|".join(str(s) for s in needs["sm"])] if unknown else []
        elif int(sm) not in [int(s) for s in needs["sm"]]:
            out.append("sm %s, have %s" % ("|".join(str(s) for s in needs["sm"]), sm))
    for name, spec in sorted(needs.get("versions", {}).items()):
        have = libs.get(name)
        if have is None:
            out += ["%s %s, unknown" % (name, spec)] if unknown else []
        elif not spec_holds(spec, have):
            out.append("%s %s, have %s" % (name, spec, have))
    return out


def meets(needs, libs=None, flags=None):
    """True where this host meets needs (an unknown fact counts as met)."""
    return not unmet(needs, libs, flags)
