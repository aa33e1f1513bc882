"""`meta.properties`: which node and cluster a log directory belongs to, as Kafka's KRaft nodes write it.

    version=1
    cluster.id=<22-character base64 uuid>
    node.id=<int>
    directory.id=<22-character base64 uuid>

`odradek storage format` writes it into every log directory of a node before the node's first start (as
`kafka-storage format` does); a lone node (no other voter configured) formats itself at its first start
instead: the log manager claims its empty directories for the node (log_manager.py) and the node then
names its cluster in them (`claim_for_cluster`), so that `odradek broker start` stays one command. A
directory whose file names another cluster or node is refused, never "repaired".
"""

from __future__ import annotations

import base64
import os
import uuid

from .checkpoints import atomic_write
from .errors import ForeignLogDirectoryError
from .names import META_PROPERTIES


def new_directory_id() -> str:
    """A random directory id as Kafka writes it: a UUID in 22 characters of URL-safe base64."""
    while True:
        raw = uuid.uuid4().bytes
        text = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        if not text.startswith("-"):  # (as Kafka's Uuid.randomUuid avoids ids that read as options)
            return text


def read_meta_properties(log_dir: str) -> dict[str, str] | None:
    """The directory's meta.properties as a dict, or None when it has none."""
    path = os.path.join(log_dir, META_PROPERTIES)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    props = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            props[key.strip()] = value.strip()
    return props


def format_log_dir(log_dir: str, *, node_id: int, cluster_id: str, directory_id: str, ignore_formatted: bool = False) -> bool:
    """Write meta.properties into `log_dir` (made if missing). Returns False when it was formatted already
    for this node and cluster and `ignore_formatted` is set; raises ForeignLogDirectoryError when it holds
    another identity, or holds anything at all without `ignore_formatted`."""
    os.makedirs(log_dir, exist_ok=True)
    existing = read_meta_properties(log_dir)
    if existing is not None:
        same = existing.get("cluster.id") == cluster_id and existing.get("node.id") == str(node_id)
        if same and ignore_formatted:
            return False
        raise ForeignLogDirectoryError(
            f"{log_dir} is already formatted (cluster.id={existing.get('cluster.id')}, "
            f"node.id={existing.get('node.id')})" + ("" if same else "; refusing to reformat it for another identity")
        )
    others = [n for n in os.listdir(log_dir) if n != "lost+found"]
    if others:
        raise ForeignLogDirectoryError(f"{log_dir} is not empty (found {sorted(others)[:3]}); refusing to format it")
    lines = ["version=1", f"cluster.id={cluster_id}", f"node.id={node_id}", f"directory.id={directory_id}"]
    atomic_write(os.path.join(log_dir, META_PROPERTIES), ("\n".join(lines) + "\n").encode())
    return True


def claim_for_cluster(log_dir: str, cluster_id: str) -> None:
    """Name `cluster_id` in the meta.properties of `log_dir`, which the log manager opened (and wrote
    without a cluster id if it had none): a lone node formatting itself at its first start
    (broker/components.py). A file that names another cluster is refused."""
    props = read_meta_properties(log_dir)
    if props is None:
        return  # not a directory the log manager opened
    existing = props.get("cluster.id")
    if existing == cluster_id:
        return
    if existing is not None:
        raise ForeignLogDirectoryError(f"{log_dir} belongs to cluster {existing}, not to cluster {cluster_id}")
    props["cluster.id"] = cluster_id
    order = ["version", "cluster.id", "node.id", "directory.id"]
    keys = [k for k in order if k in props] + sorted(k for k in props if k not in order)
    text = "".join(f"{k}={props[k]}\n" for k in keys)
    atomic_write(os.path.join(log_dir, META_PROPERTIES), text.encode())
