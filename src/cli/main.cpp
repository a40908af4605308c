// splash: one binary with subcommands (check, generate, plan, serve, ...).
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/bench_command.h"
#include "cli/calibrate_command.h"
#include "cli/check_command.h"
#include "cli/generate_command.h"
#include "cli/serve_command.h"
#include "cli/plan_command.h"
#include "cli/simulate_command.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"SPLASH: an MLA serving engine that switches attention layout while requests run"};
  app.require_subcommand(1);
  splash::add_check_command(app);
  splash::add_generate_command(app);
  splash::add_serve_command(app);
  splash::add_plan_command(app);
  splash::add_bench_command(app);
  splash::add_simulate_command(app);
  splash::add_calibrate_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const splash::UserError& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "internal error: %s\n", e.what());
    return 3;
  }
  return 0;
}
