"""A Ray worker node on loopback for the tests' local cluster (tests/test_ray.py): its raylet joins the head's GCS
at ADDRESS with its session files under TEMP, prints {"node_id": ...} once it has joined, and stays until its
stdin closes (or its process group is killed, as a lost node is).

`ray start --address` cannot start it: it replaces a loopback node address with the machine's outward one, unless
RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, which in turn refuses to join a cluster. The node is built here as Ray's own
test clusters build theirs (ray.cluster_utils.Cluster.add_node), with the address 127.0.0.1, so its servers listen on
loopback only."""

import json
import sys

import ray._private.node
import ray._private.parameter


def main(address: str, temp: str, cpus: int) -> None:
    params = ray._private.parameter.RayParams(
        gcs_address=address, node_ip_address="127.0.0.1", num_cpus=cpus, num_gpus=0, include_log_monitor=False,
        node_manager_port=0, min_worker_port=0, max_worker_port=0, object_store_memory=150 * 2**20, temp_dir=temp)
    params.dashboard_agent_listen_port = None
    node = ray._private.node.Node(params, head=False, shutdown_at_exit=True, spawn_reaper=True)
    print(json.dumps({"node_id": node.node_id}), flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
