#pragma once
// The built-in traces: request shapes where the best attention layout changes while the trace runs.
// Every length scales with `max_context` (a prompt plus its max_tokens always fits it) and the request
// count with `n`, so one shape serves a tiny CPU model and DeepSeek-V3 alike; everything is drawn from
// `seed`, so a name, a shape and a seed give the same trace every time.
//
// Arrival times are in units of `time_scale` seconds. A unit is meant to be about one decode step of the
// engine being measured (splash bench trace defaults to 0.01 s, builtin:tiny's on the CPU); C below is
// max_context.
//
//   rollout-drain     n requests, all at t = 0; prompts uniform in [C/64, C/16]; outputs Pareto
//                     (alpha 1, from C/256, cut at C/2): most short, a few long, so the batch drains
//                     from n wide to a few long ones, as in an RL rollout.
//   long-context-mix  n requests arriving over time: short chats (prompts [C/128, C/32], outputs
//                     [C/256, C/64], Poisson arrivals 8 units apart on average), and max(1, n/8) prompts
//                     of [0.6, 0.8] x C (outputs [C/256, C/64]) spread evenly over the chats' span.
//   phase-change      n requests in cycles of about 16: a burst of short requests (prompts and outputs
//                     [C/128, C/32]), 128 units later a burst of max(1, 1/8 of the cycle) long-context
//                     ones (prompts [0.5, 0.75] x C, outputs [C/64, C/16]), 128 units later the next
//                     cycle. A burst's requests arrive within 4 units.
//   grpo              n groups of group_size samples of one prompt each (identical input_ids, prompts
//                     [C/64, C/8]); a group's outputs vary around the group's typical length (uniform
//                     in [C/64, C/16], times a log-normal factor, cut at C/4). Groups arrive in waves
//                     of 4, 64 units apart; a group's samples arrive together.
#include <cstdint>
#include <string>
#include <vector>

#include "trace/trace_request.h"

namespace splash {

struct TraceShape {
  int64_t n = 64;              // requests (groups for grpo)
  int64_t max_context = 4096;  // the model's context limit: prompt + max_tokens stays within it
  int64_t vocab = 0;           // prompt ids are drawn from [first_id, vocab)
  int32_t first_id = 0;
  uint64_t seed = 0;
  double time_scale = 0.01;  // seconds per arrival unit
  int64_t group_size = 8;    // grpo: samples per prompt
};

// The named trace, sorted by arrival; fails naming the built-in traces when `name` is none of them.
std::vector<TraceRequest> builtin_trace(const std::string& name, const TraceShape& shape);
const std::vector<std::string>& builtin_trace_names();

}  // namespace splash
