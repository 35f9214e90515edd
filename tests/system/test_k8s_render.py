"""`tandem k8s render`: every kind, for a parameter-server job and a
collectives job, validated strictly offline (k8s_schema.py): custom resources
against the official CRD schemas with unnamed fields rejected, core objects
and pod templates field by field against python3-kubernetes' API types. The
pods must carry exactly what tandem's contract readers need
(docs/contracts.md)."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path

import pytest
import yaml

import k8s_schema

KINDS = ["mxjob", "pytorchjob", "mpijob", "tfjob", "trainjob", "jobset", "indexed-job",
         "volcano-job"]
# Kinds that run each strategy; the others refuse it with exit code 78.
PS_KINDS = {"mxjob", "tfjob", "jobset", "indexed-job", "volcano-job"}
COLLECTIVE_KINDS = {"pytorchjob", "mpijob", "tfjob", "trainjob", "jobset", "indexed-job",
                    "volcano-job"}

PS_JOB = {
    "name": "mnist-ps",
    "namespace": "training",
    "image": "registry.example.com/tandem:0.1.0",
    "command": ["python3", "/opt/tandem/examples/pytorch_ddp/train.py", "--epochs", "3"],
    "strategy": "parameter-server",
    "workers": 4,
    "servers": 2,
    "resources": {"cpu": "4", "memory": "8Gi", "gpus": 1},
    "server_resources": {"cpu": "2", "memory": "4Gi"},
    "node_selector": {"pool": "gpu"},
    "server_node_selector": {"pool": "cpu"},
    "shm_size": "2Gi",
    "checkpoint": {"claim": "mnist-checkpoints", "mount_path": "/checkpoints"},
    "metrics_port": 9100,
    "gang_scheduling": {"scheduler": "volcano", "queue": "research", "priority_class": "high"},
    "env": {"PS_VERBOSE": "1"},
    "labels": {"team": "vision"},
}

COLLECTIVES_JOB = {
    "name": "resnet",
    "image": "registry.example.com/tandem:0.1.0",
    "command": ["python3", "/opt/tandem/examples/pytorch_ddp/train.py"],
    "workers": 3,
    "node_selector": {"pool": "gpu"},
    "host_network": True,
    "secret": {"name": "shared-tandem-secret", "key": "secret"},
}

JOBS = {"ps": PS_JOB, "collectives": COLLECTIVES_JOB}


def supported(strategy: str, kind: str) -> bool:
    return kind in (PS_KINDS if strategy == "ps" else COLLECTIVE_KINDS)


def render(bin_dir: Path, tmp_path: Path, job: dict, kind: str,
           flags: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    description = tmp_path / "job.json"
    description.write_text(json.dumps(job))
    return subprocess.run(
        [str(bin_dir / "tandem"), "k8s", "render", "-f", str(description), "--kind", kind,
         *flags], capture_output=True, text=True, timeout=30)


def rendered(bin_dir: Path, tmp_path: Path, job: dict, kind: str,
             flags: tuple[str, ...] = ()) -> list[dict]:
    result = render(bin_dir, tmp_path, job, kind, flags)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("---\n")
    return [obj for obj in yaml.safe_load_all(result.stdout) if obj is not None]


def containers(obj: dict) -> list[tuple[str, dict]]:
    """(replica or task, container) of every pod template in a rendered object."""
    out = []
    for path, template in k8s_schema.pod_templates(obj):
        out += [(path, c) for c in template["spec"]["containers"]]
    for path, template in k8s_schema.job_templates(obj):
        out += [(path, c) for c in template["spec"]["template"]["spec"]["containers"]]
    if obj["apiVersion"] == "batch/v1" and obj["kind"] == "Job":
        out += [(obj["metadata"]["name"], c)
                for c in obj["spec"]["template"]["spec"]["containers"]]
    return out


def env_of(container: dict) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("strategy", ["ps", "collectives"])
def test_every_object_validates_strictly(tandem_bin_dir, tmp_path, strategy, kind):
    if not supported(strategy, kind):
        result = render(tandem_bin_dir, tmp_path, JOBS[strategy], kind)
        assert result.returncode == 78, result.stderr  # kExitConfigError
        assert f"kind {kind} runs" in result.stderr and "render strategy" in result.stderr
        return
    objects = rendered(tandem_bin_dir, tmp_path, JOBS[strategy], kind)
    assert objects
    for obj in objects:
        errors = k8s_schema.manifest_errors(obj)
        assert errors == [], f"{obj['kind']} {obj['metadata']['name']}:\n" + "\n".join(errors)


@pytest.mark.parametrize("strategy,kind", [
    (s, k) for s in ("ps", "collectives") for k in KINDS if supported(s, k)])
def test_every_pod_gets_the_secret_and_job_id(tandem_bin_dir, tmp_path, strategy, kind):
    job = JOBS[strategy]
    objects = rendered(tandem_bin_dir, tmp_path, job, kind)
    secrets = [o for o in objects if o["kind"] == "Secret"]
    secret_name = job.get("secret", {}).get("name", f"{job['name']}-tandem-secret")
    secret_key = job.get("secret", {}).get("key", "TANDEM_SECRET")
    if "secret" in job:  # an existing Secret is referenced, not rendered
        assert secrets == []
    else:
        assert len(secrets) == 1 and secrets[0]["metadata"]["name"] == secret_name
        value = secrets[0]["stringData"][secret_key]
        assert len(value) == 64 and int(value, 16) >= 0
    pods = [c for o in objects for c in containers(o)]
    assert pods
    for path, c in pods:
        env = env_of(c)
        assert env["TANDEM_SECRET"] == {
            "secretKeyRef": {"name": secret_name, "key": secret_key}}, path
        assert env["TANDEM_JOB_ID"] == f"{job.get('namespace', 'default')}/{job['name']}"


def test_generated_secrets_differ_between_renders(tandem_bin_dir, tmp_path):
    first = rendered(tandem_bin_dir, tmp_path, PS_JOB, "mxjob")[0]
    second = rendered(tandem_bin_dir, tmp_path, PS_JOB, "mxjob")[0]
    assert first["stringData"]["TANDEM_SECRET"] != second["stringData"]["TANDEM_SECRET"]


def dmlc_roles(objects: list[dict]) -> dict[str, dict]:
    """DMLC_ROLE -> env of the pods that set it explicitly."""
    roles = {}
    for obj in objects:
        for _, c in containers(obj):
            env = env_of(c)
            if "DMLC_ROLE" in env:
                roles[env["DMLC_ROLE"]] = env
    return roles


@pytest.mark.parametrize("kind,scheduler", [
    ("indexed-job", "mnist-ps-scheduler-0.mnist-ps"),
    ("jobset", "mnist-ps-scheduler-0-0.mnist-ps"),
])
def test_parameter_server_pods_get_the_dmlc_contract(tandem_bin_dir, tmp_path, kind, scheduler):
    objects = rendered(tandem_bin_dir, tmp_path, PS_JOB, kind)
    roles = dmlc_roles(objects)
    assert set(roles) == {"scheduler", "server", "worker"}
    for env in roles.values():
        assert env["DMLC_PS_ROOT_URI"] == scheduler
        assert env["DMLC_PS_ROOT_PORT"] == "9091"
        assert env["DMLC_NUM_SERVER"] == "2" and env["DMLC_NUM_WORKER"] == "4"
        assert env["DMLC_USE_KUBERNETES"] == "1"
        assert env["DMLC_NODE_HOST"] == {"fieldRef": {"fieldPath": "status.podIP"}}


def test_indexed_job_injects_world_size_and_subdomain(tandem_bin_dir, tmp_path):
    objects = rendered(tandem_bin_dir, tmp_path, COLLECTIVES_JOB, "indexed-job")
    service = next(o for o in objects if o["kind"] == "Service")
    job = next(o for o in objects if o["kind"] == "Job")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 3
    pod = job["spec"]["template"]["spec"]
    assert pod["subdomain"] == service["metadata"]["name"] == "resnet"
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    env = env_of(pod["containers"][0])
    assert env["WORLD_SIZE"] == "3" and env["TANDEM_SUBDOMAIN"] == "resnet"
    # The Service selects the Job's pods.
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert all(labels[k] == v for k, v in service["spec"]["selector"].items())


def test_operators_get_the_names_they_require(tandem_bin_dir, tmp_path):
    mx = rendered(tandem_bin_dir, tmp_path, PS_JOB, "mxjob")[-1]
    assert mx["spec"]["jobMode"] == "MXTrain"
    assert set(mx["spec"]["mxReplicaSpecs"]) == {"Scheduler", "Server", "Worker"}
    assert [mx["spec"]["mxReplicaSpecs"][r]["replicas"] for r in ("Scheduler", "Server", "Worker")] \
        == [1, 2, 4]
    for _, c in containers(mx):
        assert c["name"] == "mxnet"
        assert {"name": "mxjob-port", "containerPort": 9091, "protocol": "TCP"} in c["ports"]
    assert mx["spec"]["runPolicy"]["schedulingPolicy"] == {
        "minAvailable": 7, "queue": "research", "priorityClass": "high"}

    pt = rendered(tandem_bin_dir, tmp_path, COLLECTIVES_JOB, "pytorchjob")[-1]
    assert pt["spec"]["nprocPerNode"] == "1"
    assert pt["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] == 1
    assert pt["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2
    for _, c in containers(pt):
        assert c["name"] == "pytorch" and c["ports"][0]["name"] == "pytorchjob-port"

    # TFJob: Chief + Worker replicas, PS replicas serving; no scheduler pod
    # (the chief hosts it) and no Evaluator.
    tf = rendered(tandem_bin_dir, tmp_path, PS_JOB, "tfjob")[-1]
    specs = tf["spec"]["tfReplicaSpecs"]
    assert {r: specs[r]["replicas"] for r in specs} == {"Chief": 1, "Worker": 3, "PS": 2}
    for _, c in containers(tf):
        assert c["name"] == "tensorflow"
        assert {"name": "tfjob-port", "containerPort": 9091, "protocol": "TCP"} in c["ports"]
    assert specs["PS"]["template"]["spec"]["containers"][0]["command"][-1] == "server"
    assert tf["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] == 6
    tf = rendered(tandem_bin_dir, tmp_path, COLLECTIVES_JOB, "tfjob")[-1]
    assert set(tf["spec"]["tfReplicaSpecs"]) == {"Chief", "Worker"}

    runtime, trainjob = rendered(tandem_bin_dir, tmp_path, COLLECTIVES_JOB, "trainjob")
    assert trainjob["spec"]["runtimeRef"]["name"] == runtime["metadata"]["name"]
    assert trainjob["spec"]["trainer"] == {"numNodes": 3, "numProcPerNode": 1}
    assert [c["name"] for _, c in containers(runtime)] == ["node"]


@pytest.mark.parametrize("how,flags,field,runtime_kind", [
    ("default", (), None, "TrainingRuntime"),
    ("field_false", (), False, "TrainingRuntime"),
    ("flag", ("--cluster-runtime",), None, "ClusterTrainingRuntime"),
    ("field_true", (), True, "ClusterTrainingRuntime"),
])
@pytest.mark.parametrize("strategy_job", ["collectives", "gang"])
def test_trainjob_runtime_is_namespaced_unless_asked(tandem_bin_dir, tmp_path, how, flags, field,
                                                     runtime_kind, strategy_job):
    """A namespace's own users may apply a TrainingRuntime; a ClusterTrainingRuntime
    needs a cluster administrator, so it is rendered only on request. Both validate
    against their CRDs, scope included (k8s_schema.scope_errors)."""
    job = dict(COLLECTIVES_JOB, namespace="training")
    if strategy_job == "gang":
        job["gang_scheduling"] = {"scheduler": "volcano", "queue": "research"}
    if field is not None:
        job["cluster_runtime"] = field
    objects = rendered(tandem_bin_dir, tmp_path, job, "trainjob", flags)
    runtime, trainjob = objects[-2:]
    assert runtime["kind"] == runtime_kind
    assert trainjob["spec"]["runtimeRef"] == {
        "apiGroup": "trainer.kubeflow.org", "kind": runtime_kind, "name": "tandem-resnet"}
    assert runtime["metadata"].get("namespace") == (
        "training" if runtime_kind == "TrainingRuntime" else None)
    assert trainjob["metadata"]["namespace"] == "training"
    for obj in objects:
        errors = k8s_schema.manifest_errors(obj)
        assert errors == [], f"{obj['kind']} {obj['metadata']['name']}:\n" + "\n".join(errors)


@pytest.mark.parametrize("kind", sorted(set(KINDS) - {"trainjob"}))
def test_cluster_runtime_is_refused_for_other_kinds(tandem_bin_dir, tmp_path, kind):
    job = PS_JOB if kind == "mxjob" else COLLECTIVES_JOB
    result = render(tandem_bin_dir, tmp_path, job, kind, ("--cluster-runtime",))
    assert result.returncode == 78, result.stderr
    assert "cluster_runtime=true needs kind trainjob" in result.stderr
    assert f"kind {kind} has none" in result.stderr
    assert result.stdout == ""


def test_mpijob_forwards_tandem_variables_through_mpirun(tandem_bin_dir, tmp_path):
    job = dict(COLLECTIVES_JOB, env={"NCCL_DEBUG": "INFO"}, metrics_port=9100)
    mpi = rendered(tandem_bin_dir, tmp_path, job, "mpijob")[-1]
    launcher = mpi["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    cmd = launcher["command"]
    assert cmd[:4] == ["mpirun", "--allow-run-as-root", "-np", "3"]
    forwarded = {cmd[i + 1] for i, a in enumerate(cmd) if a == "-x"}
    assert forwarded == {"TANDEM_SECRET", "TANDEM_JOB_ID", "TANDEM_COORDINATOR",
                         "TANDEM_METRICS_PORT", "TANDEM_METRICS_ADDRESS", "NCCL_DEBUG"}
    assert cmd[-2:] == job["command"]
    assert env_of(launcher)["TANDEM_COORDINATOR"] == "resnet-worker-0.resnet.default.svc:29500"
    workers = mpi["spec"]["mpiReplicaSpecs"]["Worker"]
    assert workers["replicas"] == 3
    assert workers["template"]["spec"]["containers"][0]["command"] == ["/usr/sbin/sshd", "-De"]


def test_volcano_job_uses_env_and_svc_plugins(tandem_bin_dir, tmp_path):
    ps = rendered(tandem_bin_dir, tmp_path, PS_JOB, "volcano-job")[-1]
    assert ps["spec"]["plugins"] == {"env": [], "svc": []}
    assert [(t["name"], t["replicas"]) for t in ps["spec"]["tasks"]] == [
        ("scheduler", 1), ("server", 2), ("worker", 4)]
    assert ps["spec"]["minAvailable"] == 7 and ps["spec"]["queue"] == "research"
    commands = {t["name"]: t["template"]["spec"]["containers"][0]["command"]
                for t in ps["spec"]["tasks"]}
    assert commands["scheduler"] == ["tandem", "scheduler"]
    assert commands["server"] == ["tandem", "server"]
    assert commands["worker"] == PS_JOB["command"]
    policies = ps["spec"]["policies"]
    assert {p["exitCode"] for p in policies if "exitCode" in p} == {1, 2, 76, 77, 78, 126, 127}
    assert policies[-1] == {"events": ["PodFailed", "PodEvicted"], "action": "RestartJob"}


@pytest.mark.parametrize("policy", ["ExitCode", "OnFailure", "Never"])
@pytest.mark.parametrize("kind", KINDS)
def test_every_restart_policy_validates(tandem_bin_dir, tmp_path, policy, kind):
    job = dict(PS_JOB if kind in PS_KINDS else COLLECTIVES_JOB, restart_policy=policy)
    for obj in rendered(tandem_bin_dir, tmp_path, job, kind):
        assert k8s_schema.manifest_errors(obj) == []


def test_exit_code_policy_fails_indexed_job_on_permanent_codes(tandem_bin_dir, tmp_path):
    job = next(o for o in rendered(tandem_bin_dir, tmp_path, COLLECTIVES_JOB, "indexed-job")
               if o["kind"] == "Job")
    rules = job["spec"]["podFailurePolicy"]["rules"]
    assert rules[0]["action"] == "FailJob"
    assert rules[0]["onExitCodes"] == {"containerName": "tandem", "operator": "In",
                                       "values": [1, 2, 76, 77, 78, 126, 127]}
    assert rules[1]["action"] == "Ignore"
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"


@pytest.mark.parametrize("field,value,message", [
    ("workers", 0, "workers must be a whole number in 1..65536, got 0"),
    ("name", "Bad_Name", "name must be lower-case letters, digits and '-' only, got 'Bad_Name'"),
    ("restart_policy", "Always", "restart_policy must be 'ExitCode', 'OnFailure' or 'Never'"),
    ("shm_size", "2 GB", "shm_size must be a Kubernetes quantity"),
    ("colour", "blue", "unknown field 'colour'"),
])
def test_bad_descriptions_name_the_field(tandem_bin_dir, tmp_path, field, value, message):
    job = dict(COLLECTIVES_JOB, **{field: value})
    result = render(tandem_bin_dir, tmp_path, job, "indexed-job")
    assert result.returncode == 78, result.stderr
    assert message in result.stderr
    assert result.stdout == ""


def hostile_text(member: str) -> str:
    """A valid collectives description's text with `member` added last."""
    return '{"name": "a", "image": "i", "command": ["x"], ' + member + "}"


# Found by a fault drill: 100 000 nested arrays crashed render (exit 139, a
# stack overflow) and 1e400 gave nlohmann's message without the file's name.
# Each must end with exit 78 and one line naming the file, the field and the
# limit (docs/deploy.md, "Limits of the reader").
@pytest.mark.parametrize("member,message", [
    ('"env": {"A": ' + "[" * 100000 + "]" * 100000 + "}",
     "env.A[0][0][0][0]... nests deeper than 64 levels of arrays and objects at byte 122 "
     "(line 1, column 122)"),
    ('"labels": ' + '{"a": ' * 100000 + "1" + "}" * 100000,
     "labels.a.a.a.a.a... nests deeper than 64 levels"),
    ('"workers": 1e400',
     "workers must be a whole number in 1..65536, got 1e400 (beyond a double's range) at byte 58"),
    ('"resources": {"gpus": -1e400}', "resources.gpus must be a whole number in 0..1024, got -1e400"),
    ('"workers": -1', "workers must be a whole number in 1..65536, got -1 (number)"),
    ('"workers": 2.5', "workers must be a whole number in 1..65536, got 2.5 (number)"),
    ('"workers": "two"', 'workers must be a whole number in 1..65536, got "two" (string)'),
], ids=["env-nested-100000", "labels-nested-100000", "workers-1e400", "gpus-minus-1e400",
        "workers-minus-1", "workers-fraction", "workers-text"])
def test_hostile_descriptions_are_refused_by_name(tandem_bin_dir, tmp_path, member, message):
    description = tmp_path / "job.json"
    description.write_text(hostile_text(member))
    result = subprocess.run(
        [str(tandem_bin_dir / "tandem"), "k8s", "render", "-f", str(description), "--kind",
         "indexed-job"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 78, result.stderr[:500]
    assert result.stderr.startswith(f"tandem: error: {description}: "), result.stderr[:500]
    assert message in result.stderr and result.stderr.count("\n") == 1, result.stderr[:500]
    assert result.stdout == ""


# The validator itself must be strict: each mutation of a valid manifest adds
# one thing a real API server or controller would reject or ignore.
MUTATIONS = [
    ("mxjob", "ps", lambda o: o["spec"]["runPolicy"].__setitem__("backoffLimt", 3)),
    ("mxjob", "ps", lambda o: o["spec"]["mxReplicaSpecs"]["Worker"]["template"]["spec"][
        "containers"][0].__setitem__("imagePullPolicyy", "Always")),
    ("jobset", "collectives", lambda o: o["spec"]["replicatedJobs"][0]["template"]["spec"][
        "podFailurePolicy"]["rules"][0].__setitem__("onExitCode", {})),
    ("indexed-job", "collectives", lambda o: o["spec"]["template"]["spec"].__setitem__(
        "hostnetwork", True)),
    ("indexed-job", "collectives", lambda o: o["spec"].__setitem__("completions", "3")),
    ("volcano-job", "ps", lambda o: o["spec"]["tasks"][0].__setitem__("replica", 1)),
    ("trainjob", "collectives", lambda o: o["spec"]["trainer"].__setitem__("numNode", 3)),
    ("trainjob", "collectives", lambda o: o["metadata"].pop("namespace")),
    ("tfjob", "ps", lambda o: o["spec"]["tfReplicaSpecs"]["PS"].__setitem__("replica", 2)),
    ("pytorchjob", "collectives", lambda o: o["spec"]["pytorchReplicaSpecs"]["Master"][
        "template"]["spec"]["volumes"][0]["emptyDir"].__setitem__("sizelimit", "1Gi")),
]


@pytest.mark.parametrize("kind,mutate", [
    ("TrainingRuntime", lambda o: o["metadata"].pop("namespace")),
    ("ClusterTrainingRuntime", lambda o: o["metadata"].__setitem__("namespace", "default")),
    ("TrainingRuntime", lambda o: o["spec"]["mlPolicy"].__setitem__("numNode", 3)),
])
def test_validator_checks_each_runtime_scope(tandem_bin_dir, tmp_path, kind, mutate):
    flags = ("--cluster-runtime",) if kind == "ClusterTrainingRuntime" else ()
    runtime = rendered(tandem_bin_dir, tmp_path, COLLECTIVES_JOB, "trainjob", flags)[-2]
    assert runtime["kind"] == kind and k8s_schema.manifest_errors(runtime) == []
    mutate(runtime)
    assert k8s_schema.manifest_errors(runtime) != []


@pytest.mark.parametrize("index", range(len(MUTATIONS)))
def test_validator_rejects_unnamed_fields(tandem_bin_dir, tmp_path, index):
    kind, strategy, mutate = MUTATIONS[index]
    objects = rendered(tandem_bin_dir, tmp_path, JOBS[strategy], kind)
    target = copy.deepcopy(objects[-1])
    assert k8s_schema.manifest_errors(target) == []
    mutate(target)
    assert k8s_schema.manifest_errors(target) != []


def test_docs_examples_are_current(tandem_bin_dir):
    """docs/deploy.md pastes the tool's output; it must match today's."""
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        ["/usr/bin/python3", str(root / "scripts" / "render-deploy-examples.py"), "--check",
         str(tandem_bin_dir / "tandem")], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    doc = (root / "docs" / "deploy.md").read_text()
    blocks = doc.count("<!-- k8s-render ")
    assert blocks == 9 and doc.count("```yaml\n---\n") == blocks


@pytest.mark.parametrize("description", ["ps-job.json", "collectives-job.json", "full-job.json",
                                         "elastic-job.json"])
def test_shipped_examples_validate(tandem_bin_dir, tmp_path, description):
    root = Path(__file__).resolve().parents[2]
    job = json.loads((root / "deploy" / "examples" / description).read_text())
    kinds = PS_KINDS if job.get("strategy") == "parameter-server" else COLLECTIVE_KINDS
    if job.get("min_workers", job["workers"]) < job["workers"]:
        kinds = {"pytorchjob"}
    for kind in sorted(kinds):
        for obj in rendered(tandem_bin_dir, tmp_path, job, kind):
            assert k8s_schema.manifest_errors(obj) == [], (kind, obj["kind"])


ELASTIC_JOB = {**COLLECTIVES_JOB, "workers": 4, "min_workers": 2, "backoff_limit": 6,
               "server_resources": {"cpu": "1", "memory": "1Gi"},
               "gang_scheduling": {"scheduler": "volcano"}}


@pytest.mark.parametrize("policy", ["ExitCode", "OnFailure"])
def test_elastic_pytorchjob_validates_with_a_scheduler_master(tandem_bin_dir, tmp_path, policy):
    """min_workers below workers: the PyTorchJob's elasticPolicy, valid
    against the CRD; the Master runs the scheduler alone, every pod has the
    DMLC contract and TANDEM_MIN_WORKERS (docs/deploy.md, "An elastic
    PyTorchJob")."""
    objects = rendered(tandem_bin_dir, tmp_path, {**ELASTIC_JOB, "restart_policy": policy},
                       "pytorchjob")
    for obj in objects:
        errors = k8s_schema.manifest_errors(obj)
        assert errors == [], f"{obj['kind']} {obj['metadata']['name']}:\n" + "\n".join(errors)
    job = objects[-1]
    assert job["spec"]["elasticPolicy"] == {"minReplicas": 2, "maxReplicas": 4, "maxRestarts": 6}
    assert job["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] == 5
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert (replicas["Master"]["replicas"], replicas["Worker"]["replicas"]) == (1, 4)
    for role, replica in (("scheduler", replicas["Master"]), ("worker", replicas["Worker"])):
        assert replica["restartPolicy"] == policy
        (container,) = replica["template"]["spec"]["containers"]
        env = env_of(container)
        assert env["DMLC_ROLE"] == role
        assert env["DMLC_PS_ROOT_URI"] == "resnet-master-0"
        assert (env["DMLC_NUM_WORKER"], env["DMLC_NUM_SERVER"]) == ("4", "0")
        assert env["TANDEM_MIN_WORKERS"] == "2"
        assert container["ports"][0] == {"name": "pytorchjob-port", "containerPort": 29500,
                                         "protocol": "TCP"}
        expected = ({"cpu": "1", "memory": "1Gi"} if role == "scheduler" else {})
        assert container.get("resources", {}).get("limits", {}) == expected
    assert replicas["Master"]["template"]["spec"]["containers"][0]["command"] == [
        "tandem", "scheduler"]
    assert replicas["Worker"]["template"]["spec"]["containers"][0]["command"] == \
        COLLECTIVES_JOB["command"]


@pytest.mark.parametrize("kind", sorted(set(KINDS) - {"pytorchjob"}))
def test_elastic_jobs_are_refused_by_other_kinds(tandem_bin_dir, tmp_path, kind):
    result = render(tandem_bin_dir, tmp_path, ELASTIC_JOB, kind)
    assert result.returncode == 78, result.stderr
    assert "min_workers=2 (below workers=4) needs kind pytorchjob" in result.stderr


def test_elastic_job_refuses_restart_policy_never(tandem_bin_dir, tmp_path):
    result = render(tandem_bin_dir, tmp_path, {**ELASTIC_JOB, "restart_policy": "Never"},
                    "pytorchjob")
    assert result.returncode == 78, result.stderr
    assert "min_workers=2 needs restart_policy 'ExitCode' or 'OnFailure'" in result.stderr
