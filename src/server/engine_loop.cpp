#include "server/engine_loop.h"

#include <cmath>
#include <utility>

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "server/api_error.h"
#include "server/log_format.h"

namespace splash {
namespace {

double round_us(double seconds) { return std::round(seconds * 1e6) / 1e6; }

// One info line per finished request, for latency analysis from the log alone.
void log_finished(const std::string& rid, const Request& r, FinishReason why, double queue_s, double e2e_s) {
  nlohmann::ordered_json ttft;  // null: no token came
  if (r.first_token >= 0) ttft = round_us(r.first_token - r.arrival);
  log_with_fields(spdlog::level::info, "request finished",
                  {{"request_id", rid},
                   {"finish_reason", finish_reason_name(why)},
                   {"prompt_tokens", r.prompt.size()},
                   {"completion_tokens", r.output.size()},
                   {"queue_time_s", round_us(queue_s)},
                   {"ttft_s", ttft},
                   {"e2e_latency_s", round_us(e2e_s)}});
}

}  // namespace

EngineLoop::EngineLoop(Engine& engine, ServerMetrics& metrics, size_t max_waiting)
    : engine_(engine), metrics_(metrics), max_waiting_(max_waiting) {
  publish();
}

EngineLoop::~EngineLoop() { stop(); }

void EngineLoop::start() {
  running_ = true;
  thread_ = std::thread([this] { run(); });
}

void EngineLoop::stop() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<ResultStream> EngineLoop::submit(std::vector<GenerationJob> jobs) {
  auto stream = std::make_shared<ResultStream>(jobs.size());
  std::lock_guard lk(mu_);
  if (stop_) throw ApiError(503, "the server is shutting down");
  if (max_waiting_ > 0) {
    // Submissions not yet handed to the engine will wait there too (or run at once: counted anyway).
    size_t waiting = static_cast<size_t>(snapshot().waiting);
    for (const Submission& s : submissions_) waiting += s.jobs.size();
    if (waiting >= max_waiting_)
      throw ApiError(429, fmt::format("the server is busy: {} requests are waiting to run; retry later", waiting), "",
                     "rate_limit_exceeded", "requests");
  }
  for (size_t i = 0; i < jobs.size(); ++i) {
    const std::string& rid = jobs[i].rid;
    if (rid.empty()) continue;
    if (!rids_.try_emplace(rid, stream, static_cast<int>(i)).second) {
      for (size_t k = 0; k < i; ++k) rids_.erase(jobs[k].rid);
      throw bad_request(fmt::format("request id '{}' is already in use", rid), "rid");
    }
  }
  submissions_.push_back({std::move(jobs), stream});
  idle_ = false;
  cv_.notify_all();
  return stream;
}

void EngineLoop::cancel(const std::shared_ptr<ResultStream>& stream) {
  std::lock_guard lk(mu_);
  cancels_.push_back({stream, -1});
  cv_.notify_all();
}

bool EngineLoop::abort_rid(const std::string& rid) {
  std::lock_guard lk(mu_);
  auto it = rids_.find(rid);
  if (it == rids_.end()) return false;
  std::shared_ptr<ResultStream> s = it->second.first.lock();
  if (!s) return false;
  cancels_.push_back({std::move(s), it->second.second});
  cv_.notify_all();
  return true;
}

void EngineLoop::abort_all() {
  std::lock_guard lk(mu_);
  abort_all_ = true;
  cv_.notify_all();
}

LayoutSwitchOutcome EngineLoop::switch_layout(std::optional<Layout> to) {
  std::future<LayoutSwitchOutcome> outcome;
  {
    std::lock_guard lk(mu_);
    if (stop_) throw ApiError(503, "the server is shutting down");
    layout_commands_.push_back({to, {}});
    outcome = layout_commands_.back().outcome.get_future();
  }
  cv_.notify_all();
  return outcome.get();
}

nlohmann::json EngineLoop::call(std::function<nlohmann::json(Engine&)> fn) {
  std::future<nlohmann::json> result;
  {
    std::lock_guard lk(mu_);
    if (stop_) throw ApiError(503, "the server is shutting down");
    calls_.push_back({std::move(fn), {}});
    result = calls_.back().result.get_future();
  }
  cv_.notify_all();
  return result.get();
}

void EngineLoop::pause(bool abort) {
  call([this, abort](Engine&) {
    {
      std::lock_guard lk(mu_);
      paused_ = true;
    }
    if (abort) apply_cancel({nullptr, -1});
    return nlohmann::json();
  });
}

// On the loop, like pause, so the answer comes after the snapshot says "not paused".
void EngineLoop::resume() {
  call([this](Engine&) {
    std::lock_guard lk(mu_);
    paused_ = false;
    return nlohmann::json();
  });
}

bool EngineLoop::paused() const {
  std::lock_guard lk(mu_);
  return paused_;
}

bool EngineLoop::wait_idle(std::chrono::milliseconds timeout) {
  std::unique_lock lk(mu_);
  return idle_cv_.wait_for(lk, timeout, [&] { return idle_; });
}

EngineSnapshot EngineLoop::snapshot() const {
  std::lock_guard lk(snapshot_mu_);
  return snapshot_;
}

void EngineLoop::run() {
  for (;;) {
    std::deque<Submission> subs;
    std::vector<Cancel> cancels;
    std::deque<LayoutCommand> layouts;
    std::deque<Call> calls;
    bool abort_everything = false, stopping = false, paused = false;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] {
        return stop_ || abort_all_ || !submissions_.empty() || !cancels_.empty() || !layout_commands_.empty() ||
               !calls_.empty() || (!paused_ && (engine_.has_work() || engine_.switch_in_transit()));
      });
      subs.swap(submissions_);
      cancels.swap(cancels_);
      layouts.swap(layout_commands_);
      calls.swap(calls_);
      abort_everything = std::exchange(abort_all_, false) || stop_;
      stopping = stop_;
    }
    for (Submission& s : subs) {
      if (stopping) {
        std::lock_guard lk(mu_);
        for (const GenerationJob& j : s.jobs) rids_.erase(j.rid);
        s.stream->reject(503, "the server is shutting down");
      } else {
        admit(s);
      }
    }
    for (const Cancel& c : cancels) apply_cancel(c);
    if (abort_everything) apply_cancel({nullptr, -1});
    for (LayoutCommand& c : layouts) {
      if (stopping) c.outcome.set_exception(std::make_exception_ptr(ApiError(503, "the server is shutting down")));
      else apply_layout(c);
    }
    for (Call& c : calls) {
      if (stopping) {
        c.result.set_exception(std::make_exception_ptr(ApiError(503, "the server is shutting down")));
        continue;
      }
      // Published before the answer: a client that reads /get_server_info next sees the call's effect.
      try {
        nlohmann::json value = c.fn(engine_);
        publish();
        c.result.set_value(std::move(value));
      } catch (...) {
        publish();
        c.result.set_exception(std::current_exception());
      }
    }
    {
      std::lock_guard lk(mu_);
      paused = paused_;
    }
    // A switch in transit rides on the next step; with nothing running that step only transfers.
    if (!stopping && !paused && (engine_.has_work() || engine_.switch_in_transit())) step();
    else publish();
    {
      std::lock_guard lk(mu_);
      idle_ = live_.empty() && submissions_.empty();
      if (idle_) idle_cv_.notify_all();
    }
    if (stopping) break;
  }
  running_ = false;
}

void EngineLoop::step() {
  try {
    const std::vector<RequestOutput> outputs = engine_.step();
    publish();  // before the answers, so a client reading the state after its answer sees this step
    deliver(outputs);
  } catch (const std::exception& e) {
    // The step's state is unknown, and no request caused it (each was checked when admitted): fail what
    // runs as an internal error, keep serving new requests.
    spdlog::error("engine step failed: {}", e.what());
    fail_all();
  }
}

void EngineLoop::apply_layout(LayoutCommand& c) {
  try {
    LayoutSwitchOutcome o = switch_now(c.to);
    publish();  // the client may read /layout as soon as it has the answer
    c.outcome.set_value(std::move(o));
  } catch (...) {
    c.outcome.set_exception(std::current_exception());
  }
}

LayoutSwitchOutcome EngineLoop::switch_now(std::optional<Layout> to) {
  // Only one switch can be in transit: the step that carries the previous one comes first (on an idle
  // engine it only transfers), so back-to-back commands are not refused.
  if (engine_.switch_in_transit()) step();
  LayoutSwitchOutcome o;
  o.previous = o.layout = engine_.layout();
  if (!to) {
    if (!engine_.auto_policy())
      throw ApiError(409, "the server was not started with --attn-layout auto: there is no scheduler to hand the "
                          "layout back to; name a layout: tp, dp, cp or dop", "layout", "", "no_scheduler");
    engine_.set_layout_auto();
    o.handed_back = true;
    return o;
  }
  if (*to == o.previous) {
    engine_.pin_layout();  // a forced layout holds until POST /layout auto, also when already in it
    return o;
  }
  if (std::optional<std::string> why = engine_.switch_layout(*to)) {
    o.refused = std::move(*why);
    return o;
  }
  o.layout = engine_.layout();
  o.started = engine_.switches().back();
  return o;
}

int EngineLoop::max_tokens_that_fit(int64_t prompt_tokens) {
  // The largest m with prompt + m within the context and the KV capacity of one request; 1 when
  // nothing fits, so the engine rejects the request with its own reason.
  int64_t lo = 1, hi = engine_.config().max_position_embeddings - prompt_tokens;
  if (hi < 1 || !engine_.scheduler().could_ever_fit(prompt_tokens + 1, 0)) return 1;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (engine_.scheduler().could_ever_fit(prompt_tokens + mid, 0)) lo = mid;
    else hi = mid - 1;
  }
  return static_cast<int>(lo);
}

void EngineLoop::admit(Submission& s) {
  std::vector<int64_t> ids;
  std::string error;
  int status = 400;  // the engine's own rejections are the request's fault
  if (engine_.memory_released()) {
    status = 503;
    error = "the memory of weights and KV is released (POST /release_memory_occupation): nothing generates until "
            "POST /resume_memory_occupation";
  }
  for (GenerationJob& job : s.jobs) {
    if (!error.empty()) break;
    try {
      if (job.fit_max_tokens) job.params.max_tokens = max_tokens_that_fit(static_cast<int64_t>(job.prompt.size()));
      const int64_t id = engine_.add(job.prompt, job.params);
      ids.push_back(id);
      if (engine_.request(id).finished()) {
        error = engine_.request(id).error;
        break;
      }
    } catch (...) {
      const ApiError e = client_error(std::current_exception(), job.rid);
      error = e.what();
      status = e.status;
      break;
    }
  }
  if (!error.empty()) {
    // A request is admitted whole or not at all: drop the choices already queued.
    for (int64_t id : ids) {
      engine_.abort(id);
      engine_.release(id);
    }
    {
      std::lock_guard lk(mu_);
      for (const GenerationJob& j : s.jobs) rids_.erase(j.rid);
    }
    s.stream->reject(status, error);
    return;
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    live_[ids[i]] = Live{s.stream, static_cast<int>(i), s.jobs[i].rid};
    metrics_.record_admitted(static_cast<int64_t>(s.jobs[i].prompt.size()));
    spdlog::debug("request {}: {} prompt tokens, max_tokens {}", s.jobs[i].rid, s.jobs[i].prompt.size(),
                  s.jobs[i].params.max_tokens);
  }
  s.stream->admit();
}

void EngineLoop::apply_cancel(const Cancel& c) {
  std::vector<int64_t> ids;
  for (const auto& [id, l] : live_)
    if ((!c.stream || l.stream == c.stream) && (c.index < 0 || l.index == c.index)) ids.push_back(id);
  for (int64_t id : ids) engine_.abort(id);
  if (ids.empty()) return;
  publish();  // before the last chunks, as for a step's
  for (int64_t id : ids) {
    TokenDelta d;
    d.finish = FinishReason::Abort;
    finish(id, std::move(d));
  }
}

void EngineLoop::deliver(const std::vector<RequestOutput>& outputs) {
  const double now = engine_.now();
  for (const RequestOutput& o : outputs) {
    auto it = live_.find(o.id);
    if (it == live_.end()) continue;
    Live& l = it->second;
    const Request& r = engine_.request(o.id);
    TokenDelta d;
    d.tokens = o.tokens;
    d.text = o.text;
    d.weight_version = engine_.weight_version();
    const size_t k = o.tokens.size();
    if (r.params.logprobs >= 0 && r.logprobs.size() >= k) d.logprobs.assign(r.logprobs.end() - k, r.logprobs.end());
    if (r.params.logprobs > 0 && r.top_logprobs.size() >= k) d.top.assign(r.top_logprobs.end() - k, r.top_logprobs.end());
    if (k > 0) {
      if (l.last_token < 0) metrics_.observe_ttft(r.first_token - r.arrival);
      else metrics_.observe_itl(now - l.last_token);
      l.last_token = now;
      metrics_.record_generated(static_cast<int64_t>(k));
    }
    if (o.finished) {
      d.finish = r.finish;
      // A fault the engine confined to this request (its details are in the engine's log) is a 500;
      // any other failure is the request's own (400).
      d.error = r.error_internal ? internal_error_message(l.rid) : r.error;
      d.error_status = r.error_internal ? 500 : 400;
      if (r.error_internal) spdlog::error("request {}: failed by an internal fault (engine request {})", l.rid, o.id);
      finish(o.id, std::move(d));
    } else {
      d.index = l.index;
      l.stream->push(std::move(d));
    }
  }
}

void EngineLoop::fail_all() {
  std::vector<int64_t> ids;
  for (const auto& [id, l] : live_) ids.push_back(id);
  for (int64_t id : ids) {
    try {
      engine_.abort(id);
    } catch (const std::exception& e) {
      spdlog::error("aborting request {} after a failed step: {}", live_.at(id).rid, e.what());
    }
  }
  publish();  // before the answers, as for a step's
  for (int64_t id : ids) {
    const std::string rid = live_.at(id).rid;
    spdlog::error("request {}: failed by the engine step's error", rid);
    TokenDelta d;
    d.finish = FinishReason::Error;
    d.error = internal_error_message(rid);
    finish(id, std::move(d));
  }
}

void EngineLoop::finish(int64_t id, TokenDelta d) {
  auto it = live_.find(id);
  Live l = std::move(it->second);
  live_.erase(it);
  const Request& r = engine_.request(id);
  d.index = l.index;
  d.weight_version = engine_.weight_version();
  const double end = r.finished_at >= 0 ? r.finished_at : engine_.now();
  d.latency_s = end - r.arrival;
  d.cached_tokens = r.cached_tokens;
  // A request aborted before its first step waited its whole life.
  const double queue_s = (r.scheduled >= 0 ? r.scheduled : end) - r.arrival;
  metrics_.record_finished(d.finish, queue_s, d.latency_s);
  log_finished(l.rid, r, d.finish, queue_s, d.latency_s);
  {
    std::lock_guard lk(mu_);
    rids_.erase(l.rid);
  }
  engine_.release(id);
  l.stream->push(std::move(d));
}

void EngineLoop::publish() {
  Scheduler& sched = engine_.scheduler();
  KvCacheManager& kv = engine_.kv();
  EngineSnapshot s;
  s.layout = engine_.layout();
  s.policy = engine_.layout_policy_name();
  s.pinned = engine_.layout_pinned();
  if (const AutoLayoutPolicy* a = engine_.auto_policy(); a && a->forecast().step >= 0) s.forecast = a->forecast();
  s.running = static_cast<int64_t>(sched.running());
  s.waiting = static_cast<int64_t>(engine_.waiting());
  s.preemptions = sched.preemptions();
  s.page_size = kv.page_size();
  s.kv_cache_dtype = std::string(kv_dtype_label(engine_.group().kv_dtype()));
  s.layers = kv.layers();
  s.ranks.resize(static_cast<size_t>(kv.ranks()));
  for (int r = 0; r < kv.ranks(); ++r)
    s.ranks[r] = {kv.pool(r).capacity(), kv.kv_pages_live(r), kv.pool(r).free_count(), kv.evictable_pages(r), {}};
  s.prefix_cache = kv.prefix_cache_enabled();
  s.memory_released = engine_.memory_released();
  s.weight_version = engine_.weight_version();
  {
    std::lock_guard lk(mu_);
    s.paused = paused_;
  }
  s.prefix_queried_tokens = kv.prefix_cache().queried_tokens();
  s.prefix_hit_tokens = kv.prefix_cache().hit_tokens();
  for (const Request* q : sched.running_requests()) {
    if (q->owner < 0 || q->owner >= kv.ranks()) continue;
    auto it = live_.find(q->id);
    s.ranks[q->owner].owned.push_back(it != live_.end() ? it->second.rid : std::to_string(q->id));
  }
  // A switch still in transit finishes timing with the step that carries it: report it after.
  const std::vector<SwitchRecord>& sw = engine_.switches();
  const size_t complete = sw.size() - (engine_.switch_in_transit() ? 1 : 0);
  for (; switches_seen_ < complete; ++switches_seen_) metrics_.record_switch(sw[switches_seen_]);
  constexpr size_t kHistory = 64;
  s.switches.assign(sw.begin() + static_cast<std::ptrdiff_t>(complete > kHistory ? complete - kHistory : 0),
                    sw.begin() + static_cast<std::ptrdiff_t>(complete));
  std::lock_guard lk(snapshot_mu_);
  snapshot_ = std::move(s);
}

}  // namespace splash
