#include "switch/schedule_codec.h"

#include "plan/plan_codec.h"

namespace splash {

void encode_schedule(ByteWriter& w, const SwitchSchedule& s) {
  w.put(s.from);
  w.put(s.to);
  w.put<uint64_t>(s.live.size());
  for (const LiveRequest& q : s.live) {
    w.put<int64_t>(q.id);
    w.put<int32_t>(q.owner);
    w.put<int64_t>(q.context);
  }
  w.put<uint64_t>(s.requests.size());
  for (const std::vector<RequestSwitch>& rank : s.requests) {
    w.put<uint64_t>(rank.size());
    for (const RequestSwitch& q : rank) {
      encode_pages(w, q.src);
      // In place, dst is src's very tables: sent once, shared again on the other side.
      const bool same = q.dst == q.src;
      w.put<uint8_t>(same);
      if (!same) encode_pages(w, q.dst);
      w.put<uint8_t>(q.in_place);
    }
  }
  w.put<uint64_t>(s.replica_runs.size());
  for (const std::vector<int32_t>& runs : s.replica_runs) w.put_vector(runs);
}

SwitchSchedule decode_schedule(ByteReader& r) {
  SwitchSchedule s;
  s.from = r.get<Layout>();
  s.to = r.get<Layout>();
  s.live.resize(r.get_count(20));
  for (LiveRequest& q : s.live) {
    q.id = r.get<int64_t>();
    q.owner = r.get<int32_t>();
    q.context = r.get<int64_t>();
  }
  s.requests.resize(r.get_count(sizeof(uint64_t)));
  for (std::vector<RequestSwitch>& rank : s.requests) {
    rank.resize(r.get_count(3));
    for (RequestSwitch& q : rank) {
      q.src = decode_pages(r);
      q.dst = r.get<uint8_t>() ? q.src : decode_pages(r);
      q.in_place = r.get<uint8_t>() != 0;
    }
  }
  s.replica_runs.resize(r.get_count(sizeof(uint64_t)));
  for (std::vector<int32_t>& runs : s.replica_runs) runs = r.get_vector<int32_t>();
  return s;
}

}  // namespace splash
