# Sourced by the container tests' scripts (tests/container): what they share about an image that
# make_image.sh made in LAYER. Each names the programs it runs by path: a task's PATH may be empty
# (host_requeue.sh).

# mount_image LAYER [--writable]: the image's files at LAYER/root, in the caller's own mount
# namespace: its base (the Debian 13 root, through a bind mount) under its layer (LAYER/upper),
# read-only; --writable: the layer takes the writes (make_image.sh).
mount_image() {
  local layer=$1 options="ro,lowerdir=$1/upper:$1/base"
  [ "${2:-}" != --writable ] || options="lowerdir=$layer/base,upperdir=$layer/upper,workdir=$layer/work"
  /usr/bin/mount --bind / "$layer/base"
  /usr/bin/mount -t overlay overlay -o "$options" "$layer/root"
}

# image_path LAYER: the PATH of the mounted image, from its /etc/environment (make_image.sh), where
# enroot reads an image's environment.
image_path() {
  local path
  path=$(/usr/bin/sed -n 's/^PATH=//p' "$1/root/etc/environment")
  echo "${path:?the image in $1 sets no PATH}"
}

# apptainer_binds TOP: the host directories bound at the same path where the program alone is in
# the image (oci-run, podman-run), as Apptainer binds them: its defaults (/tmp, the working
# directory) and an admin's --bind (the checkout TOP, MUNGE's socket, the checkpoint directory),
# in the array `binds`.
apptainer_binds() {
  binds=(/tmp /run/munge "$1" "$PWD")
  [ -z "${HYDRO_CKPT_DIR:-}" ] || binds+=("$HYDRO_CKPT_DIR")
}
