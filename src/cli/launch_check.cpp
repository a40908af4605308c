#include "cli/launch_check.h"

#include <fmt/format.h>

#include "core/error.h"
#include "plan/byte_codec.h"

namespace splash {
namespace {

// Aliases compare as the name they stand for (fp8 and fp8_e4m3 start the same cache).
std::string kv_cache_dtype_label(const std::string& flag) {
  const auto d = parse_kv_cache_dtype(flag);
  return d ? std::string(kv_cache_dtype_name(*d)) : flag;
}

}  // namespace

std::vector<std::string> launch_flags(const std::string& command, const EngineFlags& f) {
  return {command,
          "--model " + f.model,
          "--load-format " + f.load_format,
          fmt::format("--seed {}", f.seed),
          fmt::format("--ranks {}", f.ranks),
          "--attn-layout " + f.attn_layout,
          "--backend " + f.backend,
          fmt::format("--page-size {}", f.page_size),
          "--kv-cache-dtype " + kv_cache_dtype_label(f.kv_cache_dtype),
          "--attn-form " + f.attn_form,
          "--switch " + f.switch_schedule,
          "--switch-mode " + f.switch_mode};
}

namespace {

std::string encode(const std::vector<std::string>& flags, const std::string& startup_error) {
  ByteWriter w;
  w.put_string(startup_error);
  w.put<uint64_t>(flags.size());
  for (const std::string& s : flags) w.put_string(s);
  return w.take();
}

// Process 0: the first process whose start-up failed or whose flags differ from its own, as a message.
std::string first_difference(const std::vector<std::string>& answers) {
  std::vector<std::string> mine;
  for (size_t p = 0; p < answers.size(); ++p) {
    ByteReader r(answers[p]);
    const std::string error = r.get_string();
    if (!error.empty()) return fmt::format("process {} could not start: {}", p, error);
    std::vector<std::string> flags(r.get_count(sizeof(uint64_t)));
    for (std::string& s : flags) s = r.get_string();
    if (p == 0) {
      mine = flags;
      continue;
    }
    for (size_t i = 0; i < std::max(flags.size(), mine.size()); ++i) {
      const std::string theirs = i < flags.size() ? flags[i] : "", ours = i < mine.size() ? mine[i] : "";
      if (theirs != ours)
        return fmt::format("process {} was started with '{}' but process 0 with '{}': every process of a launch needs the "
                           "same subcommand, model, ranks and layout flags",
                           p, theirs, ours);
    }
  }
  return "";
}

}  // namespace

void check_same_launch(ProcessLink& link, const std::vector<std::string>& flags, const std::string& startup_error) {
  const std::vector<std::string> answers = link.gather(encode(flags, startup_error));
  const std::string verdict = link.broadcast(link.process() == 0 ? first_difference(answers) : std::string());
  if (!verdict.empty()) fail("{}", verdict);
}

}  // namespace splash
