#!/usr/bin/env python3
"""Checks the diff's schema equivalences against an independent validator.

Pairs of JSON Schemas that the diff rates as only written differently
(representation_changed) must accept exactly the same instances. This script
reads the pairs TestSchemaPairs writes, generates instances from the names,
values and bounds in each pair, validates them under python-jsonschema
(https://pypi.org/project/jsonschema/; each schema by its own $schema, and
with draft-07 and with 2020-12 for a schema that names none), and reports
every pair rated as written differently that some instance tells apart. For
the random real edits it also reports how many the instances tell apart, a
measure of how searching the instances are.

Usage:
  cd services && go test ./internal/surface -run TestSchemaPairs -pairs /tmp/pairs.json
  python3 scripts/check-schema-equivalence.py /tmp/pairs.json

Exits 1 when a pair rated as written differently is told apart.
"""
import json, random, sys, warnings
warnings.filterwarnings("ignore")
from jsonschema import validators, Draft7Validator, Draft202012Validator

pairs = json.load(open(sys.argv[1]))
rnd = random.Random(18)

def collect(s, names, values):
    if isinstance(s, dict):
        for k, v in s.items():
            if k in ("properties", "patternProperties", "$defs", "definitions") and isinstance(v, dict):
                names.update(v.keys())
                for sub in v.values(): collect(sub, names, values)
            elif k in ("enum", "examples") and isinstance(v, list):
                values.extend(v)
            elif k in ("const", "default"):
                values.append(v)
            elif k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "minItems", "maxItems") and isinstance(v, (int, float)) and not isinstance(v, bool):
                values.extend([v, v - 1, v + 1, v + 0.5, "x" * max(0, min(int(v), 300)), ["a"] * max(0, min(int(v), 50))])
            else:
                collect(v, names, values)
    elif isinstance(s, list):
        for e in s: collect(e, names, values)

def gen(names, values, depth):
    c = rnd.random()
    if depth < 3 and c < 0.35:
        obj = {}
        for n in names:
            if rnd.random() < 0.6: obj[n] = gen(names, values, depth + 1)
        if rnd.random() < 0.2: obj["zz_extra"] = gen(names, values, depth + 1)
        return obj
    if depth < 3 and c < 0.45:
        return [gen(names, values, depth + 1) for _ in range(rnd.randint(0, 3))]
    pool = values + ["", "a", "text", 0, 1, -1, 0.5, 2**53, 2**53 + 2, -(2**53) - 2, True, False, None, "2020-01-01"]
    return rnd.choice(pool)

def verdicts(schema, default, instances):
    cls = validators.validator_for(schema, default=default)
    v = cls(schema)
    return [v.is_valid(i) for i in instances]

stats = {"written_differently": 0, "written_differently_told_apart": 0, "random_edits": 0, "random_edits_told_apart": 0, "real_changes": 0}
for p in pairs:
    names, values = set(), []
    collect(p["old"], names, values); collect(p["new"], names, values)
    names = sorted(names)
    instances = [gen(names, values, 0) for _ in range(400)]
    # Objects built from each schema's required members, so required holds.
    for s in (p["old"], p["new"]):
        if isinstance(s, dict) and isinstance(s.get("required"), list):
            for _ in range(100):
                o = {n: gen(names, values, 1) for n in s["required"] if isinstance(n, str)}
                for n in names:
                    if rnd.random() < 0.3: o[n] = gen(names, values, 1)
                instances.append(o)
    differ = False
    for default in (Draft7Validator, Draft202012Validator):
        try:
            a = verdicts(p["old"], default, instances)
            b = verdicts(p["new"], default, instances)
        except Exception as e:
            print("error", p["src"], e); differ = None; break
        if a != b:
            differ = True
            i = next(k for k in range(len(a)) if a[k] != b[k])
            witness = (default.__name__, instances[i], a[i], b[i])
    if p["rep"]:
        stats["written_differently"] += 1
        if differ:
            stats["written_differently_told_apart"] += 1
            print("REPRESENTATION BUT DIFFERENT:", p["src"], witness)
    elif p["src"] == "random edit":
        stats["random_edits"] += 1
        stats["random_edits_told_apart"] += bool(differ)
    else:
        stats["real_changes"] += 1
print(json.dumps(stats))
sys.exit(1 if stats["written_differently_told_apart"] else 0)
