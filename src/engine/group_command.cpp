#include "engine/group_command.h"

#include <fmt/format.h>

#include "comm/process_link.h"
#include "plan/plan_codec.h"
#include "switch/schedule_codec.h"

namespace splash {

std::string start_command(const GroupOptions& opt) {
  ByteWriter w;
  w.put(CommandKind::Start);
  w.put<int32_t>(opt.ranks);
  w.put<int32_t>(opt.page_size);
  w.put(opt.layout);
  w.put_string(opt.backend);
  w.put<uint8_t>(opt.count_traffic);
  w.put<uint8_t>(opt.graphs.enabled);
  w.put<int64_t>(opt.graphs.max_batch);
  w.put(opt.kv_cache_dtype);
  w.put(opt.quantization);
  w.put<int64_t>(opt.prefill_window);
  return w.take();
}

std::string allocate_command(int64_t pages) {
  ByteWriter w;
  w.put(CommandKind::AllocateKv);
  w.put<int64_t>(pages);
  return w.take();
}

std::string run_command(const StepPlan& plan, const SwitchSchedule* carried) {
  ByteWriter w;
  w.put(CommandKind::Run);
  encode_plan(w, plan);
  w.put<uint8_t>(carried != nullptr);
  if (carried) encode_schedule(w, *carried);
  return w.take();
}

std::string transfer_command(const SwitchSchedule& s) {
  ByteWriter w;
  w.put(CommandKind::Transfer);
  encode_schedule(w, s);
  return w.take();
}

std::string load_weights_command(const WeightLoad& load) {
  ByteWriter w;
  w.put(CommandKind::LoadWeights);
  w.put(load.layout);
  w.put<uint64_t>(load.replica_runs.size());
  for (const std::vector<int32_t>& runs : load.replica_runs) w.put_vector(runs);
  w.put<int64_t>(load.pool_pages);
  w.put<uint8_t>(load.origin.has_value());
  if (load.origin) {
    w.put_string(load.origin->model);
    w.put_string(load.origin->load_format);
    w.put<uint64_t>(load.origin->seed);
  }
  return w.take();
}

std::string simple_command(CommandKind kind) {
  ByteWriter w;
  w.put(kind);
  return w.take();
}

GroupCommand decode_command(const std::string& bytes) {
  ByteReader r(bytes);
  GroupCommand c;
  c.kind = r.get<CommandKind>();
  switch (c.kind) {
    case CommandKind::Start:
      c.options.ranks = r.get<int32_t>();
      c.options.page_size = r.get<int32_t>();
      c.options.layout = r.get<Layout>();
      c.options.backend = r.get_string();
      c.options.count_traffic = r.get<uint8_t>() != 0;
      c.options.graphs.enabled = r.get<uint8_t>() != 0;
      c.options.graphs.max_batch = r.get<int64_t>();
      c.options.kv_cache_dtype = r.get<KvCacheDtype>();
      if (c.options.kv_cache_dtype > KvCacheDtype::FP8E4M3)
        fail_internal("start command: unknown KV cache element {}", static_cast<int>(c.options.kv_cache_dtype));
      c.options.quantization = r.get<Quantization>();
      if (c.options.quantization > Quantization::None)
        fail_internal("start command: unknown quantization {}", static_cast<int>(c.options.quantization));
      c.options.prefill_window = r.get<int64_t>();
      break;
    case CommandKind::AllocateKv: c.pages = r.get<int64_t>(); break;
    case CommandKind::Run:
      c.plan = decode_plan(r);
      if (r.get<uint8_t>()) c.schedule = decode_schedule(r);
      break;
    case CommandKind::Transfer: c.schedule = decode_schedule(r); break;
    case CommandKind::LoadWeights: {
      c.load.layout = r.get<Layout>();
      c.load.replica_runs.resize(r.get<uint64_t>());
      for (std::vector<int32_t>& runs : c.load.replica_runs) runs = r.get_vector<int32_t>();
      c.load.pool_pages = r.get<int64_t>();
      if (r.get<uint8_t>()) {
        WeightOrigin o;
        o.model = r.get_string();
        o.load_format = r.get_string();
        o.seed = r.get<uint64_t>();
        c.load.origin = std::move(o);
      }
      break;
    }
    case CommandKind::ReleaseMemory:
    case CommandKind::EndGroup:
    case CommandKind::Synchronize:
    case CommandKind::Stop: break;
    default: fail_internal("unknown group command {}", static_cast<int>(c.kind));
  }
  r.expect_end();
  return c;
}

// The first byte of an outcome: the error's kind, so the leader rethrows the same kind.
namespace {
constexpr char kUser = 'U', kInternal = 'I', kEcho = 'A', kTimeout = 'T';
}

std::string encode_outcome(std::exception_ptr error) {
  if (!error) return "";
  try {
    std::rethrow_exception(error);
  } catch (const CommTimeout& e) {
    return kTimeout + std::string(e.what());
  } catch (const CommAborted& e) {
    return kEcho + std::string(e.what());
  } catch (const UserError& e) {
    return kUser + std::string(e.what());
  } catch (const std::exception& e) {
    return kInternal + std::string(e.what());
  }
}

bool is_echo(const std::string& outcome) { return !outcome.empty() && outcome[0] == kEcho; }
bool is_timeout(const std::string& outcome) { return !outcome.empty() && outcome[0] == kTimeout; }

std::string from_process(const std::string& outcome, int process) {
  return outcome.substr(0, 1) + fmt::format("process {}: {}", process, outcome.substr(1));
}

std::exception_ptr decode_outcome(const std::string& outcome) {
  if (outcome.empty()) return nullptr;
  const std::string msg = outcome.substr(1);
  switch (outcome[0]) {
    case kUser: return std::make_exception_ptr(UserError(msg));
    case kEcho: return std::make_exception_ptr(CommAborted(msg));
    case kTimeout: return std::make_exception_ptr(CommTimeout(msg));
    default: return std::make_exception_ptr(InternalError(msg));
  }
}

}  // namespace splash
