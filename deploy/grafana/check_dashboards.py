#!/usr/bin/env python3
"""Check the shape of the MoE Grafana dashboards (what a PromQL run cannot see).

Usage: check_dashboards.py DASHBOARD.json [DASHBOARD.json ...]

For each dashboard:
  - a template variable of type "datasource" with query "prometheus", named
    "datasource", exists;
  - every panel (rows' nested panels included), every target, every query
    variable and every Prometheus annotation uses the datasource
    {"type": "prometheus", "uid": "${datasource}"}, so that the dashboard
    works under any Grafana, whatever its Prometheus datasource is called;
  - every panel except rows and text panels has a unit
    (fieldConfig.defaults.unit; for a heatmap, options.cellValues.unit will do);
    a TFLOP/s panel's unit is not "none", and its decimals, if set, are at
    least 2 (so that a CPU's 0.022 TFLOP/s does not read 0.0);
  - a stat panel showing the job's state (titled "State", or querying
    moe_job_state) uses instant queries only, so that it shows one state.

Prints one line per problem ("FILE: WHERE: WHAT") and exits with status 1 if
there is any, 2 on bad usage; prints one "ok" line per good dashboard.
"""
import json
import re
import sys

DS_UID = "${datasource}"
NO_UNIT_TYPES = {"row", "text", "news", "dashlist", "annolist"}


def panels_of(panels):
    for p in panels or []:
        yield p
        yield from panels_of(p.get("panels"))


def where(p):
    return f'panel {p.get("id")} "{p.get("title", "")}"'


def ds_problem(ds):
    """None if ds is the ${datasource} Prometheus reference, else why not."""
    if not isinstance(ds, dict):
        return f"datasource is {json.dumps(ds)}, not an object"
    if ds.get("uid") != DS_UID or ds.get("type") != "prometheus":
        return (f'datasource is {json.dumps(ds)}, '
                f'want {{"type": "prometheus", "uid": "{DS_UID}"}}')
    return None


def is_tflops(p):
    if re.search(r"TFLOP", p.get("title", ""), re.I):
        return True
    return any(re.search(r"tflops|flops_total", t.get("expr", ""))
               for t in p.get("targets", []))


def is_state_stat(p):
    if p.get("type") != "stat":
        return False
    if re.search(r"\bstate\b", p.get("title", ""), re.I):
        return True
    return any("moe_job_state" in t.get("expr", "") for t in p.get("targets", []))


def check(doc):
    problems = []
    if not isinstance(doc, dict):
        return ["not a dashboard (a JSON object)"]

    # The datasource variable, and the query variables' datasource.
    variables = doc.get("templating", {}).get("list", [])
    dsvars = [v for v in variables if v.get("type") == "datasource"]
    if not dsvars:
        problems.append('templating: no variable of type "datasource" '
                        '(want {"name": "datasource", "type": "datasource", "query": "prometheus"})')
    for v in dsvars:
        if v.get("name") != "datasource":
            problems.append(f'templating: datasource variable is named "{v.get("name")}", '
                            'but the panels refer to ${datasource}')
        if v.get("query") != "prometheus":
            problems.append(f'templating: datasource variable "{v.get("name")}" has query '
                            f'{json.dumps(v.get("query"))}, want "prometheus"')
    for v in variables:
        if v.get("type") == "query":
            why = ds_problem(v.get("datasource"))
            if why:
                problems.append(f'variable "{v.get("name")}": {why}')

    # Annotations: the built-in Grafana one stays; any Prometheus one uses the variable.
    for a in doc.get("annotations", {}).get("list", []):
        ds = a.get("datasource")
        if a.get("builtIn") or (isinstance(ds, dict) and ds.get("type") == "grafana"):
            continue
        why = ds_problem(ds)
        if why:
            problems.append(f'annotation "{a.get("name")}": {why}')

    panels = list(panels_of(doc.get("panels")))
    if not panels:
        problems.append("no panels")
    for p in panels:
        ptype = p.get("type")
        targets = p.get("targets", [])
        # Datasource of the panel and of each target.
        if "datasource" in p or targets:
            why = ds_problem(p.get("datasource"))
            if why:
                problems.append(f"{where(p)}: {why}")
        for t in targets:
            why = ds_problem(t.get("datasource"))
            if why:
                problems.append(f'{where(p)}, target {t.get("refId")}: {why}')

        # Units.
        if ptype not in NO_UNIT_TYPES:
            defaults = p.get("fieldConfig", {}).get("defaults", {})
            unit = defaults.get("unit")
            if not unit and ptype == "heatmap":
                unit = p.get("options", {}).get("cellValues", {}).get("unit")
            if not unit:
                problems.append(f"{where(p)}: no unit (set fieldConfig.defaults.unit)")
            if is_tflops(p):
                if unit == "none":
                    problems.append(f'{where(p)}: TFLOP/s panel with unit "none" '
                                    '(use e.g. "suffix: TFLOP/s")')
                decimals = defaults.get("decimals")
                if decimals is not None and decimals < 2:
                    problems.append(f"{where(p)}: TFLOP/s panel with decimals {decimals}: "
                                    "a CPU's 0.022 TFLOP/s would read 0.0 (use at least 2)")

        # The job's state: one value, from an instant query.
        if is_state_stat(p):
            if not targets:
                problems.append(f"{where(p)}: state panel without a query")
            for t in targets:
                if t.get("instant") is not True or t.get("range") is not False:
                    problems.append(f'{where(p)}, target {t.get("refId")}: state panel must use an '
                                    'instant query ("instant": true, "range": false), or it shows '
                                    "every state the job had in the time range")
    return problems


def main(argv):
    if len(argv) < 2 or any(a.startswith("-") for a in argv[1:]):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    bad = 0
    for path in argv[1:]:
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            print(f"{path}: {e}")
            bad += 1
            continue
        problems = check(doc)
        for why in problems:
            print(f"{path}: {why}")
        if problems:
            bad += 1
        else:
            n = len(list(panels_of(doc.get("panels"))))
            print(f"{path}: ok ({n} panels)")
    if bad:
        print(f"{bad} of {len(argv) - 1} dashboards have problems", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
