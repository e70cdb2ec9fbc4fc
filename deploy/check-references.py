"""Cross-checks rendered Kubernetes objects where schemas cannot: every
selector selects a pod template, named ports and volumes exist, the
Secrets, ConfigMaps (and their keys) and Services that pods and StatefulSets
name, in volumes and in the environment, are part of the render, and a
coordinator's --restore-from is a data directory's prefix (d-...) in its
--stage-store. KEDA's ScaledObject and TriggerAuthentication, whose schemas
kubernetes-validate does not ship, are checked here: only the fields of
keda.sh/v1alpha1 that they may have, of the right types, and what they name
is in the render.

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


def arg_values(container, flag):
    """The values a container's args give `flag`, as --flag=VALUE or --flag VALUE."""
    args = [str(a) for a in container.get("args", [])]
    values = [a.split("=", 1)[1] for a in args if a.startswith(flag + "=")]
    values += [b for a, b in zip(args, args[1:]) if a == flag]
    return values


def restore_errors(container):
    """A --restore-from that is not a data directory's prefix (d-...) one
    level below the container's --stage-store: the coordinator refuses it."""
    errors = []
    name = container["name"]
    stores = [v.rstrip("/") for v in arg_values(container, "--stage-store")]
    for url in arg_values(container, "--restore-from"):
        above, _, prefix = url.rstrip("/").rpartition("/")
        if not prefix.startswith("d-") or "://" not in above:
            errors.append(f"container {name}: --restore-from {url} is no data directory's prefix (.../d-...)")
        errors += [
            f"container {name}: --restore-from {url} is not a prefix of --stage-store {store}"
            for store in stores
            if above != store
        ]
    return errors


# The fields of keda.sh/v1alpha1 these objects may use, by path: a type, or
# a dict of the fields allowed below.
SCALED_OBJECT_SPEC = {
    "scaleTargetRef": {"name": str, "kind": str, "apiVersion": str},
    "minReplicaCount": int,
    "maxReplicaCount": int,
    "idleReplicaCount": int,
    "pollingInterval": int,
    "cooldownPeriod": int,
    "triggers": list,
}
TRIGGER = {"type": str, "metadata": dict, "authenticationRef": {"name": str, "kind": str}, "name": str}
TRIGGER_AUTH_SPEC = {"secretTargetRef": list}
SECRET_TARGET = {"parameter": str, "name": str, "key": str}


def shape_errors(where, value, allowed):
    """Fields of `value` that `allowed` does not name, or of another type."""
    if not isinstance(value, dict):
        return [f"{where}: not a mapping"]
    errors = []
    for key, v in value.items():
        want = allowed.get(key)
        if want is None:
            errors.append(f"{where}: unknown field {key}")
        elif isinstance(want, dict):
            errors += shape_errors(f"{where}.{key}", v, want)
        elif not isinstance(v, want) or (want is int and isinstance(v, bool)):
            errors.append(f"{where}.{key}: not a {want.__name__}")
    return errors


def keda_errors(objects, present, data):
    """KEDA objects: their fields, their bounds, and what they name."""
    errors = []
    services = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Service"}
    for o in objects:
        name = f'{o["kind"]}/{o["metadata"]["name"]}'
        spec = o.get("spec", {})
        if o["kind"] == "TriggerAuthentication":
            errors += shape_errors(f"{name}.spec", spec, TRIGGER_AUTH_SPEC)
            for ref in spec.get("secretTargetRef", []):
                errors += shape_errors(f"{name} secretTargetRef", ref, SECRET_TARGET)
                keys = data.get(("Secret", ref.get("name")))
                if keys is None:
                    errors.append(f'{name}: unknown Secret {ref.get("name")}')
                elif ref.get("key") not in keys:
                    errors.append(f'{name}: missing key {ref.get("key")} of Secret {ref.get("name")}')
        if o["kind"] != "ScaledObject":
            continue
        errors += shape_errors(f"{name}.spec", spec, SCALED_OBJECT_SPEC)
        target = spec.get("scaleTargetRef", {})
        if ("Deployment", target.get("name")) not in present:
            errors.append(f'{name}: scales unknown Deployment {target.get("name")}')
        low, high = spec.get("minReplicaCount", 0), spec.get("maxReplicaCount", 100)
        if not (isinstance(low, int) and isinstance(high, int) and 0 <= low <= high):
            errors.append(f"{name}: replicas from {low!r} to {high!r}")
        if not spec.get("triggers"):
            errors.append(f"{name}: no trigger")
        for trigger in spec.get("triggers", []):
            errors += shape_errors(f"{name} trigger", trigger, TRIGGER)
            if trigger.get("type") not in ("external", "external-push"):
                errors.append(f'{name}: trigger of type {trigger.get("type")}')
            metadata = trigger.get("metadata", {})
            if not all(isinstance(v, str) for v in metadata.values()):
                errors.append(f"{name}: trigger metadata values must be strings")
            slots = metadata.get("slotsPerWorker", "1")
            if not (isinstance(slots, str) and slots.isdigit() and int(slots) >= 1):
                errors.append(f"{name}: slotsPerWorker {slots!r} is not a whole number from 1")
            host, _, port = metadata.get("scalerAddress", "").rpartition(":")
            service = services.get(host.split(".")[0])
            if service is None or not port.isdigit():
                errors.append(f'{name}: scalerAddress {metadata.get("scalerAddress")} is no Service of the render')
            elif int(port) not in [p.get("port") for p in service["spec"].get("ports", [])]:
                errors.append(f"{name}: port {port} is not a port of Service {host}")
            auth = trigger.get("authenticationRef", {}).get("name")
            if auth is not None and ("TriggerAuthentication", auth) not in present:
                errors.append(f"{name}: unknown TriggerAuthentication {auth}")
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
            errors += [f"{workload}: {e}" for e in restore_errors(c)]
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

    errors += keda_errors(objects, present, data)
    for e in errors:
        print(f"error: {e}", file=sys.stderr)
    if errors:
        return 1
    print(f"{len(objects)} objects, {len(pods)} workloads: references resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
