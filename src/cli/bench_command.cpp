#include "cli/bench_command.h"

#include "bench/bench_commands.h"

namespace splash {

void add_bench_command(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "measure the engine: switch costs, fixed-layout throughput, end to end");
  bench->require_subcommand(1);
  add_bench_switch(*bench);
  add_bench_layouts(*bench);
  add_bench_e2e(*bench);
}

}  // namespace splash
