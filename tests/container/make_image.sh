#!/usr/bin/env bash
# The image of the container tests (issue 56): a root filesystem as an image built FROM the Debian
# 13 root would be. Its base is that root (mmdebstrap, with python3 and Debian's torch 2.6), read
# through a bind mount; its own layer, LAYER/upper, holds what the image adds and takes away:
#   - Slurm's client and daemons purged: no scontrol, srun or sbatch inside, as in pyxis's,
#     enroot's and Apptainer's images (pyxis#129, apptainer#1487);
#   - hydro installed by pip from this checkout, as a user's image gets it: a virtual environment,
#     /opt/hydro, that sees the base's torch (--system-site-packages), hydro-launch in its bin/;
#   - PyTorch Lightning from PyPI, at python/requirements.txt's versions (the wheels beside LAYER,
#     which scripts/setup fetches), its other requirements the base's (Debian's fsspec, PyYAML, tqdm);
#   - none of the tier's build: its hydro-build.pth removed.
# tests/container/enter runs a task in it: base and layer overlaid, read-only.
#   make_image.sh [--if-stale] LAYER   inside the Debian 13 root (scripts/debian13 run); pip's build
#                                      tools are the base's, Debian's scikit-build-core and pybind11.
#                                      --if-stale: only when a source that pip builds, this
#                                      script or the wheels' pins are newer than the image
#                                      (scripts/setup and scripts/test)
# About 2 minutes on the 2-CPU VM, most of it pip's build of hydro (3.5 with make's one job).
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
if_stale=
if [ "${1:-}" = --if-stale ]; then if_stale=1; shift; fi
layer=${1:?usage: make_image.sh [--if-stale] LAYER}
wheels=$(dirname "$layer")/wheels  # Lightning's, which scripts/setup fetches from PyPI
sources=(CMakeLists.txt pyproject.toml cmake runtime launcher python config tests/container)
[ -n "${HYDRO_IN_DEBIAN13:-}" ] || { echo "make_image.sh: run it inside the Debian 13 root (scripts/debian13 run)" >&2; exit 2; }

# The image's PATH, its venv first: in its /etc/environment, where enroot reads an image's
# environment (a Dockerfile's ENV lands there), and tests/container/enter too; and in
# /etc/profile.d, since enroot starts a login shell, and Debian's /etc/profile sets PATH anew.
image_path=/opt/hydro/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# in_layer CMD...: CMD in the image with its layer writable, in a mount namespace of this script's.
in_layer() { chroot "$layer/root" /usr/bin/env -u PYTHONPATH -u LD_LIBRARY_PATH PATH="$image_path" "$@"; }

if [ "${2:-}" != --mounted ]; then
  if [ -n "$if_stale" ] && [ -f "$layer/made" ] &&
    [ -z "$(cd "$top" && find "${sources[@]}" "$wheels/pins" -newer "$layer/made" -print -quit)" ]; then
    echo "== the image in $layer is up to date"
    exit 0
  fi
  rm -rf "$layer"
  mkdir -p "$layer"/{base,upper,work,root,oci}
  exec unshare --mount --propagation private -- "$0" "$layer" --mounted
fi
source "$top/tests/container/image.sh"
mount_image "$layer" --writable
mount -t proc proc "$layer/root/proc"
mount --rbind /dev "$layer/root/dev"
mount --bind "$top" "$layer/root$top"
[ ! -f /etc/resolv.conf ] || mount --bind /etc/resolv.conf "$layer/root/etc/resolv.conf"
echo "== the image: Slurm purged"
in_layer apt-get purge -y -q slurm-wlm slurmctld slurmd slurm-client >/dev/null
rm -f "$layer"/root/usr/local/lib/python3*/dist-packages/hydro-build.pth
! in_layer sh -c 'command -v scontrol srun sbatch' || { echo "make_image.sh: Slurm's client is still in the image" >&2; exit 1; }
echo "== the image: hydro by pip, in /opt/hydro"
in_layer /usr/bin/python3 -m venv --system-site-packages /opt/hydro
echo "PATH=$image_path" >"$layer/root/etc/environment"
echo "PATH=$image_path" >"$layer/root/etc/profile.d/hydro-venv.sh"
# With no Ninja in the root, scikit-build-core builds with make, one file at a time unless told.
in_layer env CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" /opt/hydro/bin/pip install --disable-pip-version-check -q --no-index \
  --no-build-isolation "$top" ||
  { echo "make_image.sh: pip install $top failed in the image" >&2; exit 1; }
echo "== the image: PyTorch Lightning, the wheels in $wheels"
compgen -G "$wheels/*.whl" >/dev/null || { echo "make_image.sh: no wheels in $wheels (run scripts/setup)" >&2; exit 1; }
mount --bind "$wheels" "$layer/root/mnt"
in_layer sh -c '/opt/hydro/bin/pip install --disable-pip-version-check -q --no-index --no-deps /mnt/*.whl' ||
  { echo "make_image.sh: pip install $wheels/*.whl failed in the image" >&2; exit 1; }
umount "$layer/root/mnt"
in_layer /opt/hydro/bin/python3 -c 'import hydro, torch, lightning; print("== the image: hydro", hydro.__file__, "torch", torch.__version__, "lightning", lightning.__version__)'
in_layer sh -c 'command -v hydro-launch' >/dev/null || { echo "make_image.sh: no hydro-launch on the image's PATH" >&2; exit 1; }
rm -rf "$layer/work"/*
touch "$layer/made"
