#pragma once
// The CPU ranks' mover: every move happens in the call (memmove, the f32 sum), so the marks have nothing
// to order.
#include <memory>

#include "comm/collective_mover.h"

namespace splash {

std::unique_ptr<CollectiveMover> make_host_mover();

}  // namespace splash
