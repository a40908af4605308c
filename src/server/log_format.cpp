#include "server/log_format.h"

#include <atomic>
#include <ctime>

#include <fmt/format.h>
#include <spdlog/formatter.h>

#include "core/error.h"

namespace splash {
namespace {

using json = nlohmann::ordered_json;

std::atomic<bool> g_json{false};
// The fields of the line being logged on this thread: spdlog's loggers here are synchronous, so the
// formatter runs inside log_with_fields' call.
thread_local const json* t_fields = nullptr;

std::string utc_timestamp(std::chrono::system_clock::time_point t) {
  const std::time_t secs = std::chrono::system_clock::to_time_t(t);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return fmt::format("{}.{:03}Z", buf, ms);
}

class JsonFormatter : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    json line = {{"timestamp", utc_timestamp(msg.time)},
                 {"level", std::string(spdlog::level::to_string_view(msg.level).data(),
                                       spdlog::level::to_string_view(msg.level).size())},
                 {"message", std::string(msg.payload.data(), msg.payload.size())}};
    if (t_fields) line.update(*t_fields);
    // Messages may hold bytes from clients that are not UTF-8: replace them rather than lose the line.
    const std::string s = line.dump(-1, ' ', false, json::error_handler_t::replace) + '\n';
    dest.append(s.data(), s.data() + s.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override { return std::make_unique<JsonFormatter>(); }
};

}  // namespace

void set_log_format(const std::string& format) {
  if (format == "text") return;
  if (format != "json") fail("unknown --log-format '{}' (choose text or json)", format);
  g_json = true;
  spdlog::set_formatter(std::make_unique<JsonFormatter>());
}

void log_with_fields(spdlog::level::level_enum level, std::string_view message, const json& fields) {
  if (g_json) {
    t_fields = &fields;
    spdlog::log(level, "{}", message);
    t_fields = nullptr;
    return;
  }
  std::string text(message);
  for (const auto& [k, v] : fields.items()) text += fmt::format(" {}={}", k, v.is_string() ? v.get<std::string>() : v.dump());
  spdlog::log(level, "{}", text);
}

}  // namespace splash
