"""Cross-checks rendered Kubernetes objects where schemas cannot: every
selector selects a pod template, named ports and volumes exist, and the
Secrets, ConfigMaps (and their keys) and Services that pods and StatefulSets
name, in volumes and in the environment, are part of the render.

Usage: check-references.py RENDERED.yaml
"""

import sys

import yaml


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def env_errors(container, data):
    """The Secrets, ConfigMaps and keys that a container's environment names
    and the render lacks (references marked optional excepted)."""
    errors = []
    name = container["name"]
    for source in container.get("envFrom", []):
        for field, kind in (("secretRef", "Secret"), ("configMapRef", "ConfigMap")):
            ref = source.get(field)
            if ref and not ref.get("optional") and (kind, ref["name"]) not in data:
                errors.append(f'container {name}: envFrom unknown {kind} {ref["name"]}')
    for var in container.get("env", []):
        for field, kind in (("secretKeyRef", "Secret"), ("configMapKeyRef", "ConfigMap")):
            ref = var.get("valueFrom", {}).get(field)
            if not ref or ref.get("optional"):
                continue
            keys = data.get((kind, ref["name"]))
            if keys is None:
                errors.append(f'container {name}: {var["name"]} from unknown {kind} {ref["name"]}')
            elif ref["key"] not in keys:
                errors.append(
                    f'container {name}: {var["name"]} from missing key {ref["key"]} '
                    f'of {kind} {ref["name"]}'
                )
    return errors


def main(path):
    with open(path, encoding="utf-8") as f:
        objects = [o for o in yaml.safe_load_all(f) if o]
    present = {(o["kind"], o["metadata"]["name"]) for o in objects}
    data = {  # the keys of each Secret and ConfigMap
        (o["kind"], o["metadata"]["name"]): {
            k for field in ("data", "stringData", "binaryData") for k in o.get(field, {})
        }
        for o in objects
        if o["kind"] in ("Secret", "ConfigMap")
    }
    errors = []
    pods = []  # (workload, pod labels, container port names)

    for o in objects:
        if o["kind"] not in ("Deployment", "StatefulSet"):
            continue
        workload = f'{o["kind"]}/{o["metadata"]["name"]}'
        spec = o["spec"]
        template = spec["template"]
        labels = template["metadata"].get("labels", {})
        if not selects(spec["selector"].get("matchLabels"), labels):
            errors.append(f"{workload}: selector does not match its pod template")
        pod = template["spec"]
        volumes = {v["name"] for v in pod.get("volumes", [])}
        volumes |= {c["metadata"]["name"] for c in spec.get("volumeClaimTemplates", [])}
        port_names = set()
        for c in pod["containers"]:
            port_names |= {p["name"] for p in c.get("ports", []) if "name" in p}
        for c in pod["containers"]:
            for m in c.get("volumeMounts", []):
                if m["name"] not in volumes:
                    errors.append(f'{workload}: mount of unknown volume {m["name"]}')
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                for action in c.get(probe, {}).values():
                    port = action.get("port") if isinstance(action, dict) else None
                    if isinstance(port, str) and port not in port_names:
                        errors.append(f"{workload}: {probe} uses unknown port {port}")
        for v in pod.get("volumes", []):
            if "secret" in v and ("Secret", v["secret"]["secretName"]) not in present:
                errors.append(f'{workload}: unknown Secret {v["secret"]["secretName"]}')
            if "configMap" in v and ("ConfigMap", v["configMap"]["name"]) not in present:
                errors.append(f'{workload}: unknown ConfigMap {v["configMap"]["name"]}')
        for c in pod["containers"]:
            errors += [f"{workload}: {e}" for e in env_errors(c, data)]
        if o["kind"] == "StatefulSet" and ("Service", spec["serviceName"]) not in present:
            errors.append(f'{workload}: unknown governing Service {spec["serviceName"]}')
        pods.append((workload, labels, port_names))

    for o in objects:
        kind, spec = o["kind"], o.get("spec", {})
        if kind == "Service":
            selector = spec.get("selector")
            ports = [p.get("targetPort") for p in spec.get("ports", [])]
        elif kind == "PodDisruptionBudget":
            selector = spec["selector"].get("matchLabels")
            ports = []
        elif kind == "NetworkPolicy":
            selector = spec["podSelector"].get("matchLabels")
            if not selector:
                continue  # {} selects every pod in the namespace
            ports = [p.get("port") for r in spec.get("ingress", []) for p in r.get("ports", [])]
        else:
            continue
        name = f'{kind}/{o["metadata"]["name"]}'
        matched = [p for p in pods if selects(selector, p[1])]
        if not matched:
            errors.append(f"{name}: selects no pods")
        for workload, _, port_names in matched:
            for port in ports:
                if isinstance(port, str) and port not in port_names:
                    errors.append(f"{name}: port {port} is not a port of {workload}")

    for e in errors:
        print(f"error: {e}", file=sys.stderr)
    if errors:
        return 1
    print(f"{len(objects)} objects, {len(pods)} workloads: references resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
