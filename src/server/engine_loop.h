#pragma once
// The one thread that drives the Engine (which is single-threaded). HTTP handlers submit jobs,
// cancellations and layout switches under a mutex; the loop applies them between steps, steps the
// engine while there is work, and delivers each step's tokens to the requests' ResultStreams.
// Nothing else touches the Engine.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "server/engine_snapshot.h"
#include "server/metrics.h"
#include "server/result_stream.h"

namespace splash {

// One engine request: a prompt and its sampling settings.
struct GenerationJob {
  std::vector<int32_t> prompt;
  SamplingParams params;
  // No max_tokens given: use what the context and the group's KV capacity leave (vLLM's default).
  bool fit_max_tokens = false;
  std::string rid;  // the id /abort_request and /layout use; unique among live requests
};

// What a forced layout switch did.
struct LayoutSwitchOutcome {
  Layout previous = Layout::TP;
  Layout layout = Layout::TP;           // the layout the next step runs in
  std::optional<SwitchRecord> started;  // the switch (its transfers ride on the next step; not yet timed)
  std::string refused;                  // the engine's reason; it serves on in `previous`
  bool handed_back = false;             // auto: the scheduler decides again
};

class EngineLoop {
 public:
  // More than `max_waiting` engine requests waiting to run (0: no limit) and submit refuses new ones.
  EngineLoop(Engine& engine, ServerMetrics& metrics, size_t max_waiting = 0);
  ~EngineLoop();

  void start();
  // Aborts what runs, rejects what waits (503) and joins the thread.
  void stop();
  bool running() const { return running_.load(); }

  // Queues the jobs as one request (admitted or rejected together). ApiError 503 when stopped,
  // 400 when an rid is already live, 429 when max_waiting requests already wait.
  std::shared_ptr<ResultStream> submit(std::vector<GenerationJob> jobs);
  // Aborts every choice of the stream that has not finished (its client went away).
  void cancel(const std::shared_ptr<ResultStream>& stream);
  // Aborts the request with this rid; false when none is live.
  bool abort_rid(const std::string& rid);
  void abort_all();
  // Starts a switch of the attention layout between two engine steps and waits for the outcome;
  // nothing happens when already in `to`. The transfers ride on the next step, after which the
  // switch history and metrics show it. ApiError 503 when stopped.
  // `to` nullopt: hands the layout back to the transition-aware scheduler (ApiError 409 without one).
  LayoutSwitchOutcome switch_layout(std::optional<Layout> to);
  // Runs fn on the engine thread between two steps and returns its result (admin operations that change
  // the engine). ApiError 503 when stopped; what fn throws reaches the caller.
  nlohmann::json call(std::function<nlohmann::json(Engine&)> fn);
  // /pause_generation: once it returns no step runs until resume(). abort: every live request ends now
  // with its partial output (finish_reason abort); else requests keep their KV and go on after resume.
  // Requests that arrive meanwhile queue. A switch in transit rides on the first step after resume.
  void pause(bool abort);
  void resume();
  bool paused() const;
  // Waits until nothing is queued or running; false on timeout.
  bool wait_idle(std::chrono::milliseconds timeout);

  EngineSnapshot snapshot() const;

 private:
  struct Submission {
    std::vector<GenerationJob> jobs;
    std::shared_ptr<ResultStream> stream;
  };
  struct Cancel {
    std::shared_ptr<ResultStream> stream;
    int index = -1;  // -1: every choice
  };
  struct LayoutCommand {
    std::optional<Layout> to;  // nullopt: auto
    std::promise<LayoutSwitchOutcome> outcome;
  };
  struct Call {
    std::function<nlohmann::json(Engine&)> fn;
    std::promise<nlohmann::json> result;
  };
  struct Live {
    std::shared_ptr<ResultStream> stream;
    int index = 0;
    std::string rid;
    double last_token = -1;  // engine clock of the last delivered token
  };

  void run();
  void admit(Submission& s);
  int max_tokens_that_fit(int64_t prompt_tokens);
  void apply_cancel(const Cancel& c);
  void apply_layout(LayoutCommand& c);
  LayoutSwitchOutcome switch_now(std::optional<Layout> to);
  void step();
  void deliver(const std::vector<RequestOutput>& outputs);
  void fail_all();  // after a failed step: every live request ends with an internal error
  void finish(int64_t id, TokenDelta d);  // delivers the last delta and forgets the request
  void publish();

  Engine& engine_;
  ServerMetrics& metrics_;
  const size_t max_waiting_;
  std::thread thread_;
  std::atomic<bool> running_{false};

  // Shared with handler threads, under mu_.
  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  bool stop_ = false, abort_all_ = false, idle_ = true;
  std::deque<Submission> submissions_;
  std::vector<Cancel> cancels_;
  std::deque<LayoutCommand> layout_commands_;
  std::deque<Call> calls_;
  bool paused_ = false;
  std::unordered_map<std::string, std::pair<std::weak_ptr<ResultStream>, int>> rids_;

  // Engine thread only.
  std::unordered_map<int64_t, Live> live_;  // by engine request id
  size_t switches_seen_ = 0;  // engine switch records already reported

  mutable std::mutex snapshot_mu_;
  EngineSnapshot snapshot_;
};

}  // namespace splash
