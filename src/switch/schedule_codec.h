#pragma once
// A switch schedule as bytes, for the follower processes: what a rank's RankSwitch reads (the two
// layouts, the live requests, every rank's source and destination tables, the replica runs). The
// leader's own bookkeeping (the held pages, the peak) stays with the leader: a decoded schedule has none.
#include "plan/byte_codec.h"
#include "switch/switch_schedule.h"

namespace splash {

void encode_schedule(ByteWriter& w, const SwitchSchedule& s);
SwitchSchedule decode_schedule(ByteReader& r);

}  // namespace splash
