#!/usr/bin/env bash
# tests/softroce/run-in-vm.sh - run a command inside a throw-away Debian kernel
# booted under qemu-system-x86_64 (TCG, no KVM needed) with soft-RoCE (rdma_rxe)
# set up, so that real libibverbs / librdmacm programs (rFaaS's verbs backend,
# libfabric's verbs provider) can be tested on a host that has no RDMA support
# in its own kernel.
#
# rFaaS's copy of the team's softroce-vm tool, adapted for the project: the
# perftest / rdmacm-utils / ibverbs-utils packages are needed only by
# --selftest, apt lists are refreshed when no kernel package is known yet, and
# the kernel cache is shared with the original tool. See tests/softroce/README.md.
#
# The guest gets the host's /usr and /etc read-only over virtio-9p (so every
# host-installed program and library is usable unchanged), tmpfs for /tmp /run
# /var /root /home, and the current directory (or -C DIR) shared READ-WRITE at
# the same path.  The VM has no NIC to the outside (-nic none); all RDMA
# traffic stays on a veth pair inside the guest.
#
# Usage: run-in-vm.sh [options] [--] COMMAND [ARG...]
#        run-in-vm.sh --selftest
#        run-in-vm.sh --prepare
# See --help and tests/softroce/README.md.
set -euo pipefail

SELF_NAME=$(basename "$0")
VERSION_TAG=7   # part of the initramfs cache key (the key also hashes this file)

# ---------------------------------------------------------------- defaults
CACHE=${SOFTROCE_VM_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/softroce-vm}
KPKG=${SOFTROCE_VM_KERNEL_PKG:-}      # e.g. linux-image-6.1.0-56-amd64
MEM=${SOFTROCE_VM_MEM:-2048}
SMP=${SOFTROCE_VM_SMP:-2}
TIMEOUT=${SOFTROCE_VM_TIMEOUT:-600}
WORKDIR=$PWD
SHARE_CWD=rw
TWO=0
RXE=1
VERBOSE=0
MODE=run
KEEP_JOB=0
INTERACTIVE=0
ROWS=""
COLS=""
declare -a SHARES_RO=() SHARES_RW=() ENVS=()

# Guest-internal addresses (the VM has no NIC: these never leave the guest).
IP0=10.99.0.1
IP1=10.99.0.2

GUEST_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# kernel modules wanted (their dependencies are resolved from modules.dep)
# shellcheck disable=SC2206 # SOFTROCE_VM_EXTRA_MODULES is split on purpose
MODULES=(
  virtio_pci virtio_rng
  9pnet_virtio 9p
  veth
  crc32_pclmul crc32_generic
  rdma_rxe ib_uverbs rdma_ucm rdma_cm ib_cm iw_cm ib_umad
  ${SOFTROCE_VM_EXTRA_MODULES:-}
)

usage() {
  cat <<EOF
Usage: $SELF_NAME [options] [--] COMMAND [ARG...]
       $SELF_NAME [options] --selftest     boot, run RDMA smoke tests, power off
       $SELF_NAME --prepare                only download kernel / build initramfs

Boots a Debian kernel under qemu (TCG) with soft-RoCE, runs COMMAND as root in
the guest (cwd = current directory, shared read-write) and exits with its exit
status.  COMMAND's stdout+stderr (merged, via a tty) are streamed to stdout.

In the guest: veth pair eth0 ($IP0) <-> eth1 ($IP1), rxe0 on eth0.  A
single device talking to its own address works (client and server both use
$IP0).  With --two, rxe1 on eth1 as well; to really go rxe0 -> rxe1 a client
must bind its source address (rping -c -I $IP0 -a $IP1, ucmatose -b $IP0 -s
$IP1; verbs programs pick the device with -d).  Env in the guest:
SOFTROCE_IP=$IP0 SOFTROCE_PEER_IP=$IP1 SOFTROCE_DEV=rxe0 SOFTROCE_NETDEV=eth0.

Options:
  -C DIR          working directory to share read-write and cd into (default: .)
  --ro            share the working directory read-only
  --no-cwd        do not share the working directory (cd / in the guest)
  --share DIR     extra host directory, read-only, same path (repeatable)
  --share-rw DIR  extra host directory, read-write, same path (repeatable)
  -e VAR=VALUE    environment variable for COMMAND (repeatable)
  --two           also create rxe1 on eth1 (peer address $IP1)
  --no-rxe        do not create any rxe device (modules still loaded)
  --mem MB        guest memory (default $MEM)
  --smp N         guest CPUs (default $SMP)
  --timeout SEC   kill the VM after SEC seconds (default $TIMEOUT); exit 124
  -i              interactive: COMMAND gets the host terminal (e.g. -i bash);
                  Ctrl-C goes to the guest, exit the shell to power off
  -v              also stream the guest kernel console to stderr
  --keep          keep the job directory (console.log, out) and print its path
  -h, --help      this help

Environment: SOFTROCE_VM_CACHE (cache dir, default ~/.cache/softroce-vm),
SOFTROCE_VM_KERNEL_PKG (Debian kernel package, default: what linux-image-amd64
depends on), SOFTROCE_VM_MEM, SOFTROCE_VM_SMP, SOFTROCE_VM_TIMEOUT,
SOFTROCE_VM_NO_INSTALL=1 (never apt-get install missing host packages),
SOFTROCE_VM_ACCEL=tcg|kvm (default: kvm if /dev/kvm is usable, else tcg; a KVM
that aborts or shows no sign of life within SOFTROCE_VM_KVM_DEADLINE seconds,
default 30, is replaced by TCG, announced in one line; a TCG guest silent for
SOFTROCE_VM_TCG_DEADLINE seconds, default 90, is started once more),
SOFTROCE_VM_KVM_ARGS="..." (extra qemu arguments for the KVM attempt only),
SOFTROCE_VM_KVM_ACCEL (accelerator of the "KVM attempt", default kvm; tests of
the fallback set it to tcg together with SOFTROCE_VM_KVM_ARGS=-S, a guest that
never starts),
SOFTROCE_VM_EXTRA_MODULES="mod ..." (more kernel modules for the initramfs),
SOFTROCE_VM_BZIMAGE=1 (boot the compressed bzImage instead of the PVH vmlinux).

Exit status: COMMAND's status; 124 timeout; 125 VM/setup failure (see console).
EOF
}

die() { echo "$SELF_NAME: error: $*" >&2; exit 125; }
note() { echo "$SELF_NAME: $*" >&2; }

# ---------------------------------------------------------------- args
while [[ $# -gt 0 ]]; do
  case $1 in
    -C) WORKDIR=$2; shift 2 ;;
    --ro) SHARE_CWD=ro; shift ;;
    --no-cwd) SHARE_CWD=none; shift ;;
    --share) SHARES_RO+=("$2"); shift 2 ;;
    --share-rw) SHARES_RW+=("$2"); shift 2 ;;
    -e) [[ $2 == *=* ]] || die "-e needs VAR=VALUE"; ENVS+=("$2"); shift 2 ;;
    --two) TWO=1; shift ;;
    --no-rxe) RXE=0; shift ;;
    --mem) MEM=$2; shift 2 ;;
    --smp) SMP=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    -v) VERBOSE=1; shift ;;
    -i) INTERACTIVE=1; shift ;;
    --keep) KEEP_JOB=1; shift ;;
    --prepare) MODE=prepare; shift ;;
    --selftest) MODE=selftest; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) break ;;
  esac
done
if [[ $MODE == run && $# -eq 0 ]]; then usage >&2; exit 125; fi

# ---------------------------------------------------------------- host deps
ensure_host_deps() {
  local pkgs=()
  command -v qemu-system-x86_64 >/dev/null || pkgs+=(qemu-system-x86)
  command -v cpio >/dev/null || pkgs+=(cpio)
  command -v depmod >/dev/null || pkgs+=(kmod)
  command -v rdma >/dev/null || pkgs+=(iproute2)
  command -v xz >/dev/null || pkgs+=(xz-utils)
  [[ -x /bin/busybox ]] && ! ldd /bin/busybox >/dev/null 2>&1 || pkgs+=(busybox-static)
  [[ -e /etc/libibverbs.d/rxe.driver ]] || pkgs+=(ibverbs-providers rdma-core)
  if [[ $MODE == selftest ]]; then  # the selftest's client/server pairs
    command -v ibv_devinfo >/dev/null || pkgs+=(ibverbs-utils)
    command -v rping >/dev/null || pkgs+=(rdmacm-utils)
    command -v ib_write_lat >/dev/null || pkgs+=(perftest)
  fi
  [[ ${#pkgs[@]} -eq 0 ]] && return 0
  if [[ $(id -u) -eq 0 && -z ${SOFTROCE_VM_NO_INSTALL:-} ]]; then
    note "installing missing host packages: ${pkgs[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${pkgs[@]}" >&2 \
      || { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${pkgs[@]}" >&2; } \
      || die "apt-get install ${pkgs[*]} failed"
  else
    die "missing host packages; run: apt-get install --no-install-recommends ${pkgs[*]}"
  fi
}

# ---------------------------------------------------------------- kernel + initramfs
pick_kernel_pkg() {
  if [[ -n $KPKG ]]; then echo "$KPKG"; return; fi
  local p
  p=$(apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*-amd64\)$/\1/p' | head -1)
  if [[ -z $p ]]; then
    p=$(apt-cache search --names-only '^linux-image-[0-9.]+-[0-9]+-amd64$' 2>/dev/null | awk '{print $1}' | sort -V | tail -1)
  fi
  if [[ -z $p && $(id -u) -eq 0 && -z ${SOFTROCE_VM_NO_INSTALL:-} && -z ${APT_UPDATED:-} ]]; then
    # A fresh machine may have no package lists yet.
    apt-get update >&2 || true
    APT_UPDATED=1 pick_kernel_pkg
    return
  fi
  [[ -n $p ]] || die "cannot find a Debian linux-image-*-amd64 package (run apt-get update?)"
  echo "$p"
}

write_init() { # $1 = file
  cat >"$1" <<'INIT'
#!/bb/sh
# init of the softroce-vm initramfs (busybox ash). Kernel console = ttyS0,
# command output = ttyS1, job directory = 9p tag "job".
export PATH=/bb
log() { echo "softroce-vm-init: $*"; }
fail() { log "FATAL: $*"; echo 125 >/job/rc 2>/dev/null; sync; poweroff -f; sleep 5; echo o >/proc/sysrq-trigger; }
mount -t proc proc /proc
# The host's runner waits for this line to know the guest is alive (a KVM that
# cannot run the guest shows nothing at all, and is then replaced by TCG).
log "started at uptime $(cut -d' ' -f1 /proc/uptime)s"
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
T0=$(cut -d' ' -f1 /proc/uptime)
# no module tree in the guest: log any module the kernel tries to autoload
echo /bb/modreq >/proc/sys/kernel/modprobe
while read -r m; do insmod "/modules/$m" || log "insmod $m failed"; done </modules/order
Tm=$(cut -d' ' -f1 /proc/uptime)
mkdir -p /job
O9P=trans=virtio,version=9p2000.L,msize=262144
mount -t 9p -o "$O9P" job /job || fail "cannot mount job share"
# links: "name target" (e.g. bin usr/bin), shares: "tag mode cache path"
while read -r n t; do [ -n "$n" ] && ln -s "$t" "/$n"; done </job/links
mkdir -p /usr /etc /tmp /run /var /root /home /mnt
while read -r tag mode cache path; do
  case "$tag" in sys*) ;; *) continue ;; esac
  mkdir -p "$path"
  mount -t 9p -o "$O9P,$mode,cache=$cache" "$tag" "$path" || fail "cannot mount $tag at $path"
done </job/shares
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs -o mode=755 tmpfs /run
mount -t tmpfs -o mode=755 tmpfs /var
mount -t tmpfs -o mode=700 tmpfs /root
mount -t tmpfs -o mode=755 tmpfs /home
mkdir -p /var/tmp /var/lib /var/log /run/lock /run/netns && chmod 1777 /var/tmp && ln -s ../run /var/run
while read -r tag mode cache path; do
  case "$tag" in u*) ;; *) continue ;; esac
  mkdir -p "$path"
  mount -t 9p -o "$O9P,$mode,cache=$cache" "$tag" "$path" || fail "cannot mount $tag at $path"
done </job/shares
# network + rxe setup runs under the host's /bin/sh so that the host's iproute2
# (ip, rdma) is used and not busybox applets (busybox ash prefers applets).
Ts=$(cut -d' ' -f1 /proc/uptime)
hostname softroce-vm
/bin/sh /setup.sh || fail "network/rdma setup failed"
T1=$(cut -d' ' -f1 /proc/uptime)
log "ready: uptime ${T1}s (init ${T0}s, modules loaded ${Tm}s, mounts done ${Ts}s)"
. /job/config
if [ "$INTERACTIVE" = 1 ]; then
  # ttyS1 is the host terminal: cooked mode, job control, host's size
  # (the window size is lost when the tty is closed: set it while open)
  stty -F /dev/ttyS1 sane
  setsid -c /bb/sh -c '[ -n "$1" ] && stty rows "$1" cols "$2"; exec env -i /bin/sh /job/cmd.sh' \
    sh "$ROWS" "$COLS" <>/dev/ttyS1 >&0 2>&1
else
  # ttyS1 is a file on the host: raw, so output is byte-exact (no \r\n)
  stty -F /dev/ttyS1 raw -echo
  setsid /bb/sh -c 'exec env -i /bin/sh /job/cmd.sh </dev/null >/dev/ttyS1 2>&1'
fi
rc=$?
T2=$(cut -d' ' -f1 /proc/uptime)
log "command exited with $rc at uptime ${T2}s"
echo "$rc" >/job/rc
echo "boot_to_ready_s=$T1 command_end_s=$T2" >/job/times
sync
poweroff -f
sleep 5
echo o >/proc/sysrq-trigger
INIT
  chmod 755 "$1"
}

write_setup() { # $1 = file; run by the host's /bin/sh inside the guest
  cat >"$1" <<'SETUP'
set -e
. /job/config
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
fail() { echo "softroce-vm-setup: FATAL: $*"; exit 1; }
# A veth pair, both ends in the initial netns (rdma_rxe in 6.1 only works in
# init_net).  Policy routing makes traffic between the two local addresses
# really cross the veth "wire" (instead of short-cutting through lo, which rxe
# drops), so rxe0 <-> rxe1 works; a single device talking to its own address
# uses rxe's internal loopback.  (One ip -batch: every exec costs ~0.1 s here.)
echo 1 >/proc/sys/net/ipv4/conf/all/accept_local
echo 1 >/proc/sys/net/ipv4/conf/default/accept_local
echo 0 >/proc/sys/net/ipv4/conf/all/rp_filter
echo 0 >/proc/sys/net/ipv4/conf/default/rp_filter
ip -batch - <<EOF
link set lo up
link add eth0 type veth peer name eth1
addr add $IP0/32 dev eth0
addr add $IP1/32 dev eth1
link set eth0 up
link set eth1 up
route add $IP1/32 dev eth0 src $IP0
route add $IP0/32 dev eth1 src $IP1
rule add pref 10 iif lo from $IP0 to $IP1 lookup main
rule add pref 11 iif lo from $IP1 to $IP0 lookup main
rule add pref 100 lookup local
rule del pref 0 lookup local
EOF
if [ "$RXE" = 1 ]; then
  rdma link add rxe0 type rxe netdev eth0 || fail "rdma link add rxe0"
  if [ "$TWO" = 1 ]; then
    rdma link add rxe1 type rxe netdev eth1 || fail "rdma link add rxe1"
  fi
  for d in /sys/class/infiniband/rxe*; do
    i=0
    while read -r st <"$d/ports/1/state"; [ "$st" != "4: ACTIVE" ]; do
      i=$((i+1)); [ $i -gt 100 ] && fail "$d port not ACTIVE"; sleep 0.1
    done
  done
fi
exit 0
SETUP
}

# The bzImage decompresses itself (xz) in ~3.5 s under TCG; an uncompressed
# ELF vmlinux with a PVH entry note boots directly (qemu -kernel, PVH boot).
extract_vmlinux() { # bzImage out
  local off
  off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$1" | head -1 | cut -d: -f1)
  if [[ -n $off ]] && command -v xz >/dev/null; then
    tail -c +$((off + 1)) "$1" | xz -dc --single-stream -q >"$2" 2>/dev/null || true
  fi
  if [[ ! -s $2 ]]; then
    off=$(LC_ALL=C grep -obUaP '\x28\xb5\x2f\xfd' "$1" | head -1 | cut -d: -f1)
    if [[ -n $off ]] && command -v zstd >/dev/null; then
      tail -c +$((off + 1)) "$1" | zstd -dcq >"$2" 2>/dev/null || true
    fi
  fi
  [[ -s $2 && $(head -c 4 "$2" | od -An -tx1 | tr -d ' ') == 7f454c46 ]] || return 1
  # PVH entry = Xen ELF note type 18 (XEN_ELFNOTE_PHYS32_ENTRY)
  if command -v readelf >/dev/null; then
    LC_ALL=C readelf -n "$2" 2>/dev/null | grep -q 'Xen.*(0x00000012)' || return 1
  fi
  return 0
}

prepare() {
  ensure_host_deps
  local pkg; pkg=$(pick_kernel_pkg)
  local kver=${pkg#linux-image-}
  local init_tmp; init_tmp=$(mktemp); write_init "$init_tmp"
  local key; key=$( { cat "$0"; printf '%s\n' "${MODULES[@]}" "$VERSION_TAG"; } | sha256sum | cut -c1-12)
  KDIR=$CACHE/$kver
  VMLINUZ=$KDIR/vmlinuz
  INITRD=$KDIR/initrd-$key.cpio
  if [[ -s $VMLINUZ && -s $INITRD ]]; then
    rm -f "$init_tmp"
    KERNEL_IMG=$VMLINUZ; [[ -s $KDIR/vmlinux && -z ${SOFTROCE_VM_BZIMAGE:-} ]] && KERNEL_IMG=$KDIR/vmlinux
    return 0
  fi
  note "preparing kernel $pkg + initramfs in $KDIR (one-time)"
  mkdir -p "$KDIR"
  local tmp; tmp=$(mktemp -d "$CACHE/build.XXXXXX")
  BUILD_TMP="$tmp $init_tmp"
  trap 'rm -rf $BUILD_TMP' EXIT
  local deb; deb=$(ls "$KDIR"/"$pkg"_*.deb 2>/dev/null | head -1 || true)
  if [[ -z $deb ]]; then
    (cd "$tmp" && apt-get download "$pkg" 2>&1 | grep -v '^W: Download is performed unsandboxed' >&2) \
      || die "apt-get download $pkg failed"
    deb=$(ls "$tmp"/"$pkg"_*.deb | head -1) || die "no .deb for $pkg"
    mv "$deb" "$KDIR/"; deb=$KDIR/$(basename "$deb")
  fi
  dpkg -x "$deb" "$tmp/k"
  local modver; modver=$(ls "$tmp/k/lib/modules" | head -1)
  depmod -b "$tmp/k" "$modver"
  local root=$tmp/initramfs
  mkdir -p "$root"/{bb,modules,proc,sys,dev,job,usr,etc,tmp,run,var,root,home,mnt}
  cp /bin/busybox "$root/bb/busybox"
  local a
  for a in $("$root/bb/busybox" --list); do [[ $a == busybox ]] || ln -s busybox "$root/bb/$a"; done
  cp "$init_tmp" "$root/init"; chmod 755 "$root/init"
  write_setup "$root/setup.sh"
  printf '#!/bb/sh\necho "softroce-vm: kernel asked for module: $*" >/dev/kmsg\nexit 1\n' >"$root/bb/modreq"
  chmod 755 "$root/bb/modreq"
  local m line f seen=" "
  : >"$root/modules/order"
  local deps
  for m in "${MODULES[@]}"; do
    if grep -qE "/${m//_/[_-]}\.ko" "$tmp/k/lib/modules/$modver/modules.builtin" 2>/dev/null; then continue; fi
    deps=$(modprobe -d "$tmp/k" -S "$modver" --show-depends "$m" 2>&1) || die "module $m not found in $pkg: $deps"
    while read -r line; do
      [[ $line == insmod\ * ]] || continue
      f=${line#insmod }; f=${f%% *}
      [[ $seen == *" $f "* ]] && continue
      seen+="$f "
      cp "$f" "$root/modules/"
      basename "$f" >>"$root/modules/order"
    done <<<"$deps"
  done
  cp "$tmp/k/boot/vmlinuz-$modver" "$VMLINUZ.tmp"
  extract_vmlinux "$VMLINUZ.tmp" "$KDIR/vmlinux.tmp" && mv "$KDIR/vmlinux.tmp" "$KDIR/vmlinux" || rm -f "$KDIR/vmlinux.tmp"
  (cd "$root" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet -R 0:0) >"$INITRD.tmp"
  rm -f "$KDIR"/initrd-*.cpio
  mv "$VMLINUZ.tmp" "$VMLINUZ"; mv "$INITRD.tmp" "$INITRD"
  echo "$pkg" >"$KDIR/package"
  tr '\n' ' ' <"$root/modules/order" >"$KDIR/modules.txt"
  note "kernel $modver, modules: $(cat "$KDIR/modules.txt")"
  rm -rf $BUILD_TMP; BUILD_TMP=""; trap - EXIT
  KERNEL_IMG=$VMLINUZ; [[ -s $KDIR/vmlinux && -z ${SOFTROCE_VM_BZIMAGE:-} ]] && KERNEL_IMG=$KDIR/vmlinux
}

# ---------------------------------------------------------------- run
q() { printf "'%s'" "${1//\'/\'\\\'\'}"; }   # single-quote for sh

selftest_script() {
  cat <<'EOF'
set -u
ok=0; bad=0
now() { cut -d' ' -f1 /proc/uptime; }
step() { name=$1; shift; echo "=== $name: $*"; s=$(now)
  if "$@"; then r=0; ok=$((ok+1)); else r=$?; bad=$((bad+1)); fi
  echo "=== $name: rc=$r ($(awk -v a="$s" -v b="$(now)" 'BEGIN{printf "%.2f", b-a}')s)"; }
# Servers need a while to start under TCG: wait until one listens (a TCP port
# in LISTEN, e.g. perftest's 18515, or an rdma_cm id in LISTEN) before starting
# a client; a fixed "sleep 1" races.
wait_listen() {
  i=0
  while [ $i -lt 300 ]; do
    cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk '$4 == "0A" {f=1} END {exit !f}' && return 0
    rdma res show cm_id 2>/dev/null | grep -q LISTEN && return 0
    sleep 0.1; i=$((i+1))
  done
  echo "no listener after 30 s"; return 1
}
pair() { # "server cmd" "client cmd": both with a 60 s timeout
  timeout 60 sh -c "$1" & sp=$!; wait_listen
  timeout 60 sh -c "$2"; cr=$?; wait $sp; srr=$?; [ $cr = 0 ] && [ $srr = 0 ]; }
IP=$SOFTROCE_IP; IP1=$SOFTROCE_PEER_IP
uname -r; rdma link show
step ibv_devices ibv_devices
step ibv_devinfo ibv_devinfo -d rxe0
step rping pair "rping -s -a $IP -v -C 3" "rping -c -a $IP -v -C 3"
step ucmatose pair "ucmatose -b $IP -C 3" "ucmatose -s $IP -C 3"
step ib_write_lat pair "ib_write_lat -d rxe0 -n 1000" "ib_write_lat -d rxe0 -n 1000 $IP"
step ib_send_lat pair "ib_send_lat -d rxe0 -n 1000" "ib_send_lat -d rxe0 -n 1000 $IP"
step ib_write_lat_rdma_cm pair "ib_write_lat -d rxe0 -R -n 1000" "ib_write_lat -d rxe0 -R -n 1000 $IP"
step ib_write_bw pair "ib_write_bw -d rxe0 -n 1000" "ib_write_bw -d rxe0 -n 1000 $IP"
step ibv_rc_pingpong pair "ibv_rc_pingpong -d rxe0 -g 1 -n 1000" "ibv_rc_pingpong -d rxe0 -g 1 -n 1000 $IP"
if [ -e /sys/class/infiniband/rxe1 ]; then
  step rping_rxe0_to_rxe1 pair "rping -s -a $IP1 -v -C 3" "rping -c -I $IP -a $IP1 -v -C 3"
  step ucmatose_rxe0_to_rxe1 pair "ucmatose -b $IP1 -C 3" "ucmatose -b $IP -s $IP1 -C 3"
  step ib_send_lat_rxe0_to_rxe1 pair "ib_send_lat -d rxe1 -n 1000" "ib_send_lat -d rxe0 -n 1000 $IP1"
  step ib_write_bw_rxe0_to_rxe1 pair "ib_write_bw -d rxe1 -n 1000" "ib_write_bw -d rxe0 -n 1000 $IP1"
fi
for d in /sys/class/infiniband/*; do
  echo "$(basename $d): sent_pkts=$(cat $d/ports/1/hw_counters/sent_pkts) rcvd_pkts=$(cat $d/ports/1/hw_counters/rcvd_pkts)"
done
echo "selftest: $ok passed, $bad failed"
[ $bad = 0 ]
EOF
}

run_vm() {
  prepare
  local job; job=$(mktemp -d "${TMPDIR:-/tmp}/softroce-vm.XXXXXX")
  [[ $job == *[,:\ ]* ]] && die "job dir path $job contains , : or space"
  QPID="" TPID="" CPID="" JOB=$job
  cleanup() {
    local p
    for p in ${TPID:-} ${CPID:-}; do kill "$p" 2>/dev/null || true; done
    [[ -n ${QPID:-} ]] && kill "$QPID" 2>/dev/null || true
    if [[ $KEEP_JOB == 1 ]]; then note "job dir kept: $JOB"; else rm -rf "$JOB"; fi
  }
  trap cleanup EXIT
  trap 'exit 130' INT TERM

  local -a qargs=()
  local n=0 tag
  esc() { printf '%s' "${1//,/,,}"; }
  add_share() { # kind(sys|u) mode(ro|rw) cache path
    local p; p=$(cd "$4" 2>/dev/null && pwd -P) || die "cannot share $4: not a directory"
    tag=$1$n; n=$((n+1))
    local ro=""; [[ $2 == ro ]] && ro=",readonly=on"
    qargs+=(-virtfs "local,path=$(esc "$p"),mount_tag=$tag,security_model=none,multidevs=remap$ro")
    echo "$tag $2 $3 $p" >>"$job/shares"
    # also mount at the logical path if it differs (symlinked dirs)
    if [[ $4 == /* && $(realpath -s "$4") != "$p" ]]; then
      echo "$tag $2 $3 $(realpath -s "$4")" >>"$job/shares"
    fi
  }
  : >"$job/shares"; : >"$job/links"
  local d
  for d in bin sbin lib lib32 lib64 libx32; do
    if [[ -L /$d ]]; then echo "$d $(readlink "/$d")" >>"$job/links"
    elif [[ -d /$d ]]; then add_share sys ro loose "/$d"; fi
  done
  add_share sys ro loose /usr
  add_share sys ro loose /etc
  # user shares, parents before children
  local -a ulist=()
  local p
  for d in "${SHARES_RO[@]}"; do p=$(cd "$d" 2>/dev/null && pwd -P) || die "--share $d: not a directory"; ulist+=("ro $p"); done
  for d in "${SHARES_RW[@]}"; do p=$(cd "$d" 2>/dev/null && pwd -P) || die "--share-rw $d: not a directory"; ulist+=("rw $p"); done
  local cwd=/
  if [[ $SHARE_CWD != none ]]; then
    cwd=$(cd "$WORKDIR" 2>/dev/null && pwd -P) || die "-C $WORKDIR: not a directory"
    case $cwd in /|/usr|/usr/*|/etc|/etc/*) die "refusing to share $cwd as working directory (use --no-cwd)";; esac
    ulist+=("$SHARE_CWD $cwd")
  fi
  local line
  while read -r line; do
    [[ -n $line ]] || continue
    add_share u "${line%% *}" mmap "${line#* }"
  done < <(printf '%s\n' "${ulist[@]}" | awk '{print length($0)-3, $0}' | sort -n | cut -d' ' -f2-)

  cat >"$job/config" <<EOF
IP0=$IP0
IP1=$IP1
RXE=$RXE
TWO=$TWO
INTERACTIVE=$INTERACTIVE
ROWS=$ROWS
COLS=$COLS
EOF
  {
    local term=dumb; [[ $INTERACTIVE == 1 ]] && term=${TERM:-vt100}
    echo "export PATH=$(q "$GUEST_PATH") HOME=/root TERM=$(q "$term") LANG=C.UTF-8 USER=root LOGNAME=root"
    echo "export SOFTROCE_IP=$IP0 SOFTROCE_PEER_IP=$IP1 SOFTROCE_DEV=rxe0 SOFTROCE_NETDEV=eth0"
    local e
    for e in "${ENVS[@]}"; do echo "export ${e%%=*}=$(q "${e#*=}")"; done
    echo "cd $(q "$cwd") || exit 126"
    if [[ $MODE == selftest ]]; then
      selftest_script
    else
      printf 'exec'; local a; for a in "$@"; do printf ' %s' "$(q "$a")"; done; echo
    fi
  } >"$job/cmd.sh"
  : >"$job/out"; : >"$job/console.log"
  if [[ $INTERACTIVE == 1 && -t 0 ]]; then
    local sz; sz=$(stty size 2>/dev/null || true)
    [[ -n $sz ]] && { ROWS=${sz% *}; COLS=${sz#* }; sed -i "s/^ROWS=.*/ROWS=$ROWS/; s/^COLS=.*/COLS=$COLS/" "$job/config"; }
  fi

  # tsc=reliable: under TCG the kernel otherwise marks the TSC unstable and
  # falls back to hpet, which makes gettimeofday slow and jittery (perftest's
  # cycles-vs-time calibration then fails with "r^2 < 0.9").
  local append="console=ttyS0 panic=-1 quiet loglevel=4 8250.nr_uarts=2 mitigations=off nokaslr tsc=reliable"
  local accel=${SOFTROCE_VM_ACCEL:-}
  if [[ -z $accel ]]; then accel=tcg; [[ -r /dev/kvm && -w /dev/kvm ]] && accel=kvm; fi
  local t0; t0=$(date +%s.%N)
  qemu_cmd() { # accelerator, cpu model, extra qemu arguments...
    QEMU=(timeout --foreground -k 5 "$TIMEOUT" qemu-system-x86_64
      -machine pc -accel "$1" -cpu "$2" -smp "$SMP" -m "$MEM"
      -nodefaults -no-user-config -display none -no-reboot -nic none
      -kernel "$KERNEL_IMG" -initrd "$INITRD" -append "$append"
      -serial "file:$job/console.log"
      -device virtio-rng-pci
      -virtfs "local,path=$job,mount_tag=job,security_model=none,multidevs=remap"
      "${qargs[@]}" "${@:3}")
  }
  start_vm() { # same arguments as qemu_cmd; runs it in the background
    : >"$job/out"; : >"$job/console.log"; rm -f "$job/rc" "$job/times"
    qemu_cmd "$@"
    "${QEMU[@]}" -serial "file:$job/out" </dev/null >"$job/qemu.log" 2>&1 &
    QPID=$!
    tail -n +1 -s 0.2 -f --pid="$QPID" "$job/out" & TPID=$!
    if [[ $VERBOSE == 1 ]]; then tail -n +1 -s 0.2 -f --pid="$QPID" "$job/console.log" >&2 & CPID=$!; fi
  }
  stop_vm() {
    local p
    for p in ${QPID:-} ${TPID:-} ${CPID:-}; do kill "$p" 2>/dev/null || true; done
    for p in ${QPID:-} ${TPID:-} ${CPID:-}; do wait "$p" 2>/dev/null || true; done
    QPID="" TPID="" CPID=""
  }
  # wait_for_life DEADLINE: 0 once the guest's init printed its first line;
  # 1 with `why` set when qemu exited first (its status in qrc, QPID cleared)
  # or the deadline passed.
  wait_for_life() {
    local deadline=$1 waited=0
    why=""
    while :; do
      if grep -aq 'softroce-vm-init' "$job/console.log" 2>/dev/null; then return 0; fi
      if ! kill -0 "$QPID" 2>/dev/null; then
        qrc=0; wait "$QPID" 2>/dev/null || qrc=$?
        QPID=""
        why="qemu exited with status $qrc: $(grep -av '^\s*$' "$job/qemu.log" | tail -n 1)"
        return 1
      fi
      if ((waited >= deadline * 10)); then
        why="no sign of life from the guest within ${deadline} s"
        return 1
      fi
      sleep 0.1; waited=$((waited + 1))
    done
  }
  local qrc=0 why=""
  if [[ $INTERACTIVE == 1 ]]; then
    local cpu=max; [[ $accel == kvm ]] && cpu=host
    qemu_cmd "$accel" "$cpu"
    if [[ $VERBOSE == 1 ]]; then tail -n +1 -s 0.2 -f "$job/console.log" >&2 & CPID=$!; fi
    "${QEMU[@]}" -chardev stdio,id=io,signal=off -serial chardev:io 2>"$job/qemu.log" || qrc=$?
  else
    if [[ $accel == kvm ]]; then
      # A /dev/kvm that exists does not mean KVM can run this guest: on nested
      # hosts qemu aborts at once (kvm_buf_set_msrs assertion) or the guest
      # hangs before its first line. Either way, fall back to TCG instead of
      # failing the run: the init's first console line is the sign of life.
      local deadline=${SOFTROCE_VM_KVM_DEADLINE:-30}
      # shellcheck disable=SC2206 # extra arguments are split on purpose
      local -a kvm_extra=(${SOFTROCE_VM_KVM_ARGS:-})
      local kvm_accel=${SOFTROCE_VM_KVM_ACCEL:-kvm}
      local kvm_cpu=host; [[ $kvm_accel == kvm ]] || kvm_cpu=max
      start_vm "$kvm_accel" "$kvm_cpu" "${kvm_extra[@]}"
      if ! wait_for_life "$deadline"; then
        stop_vm
        cp "$job/qemu.log" "$job/qemu-kvm.log" 2>/dev/null || true
        note "KVM did not bring the guest up ($why); falling back to TCG"
        accel=tcg qrc=0
        start_vm tcg max
      fi
    else
      start_vm "$accel" max
    fi
    # A TCG guest that stays silent (seen once in CI: no console line in
    # 120 s, where it boots in seconds; the same run passed at once when
    # repeated) is started once more instead of failing the run.
    if [[ $accel == tcg ]]; then
      local tcg_deadline=${SOFTROCE_VM_TCG_DEADLINE:-90}
      if ! wait_for_life "$tcg_deadline" && [[ -n $QPID ]]; then
        stop_vm
        note "the guest under TCG showed no sign of life within ${tcg_deadline} s; starting it once more"
        qrc=0
        start_vm tcg max
      fi
    fi
    if [[ -n $QPID ]]; then wait "$QPID" || qrc=$?; fi
    QPID=""
  fi
  wait "$TPID" 2>/dev/null || true; TPID=""
  if [[ -n $CPID ]]; then
    [[ $INTERACTIVE == 1 ]] && { sleep 0.3; kill "$CPID" 2>/dev/null || true; }
    wait "$CPID" 2>/dev/null || true; CPID=""
  fi
  local t1; t1=$(date +%s.%N)
  local rc
  if [[ -s $job/rc ]]; then
    rc=$(cat "$job/rc")
  elif [[ $qrc == 124 || $qrc == 137 ]]; then
    note "timeout after ${TIMEOUT}s; last console lines:"; tail -n 20 "$job/console.log" >&2; rc=124
  else
    note "VM ended without a result (qemu rc=$qrc); qemu log / last console lines:"
    tail -n 5 "$job/qemu.log" >&2; tail -n 30 "$job/console.log" >&2; rc=125
  fi
  if [[ $rc == 125 && $VERBOSE == 0 ]]; then grep -a 'softroce-vm-init' "$job/console.log" >&2 || true; fi
  local times=""; [[ -s $job/times ]] && times=$(cat "$job/times")
  note "exit=$rc accel=$accel wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')s $times"
  exit "$rc"
}

case $MODE in
  prepare) prepare; note "ready: $KERNEL_IMG $INITRD" ;;
  selftest) TWO=1; run_vm ;;
  run) run_vm "$@" ;;
esac
