#include "server/sampling_fields.h"

#include "core/error.h"
#include "server/api_error.h"

namespace splash {

SamplingParams sampling_params_from_api(const json& body, std::span<const SamplingField> fields, json base) {
  for (const SamplingField& f : fields) {
    const json* v = field(body, f.api);
    if (!v) continue;
    // Parsing the field alone (the rest at defaults) attributes any type or range error to it.
    try {
      sampling_params_from_json(json{{f.key, *v}});
    } catch (const UserError& e) {
      std::string msg = e.what();
      if (f.api != f.key)
        if (size_t at = msg.find(f.key); at != std::string::npos) msg.replace(at, f.key.size(), f.api);
      throw bad_request(msg, std::string(f.api));
    }
    base[f.key] = *v;
  }
  try {
    return sampling_params_from_json(base);
  } catch (const UserError& e) {
    throw bad_request(e.what());
  }
}

}  // namespace splash
