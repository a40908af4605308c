// Engine flags under the names SGLang and vLLM users type: each alias sets the same field as SPLASH's
// own name, and the window flag is bounded.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cli/engine_options.h"
#include "engine/engine.h"

namespace splash {
namespace {

EngineFlags parse(std::vector<std::string> args) {
  CLI::App app;
  EngineFlags f;
  add_engine_flags(app, f);
  add_serving_flags(app, f);
  std::reverse(args.begin(), args.end());  // CLI11 takes the arguments back to front
  app.parse(args);
  return f;
}

TEST(EngineFlags, SglangAndVllmNamesSetTheSameFields) {
  for (const char* ranks : {"--ranks", "--tp-size", "--tensor-parallel-size"})
    EXPECT_EQ(parse({ranks, "4"}).ranks, 4) << ranks;
  for (const char* budget : {"--max-batched-tokens", "--max-num-batched-tokens"})
    EXPECT_EQ(parse({budget, "4096"}).max_batched_tokens, 4096) << budget;
  for (const char* running : {"--max-running-requests", "--max-num-seqs"})
    EXPECT_EQ(parse({running, "32"}).max_running_requests, 32) << running;
  for (const char* fraction : {"--mem-fraction", "--mem-fraction-static"})
    EXPECT_DOUBLE_EQ(parse({fraction, "0.8"}).mem_fraction, 0.8) << fraction;
  EXPECT_EQ(parse({"--enable-dp-attention"}).attn_layout, "dp");
  EXPECT_THROW(parse({"--enable-dp-attention", "--attn-layout", "cp"}), CLI::ExcludesError);
  const EngineOptions o = make_engine_options(parse({"--max-num-batched-tokens", "1024", "--prefill-attention-window", "96"}));
  EXPECT_EQ(o.scheduler.max_batched_tokens, 1024);
  EXPECT_EQ(o.group.prefill_window, 96);
}

TEST(EngineFlags, DefaultsAreTheSchedulersAndTheWindowIsBounded) {
  const EngineOptions o = make_engine_options(parse({}));
  EXPECT_EQ(o.scheduler.max_batched_tokens, SchedulerOptions{}.max_batched_tokens);
  EXPECT_EQ(o.scheduler.prefill_chunk, SchedulerOptions{}.prefill_chunk);
  EXPECT_EQ(o.group.prefill_window, 0);
  EXPECT_THROW(parse({"--prefill-attention-window", "-1"}), CLI::ValidationError);
  EXPECT_THROW(parse({"--prefill-attention-window", "100000000"}), CLI::ValidationError);
}

}  // namespace
}  // namespace splash
