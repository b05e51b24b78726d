#!/usr/bin/env bash
# The measurements recorded in docs/benchmarks.md, in one go on the GPU machine; logs and JSON in $OUT.
#   scripts/gpu_bench.sh run|streams|realtime|batch|soak ...   (each part bounded; a failing part goes on)
set -uo pipefail
out=${OUT:-gpu-logs}; mkdir -p "$out" "$out/clips"
export PYTHONUNBUFFERED=1
log() { echo "== $(date -u +%T) $*" | tee -a "$out/summary.txt"; }
clip() {  # name w h fps frames
  [ -f "$out/clips/$1.mp4" ] || python3 -m pipeline sample 1080p -o "$out/clips/$1.mp4" --size "$2x$3" --fps "$4" \
    --frames "$5" >/dev/null
}
for part in "$@"; do
  case $part in
    cold)  # the first run on a fresh machine (kernels compiled), then warm: time to first frame
      clip c1080 1920 1080 60 120
      for i in 1 2; do /usr/bin/time -f "wall %e s" python3 -m pipeline run "$out/clips/c1080.mp4" -o null -q \
        --stats-json "$out/cold$i.json" 2>>"$out/summary.txt"; done
      python3 -c "import json;[print(f, json.load(open(f'$out/{f}'))['time_to_first_frame_ms'], json.load(open(f'$out/{f}'))['startup_ms']) for f in ('cold1.json','cold2.json')]" | tee -a "$out/summary.txt"
      python3 -m pipeline warmup | tee -a "$out/summary.txt" ;;
    run)
      clip b1080 1920 1080 60 300; clip b4k 3840 2160 30 120
      log "bench 1080p"; timeout 200 python3 -m pipeline bench "$out/clips/b1080.mp4" --scope gpu,run --repeats 2 \
        --frames 300 --warmup 30 --no-peers --no-chart -y --json "$out/bench_1080p.json" 2>&1 | tail -40 | tee -a "$out/summary.txt"
      log "bench 4k"; timeout 200 python3 -m pipeline bench "$out/clips/b4k.mp4" --scope gpu,run --repeats 1 \
        --frames 120 --warmup 20 --no-peers --no-chart -y --json "$out/bench_4k.json" 2>&1 | tail -40 | tee -a "$out/summary.txt"
      log "4k gpu scope, pool, no filters / default"; for f in "" "gblur=sigma=1.5,eq=contrast=1.1:saturation=1.1"; do
        timeout 60 python3 -m pipeline bench "$out/clips/b4k.mp4" --scope gpu --strategies pool --repeats 3 --frames 300 \
          --filters "$f" --no-peers --no-chart -y --json "$out/gpu4k.json" 2>&1 | grep -E "^│ pool" | tee -a "$out/summary.txt"; done ;;
    decoders)  # whole runs as a user runs them: the CPU decoder against NVDEC, libx264 ultrafast output
      clip d1080 1920 1080 60 300; clip d4k 3840 2160 30 120
      for c in d1080 d4k; do for dec in cpu nvdec; do for alloc in pool naive; do
        /usr/bin/time -f "$c $dec $alloc process %e s" python3 -m pipeline run "$out/clips/$c.mp4" -o "$out/o.mp4" -y -q \
          --decode $dec --alloc $alloc --encoder-opt preset=ultrafast --stats-json "$out/$c-$dec-$alloc.json" \
          2>>"$out/summary.txt"
        python3 -c "import json;d=json.load(open('$out/$c-$dec-$alloc.json'));print('$c $dec $alloc', d['fps'], d['steady_fps'], d['time_to_first_frame_ms'])" | tee -a "$out/summary.txt"
      done; done; done ;;
    batch)  # one GPU: 16 files, libx264 ultrafast, then -o null --decode nvdec; per-file overhead
      clip e1080 1920 1080 60 300; mkdir -p "$out/in"; for i in $(seq 16); do cp "$out/clips/e1080.mp4" "$out/in/f$i.mp4"; done  # links: one file, run once
      timeout 200 python3 -m pipeline batch "$out/in/"*.mp4 -o "$out/bo" --gpus 0 -y --encoder-opt preset=ultrafast \
        --json "$out/batch_x264.json" 2>&1 | tail -4 | tee -a "$out/summary.txt"
      timeout 120 python3 -m pipeline batch "$out/in/"*.mp4 -o null --gpus 0 --decode nvdec --json "$out/batch_null.json" \
        2>&1 | tail -4 | tee -a "$out/summary.txt" ;;
    streams) log "streams"; timeout 300 python3 scripts/bench_streams.py --out-dir "$out/streams" --seconds 5 \
        --pool 32,48,64,80 --naive 8,16,24,32 --x264 2,4,8 2>&1 | tail -25 | tee -a "$out/summary.txt" ;;
    realtime) log "realtime"; timeout 240 python3 scripts/bench_realtime.py --out-dir "$out/rt" -q 2>&1 | tail -22 \
        | tee -a "$out/summary.txt" ;;
    soak) log "soak"; timeout 200 python3 scripts/soak.py --frames 600 --cycles 400 --device cuda 2>&1 | grep "soak:" \
        | tee -a "$out/summary.txt" ;;
  esac
done
tar czf "$out/logs.tgz" -C "$out" --exclude clips --exclude '*.mkv' --exclude '*.mp4' . 2>/dev/null
