#!/usr/bin/env bash
# Proves an edgevit .deb as installed, without changing this machine (tools/package.sh calls it; CI runs it
# as root): in a private mount namespace (unshare -m), /etc, /usr and /var become overlays whose writes go
# to a tmpfs, so dpkg, the maintainer scripts, systemd-sysusers and systemd-tmpfiles run for real against
# the real system and everything they do is thrown away at the end. Cheaper than a debootstrap chroot
# (seconds, nothing downloaded) and it runs the package's own postinst/postrm; the overlays' upper layers
# also show exactly what the package left behind after the purge.
#   1. dpkg -i; the user, group, /var/spool/edgevit and the conffile exist
#   2. systemd-analyze verify edgevitd.service; edgevitd --check --config /etc/edgevit/edgevitd.yaml as the
#      service user
#   3. edgevitd (the unit's ExecStart, as the service user, the socket under a temporary directory: systemd
#      is not PID 1 here) classifies digit-7.png through `edgevit client`; SIGTERM stops it with status 0
#   4. dpkg --purge; nothing is left but the user and group (Debian's practice, tools/cmake/deb/postrm),
#      dpkg's own records and the loader cache
# The source tree is hidden (an empty tmpfs over it) while the package runs, so nothing is found there.
# Usage: tools/deb_install_test.sh PACKAGE.deb        (root; Linux with overlayfs)
#   env EDGEVIT_DEBTEST_CUDA_LIBS=DIR[:DIR]  a CUDA build on a machine whose CUDA toolkit is not installed
#       from packages: dpkg's check of the CUDA Depends (cuda-cudart-X-Y, libcublas-X-Y) is forced and the
#       programs find the CUDA libraries through LD_LIBRARY_PATH=DIR (tools/package.sh passes the build's)
set -euo pipefail
if [ "${1:-}" != --inside ]; then
  [ $# -eq 1 ] && [ -f "$1" ] || { echo "usage: $0 PACKAGE.deb" >&2; exit 2; }
  [ "$(id -u)" -eq 0 ] || { echo "deb_install_test: needs root (dpkg, mount namespaces)" >&2; exit 2; }
  scratch=$(mktemp -d /tmp/edgevit-debtest.XXXXXX)  # a mount point inside the namespace, empty outside
  rc=0
  unshare --mount --propagation private -- "$(realpath "$0")" --inside "$(realpath "$1")" \
    "$(realpath "$(dirname "$0")/..")" "$scratch" || rc=$?
  rmdir "$scratch"
  exit $rc
fi
deb=$2
src=$3
scratch=$4
fail() { echo "deb_install_test: FAIL: $*" >&2; exit 1; }
step() { echo "deb_install_test: $*"; }

mount -t tmpfs -o size=1g,mode=0755 edgevit-debtest "$scratch"
for d in etc usr var; do
  mkdir -p "$scratch/$d.upper" "$scratch/$d.work" "$scratch/$d.lower"
  mount --bind "/$d" "$scratch/$d.lower"  # the untouched original, to tell leftovers from copied-up folders
  mount -t overlay overlay -o "lowerdir=/$d,upperdir=$scratch/$d.upper,workdir=$scratch/$d.work" "/$d"
done
# No systemd manager to talk to (postinst/postrm check /run/systemd/system); the host's stays untouched.
mkdir -p /run/systemd && mount -t tmpfs tmpfs /run/systemd
mkdir -p "$scratch/files" "$scratch/sock"
cp "$deb" "$scratch/files/edgevit.deb"
cp "$src/tests/data/digits/digit-7.png" "$scratch/files/"
mount -t tmpfs -o size=1m,mode=0755 edgevit-hidden "$src"
chmod 0755 "$scratch" "$scratch/files"

step "dpkg -i $(basename "$deb")"
force=()
if [ -n "${EDGEVIT_DEBTEST_CUDA_LIBS:-}" ]; then
  force=(--force-depends)
  export LD_LIBRARY_PATH=$EDGEVIT_DEBTEST_CUDA_LIBS
fi
dpkg -i "${force[@]}" "$scratch/files/edgevit.deb" >"$scratch/dpkg.log" 2>&1 || { cat "$scratch/dpkg.log"; fail "dpkg -i"; }
if [ ${#force[@]} -gt 0 ]; then
  # Only the CUDA runtime packages may be missing.
  unmet=$(grep -oE "depends on [^;]+" "$scratch/dpkg.log" | grep -vE "depends on (cuda-cudart|libcublas)-[0-9]+-[0-9]+" || true)
  [ -z "$unmet" ] || fail "dpkg -i: unmet dependencies besides the CUDA runtime: $unmet"
fi
getent passwd edgevit >/dev/null || fail "no edgevit user after install"
getent group edgevit >/dev/null || fail "no edgevit group after install"
[ "$(stat -c %U:%G:%a /var/spool/edgevit)" = edgevit:edgevit:770 ] ||
  fail "/var/spool/edgevit: $(stat -c %U:%G:%a /var/spool/edgevit 2>&1)"
dpkg-query -W -f='${Conffiles}\n' edgevit | grep -q "^ /etc/edgevit/edgevitd.yaml " || fail "edgevitd.yaml is not a conffile"
unit=/usr/lib/systemd/system/edgevitd.service
[ -f "$unit" ] || fail "$unit missing"
verify=$(systemd-analyze verify "$unit" 2>&1) || fail "systemd-analyze verify $unit: $verify"
[ -z "$verify" ] || fail "systemd-analyze verify $unit: $verify"
step "installed: user, group, /var/spool/edgevit, conffile; systemd-analyze verify clean"

as_service=(setpriv --reuid=edgevit --regid=edgevit --init-groups --)
(cd / && "${as_service[@]}" /usr/bin/edgevitd --check --config /etc/edgevit/edgevitd.yaml) >"$scratch/check.log" 2>&1 ||
  { cat "$scratch/check.log"; fail "edgevitd --check --config /etc/edgevit/edgevitd.yaml (exit $?)"; }
step "edgevitd --check --config /etc/edgevit/edgevitd.yaml: ok"

chown edgevit:edgevit "$scratch/sock"
sock=$scratch/sock/edgevitd.sock
(cd / && exec "${as_service[@]}" /usr/bin/edgevitd --config /etc/edgevit/edgevitd.yaml --socket "$sock") \
  >"$scratch/daemon.log" 2>&1 &
daemon=$!
for _ in $(seq 1 600); do
  [ -S "$sock" ] && break
  kill -0 "$daemon" 2>/dev/null || { cat "$scratch/daemon.log"; fail "edgevitd exited before listening"; }
  sleep 0.1
done
[ -S "$sock" ] || { kill "$daemon"; cat "$scratch/daemon.log"; fail "edgevitd: no socket after 60 s"; }
answer=$(/usr/bin/edgevit client --socket "$sock" --input "$scratch/files/digit-7.png" 2>&1) ||
  { kill "$daemon"; cat "$scratch/daemon.log"; fail "edgevit client: $answer"; }
grep -qE "^ *1\. 7 " <<<"$answer" ||
  { kill "$daemon"; fail "edgevit client did not answer 7: $answer"; }
kill -TERM "$daemon"
rc=0
wait "$daemon" || rc=$?
[ $rc -eq 0 ] || { cat "$scratch/daemon.log"; fail "edgevitd exited $rc on SIGTERM"; }
step "edgevitd as user edgevit on $sock: edgevit client classified digit-7.png as 7; SIGTERM: exit 0"

dpkg --purge "${force[@]}" edgevit >"$scratch/dpkg.log" 2>&1 || { cat "$scratch/dpkg.log"; fail "dpkg --purge"; }
# What the package left: every non-directory in the upper layers, and every directory that is not in the
# lower layer (an empty directory copied up because something was created in it, then removed, is fine).
left=()
for d in etc usr var; do
  while IFS= read -r -d '' p; do
    rel=${p#"$scratch/$d.upper"}
    path=/$d$rel
    case "$path" in
      /etc/passwd|/etc/group|/etc/shadow|/etc/gshadow|/etc/passwd-|/etc/group-|/etc/shadow-|/etc/gshadow-|/etc/.pwd.lock) continue;;
      /etc/ld.so.cache|/var/lib/dpkg/*|/var/log/dpkg.log|/var/cache/ldconfig/*) continue;;
    esac
    if [ -d "$p" ] && [ ! -L "$p" ] && [ -d "$scratch/$d.lower$rel" ]; then
      continue  # a folder that existed before, copied up because something was created in it
    fi
    left+=("$path")
  done < <(find "$scratch/$d.upper" -mindepth 1 -print0)
done
[ ${#left[@]} -eq 0 ] || fail "left after dpkg --purge: ${left[*]}"
step "dpkg --purge: nothing left but the edgevit user and group, dpkg's records and the loader cache"
