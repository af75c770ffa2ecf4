"""One TrainJob through the Kubeflow Python SDK, the way its users write one.

TestSDK (test/cluster/e2e/sdk_test.go) runs this with the venv of
scripts/sdk-venv.sh and the cluster's KUBECONFIG:

    python trainjob.py --namespace NS --runtime podmpi-openmpi --function ranks \
        --num-nodes 3 --env NAME=VALUE --timeout 300
    python trainjob.py --namespace NS --events-of TRAINJOB
    python trainjob.py --render RUNTIME.yaml

It calls TrainerClient.get_runtime, train with a CustomTrainer (the SDK
writes the TrainJob's command itself: mpirun --hostfile /etc/mpi/hostfile
bash -c '<the function>'), wait_for_job_status (Complete, or Failed for
--function fail-rank-1), get_job_logs (the launcher, step node-0, where
mpirun gathers every rank's output) and get_job_events, and prints what
each returned as one JSON object on stdout; --events-of only reads the
events of a TrainJob made some other way (get_job_events). --render needs
no cluster: it reads a runtime from a file with the SDK functions that
get_runtime and train use (kubeflow.trainer.backends.kubernetes.utils) and
prints what the SDK makes of it and the command it would give a TrainJob for
ranks(). A call that
raises is recorded under "error" and the calls after it still run, so that
the test can show what the SDK saw; the exit status is then 1.
"""

import argparse
import json
import sys
import time
import traceback

from kubeflow.common.types import KubernetesBackendConfig
from kubeflow.trainer import CustomTrainer, TrainerClient

# The functions below run on every rank: the SDK sends their source, which
# must stand alone, inside a bash here-document (no dollar signs or
# backquotes, which bash would expand), and python3-minimal runs them (os,
# sys and time only: the images ship no more). They print one line per rank that
# names the rank, its host and what the rank sees of the TrainJob's
# trainer.env (PODMPI_SDK_PROBE).


def ranks():
    import os

    rank = os.environ.get("OMPI_COMM_WORLD_RANK") or os.environ.get("PMI_RANK") or "?"
    size = os.environ.get("OMPI_COMM_WORLD_SIZE") or os.environ.get("PMI_SIZE") or "?"
    probe = os.environ.get("PODMPI_SDK_PROBE", "<unset>")
    print(f"sdk-rank {rank} of {size} on {os.uname().nodename}: PODMPI_SDK_PROBE={probe}", flush=True)


def fail_rank_1():
    import os
    import sys
    import time

    rank = os.environ.get("OMPI_COMM_WORLD_RANK") or os.environ.get("PMI_RANK") or "?"
    size = os.environ.get("OMPI_COMM_WORLD_SIZE") or os.environ.get("PMI_SIZE") or "?"
    print(f"sdk-rank {rank} of {size} on {os.uname().nodename}", flush=True)
    time.sleep(1)
    if rank == "1":
        print("sdk-rank 1: exiting with status 7", flush=True)
        sys.exit(7)
    time.sleep(5)


FUNCTIONS = {"ranks": (ranks, "Complete"), "fail-rank-1": (fail_rank_1, "Failed")}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--namespace")
    p.add_argument("--runtime")
    p.add_argument("--function", choices=sorted(FUNCTIONS))
    p.add_argument("--events-of", metavar="TRAINJOB", help="only get_job_events of this TrainJob")
    p.add_argument("--render", metavar="RUNTIME_YAML", help="no cluster: what the SDK makes of this runtime")
    p.add_argument("--num-nodes", type=int, default=3)
    p.add_argument("--env", action="append", default=[], help="NAME=VALUE for the TrainJob's trainer.env")
    p.add_argument("--timeout", type=int, default=300, help="seconds wait_for_job_status waits")
    p.add_argument("--image", help="CustomTrainer's image (the TrainJob's trainer.image)")
    p.add_argument("--cpu", help="CustomTrainer's resources_per_node cpu (e.g. 250m)")
    a = p.parse_args()
    if a.render:
        return render(a.render)
    if not a.namespace or not (a.events_of or (a.runtime and a.function)):
        p.error("give --namespace, and --runtime and --function or --events-of; or --render")

    out = {"runtime": a.runtime, "function": a.function}

    def call(what, f):
        """Runs one SDK call; records its exception and returns None."""
        try:
            return f()
        except Exception:
            out.setdefault("error", []).append(f"{what}: {traceback.format_exc()}")
            return None

    client = call("TrainerClient", lambda: TrainerClient(backend_config=KubernetesBackendConfig(namespace=a.namespace)))
    if client is None:
        print(json.dumps(out))
        return 1
    if a.events_of:
        events = call("get_job_events", lambda: client.get_job_events(a.events_of))
        out["events"] = event_list(events)
        print(json.dumps(out))
        return 1 if "error" in out else 0

    func, want = FUNCTIONS[a.function]
    env = dict(kv.split("=", 1) for kv in a.env) or None
    rt = call("get_runtime", lambda: client.get_runtime(a.runtime))
    if rt is None:
        print(json.dumps(out))
        return 1
    out["runtime_trainer"] = trainer_json(rt.trainer)
    start = time.monotonic()
    resources = {"cpu": a.cpu} if a.cpu else None
    trainer = CustomTrainer(func=func, num_nodes=a.num_nodes, env=env, image=a.image, resources_per_node=resources)
    name = call("train", lambda: client.train(runtime=rt, trainer=trainer))
    if name is None:
        print(json.dumps(out))
        return 1
    out["job"] = name
    job = call("wait_for_job_status", lambda: client.wait_for_job_status(name, status={want}, timeout=a.timeout))
    out["seconds"] = round(time.monotonic() - start, 1)
    out["waited_until"] = time.time()
    if job is None:
        job = call("get_job", lambda: client.get_job(name))
    if job is not None:
        out["status"] = job.status
        out["steps"] = [{"name": s.name, "status": s.status, "pod": s.pod_name} for s in job.steps]
    logs = call("get_job_logs", lambda: list(client.get_job_logs(name)))
    out["logs"] = logs or []
    events = call("get_job_events", lambda: client.get_job_events(name))
    out["events"] = event_list(events)
    print(json.dumps(out))
    return 1 if "error" in out else 0


def trainer_json(trainer):
    """The SDK's RuntimeTrainer as JSON."""
    return {
        "framework": trainer.framework,
        "command": list(trainer.command),
        "image": trainer.image,
        "device": trainer.device,
        "device_count": trainer.device_count,
    }


def render(path):
    """Prints what the SDK makes of the runtime in path (get_runtime's
    functions) and the TrainJob command train would write for ranks()."""
    import yaml  # PyYAML, which the kubernetes client brings

    from kubeflow.trainer.backends.kubernetes import utils
    from kubeflow.trainer.constants import constants
    from kubeflow.trainer.types import types
    from kubeflow_trainer_api import models

    out = {"file": path}
    try:
        doc = next(d for d in yaml.safe_load_all(open(path)) if d and d.get("kind", "").endswith("TrainingRuntime"))
        cr = getattr(models, "TrainerV1alpha1" + doc["kind"]).from_dict(doc)
        trainer = utils.get_runtime_trainer(
            cr.metadata.labels[constants.RUNTIME_FRAMEWORK_LABEL],
            cr.spec.template.spec.replicated_jobs,
            cr.spec.ml_policy,
        )
        out["runtime_trainer"] = trainer_json(trainer)
        runtime = types.Runtime(name=cr.metadata.name, kind=types.RuntimeKind(doc["kind"]), trainer=trainer)
        out["trainjob_command"] = utils.get_trainer_cr_from_custom_trainer(runtime, CustomTrainer(func=ranks)).command
    except Exception:
        out["error"] = [traceback.format_exc()]
    print(json.dumps(out))
    return 1 if "error" in out else 0


def event_list(events):
    """The SDK's Event objects as JSON (it keeps no type or source)."""
    return [
        {"kind": e.involved_object_kind, "name": e.involved_object_name, "reason": e.reason, "message": e.message}
        for e in events or []
    ]


if __name__ == "__main__":
    sys.exit(main())
