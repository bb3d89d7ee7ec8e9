#!/usr/bin/env bash
# Installs the build tree into a temporary prefix, then builds a consumer with
# find_package(signlion) and another with pkg-config, and runs both.
set -euo pipefail
BUILD=$1
SRC=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cmake --install "$BUILD" --prefix "$TMP/prefix" > "$TMP/install.log"
test -f "$TMP/prefix/include/nccl_sign.h"
ls "$TMP"/prefix/lib*/libnccl-sign.so* > /dev/null

CC_FLAGS=()
if [ -n "${NCCL_INCLUDE:-}" ]; then CC_FLAGS+=("-DCMAKE_C_FLAGS=-I$NCCL_INCLUDE"); fi
cmake -S "$SRC" -B "$TMP/consumer" -DCMAKE_PREFIX_PATH="$TMP/prefix" "${CC_FLAGS[@]}" > "$TMP/configure.log"
cmake --build "$TMP/consumer" > "$TMP/build.log"
"$TMP/consumer/consumer"

PC_DIR=$(dirname "$(ls "$TMP"/prefix/lib*/pkgconfig/signlion.pc)")
sed -i "s|^prefix=.*|prefix=$TMP/prefix|" "$PC_DIR/signlion.pc"
export PKG_CONFIG_PATH=$PC_DIR
cc "$SRC/consumer.c" -o "$TMP/consumer_pc" $(pkg-config --cflags --libs signlion) ${NCCL_INCLUDE:+-I$NCCL_INCLUDE} \
  -Wl,-rpath,"$(pkg-config --variable=libdir signlion)"
"$TMP/consumer_pc"
echo "install test passed"
