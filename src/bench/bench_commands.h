#pragma once
// `splash bench` subcommands: measurements of the engine on synthetic or generated work, each printing
// its figures next to the limit they are judged against (docs/perf.md, docs/gpu-switching.md).
#include <CLI/CLI.hpp>

namespace splash {

// splash bench switch: per-layer switch primitive costs and the live-switch table of the 12 directions.
void add_bench_switch(CLI::App& bench);
// splash bench layouts: fixed-layout throughput over input lengths and batch sizes, KV capacity per layout.
void add_bench_layouts(CLI::App& bench);
// splash bench e2e: end-to-end prefill and decode tokens/s of the engine, next to the roofline.
void add_bench_e2e(CLI::App& bench);

}  // namespace splash
