#include "engine/rank_group.h"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <utility>

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "engine/rank_placement.h"
#include "kernels/cpu/cpu_backend.h"
#include "layout/memory_plan.h"
#include "model/rope_table.h"
#include "switch/rank_switch.h"

#ifdef SPLASH_HAVE_CUDA
#include "comm/cuda/device_local_communicator.h"
#include "kernels/cuda/cuda_backend.h"
#endif
#ifdef SPLASH_HAVE_NCCL
#include "comm/nccl/nccl_communicator.h"
#endif

namespace splash {

struct RankGroup::Worker {
  int rank = 0;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<DeepseekModel> model;
  std::thread thread;
  std::mutex mu;
  std::condition_variable cv;
  std::function<void(Worker&)> task;
  bool has_task = false;
  bool done = false;
  bool stop = false;
};

std::unique_ptr<Backend> make_backend(const std::string& name, int device, const std::vector<int>& peers) {
  if (name == "cpu") return std::make_unique<CpuBackend>();
#ifdef SPLASH_HAVE_CUDA
  if (name == "cuda") return make_cuda_backend(device, peers);
  fail("unknown backend '{}' (this build has: cpu, cuda)", name);
#else
  fail("unknown or unavailable backend '{}' (this build has: cpu)", name);
#endif
}

KvSizing backend_dtypes(const std::string& name) {
  if (name == "cpu") return {DType::F32, DType::F32, 0};  // the f32 reference
  if (name == "cuda") return {DType::BF16, DType::BF16, 0};
  fail("unknown backend '{}'", name);
}

RankGroup::RankGroup(const ModelConfig& cfg, const WeightSource& weights, const GroupOptions& opt)
    : cfg_(cfg), opt_(opt), devices_(rank_devices(opt.ranks, opt.devices)), loaded_layout_(opt.layout) {
  if (!opt.devices.empty() && opt.backend == "cpu") fail("placing ranks on devices needs a GPU backend, not cpu");
  for (int r = 0; r < opt.ranks; ++r) {
    workers_.push_back(std::make_unique<Worker>());
    workers_.back()->rank = r;
    Worker* w = workers_.back().get();
    w->thread = std::thread([this, w] { loop(*w); });
  }
  // Each rank makes its backend and loads its part of the weights on its own thread (its own device).
  // A failure stops the workers before the error leaves the constructor (no destructor runs then).
  try {
    load_ranks(weights);
  } catch (...) {
    stop_workers();
    throw;
  }
}

// CPU ranks talk through the in-process communicator; GPU ranks through NCCL on their compute streams,
// or through the device-local communicator where a GPU hosts several ranks (NCCL refuses that).
std::vector<std::unique_ptr<Communicator>> RankGroup::make_communicators() {
  if (opt_.backend == "cpu") return make_inproc_group(opt_.ranks);
  std::vector<Stream> streams;
  for (auto& w : workers_) streams.push_back(w->backend->compute_stream());
#ifdef SPLASH_HAVE_CUDA
  if (shares_a_device(devices_)) return make_device_local_group(streams, devices_);
#endif
#ifdef SPLASH_HAVE_NCCL
  return make_nccl_group(streams, devices_);
#else
  fail("backend '{}' needs NCCL, which this build lacks", opt_.backend);
#endif
}

// Both sets at once, so that a failure leaves the ranks' references on the old (aborted) ones.
void RankGroup::renew_communicators() {
  std::vector<std::unique_ptr<Communicator>> comms = make_communicators();
  std::vector<std::unique_ptr<Communicator>> transfer = make_communicators();
  if (opt_.count_traffic)
    for (auto& c : comms) c = std::make_unique<CountingCommunicator>(std::move(c));
  for (size_t r = 0; r < comms.size(); ++r) {
    if (r < comm_refs_.size()) {
      comm_refs_[r]->rebind(*comms[r]);
      transfer_comm_refs_[r]->rebind(*transfer[r]);
    } else {
      comm_refs_.push_back(std::make_unique<RebindableCommunicator>(*comms[r]));
      transfer_comm_refs_.push_back(std::make_unique<RebindableCommunicator>(*transfer[r]));
    }
  }
  comms_ = std::move(comms);
  transfer_comms_ = std::move(transfer);
}

void RankGroup::load_ranks(const WeightSource& weights) {
  const GroupOptions& opt = opt_;
  // Projections load as shards whenever the heads split; a replicated starting layout then gathers
  // them into pool pages (allocate_kv), the same way a switch does.
  if (layout_split_error(cfg_, Layout::TP, opt.ranks).empty()) loaded_layout_ = Layout::TP;
  // Ranks that share a GPU exchange buffers directly, also with the ranks on other GPUs: every backend's
  // pool is made accessible from every device of the group.
  const std::vector<int> peers = shares_a_device(devices_) ? devices_ : std::vector<int>();
  dispatch([&](Worker& w) { w.backend = make_backend(opt.backend, devices_[w.rank], peers); });
  const std::string unsupported = workers_.front()->backend->attention_width_error(
      cfg_.kv_lora_rank, cfg_.qk_nope_head_dim, cfg_.qk_rope_head_dim, cfg_.v_head_dim);
  if (!unsupported.empty()) fail("this model's attention cannot run on the {} backend: {}", opt.backend, unsupported);
  renew_communicators();
  dispatch([&](Worker& w) {
    Backend& be = *w.backend;
    const ParallelSplit split = make_parallel_split(cfg_, w.rank, opt.ranks);
    RankEnv env{be, *comm_refs_[w.rank], *transfer_comm_refs_[w.rank], cfg_,
                make_rope_table(be, cfg_, cfg_.max_position_embeddings), Tensor()};
    w.model = std::make_unique<DeepseekModel>(std::move(env), load_model_weights(be, weights, cfg_, split, loaded_layout_));
  });
}

RankGroup::~RankGroup() { stop_workers(); }

void RankGroup::stop_workers() {
  for (auto& w : workers_) {
    {
      std::lock_guard<std::mutex> lk(w->mu);
      w->stop = true;
    }
    w->cv.notify_all();
    w->thread.join();
  }
  workers_.clear();
}

void RankGroup::loop(Worker& w) {
  for (;;) {
    std::function<void(Worker&)> task;
    {
      std::unique_lock<std::mutex> lk(w.mu);
      w.cv.wait(lk, [&] { return w.has_task || w.stop; });
      if (w.stop) return;
      task = std::move(w.task);
      w.has_task = false;
    }
    try {
      task(w);
    } catch (...) {
      task_failed(w, std::current_exception());
    }
    {
      std::lock_guard<std::mutex> lk(w.mu);
      w.done = true;
    }
    w.cv.notify_all();
  }
}

// On the failed rank's thread, at once: the other ranks may already wait for it in a collective.
void RankGroup::task_failed(Worker& w, std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lk(error_mu_);
    if (!first_error_) first_error_ = std::move(error);
  }
  // The leader changes these sets only between tasks; none exist yet while the backends are made.
  if (comms_.empty()) return;
  comms_[w.rank]->abort();
  transfer_comms_[w.rank]->abort();
}

void RankGroup::dispatch(const std::function<void(Worker&)>& fn) {
  if (!shut_down_.empty()) fail_internal("the rank group is shut down: {}", shut_down_);
  for (auto& w : workers_) {
    {
      std::lock_guard<std::mutex> lk(w->mu);
      w->task = fn;
      w->has_task = true;
      w->done = false;
    }
    w->cv.notify_all();
  }
  for (auto& w : workers_) {
    std::unique_lock<std::mutex> lk(w->mu);
    w->cv.wait(lk, [&] { return w->done; });
  }
  std::exception_ptr first;
  {
    std::lock_guard<std::mutex> lk(error_mu_);
    first = std::exchange(first_error_, nullptr);
  }
  if (!first) return;
  if (!comms_.empty()) {
    try {
      renew_communicators();
    } catch (const std::exception& e) {
      shut_down_ = fmt::format("new communicators after a failed task could not be made: {}", e.what());
      spdlog::error("rank group: {}", shut_down_);
    }
  }
  std::rethrow_exception(first);
}

void RankGroup::allocate_kv(int64_t pages) {
  dispatch([&](Worker& w) {
    RankEnv& env = w.model->env();
    env.kv_pool = Tensor();  // free the old storage first
    env.kv_pool = env.be.empty(env.be.act_dtype(), {pages, opt_.page_size, cfg_.latent_dim()});
    // Zeros, not whatever the allocator held: benchmarks register contexts without writing them
    // (bench/synthetic_batch) and must never feed NaN bit patterns to attention and routing.
    env.be.fill_zero(env.kv_pool);
  });
  kv_ = std::make_unique<KvCacheManager>(opt_.ranks, cfg_.num_hidden_layers, opt_.page_size, pages);
  kv_->set_replica_pages(replica_pages_per_layer());
}

int64_t replica_pages_per_layer(const ModelConfig& cfg, int page_size, int64_t weight_elem_bytes, int64_t kv_elem_bytes) {
  const int64_t bytes = projection_bytes(cfg, weight_elem_bytes).total();
  const int64_t page_bytes = static_cast<int64_t>(page_size) * cfg.latent_dim() * kv_elem_bytes;
  return (bytes + page_bytes - 1) / page_bytes;
}

int64_t RankGroup::replica_pages_per_layer() const {
  return splash::replica_pages_per_layer(cfg_, opt_.page_size, static_cast<int64_t>(dtype_size(weight_dtype())),
                                         static_cast<int64_t>(dtype_size(kv_dtype())));
}

void RankGroup::transfer(const SwitchSchedule& sched) {
  dispatch([&](Worker& w) {
    RankSwitch sw(w.model->env(), w.model->weights(), sched, opt_.page_size);
    for (int l = 0; l < sw.layers(); ++l) sw.start_layer(l);
    w.backend->synchronize();
  });
}

void RankGroup::set_routing_hook(RoutingHook* hook) {
  dispatch([&](Worker& w) { w.model->set_routing_hook(hook); });
}

int64_t RankGroup::device_memory_bytes() const {
  int64_t least = INT64_MAX;
  for (const auto& w : workers_) {
    const int device = devices_[w->rank];
    least = std::min(least, w->backend->total_memory_bytes() / ranks_on(devices_, device));
  }
  return least;
}
DType RankGroup::kv_dtype() const { return workers_.front()->backend->act_dtype(); }
DType RankGroup::weight_dtype() const { return workers_.front()->backend->weight_dtype(); }

const TrafficCounters& RankGroup::traffic(int r) const {
  auto* c = dynamic_cast<const CountingCommunicator*>(comms_.at(r).get());
  if (!c) fail("traffic counters need GroupOptions::count_traffic");
  return c->counters();
}

void RankGroup::reset_traffic() {
  for (auto& c : comms_)
    if (auto* cc = dynamic_cast<CountingCommunicator*>(c.get())) cc->reset();
}

void RankGroup::on_each_rank(const std::function<void(RankEnv&)>& fn) {
  dispatch([&](Worker& w) { fn(w.model->env()); });
}

void RankGroup::synchronize() {
  dispatch([](Worker& w) { w.backend->synchronize(); });
}

StepOutput RankGroup::run(const StepPlan& plan, const SwitchSchedule* carried) {
  SPLASH_CHECK(plan.ranks == ranks(), "step planned for {} ranks on {}", plan.ranks, ranks());
  StepOutput out;
  dispatch([&](Worker& w) {
    std::unique_ptr<RankSwitch> sw;
    if (carried) sw = std::make_unique<RankSwitch>(w.model->env(), w.model->weights(), *carried, opt_.page_size);
    StepOutput o = w.model->forward(plan, sw.get());
    if (w.rank == 0) out = std::move(o);
  });
  return out;
}

}  // namespace splash
