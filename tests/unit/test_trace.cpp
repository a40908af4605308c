// Request traces: the built-in shapes keep their defining properties at any size and context limit,
// are the same for the same seed, and a trace file's bad line is named.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "core/error.h"
#include "trace/builtin_traces.h"
#include "trace/trace_stats.h"
#include "trace/trace_file.h"

namespace splash {
namespace {

namespace fs = std::filesystem;

TraceShape shape(int64_t n, int64_t max_context = 4096, uint64_t seed = 7) {
  TraceShape s;
  s.n = n;
  s.max_context = max_context;
  s.vocab = 512;
  s.first_id = 2;
  s.seed = seed;
  s.time_scale = 0.01;
  return s;
}

int64_t prompt_len(const TraceRequest& r) { return static_cast<int64_t>(r.input_ids.size()); }

bool same(const std::vector<TraceRequest>& a, const std::vector<TraceRequest>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].arrival_s != b[i].arrival_s || a[i].input_ids != b[i].input_ids || a[i].max_tokens != b[i].max_tokens)
      return false;
  return true;
}

TEST(Trace, BuiltinTracesAreDeterministicFromTheSeed) {
  for (const std::string& name : builtin_trace_names()) {
    EXPECT_TRUE(same(builtin_trace(name, shape(24)), builtin_trace(name, shape(24)))) << name;
    EXPECT_FALSE(same(builtin_trace(name, shape(24)), builtin_trace(name, shape(24, 4096, 8)))) << name;
  }
}

TEST(Trace, EveryRequestFitsTheContextLimitAndTheVocabulary) {
  for (const std::string& name : builtin_trace_names())
    for (int64_t ctx : {16, 1024, 4096, 163840})
      for (int64_t n : {1, 5, 40}) {
        const std::vector<TraceRequest> t = builtin_trace(name, shape(n, ctx));
        ASSERT_FALSE(t.empty()) << name;
        for (size_t i = 0; i < t.size(); ++i) {
          const TraceRequest& r = t[i];
          EXPECT_GE(prompt_len(r), 1) << name;
          EXPECT_GE(r.max_tokens, 1) << name;
          EXPECT_LE(prompt_len(r) + r.max_tokens, ctx) << name << " ctx " << ctx << " n " << n;
          EXPECT_GE(r.arrival_s, 0) << name;
          if (i > 0) {
            EXPECT_GE(r.arrival_s, t[i - 1].arrival_s) << name << ": sorted by arrival";
          }
          for (int32_t id : r.input_ids) ASSERT_TRUE(id >= 2 && id < 512) << name << " id " << id;
        }
      }
}

TEST(Trace, RolloutDrainStartsTogetherWithModeratePromptsAndAHeavyTail) {
  const int64_t ctx = 4096;
  const std::vector<TraceRequest> t = builtin_trace("rollout-drain", shape(64, ctx));
  ASSERT_EQ(t.size(), 64u);
  std::vector<int64_t> out;
  for (const TraceRequest& r : t) {
    EXPECT_EQ(r.arrival_s, 0);
    EXPECT_GE(prompt_len(r), ctx / 64);
    EXPECT_LE(prompt_len(r), ctx / 16);
    EXPECT_LE(r.max_tokens, ctx / 2);
    out.push_back(r.max_tokens);
  }
  std::sort(out.begin(), out.end());
  const int64_t median = out[out.size() / 2];
  EXPECT_LE(median, ctx / 64) << "most outputs are short";
  EXPECT_GE(out.back(), 16 * median) << "a few are much longer";
  EXPECT_GE(out.back(), ctx / 8);
  // The tail stays heavy at a small size too.
  std::vector<int64_t> small;
  for (const TraceRequest& r : builtin_trace("rollout-drain", shape(8, ctx))) small.push_back(r.max_tokens);
  std::sort(small.begin(), small.end());
  EXPECT_GE(small.back(), 4 * small[small.size() / 2]);
}

TEST(Trace, LongContextMixHasShortChatsAndAFewPromptsNearTheLimitArrivingOverTime) {
  const int64_t ctx = 8192;
  const std::vector<TraceRequest> t = builtin_trace("long-context-mix", shape(32, ctx));
  ASSERT_EQ(t.size(), 32u);
  int64_t near_limit = 0, chats = 0;
  std::set<double> long_arrivals;
  for (const TraceRequest& r : t) {
    if (prompt_len(r) >= ctx * 6 / 10) {
      EXPECT_LE(prompt_len(r), ctx * 8 / 10);
      ++near_limit;
      long_arrivals.insert(r.arrival_s);
    } else {
      EXPECT_LE(prompt_len(r), ctx / 32);
      EXPECT_LE(r.max_tokens, ctx / 64);
      ++chats;
    }
  }
  EXPECT_EQ(near_limit, 4);
  EXPECT_EQ(chats, 28);
  EXPECT_EQ(long_arrivals.size(), 4u) << "the long prompts arrive at different times";
  EXPECT_GT(t.back().arrival_s, t.front().arrival_s);
  // At least one near the limit even when n is small.
  const std::vector<TraceRequest> one = builtin_trace("long-context-mix", shape(3, ctx));
  EXPECT_TRUE(std::any_of(one.begin(), one.end(), [&](const TraceRequest& r) { return prompt_len(r) >= ctx * 6 / 10; }));
}

TEST(Trace, PhaseChangeAlternatesBurstsOfShortAndLongRequests) {
  const int64_t ctx = 4096;
  const std::vector<TraceRequest> t = builtin_trace("phase-change", shape(48, ctx));
  ASSERT_EQ(t.size(), 48u);
  // Along the arrivals: runs of short prompts and runs of long ones, alternating, three cycles.
  std::vector<bool> runs;  // true: a run of long prompts
  for (const TraceRequest& r : t) {
    const bool is_long = prompt_len(r) >= ctx / 2;
    if (!is_long) {
      EXPECT_LE(prompt_len(r), ctx / 32);
    }
    if (runs.empty() || runs.back() != is_long) runs.push_back(is_long);
  }
  EXPECT_EQ(runs, (std::vector<bool>{false, true, false, true, false, true}));
}

TEST(Trace, GrpoGroupsShareTheirPromptAndVaryTheirOutputs) {
  TraceShape s = shape(6);
  s.group_size = 8;
  const std::vector<TraceRequest> t = builtin_trace("grpo", s);
  ASSERT_EQ(t.size(), 48u);
  std::map<std::vector<int32_t>, std::vector<const TraceRequest*>> groups;
  for (const TraceRequest& r : t) groups[r.input_ids].push_back(&r);
  ASSERT_EQ(groups.size(), 6u);
  for (const auto& [prompt, members] : groups) {
    ASSERT_EQ(members.size(), 8u);
    std::set<int64_t> outputs;
    for (const TraceRequest* r : members) {
      outputs.insert(r->max_tokens);
      EXPECT_EQ(r->arrival_s, members.front()->arrival_s) << "a group arrives together";
    }
    EXPECT_GT(outputs.size(), 1u) << "output lengths vary within a group";
  }
  EXPECT_EQ(t.front().arrival_s, 0);
  EXPECT_GT(t.back().arrival_s, 0) << "6 groups come in two waves";
}

TEST(Trace, TimeScaleStretchesArrivals) {
  TraceShape fast = shape(16), slow = shape(16);
  slow.time_scale = 2 * fast.time_scale;
  const std::vector<TraceRequest> a = builtin_trace("long-context-mix", fast), b = builtin_trace("long-context-mix", slow);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_DOUBLE_EQ(b[i].arrival_s, 2 * a[i].arrival_s);
}

TEST(Trace, UnknownNameListsTheBuiltinTraces) {
  try {
    builtin_trace("rollout", shape(4));
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("rollout-drain, long-context-mix, phase-change, grpo"), std::string::npos) << e.what();
  }
}

fs::path write_file(const std::string& name, const std::string& text) {
  const fs::path p = fs::temp_directory_path() / name;
  std::ofstream(p) << text;
  return p;
}

TEST(TraceFile, ReadsIdsAndExpandsPromptLengthsFromTheSeed) {
  const fs::path p = write_file("splash_trace_ok.jsonl",
                                "{\"arrival_s\": 0.5, \"input_ids\": [3, 4, 5], \"max_tokens\": 7}\n"
                                "\n"
                                "{\"prompt_len\": 100, \"max_tokens\": 2}\n");
  const std::vector<TraceRequest> t = load_trace_file(p.string(), 512, 11, 2);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].arrival_s, 0.5);
  EXPECT_EQ(t[0].input_ids, (std::vector<int32_t>{3, 4, 5}));
  EXPECT_EQ(t[0].max_tokens, 7);
  EXPECT_EQ(t[1].arrival_s, 0) << "arrival defaults to 0";
  ASSERT_EQ(t[1].input_ids.size(), 100u);
  for (int32_t id : t[1].input_ids) EXPECT_TRUE(id >= 2 && id < 512) << id;
  EXPECT_EQ(load_trace_file(p.string(), 512, 11, 2)[1].input_ids, t[1].input_ids) << "same seed, same ids";
  EXPECT_NE(load_trace_file(p.string(), 512, 12, 2)[1].input_ids, t[1].input_ids);
}

// The error for `line` (after a good first line and a blank one) names the file, line 3 and `field`.
void expect_line_error(const std::string& line, const std::string& field) {
  const fs::path p = write_file("splash_trace_bad.jsonl", "{\"input_ids\": [1], \"max_tokens\": 1}\n\n" + line + "\n");
  try {
    load_trace_file(p.string(), 512, 0);
    FAIL() << "no error for " << line;
  } catch (const UserError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(p.string() + ":3:"), std::string::npos) << what;
    EXPECT_NE(what.find(field), std::string::npos) << what;
  }
}

TEST(TraceFile, BadLinesNameTheLineAndTheField) {
  expect_line_error("{\"input_ids\": [1], \"max_tokens\": 0}", "max_tokens");
  expect_line_error("{\"input_ids\": [1]}", "max_tokens");
  expect_line_error("{\"input_ids\": [1], \"max_tokens\": 2.5}", "max_tokens");
  expect_line_error("{\"arrival_s\": -1, \"input_ids\": [1], \"max_tokens\": 1}", "arrival_s");
  expect_line_error("{\"arrival_s\": \"soon\", \"input_ids\": [1], \"max_tokens\": 1}", "arrival_s");
  expect_line_error("{\"input_ids\": [1, 512], \"max_tokens\": 1}", "input_ids");
  expect_line_error("{\"input_ids\": [], \"max_tokens\": 1}", "input_ids");
  expect_line_error("{\"prompt_len\": 0, \"max_tokens\": 1}", "prompt_len");
  expect_line_error("{\"max_tokens\": 1}", "input_ids");
  expect_line_error("{\"input_ids\": [1], \"prompt_len\": 3, \"max_tokens\": 1}", "prompt_len");
  expect_line_error("{\"input_ids\": [1], \"max_token\": 1}", "max_token'");
  expect_line_error("{\"input_ids\": [1], ", "not JSON");
  expect_line_error("[1, 2]", "object");
}

TEST(TraceFile, MissingOrEmptyFileIsAUserError) {
  EXPECT_THROW(load_trace_file("/nonexistent/trace.jsonl", 512, 0), UserError);
  EXPECT_THROW(load_trace_file(write_file("splash_trace_empty.jsonl", "\n\n").string(), 512, 0), UserError);
}

}  // namespace
}  // namespace splash

namespace splash {
namespace {

// The figures bench trace and simulate both report, on a hand-made pair of requests.
TEST(TraceStats, SummarizesRequestTimes) {
  const std::vector<RequestTimes> times = {{0.0, 0.5, 2.5, 3}, {1.0, 1.2, 1.2, 1}};
  const TraceStats s = summarize(times);
  EXPECT_DOUBLE_EQ(s.total_s, 2.5);  // first arrival to last finish
  EXPECT_EQ(s.output_tokens, 4);
  EXPECT_DOUBLE_EQ(s.output_tok_s, 4 / 2.5);
  EXPECT_NEAR(s.ttft_p99_ms, 500, 1e-9);
  EXPECT_NEAR(s.tpot_p50_ms, 1000, 1e-9);  // only the request with 2+ tokens: (2.5 - 0.5) / 2
  EXPECT_EQ(summarize({}).total_s, 0);
  const std::vector<TraceRequest> trace = {{2.0, {5}, 1}, {0.5, {5}, 1}, {2.0, {6}, 1}};
  EXPECT_EQ(arrival_order(trace), (std::vector<size_t>{1, 0, 2}));  // stable among equal arrivals
}

}  // namespace
}  // namespace splash
