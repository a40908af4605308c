#include "comm/counting_communicator.h"

namespace splash {

void CountingCommunicator::add(CollectiveKind k, int64_t bytes) {
  counters_.bytes[static_cast<size_t>(k)] += bytes;
  ++counters_.calls[static_cast<size_t>(k)];
}

// A ring all-reduce receives 2 (T - 1) / T of the buffer on every rank.
void CountingCommunicator::all_reduce_sum(Tensor buf, Stream s) {
  add(CollectiveKind::AllReduce, 2 * static_cast<int64_t>(buf.nbytes()) * (size() - 1) / size());
  inner_->all_reduce_sum(buf, s);
}

void CountingCommunicator::all_gather(Tensor in, Tensor out, Stream s) {
  add(CollectiveKind::AllGather, static_cast<int64_t>(in.nbytes()) * (size() - 1));
  inner_->all_gather(in, out, s);
}

void CountingCommunicator::all_gather_v(Tensor in, Tensor out, const std::vector<int64_t>& counts, Stream s) {
  int64_t others = 0;
  for (int r = 0; r < size(); ++r)
    if (r != rank()) others += counts[r];
  add(CollectiveKind::AllGather, others * static_cast<int64_t>(dtype_size(out.dtype())));
  inner_->all_gather_v(in, out, counts, s);
}

void CountingCommunicator::reduce_scatter_sum(Tensor in, Tensor out, Stream s) {
  add(CollectiveKind::ReduceScatter, static_cast<int64_t>(out.nbytes()) * (size() - 1));
  inner_->reduce_scatter_sum(in, out, s);
}

void CountingCommunicator::all_to_all(Tensor in, Tensor out, Stream s) {
  add(CollectiveKind::AllToAll, static_cast<int64_t>(out.nbytes()) * (size() - 1) / size());
  inner_->all_to_all(in, out, s);
}

void CountingCommunicator::all_to_all_v(Tensor in, const std::vector<int64_t>& send_counts, Tensor out,
                                        const std::vector<int64_t>& recv_counts, Stream s) {
  int64_t others = 0;
  for (int r = 0; r < size(); ++r)
    if (r != rank()) others += recv_counts[r];
  add(CollectiveKind::AllToAll, others * static_cast<int64_t>(dtype_size(out.defined() ? out.dtype() : in.dtype())));
  inner_->all_to_all_v(in, send_counts, out, recv_counts, s);
}

void CountingCommunicator::broadcast(Tensor buf, int root, Stream s) {
  if (rank() != root) add(CollectiveKind::Broadcast, static_cast<int64_t>(buf.nbytes()));
  inner_->broadcast(buf, root, s);
}

}  // namespace splash
