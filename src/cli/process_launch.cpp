#include "cli/process_launch.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "cli/launch_check.h"
#include "comm/tcp/tcp_process_link.h"
#include "core/error.h"
#include "engine/follower_loop.h"
#ifdef SPLASH_HAVE_MPI
#include "comm/mpi/mpi_process_link.h"
#include "comm/mpi/mpi_session.h"
#endif

namespace splash {
namespace {

constexpr int kLostExit = 3;  // an internal error's exit code

// This process's place among the others and the link to them.
class Launch {
 public:
  explicit Launch(const MultinodeFlags& f) {
#ifdef SPLASH_HAVE_MPI
    if (launched_by_mpi()) {
      if (f.nnodes > 1) fail("under mpirun the processes come from MPI: drop --nnodes, --node-rank and --dist-init-addr");
      mpi_ = std::make_unique<MpiSession>();
      const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(f.dist_timeout_s * 1000));
      if (mpi_->size() > 1) link_ = std::make_shared<MpiProcessLink>(*mpi_, timeout);
      return;
    }
#endif
    if (f.nnodes > 1) link_ = std::make_shared<TcpProcessLink>(make_rendezvous_options(f));
  }
  const std::shared_ptr<ProcessLink>& link() const { return link_; }

  // Ends every process of the launch (a lost process leaves nothing to finish in order): MPI ends the
  // others; over TCP they see this process's connections close.
  [[noreturn]] void end_all(int code) {
    std::fflush(stdout);
    std::fflush(stderr);
#ifdef SPLASH_HAVE_MPI
    if (mpi_) mpi_->abort_job(code);
#endif
    std::_Exit(code);
  }
  // Ends the launch over a lost process (ProcessLink::lost), saying why. Once: the watch and the main
  // thread may both come here.
  [[noreturn]] void end_lost() {
    ending_.lock();  // never unlocked: the first caller ends the process
    std::fprintf(stderr, "error: %s; ending every process of the launch\n", link_->lost().c_str());
    end_all(kLostExit);
  }

 private:
#ifdef SPLASH_HAVE_MPI
  std::unique_ptr<MpiSession> mpi_;  // declared first: finalised after the link is gone
#endif
  std::shared_ptr<ProcessLink> link_;
  std::mutex ending_;
};

// Process 0 watches the link from a thread of its own: a server would go on answering every request with
// an error, so once a process is lost this ends the launch, after a moment for those answers to leave.
class LossWatch {
 public:
  LossWatch(Launch& launch) : thread_([this, &launch] {
    while (!stop_.load()) {
      if (!launch.link()->lost().empty()) {
        std::this_thread::sleep_for(std::chrono::seconds(1));
        launch.end_lost();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }) {}
  ~LossWatch() {
    stop_.store(true);
    thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

int lead_processes(Launch& launch, ModelSource src, const LeadFn& lead) {
  ProcessLink& link = *launch.link();
  int code = 0;
  {
    LossWatch watch(launch);
    try {
      code = lead(std::move(src), launch.link());
    } catch (...) {
      if (!link.lost().empty()) launch.end_lost();
      stop_followers(link);
      throw;
    }
  }
  if (!link.lost().empty()) launch.end_lost();
  stop_followers(link);
  return code;
}

}  // namespace

int run_on_processes(const std::string& command, const EngineFlags& f, const LeadFn& lead) {
  apply_log_level(f.log_level);
  Launch launch(f.multinode);
  if (!launch.link()) return lead(open_model(f.model, f.load_format, f.seed), nullptr);
  ProcessLink& link = *launch.link();
  ModelSource src;
  std::string startup_error;
  try {
    src = open_model(f.model, f.load_format, f.seed);
  } catch (const Error& e) {
    startup_error = e.what();
  }
  check_same_launch(link, launch_flags(command, f), startup_error);
  if (link.process() == 0) return lead_processes(launch, std::move(src), lead);
  spdlog::info("process {} of {} (pid {}): following process 0's commands", link.process(), link.processes(), getpid());
  try {
    follow_leader(launch.link(), src.config, *src.weights);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: process %d: %s\n", link.process(), e.what());
    launch.end_all(kLostExit);
  }
  return 0;
}

}  // namespace splash
