#include "comm/tcp/tcp_process_link.h"

#include "comm/tcp/tcp_communicator.h"

namespace splash {
namespace {

// The link's channels are Channel's values; groups come after them.
constexpr uint32_t kFirstGroupChannel = 2;

std::shared_ptr<TcpMesh> join(const RendezvousOptions& opt) {
  TcpRendezvous rendezvous(opt);
  return std::make_shared<TcpMesh>(rendezvous, opt.timeout);
}

}  // namespace

TcpProcessLink::TcpProcessLink(const RendezvousOptions& opt)
    : MessageProcessLink(opt.node_rank, opt.nnodes, opt.timeout), mesh_(join(opt)),
      next_group_channel_(kFirstGroupChannel) {}

std::vector<std::unique_ptr<Communicator>> TcpProcessLink::make_cpu_group(int local) {
  return make_tcp_group(mesh_, next_group_channel_++, local, timeout());
}

std::optional<MessageProcessLink::Shortfall> TcpProcessLink::send(const std::string& bytes, const std::vector<int>& to,
                                                                   Channel channel, Clock::time_point deadline) {
  Shortfall s;
  for (int p : to) {
    const MeshTag tag{static_cast<uint32_t>(channel), static_cast<uint32_t>(process()), static_cast<uint32_t>(p)};
    if (std::string why = mesh_->send(p, tag, bytes, deadline); !why.empty()) {
      s.processes.push_back(p);
      if (s.gone.empty()) s.gone = why;
    }
  }
  return s.processes.empty() ? std::nullopt : std::optional<Shortfall>(s);
}

std::optional<MessageProcessLink::Shortfall> TcpProcessLink::receive(const std::vector<int>& from, Channel channel,
                                                                      Clock::time_point deadline,
                                                                      std::vector<std::string>& got) {
  got.assign(from.size(), std::string());
  std::vector<bool> have(from.size(), false);
  size_t left = from.size();
  Shortfall s;
  mesh_->mailbox().wait_until(
      [&](MailboxState& st) {
        for (size_t i = 0; i < from.size(); ++i) {
          if (have[i]) continue;
          const MeshTag tag{static_cast<uint32_t>(channel), static_cast<uint32_t>(from[i]),
                            static_cast<uint32_t>(process())};
          if (std::optional<std::string> m = st.take(tag)) {
            got[i] = std::move(*m);
            have[i] = true;
            --left;
          } else if (s.gone.empty()) {
            s.gone = st.gone[from[i]];
          }
        }
        return left == 0 || !s.gone.empty();
      },
      deadline);
  if (left == 0) return std::nullopt;
  for (size_t i = 0; i < from.size(); ++i)
    if (!have[i]) s.processes.push_back(from[i]);
  return s;
}

std::string TcpProcessLink::gone() const {
  MeshMailbox& mailbox = mesh_->mailbox();
  if (process() != 0) return mailbox.gone(0);
  for (int p = 1; p < processes(); ++p)
    if (std::string why = mailbox.gone(p); !why.empty()) return why;
  return "";
}

}  // namespace splash
