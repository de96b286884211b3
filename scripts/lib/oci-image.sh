# shellcheck shell=bash
# Sourced by the scripts that run executors in the oci and command sandbox
# kinds on this host (tests/sandbox/escape_test.sh,
# benchmarks/run-sandbox-benchmarks.sh).
#
# oci_podman: podman as these machines need it (runc: crun refuses hybrid
#   cgroups; cgroupfs: no systemd to manage the groups).
#
# oci_usable: returns 1 and says why on stdout when podman cannot run
#   executors here (not root, podman or runc missing).
#
# oci_make_image WORKDIR NAME
#   Builds image NAME offline (podman import, no registry): a skeleton root
#   with the links into /usr and empty mount points, nothing else. The host's
#   /usr and the executor's directories are bound read-only when it runs
#   (executor.oci.host_code, and the binds of config/sandbox/podman-command.json).
#   Returns 1 when podman cannot import it.
oci_podman=(podman --runtime runc --cgroup-manager=cgroupfs)

oci_usable() {
  if [[ $(id -u) -ne 0 ]]; then
    echo "needs root (podman makes the executor's cgroups and namespaces)"
    return 1
  fi
  local tool
  for tool in podman runc; do
    if ! command -v "$tool" >/dev/null; then
      echo "needs $tool (Debian package $tool)"
      return 1
    fi
  done
}

oci_make_image() {
  local work=$1 name=$2 d
  mkdir -p "$work/rootfs"/{usr,etc,tmp,dev,proc,sys,run} || return 1
  for d in bin sbin lib lib32 lib64 libx32; do
    [[ -L /$d ]] && ln -sfn "$(readlink "/$d")" "$work/rootfs/$d"
  done
  tar -C "$work/rootfs" -cf "$work/rootfs.tar" . &&
    "${oci_podman[@]}" import -q "$work/rootfs.tar" "$name" >/dev/null
}
