"""The Helm chart: `helm lint --strict`, and the objects `helm template` renders, read back."""

from __future__ import annotations

import hashlib
from functools import cache
from typing import Any

import pytest
import yaml

from tests.doubles.helm import CHART, find, helm, kinds, render

CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))
DEFAULT = str(CHART / "ci" / "default-values.yaml")
EXISTING = str(CHART / "ci" / "existing-secret-values.yaml")
HOST = str(CHART / "ci" / "host-docker-values.yaml")
PRIVATE_INDEX = str(CHART / "ci" / "private-index-values.yaml")
POD_KINDS = ("Deployment", "StatefulSet")


@cache
def _rendered(*args: str) -> str:
    return yaml.safe_dump_all(render(*args))


def rendered(*args: str) -> list[dict[str, Any]]:
    """Rendered once per argument list (helm takes a moment); a fresh copy for each test."""
    return [d for d in yaml.safe_load_all(_rendered(*args)) if d]


def pod(doc: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = doc["spec"]["template"]["spec"]
    return spec


def container(spec: dict[str, Any], name: str, where: str = "containers") -> dict[str, Any]:
    found = [c for c in spec.get(where) or [] if c["name"] == name]
    assert len(found) == 1, f"{name} in {where}: {[c['name'] for c in spec.get(where) or []]}"
    return found[0]


def env(c: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env") or []}


def mounts(c: dict[str, Any]) -> dict[str, str]:
    return {m["name"]: m["mountPath"] for m in c.get("volumeMounts") or []}


def secret_refs(docs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(secret name, key) of every secretKeyRef and secret volume in every pod template."""
    refs = []
    for doc in docs:
        if doc["kind"] not in POD_KINDS:
            continue
        spec = pod(doc)
        for c in (spec.get("initContainers") or []) + spec["containers"]:
            for e in c.get("env") or []:
                ref = (e.get("valueFrom") or {}).get("secretKeyRef")
                if ref:
                    refs.append((ref["name"], ref["key"]))
        for v in spec.get("volumes") or []:
            if "secret" in v:
                refs += [(v["secret"]["secretName"], i["key"]) for i in v["secret"]["items"]]
    return refs


# --- lint and schema ---------------------------------------------------------------------------
@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.name)
def test_helm_lint_strict_passes_with_each_ci_values_file(values: Any) -> None:
    done = helm("lint", "--strict", str(CHART), "-f", str(values))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 chart(s) failed" in done.stdout


def test_defaults_alone_fail_with_a_clear_message_about_the_database_password() -> None:
    done = helm("template", "t", str(CHART))
    assert done.returncode != 0
    assert "postgresql.password is required" in done.stderr


@pytest.mark.parametrize(
    ("setting", "complaint"),
    [
        ("worker.replicas=-1", "/worker/replicas"),
        ("sandbox.daemon=podman", "/sandbox/daemon"),
        ("sandbox.backend=firecracker", "/sandbox/backend"),
        ("config.agent=gpt", "/config/agent"),
        ("config.jobTimeLimit=5", "/config/jobTimeLimit"),
        ("ingress.hosts={}", "/ingress/hosts"),  # enabled in DEFAULT, no host
        ("web.port=70000", "/web/port"),
        ("postgresql.password=has space", "/postgresql/password"),
        ("externalRedis.url=http://redis", "/externalRedis/url"),
        ("worker.autoscaling.targetCPUUtilizationPercentage=150", "targetCPUUtilization"),
        ("nosuchkey=1", "additional properties 'nosuchkey'"),
        ("sandbox.dind.nativeSidecar=maybe", "/sandbox/dind/nativeSidecar"),
        ("egress.ca.bundle=not-a-pem", "/egress/ca/bundle"),
        ("egress.ca.existingConfigMap=Not_A_Name", "/egress/ca/existingConfigMap"),
        ("egress.credentials.key=../escape", "/egress/credentials/key"),
        ("egress.credentials.password=x", "additional properties 'password'"),
    ],
)
def test_schema_rejects_bad_values(setting: str, complaint: str) -> None:
    done = helm("template", "t", str(CHART), "-f", DEFAULT, "--set", setting)
    assert done.returncode != 0, f"{setting} was accepted"
    assert "schema" in done.stderr and complaint in done.stderr, done.stderr
    lint = helm("lint", "--strict", str(CHART), "-f", DEFAULT, "--set", setting)
    assert lint.returncode != 0


def test_notes_list_missing_app_settings_and_not_when_they_are_given() -> None:
    bare = helm("install", "t", str(CHART), "--dry-run=client", "--set", "postgresql.password=x")
    assert bare.returncode == 0, bare.stderr
    assert "config.appId, config.appSlug, config.clientId" in bare.stdout
    assert "secrets.privateKey" in bare.stdout
    full = helm("install", "t", str(CHART), "--dry-run=client", "-f", DEFAULT)
    assert full.returncode == 0, full.stderr
    assert "WARNING" not in full.stdout
    assert "https://onloop.example.com/webhooks/github" in full.stdout


# --- web -----------------------------------------------------------------------------------------
def test_web_deployment_service_and_probes() -> None:
    docs = rendered("-f", DEFAULT)
    web = find(docs, "Deployment", "t-onloop-web")
    spec = pod(web)
    c = container(spec, "web")
    assert c["args"] == ["web", "--bind", "0.0.0.0:8000"]
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert spec["automountServiceAccountToken"] is False
    assert container(spec, "migrate", "initContainers")["args"] == ["db", "upgrade"]
    assert c["envFrom"] == [{"configMapRef": {"name": "t-onloop"}}]
    config = find(docs, "ConfigMap", "t-onloop")["data"]
    key_dir = mounts(c)["github-app-key"]
    assert config["ONLOOP_PRIVATE_KEY_PATH"] == f"{key_dir}/private-key.pem"
    assert config["ONLOOP_APP_ID"] == "4242"
    svc = find(docs, "Service", "t-onloop-web")
    assert svc["spec"]["selector"] == web["spec"]["selector"]["matchLabels"]
    assert svc["spec"]["ports"][0]["targetPort"] == "http"
    assert c["ports"] == [{"name": "http", "containerPort": 8000}]


def test_ingress_routes_the_host_to_the_web_service_and_sets_the_public_url() -> None:
    docs = rendered("-f", DEFAULT)
    ingress = find(docs, "Ingress", "t-onloop")["spec"]
    assert ingress["ingressClassName"] == "nginx"
    assert ingress["tls"] == [{"secretName": "onloop-tls", "hosts": ["onloop.example.com"]}]
    (rule,) = ingress["rules"]
    assert rule["host"] == "onloop.example.com"
    backend = rule["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": "t-onloop-web", "port": {"name": "http"}}
    config = find(docs, "ConfigMap", "t-onloop")["data"]
    assert config["ONLOOP_PUBLIC_URL"] == "https://onloop.example.com"
    assert ("Ingress", "t-onloop") not in kinds(rendered("-f", HOST))
    existing = find(rendered("-f", EXISTING), "ConfigMap", "t-onloop")["data"]
    assert existing["ONLOOP_PUBLIC_URL"] == "https://agents.example.com"


# --- worker and its Docker daemon ----------------------------------------------------------------
def test_worker_gets_a_private_dind_native_sidecar_by_default() -> None:
    spec = pod(find(rendered("-f", DEFAULT), "Deployment", "t-onloop-worker"))
    inits = [c["name"] for c in spec["initContainers"]]
    assert inits == ["migrate", "dind", "sandbox-image"]  # the daemon is up before the build
    dind = container(spec, "dind", "initContainers")
    assert dind["restartPolicy"] == "Always"  # a native sidecar
    assert dind["image"].startswith("docker:") and dind["image"].endswith("-dind")
    assert dind["securityContext"]["privileged"] is True
    assert dind["args"] == ["dockerd", "--host=tcp://127.0.0.1:2375", "--tls=false"]
    assert not any("0.0.0.0" in a for a in dind["args"])  # no other pod can reach it
    worker = container(spec, "worker")
    assert [c["name"] for c in spec["containers"]] == ["worker"]
    assert env(worker)["DOCKER_HOST"] == "tcp://127.0.0.1:2375"
    assert worker["args"] == ["worker", "--concurrency", "4"]
    assert "privileged" not in worker["securityContext"]
    # the daemon resolves the sandbox's bind mount: the workspace is at the same path in both
    assert mounts(worker)["work"] == mounts(dind)["work"] == "/var/lib/onloop/work"
    assert mounts(dind)["docker-data"] == "/var/lib/docker"
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert "emptyDir" in volumes["work"] and "emptyDir" in volumes["docker-data"]
    build = container(spec, "sandbox-image", "initContainers")
    assert "onloop sandbox build-image --tag 'onloop-sandbox:latest'" in build["command"][-1]
    assert env(build)["DOCKER_HOST"] == "tcp://127.0.0.1:2375"


def test_worker_with_a_plain_dind_sidecar_waits_for_it_then_prepares_images() -> None:
    spec = pod(find(rendered("-f", EXISTING), "Deployment", "t-onloop-worker"))
    assert [c["name"] for c in spec["containers"]] == ["worker", "dind"]
    assert [c["name"] for c in spec["initContainers"]] == ["migrate"]
    assert "restartPolicy" not in container(spec, "dind")
    script = container(spec, "worker")["command"][-1]
    lines = script.splitlines()
    assert lines[0].startswith("until python -c 'import docker; docker.from_env(timeout=5).ping()'")
    assert "'python:3.12-slim'" in lines[1] and "images.pull" in lines[1]
    assert lines[2] == "onloop sandbox build-image --tag 'onloop-sandbox:latest'"
    assert lines[3] == "exec onloop worker --concurrency 4"


def test_worker_can_use_the_nodes_docker_daemon_instead() -> None:
    docs = rendered("-f", HOST)
    spec = pod(find(docs, "Deployment", "t-onloop-worker"))
    # no migrations, no build, no dind; only the hostPath work directory is handed over
    (chown,) = spec["initContainers"]
    assert chown["command"] == ["chown", "10001:10001", "/var/lib/onloop/work"]
    assert chown["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
    assert [c["name"] for c in spec["containers"]] == ["worker"]
    worker = container(spec, "worker")
    assert env(worker)["DOCKER_HOST"] == "unix:///var/run/docker.sock"
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["docker-socket"]["hostPath"] == {
        "path": "/var/run/docker.sock",
        "type": "Socket",
    }
    assert volumes["work"]["hostPath"]["path"] == mounts(worker)["work"]
    assert spec["securityContext"]["supplementalGroups"] == [998]
    for doc in docs:
        if doc["kind"] in POD_KINDS:
            for c in pod(doc)["containers"]:
                assert not (c.get("securityContext") or {}).get("privileged"), c["name"]
    assert find(docs, "ConfigMap", "t-onloop")["data"]["ONLOOP_SANDBOX_RUNTIME"] == "runsc"


def test_worker_hpa_scales_the_worker_deployment() -> None:
    docs = rendered("-f", DEFAULT)
    hpa = find(docs, "HorizontalPodAutoscaler", "t-onloop-worker")["spec"]
    assert hpa["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "t-onloop-worker",
    }
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (2, 6)
    assert hpa["metrics"][0]["resource"]["name"] == "cpu"
    assert hpa["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 900
    # the HPA owns the replica count; a fixed one would fight it on every upgrade
    assert "replicas" not in find(docs, "Deployment", "t-onloop-worker")["spec"]
    plain = rendered("-f", EXISTING)
    assert not [d for d in plain if d["kind"] == "HorizontalPodAutoscaler"]
    assert find(plain, "Deployment", "t-onloop-worker")["spec"]["replicas"] == 2


def test_pdbs_select_the_web_and_worker_pods() -> None:
    docs = rendered("-f", DEFAULT)
    for component in ("web", "worker"):
        pdb = find(docs, "PodDisruptionBudget", f"t-onloop-{component}")["spec"]
        deployment = find(docs, "Deployment", f"t-onloop-{component}")
        assert pdb["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert pdb["selector"]["matchLabels"].items() <= labels.items()
        assert pdb["maxUnavailable"] == 1
    assert not [d for d in rendered("-f", HOST) if d["kind"] == "PodDisruptionBudget"]


def test_beat_is_one_pod_that_is_never_doubled() -> None:
    beat = find(rendered("-f", DEFAULT), "Deployment", "t-onloop-beat")
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"] == {"type": "Recreate"}
    assert container(pod(beat), "beat")["args"] == ["beat"]
    assert ("Deployment", "t-onloop-beat") not in kinds(rendered("-f", HOST))


# --- secrets and configuration -------------------------------------------------------------------
def test_secret_values_live_only_in_the_secret() -> None:
    docs = rendered("-f", DEFAULT)
    secret = find(docs, "Secret", "t-onloop")["stringData"]
    values = yaml.safe_load((CHART / "ci" / "default-values.yaml").read_text())
    assert secret["webhook-secret"] == values["secrets"]["webhookSecret"]
    assert secret["client-secret"] == values["secrets"]["clientSecret"]
    assert secret["secret-key"] == values["secrets"]["secretKey"]
    assert secret["private-key.pem"] == values["secrets"]["privateKey"]
    assert secret["postgres-password"] == values["postgresql"]["password"]
    hidden = [*values["secrets"].values(), values["postgresql"]["password"], "not-a-real-key"]
    for doc in docs:
        if doc["kind"] != "Secret":
            text = yaml.safe_dump(doc)
            for value in hidden:
                assert value.strip() not in text, f"a secret value is in {doc['kind']}"
    refs = secret_refs(docs)
    assert {name for name, _ in refs} == {"t-onloop"}
    assert {key for _, key in refs} <= set(secret)
    web = container(pod(find(docs, "Deployment", "t-onloop-web")), "web")
    url = env(web)["ONLOOP_DATABASE_URL"]
    assert url == "postgresql+psycopg://onloop:$(POSTGRES_PASSWORD)@t-onloop-postgresql:5432/onloop"
    names = [e["name"] for e in web["env"]]
    assert names.index("POSTGRES_PASSWORD") < names.index("ONLOOP_DATABASE_URL")  # expansion order


def test_existing_secret_is_used_everywhere_and_no_secret_is_rendered() -> None:
    docs = rendered("-f", EXISTING)
    assert not [d for d in docs if d["kind"] == "Secret"]
    refs = secret_refs(docs)
    assert {name for name, _ in refs} == {"onloop-credentials"}
    keys = {key for _, key in refs}
    assert keys == {
        "webhook-secret",
        "client-secret",
        "secret-key",
        "private-key.pem",
        "database-url",
        "redis-url",
    }
    assert not {k for k in kinds(docs) if k[1].endswith(("-postgresql", "-redis"))}
    web = find(docs, "Deployment", "t-onloop-web")
    annotations = web["spec"]["template"]["metadata"]["annotations"]
    assert annotations["checksum/secret"] == hashlib.sha256(b"onloop-credentials").hexdigest()


def test_bundled_redis_and_postgresql() -> None:
    docs = rendered("-f", DEFAULT)
    config = find(docs, "ConfigMap", "t-onloop")["data"]
    assert config["ONLOOP_REDIS_URL"] == "redis://t-onloop-redis:6379/0"
    find(docs, "Service", "t-onloop-redis")
    pg = find(docs, "StatefulSet", "t-onloop-postgresql")
    c = container(pod(pg), "postgresql")
    assert env(c)["POSTGRES_PASSWORD"] == {
        "secretKeyRef": {"name": "t-onloop", "key": "postgres-password"}
    }
    assert pg["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"] == {
        "storage": "8Gi"
    }
    assert find(docs, "Service", "t-onloop-postgresql")["spec"]["ports"][0]["port"] == 5432


def test_bundled_redis_keeps_its_queue_on_a_claim() -> None:
    """An append-only file (fsync every second) on a PersistentVolumeClaim; without
    persistence, an emptyDir that a container restart keeps."""
    docs = rendered("-f", DEFAULT)
    spec = pod(find(docs, "Deployment", "t-onloop-redis"))
    args = container(spec, "redis")["args"]
    options = dict(zip(args[1::2], args[2::2], strict=True))
    assert options["--appendonly"] == "yes" and options["--appendfsync"] == "everysec"
    assert options["--dir"] == mounts(container(spec, "redis"))["data"]
    (volume,) = [v for v in spec["volumes"] if v["name"] == "data"]
    assert volume["persistentVolumeClaim"]["claimName"] == "t-onloop-redis"
    claim = find(docs, "PersistentVolumeClaim", "t-onloop-redis")
    assert claim["spec"]["resources"]["requests"] == {"storage": "1Gi"}
    docs = rendered("-f", DEFAULT, "--set", "redis.persistence.enabled=false")
    spec = pod(find(docs, "Deployment", "t-onloop-redis"))
    assert [v for v in spec["volumes"] if v["name"] == "data"] == [{"name": "data", "emptyDir": {}}]
    assert not [d for d in docs if d and d.get("kind") == "PersistentVolumeClaim"]


def _checksums(docs: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    out = {}
    for name in ("web", "worker", "beat"):
        meta = find(docs, "Deployment", f"t-onloop-{name}")["spec"]["template"]["metadata"]
        out[name] = {k: v for k, v in meta["annotations"].items() if k.startswith("checksum/")}
    return out


def test_checksum_annotations_roll_pods_when_config_or_secret_change() -> None:
    base = _checksums(rendered("-f", DEFAULT))
    assert _checksums(rendered("-f", DEFAULT)) == base  # deterministic: no roll without change
    assert set(base["web"]) == {"checksum/config", "checksum/secret"}
    assert base["web"] == base["worker"] == base["beat"]
    config = _checksums(rendered("-f", DEFAULT, "--set", "config.logLevel=DEBUG"))
    secret = _checksums(rendered("-f", DEFAULT, "--set", "secrets.webhookSecret=rotated"))
    for name in base:
        assert config[name]["checksum/config"] != base[name]["checksum/config"]
        assert config[name]["checksum/secret"] == base[name]["checksum/secret"]
        assert secret[name]["checksum/secret"] != base[name]["checksum/secret"]
        assert secret[name]["checksum/config"] == base[name]["checksum/config"]


# --- private package indexes for the setup egress proxy (workers only) ---------------------------
EGRESS_ENV = ("ONLOOP_EGRESS_CREDENTIALS_FILE", "ONLOOP_EGRESS_CA_FILE")
EGRESS_VOLUMES = ("egress-credentials", "egress-ca")


def egress_wiring(doc: dict[str, Any]) -> set[str]:
    """Every egress volume, mount and variable anywhere in a pod template."""
    spec = pod(doc)
    found = {v["name"] for v in spec.get("volumes") or [] if v["name"] in EGRESS_VOLUMES}
    for c in (spec.get("initContainers") or []) + spec["containers"]:
        found |= {f"{c['name']}:mount:{m}" for m in mounts(c) if m in EGRESS_VOLUMES}
        found |= {f"{c['name']}:env:{e}" for e in env(c) if e in EGRESS_ENV}
    return found


def assert_egress_files(spec: dict[str, Any], *names: str) -> dict[str, dict[str, Any]]:
    """The named containers get both files, read-only, where the variables say; the volumes."""
    volumes = {v["name"]: v for v in spec["volumes"]}
    for name in names:
        where = "containers" if name == "worker" else "initContainers"
        c = container(spec, name, where)
        ro = {m["name"]: m.get("readOnly") for m in c["volumeMounts"]}
        assert ro["egress-credentials"] is True and ro["egress-ca"] is True, name
        for var, volume, kind in (
            ("ONLOOP_EGRESS_CREDENTIALS_FILE", "egress-credentials", "secret"),
            ("ONLOOP_EGRESS_CA_FILE", "egress-ca", "configMap"),
        ):
            (item,) = volumes[volume][kind]["items"]
            assert env(c)[var] == f"{mounts(c)[volume]}/{item['path']}", (name, var)
    return volumes


def test_no_private_index_settings_render_no_egress_files_or_variables() -> None:
    for values in (DEFAULT, EXISTING, HOST):
        docs = rendered("-f", values)
        for doc in docs:
            if doc["kind"] in POD_KINDS:
                assert egress_wiring(doc) == set(), (values, doc["metadata"]["name"])
        assert ("ConfigMap", "t-onloop-egress-ca") not in kinds(docs)
        assert not [k for k in find(docs, "ConfigMap", "t-onloop")["data"] if "EGRESS" in k]
        if values != EXISTING:
            assert "egress-credentials.yaml" not in find(docs, "Secret", "t-onloop")["stringData"]


def test_inline_private_index_files_are_mounted_read_only_into_worker_pods_only() -> None:
    docs = rendered("-f", PRIVATE_INDEX)
    spec = pod(find(docs, "Deployment", "t-onloop-worker"))
    # the worker and its sandbox-image step (same settings) read them; migrations do not
    volumes = assert_egress_files(spec, "worker", "sandbox-image")
    assert volumes["egress-credentials"]["secret"]["secretName"] == "t-onloop"
    assert volumes["egress-credentials"]["secret"]["items"][0]["key"] == "egress-credentials.yaml"
    assert volumes["egress-ca"]["configMap"]["name"] == "t-onloop-egress-ca"
    assert volumes["egress-ca"]["configMap"]["items"][0]["key"] == "ca.pem"
    migrate = container(spec, "migrate", "initContainers")
    assert not {*mounts(migrate), *env(migrate)} & {*EGRESS_VOLUMES, *EGRESS_ENV}
    # web and beat get nothing, and the shared ConfigMap (envFrom of every pod) names neither
    for name in ("web", "beat"):
        assert egress_wiring(find(docs, "Deployment", f"t-onloop-{name}")) == set(), name
    assert not [k for k in find(docs, "ConfigMap", "t-onloop")["data"] if "EGRESS" in k]


def test_inline_private_index_credentials_live_only_in_the_secret() -> None:
    docs = rendered("-f", PRIVATE_INDEX)
    values = yaml.safe_load((CHART / "ci" / "private-index-values.yaml").read_text())
    inline = values["secrets"]["egressCredentials"]
    secret = find(docs, "Secret", "t-onloop")["stringData"]
    assert secret["egress-credentials.yaml"] == inline
    for doc in docs:
        if doc["kind"] != "Secret":
            text = yaml.safe_dump(doc)
            for value in ("ci-index-user", "ci-index-password", "ci-index-token", "corp.example"):
                assert value not in text, f"a private index credential is in {doc['kind']}"
    # the CA bundle is not secret: it gets its own ConfigMap, not the shared one every pod reads
    ca = find(docs, "ConfigMap", "t-onloop-egress-ca")["data"]
    assert ca == {"ca.pem": values["egress"]["ca"]["bundle"]}
    assert {key for _, key in secret_refs(docs)} <= set(secret)


def test_private_index_files_from_a_secret_and_configmap_the_operator_manages() -> None:
    docs = rendered(
        "-f",
        EXISTING,
        "--set",
        "egress.credentials.existingSecret=index-credentials",
        "--set",
        "egress.ca.existingConfigMap=corp-ca",
        "--set",
        "egress.ca.key=bundle.pem",
    )
    assert not [d for d in docs if d["kind"] == "Secret"]
    assert ("ConfigMap", "t-onloop-egress-ca") not in kinds(docs)
    spec = pod(find(docs, "Deployment", "t-onloop-worker"))
    volumes = assert_egress_files(spec, "worker")  # EXISTING: dind as a plain sidecar
    secret = volumes["egress-credentials"]["secret"]
    assert secret["secretName"] == "index-credentials"
    assert secret["items"] == [{"key": "credentials.yaml", "path": "credentials.yaml"}]
    assert "optional" not in secret  # a named but missing Secret must not start a worker silently
    assert volumes["egress-ca"]["configMap"]["name"] == "corp-ca"
    assert volumes["egress-ca"]["configMap"]["items"] == [{"key": "bundle.pem", "path": "ca.pem"}]
    for name in ("web", "beat"):
        web_or_beat = find(docs, "Deployment", f"t-onloop-{name}")
        assert egress_wiring(web_or_beat) == set(), name
        assert {ref for ref, _ in secret_refs([web_or_beat])} == {"onloop-credentials"}


@pytest.mark.parametrize(
    ("settings", "complaint"),
    [
        (
            ["-f", EXISTING, "--set", "secrets.egressCredentials=x"],
            "name it in egress.credentials.existingSecret",
        ),
        (
            ["-f", PRIVATE_INDEX, "--set", "egress.credentials.existingSecret=other"],
            "not both",
        ),
        (["-f", PRIVATE_INDEX, "--set", "egress.ca.existingConfigMap=other"], "not both"),
    ],
)
def test_conflicting_private_index_settings_fail_clearly(
    settings: list[str], complaint: str
) -> None:
    done = helm("template", "t", str(CHART), *settings)
    assert done.returncode != 0
    assert complaint in done.stderr, done.stderr


def test_changing_the_inline_ca_bundle_rolls_only_the_workers() -> None:
    base = _checksums(rendered("-f", PRIVATE_INDEX))
    pem = "-----BEGIN CERTIFICATE-----\nrotated\n-----END CERTIFICATE-----\n"
    rotated = _checksums(rendered("-f", PRIVATE_INDEX, "--set-string", f"egress.ca.bundle={pem}"))
    assert rotated["worker"]["checksum/egress-ca"] != base["worker"]["checksum/egress-ca"]
    assert rotated["web"] == base["web"] and rotated["beat"] == base["beat"]
    assert "checksum/egress-ca" not in base["web"]
