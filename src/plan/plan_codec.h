#pragma once
// A step plan as bytes, for the follower processes (engine/follower_loop.h): every field, the derived ones
// and the page tables included, so a follower runs exactly the plan the leader made without the
// leader's page accounting. decode_plan(encode_plan(p)) equals p field by field.
#include <memory>
#include <string>

#include "plan/byte_codec.h"
#include "plan/step_plan.h"

namespace splash {

void encode_plan(ByteWriter& w, const StepPlan& plan);
StepPlan decode_plan(ByteReader& r);
// One rank's page tables of a request (null: none held); the switch schedule's codec shares them.
void encode_pages(ByteWriter& w, const std::shared_ptr<const SeqPages>& pages);
std::shared_ptr<const SeqPages> decode_pages(ByteReader& r);

}  // namespace splash
