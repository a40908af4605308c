#include "server/metrics.h"

#include <string>

namespace splash {
namespace {

// vLLM's request latency buckets, with finer ones below 0.3 s where small models on the CPU land.
std::vector<double> request_latency_buckets() {
  return {0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
          50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}

}  // namespace

ServerMetrics::ServerMetrics()
    : ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
             80.0, 160.0, 640.0}),
      itl_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0,
            20.0, 80.0}),
      queue_time_(request_latency_buckets()),
      e2e_latency_(request_latency_buckets()),
      switch_seconds_({0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0}) {}

void ServerMetrics::record_admitted(int64_t prompt_tokens) {
  std::lock_guard lk(mu_);
  ++requests_;
  prompt_tokens_ += prompt_tokens;
}

void ServerMetrics::record_generated(int64_t tokens) {
  std::lock_guard lk(mu_);
  generated_tokens_ += tokens;
}

int64_t ServerMetrics::generated_tokens() const {
  std::lock_guard lk(mu_);
  return generated_tokens_;
}

void ServerMetrics::observe_ttft(double seconds) {
  std::lock_guard lk(mu_);
  ttft_.observe(seconds);
}

void ServerMetrics::observe_itl(double seconds) {
  std::lock_guard lk(mu_);
  itl_.observe(seconds);
}

void ServerMetrics::record_finished(FinishReason why, double queue_seconds, double e2e_seconds) {
  std::lock_guard lk(mu_);
  ++finished_[why];
  queue_time_.observe(queue_seconds);
  e2e_latency_.observe(e2e_seconds);
}

void ServerMetrics::record_switch(const SwitchRecord& r) {
  std::lock_guard lk(mu_);
  if (!r.refused.empty()) {
    ++refusals_[{r.from, r.to, r.reason}];
    return;
  }
  ++switches_[{r.from, r.to, r.reason}];
  switch_seconds_.observe(r.seconds);
}

std::string ServerMetrics::render(const EngineSnapshot& s) const {
  std::lock_guard lk(mu_);
  PromText p;
  p.family("splash_num_requests_running", "gauge", "Requests in the running batch.");
  p.sample("splash_num_requests_running", {}, static_cast<double>(s.running));
  p.family("splash_num_requests_waiting", "gauge", "Requests queued for admission.");
  p.sample("splash_num_requests_waiting", {}, static_cast<double>(s.waiting));
  p.family("splash_http_connections_open", "gauge", "Client connections being served (idle keep-alive included).");
  p.sample("splash_http_connections_open", {}, static_cast<double>(open_connections.load()));

  p.family("splash_kv_pages_used", "gauge", "KV pages in use per rank (one page holds page_size tokens of one layer).");
  for (size_t r = 0; r < s.ranks.size(); ++r)
    p.sample("splash_kv_pages_used", {{"rank", std::to_string(r)}}, static_cast<double>(s.ranks[r].pages_used));
  p.family("splash_kv_pages_free", "gauge", "Free KV pages per rank.");
  for (size_t r = 0; r < s.ranks.size(); ++r)
    p.sample("splash_kv_pages_free", {{"rank", std::to_string(r)}}, static_cast<double>(s.ranks[r].pages_free));
  p.family("splash_kv_pages_cached", "gauge", "KV pages per rank only the prefix cache holds (evicted when needed).");
  for (size_t r = 0; r < s.ranks.size(); ++r)
    p.sample("splash_kv_pages_cached", {{"rank", std::to_string(r)}}, static_cast<double>(s.ranks[r].pages_cached));
  p.family("splash_prefix_cache_hit_rate", "gauge", "Prompt tokens found in the prefix cache / prompt tokens looked up.");
  p.sample("splash_prefix_cache_hit_rate", {},
           s.prefix_queried_tokens > 0 ? static_cast<double>(s.prefix_hit_tokens) / s.prefix_queried_tokens : 0.0);
  p.family("splash_prefix_cache_queried_tokens_total", "counter", "Prompt tokens looked up in the prefix cache.");
  p.sample("splash_prefix_cache_queried_tokens_total", {}, static_cast<double>(s.prefix_queried_tokens));
  p.family("splash_prefix_cache_hit_tokens_total", "counter", "Prompt tokens found in the prefix cache.");
  p.sample("splash_prefix_cache_hit_tokens_total", {}, static_cast<double>(s.prefix_hit_tokens));

  p.family("splash_requests_total", "counter", "Requests admitted to the engine.");
  p.sample("splash_requests_total", {}, static_cast<double>(requests_));
  p.family("splash_requests_finished_total", "counter", "Requests finished, by reason.");
  for (FinishReason r : {FinishReason::Stop, FinishReason::Length, FinishReason::Abort, FinishReason::Error}) {
    auto it = finished_.find(r);
    p.sample("splash_requests_finished_total", {{"reason", finish_reason_name(r)}},
             static_cast<double>(it == finished_.end() ? 0 : it->second));
  }
  p.family("splash_prompt_tokens_total", "counter", "Prompt tokens of admitted requests.");
  p.sample("splash_prompt_tokens_total", {}, static_cast<double>(prompt_tokens_));
  p.family("splash_generation_tokens_total", "counter", "Tokens generated.");
  p.sample("splash_generation_tokens_total", {}, static_cast<double>(generated_tokens_));

  p.family("splash_time_to_first_token_seconds", "histogram", "Time from admission to the first generated token.");
  p.histogram("splash_time_to_first_token_seconds", {}, ttft_);
  p.family("splash_inter_token_latency_seconds", "histogram", "Time between consecutive tokens of a request.");
  p.histogram("splash_inter_token_latency_seconds", {}, itl_);
  p.family("splash_request_queue_time_seconds", "histogram",
           "Time a finished request waited from admission to its first step (its whole life if it never ran).");
  p.histogram("splash_request_queue_time_seconds", {}, queue_time_);
  p.family("splash_e2e_request_latency_seconds", "histogram", "Time from admission to the end of a finished request.");
  p.histogram("splash_e2e_request_latency_seconds", {}, e2e_latency_);

  p.family("splash_num_preemptions_total", "counter", "Requests preempted for lack of KV pages (recomputed later).");
  p.sample("splash_num_preemptions_total", {}, static_cast<double>(s.preemptions));

  p.family("splash_attention_layout", "gauge", "The current attention layout (1 for the active one).");
  for (Layout l : kAllLayouts)
    p.sample("splash_attention_layout", {{"layout", std::string(layout_name(l))}}, l == s.layout ? 1.0 : 0.0);
  // Every direction and reason, zeros included, so rates exist before the first switch.
  auto by_direction = [&](const char* name, const char* help,
                          const std::map<std::tuple<Layout, Layout, std::string>, int64_t>& counts) {
    p.family(name, "counter", help);
    for (Layout from : kAllLayouts)
      for (Layout to : kAllLayouts)
        for (const char* reason : {"forced", "scripted", "faster", "capacity"}) {
          if (from == to) continue;
          auto it = counts.find({from, to, reason});
          p.sample(name, {{"from", std::string(layout_name(from))}, {"to", std::string(layout_name(to))}, {"reason", reason}},
                   static_cast<double>(it == counts.end() ? 0 : it->second));
        }
  };
  by_direction("splash_layout_switches_total",
               "Layout switches by direction and reason (forced: POST /layout; scripted: --switch; faster: the "
               "transition-aware scheduler).", switches_);
  by_direction("splash_layout_switch_refusals_total", "Layout switches refused (they did not fit), by direction and reason.",
               refusals_);
  if (s.forecast) {
    p.family("splash_layout_predicted_step_seconds", "gauge",
             "The transition-aware scheduler's predicted step time of each layout for the current batch.");
    for (Layout l : kAllLayouts)
      p.sample("splash_layout_predicted_step_seconds", {{"layout", std::string(layout_name(l))}},
               s.forecast->step_s[static_cast<size_t>(l)]);
  }
  // The engine times a switch, not a target-ready baseline: a blocking switch's time is its
  // overhead; an overlapped switch's is the whole step that carried its transfers.
  p.family("splash_layout_switch_seconds", "histogram",
           "Time of a layout switch: its transfers (blocking) or the step that carried them (overlapped).");
  p.histogram("splash_layout_switch_seconds", {}, switch_seconds_);
  return p.text();
}

}  // namespace splash
