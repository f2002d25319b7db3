#!/usr/bin/python3
"""oci_config.py ROOTFS IMAGE_PATH BIND... -- CMD...: prints the OCI runtime config (config.json)
with which tests/container/oci-run has crun run CMD in ROOTFS, the way `apptainer exec` runs a
program: the host's processes, network and IPC (only a mount namespace of its own, so the program
stays in the step's cgroup and gets Slurm's signals itself), root as the task is, the task's
environment with the image's PATH (IMAGE_PATH) and without the build's PYTHONPATH and
LD_LIBRARY_PATH, its working directory, and each BIND (a host directory) at the same path, as
Apptainer binds /tmp, $HOME and $PWD and an admin's --bind."""
import json
import os
import sys

DROPPED = ("PYTHONPATH", "LD_LIBRARY_PATH", "PATH")


def bind(path):
    return {"destination": path, "type": "bind", "source": path, "options": ["rbind", "rw"]}


def config(rootfs, image_path, binds, cmd):
    env = [f"{k}={v}" for k, v in os.environ.items() if k not in DROPPED]
    return {
        "ociVersion": "1.0.2",
        "root": {"path": rootfs, "readonly": True},
        "process": {
            "terminal": False,
            "user": {"uid": os.getuid(), "gid": os.getgid()},
            "args": cmd,
            "env": env + [f"PATH={image_path}"],
            "cwd": os.getcwd(),
            "noNewPrivileges": False,
        },
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "bind", "source": "/dev", "options": ["rbind", "rw"]},
            {"destination": "/sys", "type": "bind", "source": "/sys", "options": ["rbind", "ro"]},
        ]
        + [bind(b) for b in binds],
        "linux": {"namespaces": [{"type": "mount"}]},
    }


def main(argv):
    if "--" not in argv or argv.index("--") < 2 or argv.index("--") == len(argv) - 1:
        sys.exit("usage: oci_config.py ROOTFS IMAGE_PATH BIND... -- CMD...")
    split = argv.index("--")
    rootfs, image_path, binds, cmd = argv[0], argv[1], argv[2:split], argv[split + 1 :]
    json.dump(config(rootfs, image_path, sorted(set(binds)), cmd), sys.stdout, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
