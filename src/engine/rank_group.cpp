#include "engine/rank_group.h"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <utility>

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "engine/group_command.h"
#include "engine/rank_placement.h"
#include "kernels/cpu/cpu_backend.h"
#include "layout/expanded_window.h"
#include "layout/graph_memory.h"
#include "layout/memory_plan.h"
#include "layout/weight_bytes.h"
#include "model/model_source.h"
#include "model/rope_table.h"
#include "switch/projection_replica.h"
#include "switch/rank_switch.h"
#include "switch/switch_manifest.h"

#ifdef SPLASH_HAVE_CUDA
#include "comm/cuda/device_local_communicator.h"
#include "kernels/cuda/cuda_backend.h"
#endif
#ifdef SPLASH_HAVE_NCCL
#include "comm/nccl/nccl_communicator.h"
#endif

namespace splash {

struct RankGroup::Worker {
  int rank = 0;   // in the group
  int index = 0;  // among this process's ranks
  std::unique_ptr<Backend> backend;
  std::unique_ptr<DeepseekModel> model;
  std::unique_ptr<StepGraphs> graphs;  // wraps the model's forward
  uint64_t graphs_comm_generation = 0;  // the communicators the graphs may have captured
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

int64_t graph_reserve_bytes(const ModelConfig& cfg, const GroupOptions& opt, bool fp8_weights) {
  if (!opt.graphs.enabled || opt.backend == "cpu" || (!opt.link && shares_a_device(rank_devices(opt.ranks, opt.devices))))
    return 0;
  return graph_memory_bytes(cfg, opt.ranks, opt.graphs.max_batch, opt.page_size, act_elem_bytes(opt.backend),
                            fp8_weights);
}

int64_t window_reserve_bytes(const ModelConfig& cfg, const GroupOptions& opt, AttnForm form) {
  if (opt.backend == "cpu" || form == AttnForm::Absorbed) return 0;
  return expanded_window_bytes(cfg, act_elem_bytes(opt.backend), opt.prefill_window);
}

// Activations are in the backend's weight dtype (the KV element may be FP8).
int64_t act_elem_bytes(const std::string& backend) {
  return static_cast<int64_t>(dtype_size(backend_dtypes(backend).weight_dtype));
}

KvSizing backend_dtypes(const std::string& name, KvCacheDtype kv) {
  if (name == "cpu") return {DType::F32, kv_storage_dtype(kv, DType::F32), 0};  // the f32 reference
  if (name == "cuda") return {DType::BF16, kv_storage_dtype(kv, DType::BF16), 0};
  fail("unknown backend '{}'", name);
}

namespace {

// This process's ranks: all of them, or its share of a group that spans processes.
int local_ranks(const GroupOptions& opt) {
  if (!opt.link) return opt.ranks;
  const int p = opt.link->processes();
  if (opt.ranks % p != 0) fail("--ranks {} does not split evenly over {} processes", opt.ranks, p);
  if (!opt.devices.empty())
    fail("placing ranks on devices (--devices, --ranks-per-gpu) is for one process; across processes, a process's "
         "local rank i runs on GPU i");
  return opt.ranks / p;
}

// How long process 0 still waits for the others' answers after its own ranks timed out waiting for theirs:
// a live process whose ranks were released by the abort answers at once.
constexpr std::chrono::milliseconds kGrace(2000);

}  // namespace

RankGroup::RankGroup(const ModelConfig& cfg, const WeightSource& weights, const GroupOptions& opt)
    : cfg_(cfg),
      opt_(opt),
      first_(opt.link ? opt.link->process() * local_ranks(opt) : 0),
      devices_(rank_devices(local_ranks(opt), opt.devices)),
      loaded_layout_(opt.layout),
      fp8_weights_(holds_fp8(opt.quantization, weights)) {
  if (!opt.devices.empty() && opt.backend == "cpu") fail("placing ranks on devices needs a GPU backend, not cpu");
  announce([&] { return start_command(opt); });
  for (int i = 0; i < local_ranks(opt); ++i) {
    workers_.push_back(std::make_unique<Worker>());
    workers_.back()->rank = first_ + i;
    workers_.back()->index = i;
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

// CPU ranks talk through the in-process communicator, or the link's (MPI or TCP) across processes; GPU ranks
// through NCCL on their compute streams, or through the device-local communicator where a GPU hosts
// several ranks (NCCL refuses that). Across processes, NCCL's group id is process 0's, sent over the link.
std::vector<std::unique_ptr<Communicator>> RankGroup::make_communicators() {
  if (opt_.backend == "cpu")
    return opt_.link ? opt_.link->make_cpu_group(static_cast<int>(workers_.size())) : make_inproc_group(opt_.ranks);
  std::vector<Stream> streams;
  for (auto& w : workers_) streams.push_back(w->backend->compute_stream());
#ifdef SPLASH_HAVE_NCCL
  if (opt_.link) {
    const std::string id = opt_.link->broadcast(leads() ? new_nccl_group_id() : std::string());
    return make_nccl_group(id, opt_.link->processes(), opt_.link->process(), streams);
  }
#endif
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
  ++comm_generation_;
}

void RankGroup::load_ranks(const WeightSource& weights) {
  const GroupOptions& opt = opt_;
  // Projections load as shards whenever the heads split; a replicated starting layout then gathers
  // them into pool pages (allocate_kv), the same way a switch does.
  if (layout_split_error(cfg_, Layout::TP, opt.ranks).empty()) loaded_layout_ = Layout::TP;
  // Ranks that share a GPU exchange buffers directly, also with the ranks on other GPUs: every backend's
  // pool is made accessible from every device of the group.
  const std::vector<int> peers = shares_a_device(devices_) ? devices_ : std::vector<int>();
  dispatch([&](Worker& w) { w.backend = make_backend(opt.backend, devices_[w.index], peers); });
  const std::string unsupported = workers_.front()->backend->attention_width_error(
      cfg_.kv_lora_rank, cfg_.qk_nope_head_dim, cfg_.qk_rope_head_dim, cfg_.v_head_dim);
  if (!unsupported.empty()) fail("this model's attention cannot run on the {} backend: {}", opt.backend, unsupported);
  renew_communicators();
  dispatch([&](Worker& w) {
    Backend& be = *w.backend;
    const ParallelSplit split = make_parallel_split(cfg_, w.rank, opt.ranks);
    RankEnv env{be, *comm_refs_[w.index], *transfer_comm_refs_[w.index], cfg_,
                make_rope_table(be, cfg_, cfg_.max_position_embeddings), Tensor(), opt.prefill_window};
    w.model = std::make_unique<DeepseekModel>(
        std::move(env), load_model_weights(be, weights, cfg_, split, loaded_layout_, fp8_weights_));
    w.graphs = std::make_unique<StepGraphs>(*w.model, opt.graphs);
  });
  spdlog::info("weights per rank: {} (rank {}, {})", describe_held_weights(workers_.front()->model->weights()),
               first_, fp8_weights_ ? "FP8 linear layers" : "no FP8");
}

RankGroup::~RankGroup() {
  // The followers drop their groups with this one: an NCCL communicator's teardown waits for its peers,
  // so a follower still waiting for a command would hold this process here forever.
  try {
    announce([] { return simple_command(CommandKind::EndGroup); });
  } catch (const std::exception& e) {
    spdlog::warn("rank group: the other processes were not told that the group ends: {}", e.what());
  }
  stop_workers();
}

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
  comms_[w.index]->abort();
  transfer_comms_[w.index]->abort();
}

void RankGroup::announce(const std::function<std::string()>& make) {
  if (!opt_.link || !leads()) return;
  if (!shut_down_.empty()) fail_internal("the rank group is shut down: {}", shut_down_);
  try {
    opt_.link->broadcast(make());
  } catch (const CommTimeout& e) {
    std::rethrow_exception(lose(e.what()));
  }
}

std::exception_ptr RankGroup::lose(const std::string& why) {
  shut_down_ = fmt::format("a process of the group stopped answering: {}", why);
  spdlog::error("rank group: {}", shut_down_);
  return std::make_exception_ptr(InternalError(shut_down_));
}

std::exception_ptr RankGroup::agree(std::exception_ptr local) {
  if (!opt_.link) return local;
  ProcessLink& link = *opt_.link;
  const std::string mine = encode_outcome(local);
  if (!leads()) {
    link.gather(mine);
    const std::string all = link.broadcast(std::string());
    return local ? local : decode_outcome(all);
  }
  std::vector<std::string> all;
  try {
    all = link.gather(mine, is_timeout(mine) ? std::min(kGrace, link.timeout()) : std::chrono::milliseconds(0));
  } catch (const CommTimeout& e) {
    return lose(is_timeout(mine) ? fmt::format("{}; then {}", mine.substr(1), e.what()) : std::string(e.what()));
  }
  // The first failure that is not an echo of another's, else the first echo.
  int pick = -1;
  for (int p = 0; p < static_cast<int>(all.size()) && pick < 0; ++p)
    if (!all[p].empty() && !is_echo(all[p])) pick = p;
  for (int p = 0; p < static_cast<int>(all.size()) && pick < 0; ++p)
    if (!all[p].empty()) pick = p;
  const std::string chosen = pick <= 0 ? mine : from_process(all[pick], pick);
  try {
    link.broadcast(chosen);
  } catch (const CommTimeout& e) {
    return lose(e.what());
  }
  return pick <= 0 ? local : decode_outcome(chosen);
}

void RankGroup::dispatch(const std::function<void(Worker&)>& fn) {
  if (!shut_down_.empty()) fail_internal("the rank group is shut down: {}", shut_down_);
  std::exception_ptr first = agree(run_local(fn));
  if (!first) return;
  if (!comms_.empty() && shut_down_.empty()) {
    try {
      renew_communicators();
    } catch (const std::exception& e) {
      shut_down_ = fmt::format("new communicators after a failed task could not be made: {}", e.what());
      spdlog::error("rank group: {}", shut_down_);
    }
  }
  std::rethrow_exception(first);
}

std::exception_ptr RankGroup::run_local(const std::function<void(Worker&)>& fn) {
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
  std::lock_guard<std::mutex> lk(error_mu_);
  return std::exchange(first_error_, nullptr);
}

void RankGroup::allocate_kv(int64_t pages) {
  announce([&] { return allocate_command(pages); });
  dispatch([&](Worker& w) { allocate_storage(w, pages); });
  kv_ = std::make_unique<KvCacheManager>(opt_.ranks, cfg_.num_hidden_layers, opt_.page_size, pages);
  kv_->set_replica_pages(replica_pages_per_layer());
}

void RankGroup::allocate_storage(Worker& w, int64_t pages) {
  RankEnv& env = w.model->env();
  env.kv_pool = LatentPool();  // free the old storage first
  const DType dt = kv_storage_dtype(opt_.kv_cache_dtype, env.be.act_dtype());
  env.kv_pool.data = env.be.empty(dt, {pages, opt_.page_size, cfg_.latent_dim()});
  if (dt == DType::F8E4M3) env.kv_pool.scales = env.be.empty(DType::F32, {pages, opt_.page_size});
  // Zeros, not whatever the allocator held: benchmarks register contexts without writing them
  // (bench/synthetic_batch) and must never feed NaN bit patterns to attention and routing (a zero
  // scale reads an FP8 token as zeros).
  env.be.fill_zero(env.kv_pool.data);
  if (env.kv_pool.scales.defined()) env.be.fill_zero(env.kv_pool.scales);
}

std::vector<std::vector<int32_t>> RankGroup::replica_runs() const {
  std::vector<std::vector<int32_t>> runs(static_cast<size_t>(opt_.ranks));
  for (int r = 0; r < opt_.ranks; ++r)
    for (int l = 0; l < cfg_.num_hidden_layers; ++l) runs[r].push_back(kv_->replica_run(r, l));
  return runs;
}

void RankGroup::reload_weights(const WeightSource& weights, const WeightOrigin& origin, Layout layout) {
  if (released_) fail("the weights' memory is released: resume it first");
  load_weights(&weights, {layout, replica_runs(), 0, origin});
}

void RankGroup::release_memory() {
  announce([] { return simple_command(CommandKind::ReleaseMemory); });
  dispatch([](Worker& w) {
    w.graphs->clear();
    w.model->weights() = ModelWeights();
    w.model->env().kv_pool = LatentPool();
    w.backend->release_free_memory();
  });
  released_ = true;
}

void RankGroup::restore_memory(const WeightSource& weights, Layout layout) {
  if (!released_) fail("the memory of weights and KV is not released");
  load_weights(&weights, {layout, replica_runs(), kv_pages(), std::nullopt});
}

std::shared_ptr<const WeightSource> RankGroup::load_weights(const WeightSource* weights, const WeightLoad& load) {
  announce([&] { return load_weights_command(load); });
  // A process that cannot open the weights fails on its ranks, so every process learns it (agree).
  std::shared_ptr<const WeightSource> opened;
  std::exception_ptr open_error;
  if (!weights) {
    SPLASH_CHECK(load.origin, "no weights to load");
    try {
      opened = open_model(load.origin->model, load.origin->load_format, load.origin->seed).weights;
      weights = opened.get();
    } catch (...) {
      open_error = std::current_exception();
    }
  }
  const Primitive wp = weight_primitive(loaded_layout_, load.layout, opt_.ranks);
  SPLASH_CHECK(wp != Primitive::Discard, "layout {} holds shards of projections loaded replicated", layout_name(load.layout));
  // Every rank loads before any changes, so a checkpoint that fails to load leaves the old weights serving.
  std::vector<ModelWeights> fresh(workers_.size());
  dispatch([&](Worker& w) {
    if (open_error) std::rethrow_exception(open_error);
    const ParallelSplit split = make_parallel_split(cfg_, w.rank, opt_.ranks);
    fresh[w.index] = load_model_weights(*w.backend, *weights, cfg_, split, loaded_layout_, fp8_weights_);
  });
  dispatch([&](Worker& w) {
    if (load.pool_pages > 0) allocate_storage(w, load.pool_pages);
    RankEnv& env = w.model->env();
    ModelWeights& mine = fresh[w.index];
    if (wp == Primitive::AllGather) {
      const HeadRange heads = projection_heads(load.layout, w.rank, opt_.ranks, cfg_.num_attention_heads);
      std::vector<Tensor> shards;
      for (int l = 0; l < cfg_.num_hidden_layers; ++l) {
        AttentionWeights& a = mine.layers[l].attn;
        for (Tensor& t : gather_projection_replica(env, a, load.replica_runs[w.rank][l], env.be.compute_stream()))
          shards.push_back(std::move(t));
        a.heads = heads;
      }
      env.be.synchronize();  // the shards are read before they go
    }
    w.model->weights() = std::move(mine);
  });
  released_ = false;
  return opened;
}

int64_t replica_pages_per_layer(const ModelConfig& cfg, int page_size, int64_t replica_bytes, int64_t weight_elem_bytes,
                                int64_t kv_elem_bytes) {
  // A run starts at a page boundary; where pages are not whole weight elements (FP8 pages of odd
  // bytes), the replica starts up to weight_elem_bytes - 1 bytes in (switch/projection_replica.cpp).
  const int64_t page_bytes = static_cast<int64_t>(page_size) * cfg.latent_dim() * kv_elem_bytes;
  const int64_t bytes = replica_bytes + (page_bytes % weight_elem_bytes != 0 ? weight_elem_bytes - 1 : 0);
  return (bytes + page_bytes - 1) / page_bytes;
}

int64_t RankGroup::replica_pages_per_layer() const {
  const ReplicaLayout replica = projection_replica_layout(cfg_, fp8_projections(cfg_, opt_.ranks, fp8_weights_),
                                                          static_cast<int64_t>(dtype_size(weight_dtype())));
  return splash::replica_pages_per_layer(cfg_, opt_.page_size, replica.bytes, static_cast<int64_t>(dtype_size(weight_dtype())),
                                         static_cast<int64_t>(dtype_size(kv_dtype())));
}

void RankGroup::transfer(const SwitchSchedule& sched) {
  announce([&] { return transfer_command(sched); });
  dispatch([&](Worker& w) {
    RankSwitch sw(w.model->env(), w.model->weights(), sched, opt_.page_size);
    for (int l = 0; l < sw.layers(); ++l) sw.start_layer(l);
    w.backend->synchronize();
  });
}

void RankGroup::set_routing_hook(RoutingHook* hook) {
  if (opt_.link) {
    if (hook) fail("routing hooks (--replay-routing, the routing margins) need the ranks in one process: launch without mpirun or --nnodes");
    return;  // the ranks of a group across processes never have one
  }
  dispatch([&](Worker& w) { w.model->set_routing_hook(hook); });
}

int64_t RankGroup::device_memory_bytes() const {
  int64_t least = INT64_MAX;
  for (const auto& w : workers_) {
    const int device = devices_[w->index];
    least = std::min(least, w->backend->total_memory_bytes() / ranks_on(devices_, device));
  }
  return least;
}
DType RankGroup::kv_dtype() const {
  return kv_storage_dtype(opt_.kv_cache_dtype, workers_.front()->backend->act_dtype());
}
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
  if (opt_.link)
    fail("benchmarks and calibration run a function on every rank, which needs the ranks in one process: launch "
         "without mpirun or --nnodes (for --attn-layout auto across processes, give --cost-profile)");
  dispatch([&](Worker& w) { fn(w.model->env()); });
}

GraphStats RankGroup::graph_stats() const { return workers_.front()->graphs->stats(); }

void RankGroup::synchronize() {
  announce([] { return simple_command(CommandKind::Synchronize); });
  dispatch([](Worker& w) { w.backend->synchronize(); });
}

StepOutput RankGroup::run(const StepPlan& plan, const SwitchSchedule* carried) {
  SPLASH_CHECK(plan.ranks == ranks(), "step planned for {} ranks on {}", plan.ranks, ranks());
  announce([&] { return run_command(plan, carried); });
  StepOutput out;
  dispatch([&](Worker& w) {
    std::unique_ptr<RankSwitch> sw;
    if (carried) sw = std::make_unique<RankSwitch>(w.model->env(), w.model->weights(), *carried, opt_.page_size);
    if (w.graphs_comm_generation != comm_generation_) {  // new communicators: the graphs' NCCL calls are stale
      w.graphs->clear();
      w.graphs_comm_generation = comm_generation_;
    }
    StepOutput o = w.graphs->forward(plan, sw.get());
    if (w.rank == 0) out = std::move(o);
  });
  return out;
}

}  // namespace splash
