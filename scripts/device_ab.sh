#!/usr/bin/env bash
# A/B of `splash bench e2e` on one GPU: an earlier revision against this tree, built with the same flags
# and run interleaved on the same device, so a refactor's effect on speed is measured, not assumed.
#
#   bash scripts/device_ab.sh prepare REV   # HERE: archives REV into .device-ab/ (and the deps, as device.sh)
#   bash scripts/device_ab.sh               # THERE, one `run` call with carry [".device-deps", ".device-ab"]
#
# SPLASH_AB_BATCHES (default "1 64") and SPLASH_AB_REPS (default 2) set the points and repetitions;
# SPLASH_AB_ARGS adds flags to both runs (e.g. "--quantization fp8").
# SPLASH_AB_BENCH=attention compares splash_bench_attention's decode tables instead (SPLASH_BENCH_HEADS,
# _BATCHES and _CONTEXTS narrow them, as for the bench itself).
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = prepare ]; then
  set -e
  rev=${2:?give the revision to compare against}
  mkdir -p .git/info .device-ab
  grep -qxF /.device-ab/ .git/info/exclude 2>/dev/null || echo /.device-ab/ >> .git/info/exclude
  git archive --format=tar.gz -o .device-ab/old-src.tar.gz "$rev"
  git rev-parse "$rev" > .device-ab/rev
  bash scripts/device.sh prepare
  exit 0
fi
export NCCL_NVLS_ENABLE=0
OLD=/tmp/splash-ab-old
rm -rf "$OLD" && mkdir -p "$OLD" && tar xzf .device-ab/old-src.tar.gz -C "$OLD"
ARGS=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_POLICY_VERSION_MINIMUM=3.5 -DSPLASH_TESTS=OFF)
missing=0
for p in nlohmann-json3-dev libcli11-dev libfmt-dev libspdlog-dev libonig-dev libcpp-httplib-dev; do
  dpkg -s "$p" >/dev/null 2>&1 || missing=1
done
if [ $missing = 1 ]; then  # the carried Debian 12 packages in a private prefix, as scripts/device.sh does
  P=/tmp/splash-deps
  rm -rf "$P" && mkdir -p "$P"
  for f in .device-deps/*.deb; do dpkg -x "$f" "$P"; done
  LIBDIR=$P/usr/lib/x86_64-linux-gnu
  export PKG_CONFIG_PATH=$LIBDIR/pkgconfig PKG_CONFIG_SYSROOT_DIR=$P LD_LIBRARY_PATH=$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  ARGS+=(-DCMAKE_PREFIX_PATH="$P/usr")
fi
BENCH=${SPLASH_AB_BENCH:-e2e}
TARGET=splash; [ "$BENCH" = attention ] && TARGET=splash_bench_attention
(cmake -S "$OLD" -B "$OLD/build" "${ARGS[@]}" > /tmp/ab_old.log 2>&1 && cmake --build "$OLD/build" -j "$(nproc)" --target $TARGET >> /tmp/ab_old.log 2>&1) &
(cmake -S . -B build-ab "${ARGS[@]}" > /tmp/ab_new.log 2>&1 && cmake --build build-ab -j "$(nproc)" --target $TARGET >> /tmp/ab_new.log 2>&1) &
wait
[ -x "$OLD/build/$TARGET" ] && [ -x build-ab/$TARGET ] || { tail -20 /tmp/ab_old.log /tmp/ab_new.log; exit 1; }
echo "old: $(cat .device-ab/rev 2>/dev/null || echo '?')  new: this tree"
if [ "$BENCH" = attention ]; then
  for rep in $(seq "${SPLASH_AB_REPS:-2}"); do
    for which in old new; do
      bin=$OLD/build/splash_bench_attention; [ $which = new ] && bin=build-ab/splash_bench_attention
      echo "== $which rep $rep"
      "$bin" decode 2>&1 | grep -E '^ +[0-9]|^limits|^ +B '
    done
  done
  exit 0
fi
for rep in $(seq "${SPLASH_AB_REPS:-2}"); do
  for b in ${SPLASH_AB_BATCHES:-1 64}; do
    for which in old new; do
      bin=$OLD/build/splash; [ $which = new ] && bin=build-ab/splash
      echo "== $which B=$b rep $rep"
      "$bin" bench e2e --backend cuda --model builtin:deepseek-v2-lite --load-format dummy --batch "$b" \
        --input-len 1024 --output-len 128 --log-level warn ${SPLASH_AB_ARGS:-} 2>&1 | grep -E '^(limits|prefill|decode|mean)'
    done
  done
done
