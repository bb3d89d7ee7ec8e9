#!/usr/bin/env bash
# cmake --install into a new prefix, then, with no installed file rewritten:
# a consumer built with find_package(signlion) (both advertised targets), one
# built with pkg-config (plain and --define-prefix) and run without
# LD_LIBRARY_PATH, and the installed sign_allreduce_perf run from bin/. Then the
# prefix is moved elsewhere and the consumers are built again from there: the
# CMake package and signlion.pc are relocatable.
#   install_test.sh BUILD_DIR
set -euo pipefail
BUILD=$1
SRC=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cmake --install "$BUILD" --prefix "$TMP/prefix" > "$TMP/install.log"
test -f "$TMP/prefix/include/nccl_sign.h"
test -f "$TMP/prefix/include/nccl_sign_version.h"
ls "$TMP"/prefix/lib*/libnccl-sign.so* > /dev/null
PERF=0
if [ -x "$BUILD/perf/sign_allreduce_perf" ]; then PERF=1; fi  # SIGNLION_BUILD_PERF=ON
if [ $PERF = 1 ]; then test -x "$TMP/prefix/bin/sign_allreduce_perf"; fi
(cd "$TMP/prefix" && find . -type f -exec md5sum {} + | sort) > "$TMP/sums.installed"

CC_FLAGS=()
if [ -n "${NCCL_INCLUDE:-}" ]; then CC_FLAGS+=("-DCMAKE_C_FLAGS=-I$NCCL_INCLUDE"); fi

consumers() {  # PREFIX TAG: build and run the CMake and pkg-config consumers against PREFIX
  local prefix=$1 tag=$2 pc_dir
  unset LD_LIBRARY_PATH
  cmake -S "$SRC" -B "$TMP/cmake_$tag" -DCMAKE_PREFIX_PATH="$prefix" "${CC_FLAGS[@]}" > "$TMP/configure_$tag.log"
  cmake --build "$TMP/cmake_$tag" > "$TMP/build_$tag.log"
  "$TMP/cmake_$tag/consumer"
  case $(cat "$TMP/cmake_$tag/plugin_path.txt") in
    "$prefix"/*) test -f "$(cat "$TMP/cmake_$tag/plugin_path.txt")" ;;
    *) echo "FAILED: signlion::nccl-net-signlion is not under $prefix"; return 1 ;;
  esac

  pc_dir=$(dirname "$(ls "$prefix"/lib*/pkgconfig/signlion.pc)")
  for define_prefix in "" --define-prefix; do
    local flags
    flags=$(PKG_CONFIG_PATH=$pc_dir pkg-config $define_prefix --cflags --libs signlion)
    local word dirs=0
    for word in $flags; do  # every -I, -L and -rpath names a folder inside the prefix
      case $word in
        -I* | -L*) word=${word:2} ;;
        -Wl,-rpath,*) word=${word#-Wl,-rpath,} ;;
        *) continue ;;
      esac
      dirs=$((dirs + 1))
      case $(realpath "$word") in
        "$(realpath "$prefix")"/*) ;;
        *) echo "FAILED: pkg-config $define_prefix gives $word, outside $prefix ($flags)"; return 1 ;;
      esac
    done
    [ $dirs = 3 ] || { echo "FAILED: pkg-config $define_prefix: '$flags' (want -I, -L and -rpath)"; return 1; }
    # shellcheck disable=SC2086 # pkg-config's flags are words
    cc "$SRC/consumer.c" -o "$TMP/consumer_pc_$tag" $flags ${NCCL_INCLUDE:+-I$NCCL_INCLUDE}
    "$TMP/consumer_pc_$tag"  # finds libnccl-sign.so.0 through the RPATH in the .pc's Libs
  done
}

consumers "$TMP/prefix" installed
if [ $PERF = 1 ]; then  # the installed perf tool as the README runs it (RPATH): 2 ranks as threads, checked
  (unset LD_LIBRARY_PATH && SIGNLION_SOCKET_IFNAME=lo "$TMP/prefix/bin/sign_allreduce_perf" -t 2 -b 8 -e 64 -f 8 \
    -w 1 -n 1 -c 1 > "$TMP/perf.log") || { cat "$TMP/perf.log"; echo "FAILED: the installed sign_allreduce_perf"; exit 1; }
  grep -q "Out of bounds values : 0 OK" "$TMP/perf.log"
fi

mkdir "$TMP/elsewhere"
mv "$TMP/prefix" "$TMP/elsewhere/moved"
consumers "$TMP/elsewhere/moved" moved

(cd "$TMP/elsewhere/moved" && find . -type f -exec md5sum {} + | sort) > "$TMP/sums.after"
diff "$TMP/sums.installed" "$TMP/sums.after" || { echo "FAILED: an installed file changed"; exit 1; }
echo "install test passed"
